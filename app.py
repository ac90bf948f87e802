#!/usr/bin/env python3
"""CDK entry point: ``npx cdk synth`` / ``npx cdk deploy`` (settings: ``cdk.json`` context, docs/aws.md)."""

from __future__ import annotations

import aws_cdk as cdk
from cdk_nag import AwsSolutionsChecks

from infra.stack import EngramStack

app = cdk.App()
EngramStack(
    app,
    app.node.try_get_context("engram:stack_name") or "Engram",
    description="Engram: long-term memory for AI chat clients (gateway, MCP, REST, jobs)",
)
cdk.Aspects.of(app).add(AwsSolutionsChecks(verbose=True))
app.synth()
