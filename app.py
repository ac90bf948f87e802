#!/usr/bin/env python3
"""CDK entry point: ``npx cdk synth`` / ``npx cdk deploy``.

The deployment's settings live in ``engram.deploy.json`` next to this file (yours, git-ignored);
``-c engram:<key>=<value>`` changes one and is written back there (infra/deploy_settings.py, docs/aws.md,
"Settings").
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import aws_cdk as cdk
from cdk_nag import AwsSolutionsChecks

from infra.deploy_settings import resolve
from infra.layer import require_supported_region
from infra.stack import EngramStack

ROOT = Path(__file__).resolve().parent


def build(app: cdk.App, root: Path = ROOT) -> EngramStack:
    """The stack of this deployment: its settings file and the ``-c engram:*`` flags (written back)."""
    settings = resolve(app.node.get_all_context(), root)
    # Model ids as the deploy region serves them (the CLI passes its region; infra/bedrock_models.py).
    config = settings.config().for_region(os.environ.get("CDK_DEFAULT_REGION"))
    if settings.message():
        print(settings.message(), file=sys.stderr)
    stack = EngramStack(
        app,
        settings.stack_name,
        config=config,
        description="Engram: long-term memory for AI chat clients (gateway, MCP, REST, jobs)",
    )
    cdk.Aspects.of(app).add(AwsSolutionsChecks(verbose=True))
    return stack


def main() -> None:
    # The stack is environment-agnostic: it deploys to the CLI's region, which the CLI passes here.
    require_supported_region(os.environ.get("CDK_DEFAULT_REGION"))
    app = cdk.App()
    build(app)
    app.synth()


if __name__ == "__main__":
    main()
