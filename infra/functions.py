"""Shared Lambda function defaults: one code asset (functions/), the dependency layer, Powertools env."""

from __future__ import annotations

from pathlib import Path

from aws_cdk import Duration, RemovalPolicy, Stack
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from constructs import Construct

ROOT = Path(__file__).resolve().parent.parent
FUNCTIONS_DIR = ROOT / "functions"
RUNTIME = lambda_.Runtime.PYTHON_3_12  # matches layers/build.py PYTHON_VERSION (Amazon Linux 2023, glibc 2.34)
ARCHITECTURE = lambda_.Architecture.X86_64  # matches layers/build.py --arch x86_64 and the LWA X86 layer
ASSET_EXCLUDES = ["**/__pycache__", "**/*.pyc", "**/.pytest_cache", "**/*.egg-info"]
# Lambda's log filter (JSON format) must pass what ENGRAM_LOG_LEVEL lets Engram write.
APPLICATION_LOG_LEVELS = {
    "DEBUG": lambda_.ApplicationLogLevel.DEBUG,
    "INFO": lambda_.ApplicationLogLevel.INFO,
    "WARNING": lambda_.ApplicationLogLevel.WARN,
    "ERROR": lambda_.ApplicationLogLevel.ERROR,
    "CRITICAL": lambda_.ApplicationLogLevel.FATAL,
}


def functions_code(scope: Construct) -> lambda_.Code:
    """One asset for every function of a stack (CDK needs one Code instance per stack)."""
    stack = Stack.of(scope)
    code = getattr(stack, "_engram_functions_code", None)
    if code is None:
        code = lambda_.Code.from_asset(str(FUNCTIONS_DIR), exclude=ASSET_EXCLUDES)
        stack._engram_functions_code = code  # type: ignore[attr-defined]
    return code


def engram_function(
    scope: Construct,
    construct_id: str,
    *,
    handler: str,
    description: str,
    environment: dict[str, str],
    layers: list[lambda_.ILayerVersion],
    timeout: Duration,
    memory_size: int,
    log_retention: logs.RetentionDays = logs.RetentionDays.ONE_MONTH,
    reserved_concurrency: int = 0,
) -> lambda_.Function:
    log_group = logs.LogGroup(
        scope,
        f"{construct_id}Logs",
        retention=log_retention,
        removal_policy=RemovalPolicy.DESTROY,
    )
    return lambda_.Function(
        scope,
        construct_id,
        runtime=RUNTIME,
        architecture=ARCHITECTURE,
        code=functions_code(scope),
        handler=handler,
        description=description,
        environment=environment,
        layers=layers,
        timeout=timeout,
        memory_size=memory_size,
        reserved_concurrent_executions=reserved_concurrency or None,
        tracing=lambda_.Tracing.ACTIVE,
        log_group=log_group,
        logging_format=lambda_.LoggingFormat.JSON,
        application_log_level_v2=APPLICATION_LOG_LEVELS[environment.get("ENGRAM_LOG_LEVEL", "INFO").upper()],
    )
