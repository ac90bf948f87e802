#!/usr/bin/env python3
"""CDK entry point: ``npx cdk synth`` / ``npx cdk deploy`` (settings: ``cdk.json`` context, docs/aws.md)."""

from __future__ import annotations

import os

import aws_cdk as cdk
from cdk_nag import AwsSolutionsChecks

from infra.layer import require_supported_region
from infra.stack import EngramStack

# The stack is environment-agnostic: it deploys to the CLI's region, which the CLI passes here.
require_supported_region(os.environ.get("CDK_DEFAULT_REGION"))
app = cdk.App()
EngramStack(
    app,
    app.node.try_get_context("engram:stack_name") or "Engram",
    description="Engram: long-term memory for AI chat clients (gateway, MCP, REST, jobs)",
)
cdk.Aspects.of(app).add(AwsSolutionsChecks(verbose=True))
app.synth()
