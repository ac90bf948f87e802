"""Shared Lambda function defaults: one code asset (functions/, with its bytecode), the dependency layer,
Powertools env."""

from __future__ import annotations

import hashlib
import os
import shutil
from fnmatch import fnmatch
from pathlib import Path

from aws_cdk import Duration, RemovalPolicy, Stack
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from constructs import Construct

from layers.build import add_bytecode, bytecode_tag

ROOT = Path(__file__).resolve().parent.parent
FUNCTIONS_DIR = ROOT / "functions"
# The code asset as it ships: functions/ without what ASSET_EXCLUDES names, plus the runtime's .pyc
# (layers/build.py add_bytecode), rebuilt when a source file or the bytecode this machine can make changes.
CODE_BUILD_DIR = ROOT / "build" / "functions"
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


def source_files(root: Path = FUNCTIONS_DIR) -> list[Path]:
    """The files of ``root`` the code asset ships (``ASSET_EXCLUDES`` left out), sorted."""
    patterns = [pattern.removeprefix("**/") for pattern in ASSET_EXCLUDES]
    return sorted(
        p
        for p in root.rglob("*")
        if p.is_file() and not any(fnmatch(part, x) for part in p.relative_to(root).parts for x in patterns)
    )


def built_code(out: Path = CODE_BUILD_DIR, source: Path = FUNCTIONS_DIR) -> Path:
    """``source`` as the code asset ships it, in ``out``: its files (modes kept: run.sh is executable) and,
    when this machine has the runtime's interpreter, their ``.pyc`` (compiled as Lambda mounts them, under
    /var/task). Reused while the sources and the bytecode tag are what its stamp (``<out>.stamp``) says."""
    files = source_files(source)
    hasher = hashlib.sha256()
    for path in files:
        hasher.update(f"{path.relative_to(source).as_posix()}\0{path.stat().st_mode & 0o111}\0".encode())
        hasher.update(hashlib.sha256(path.read_bytes()).digest())
    sources = hasher.hexdigest()
    mark = out.with_name(out.name + ".stamp")
    if out.is_dir() and mark.is_file() and mark.read_text(encoding="utf-8") == _code_stamp(sources, bytecode_tag()):
        return out
    staging = out.with_name(f"{out.name}.tmp-{os.getpid()}")
    shutil.rmtree(staging, ignore_errors=True)
    for path in files:
        target = staging / path.relative_to(source)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(path, target)
    shipped = add_bytecode(staging, "/var/task")
    shutil.rmtree(out, ignore_errors=True)
    staging.rename(out)
    mark.write_text(_code_stamp(sources, shipped), encoding="utf-8")
    return out


def _code_stamp(sources: str, bytecode: str) -> str:
    return f"{sources}\nbytecode: {bytecode}\n"


def functions_code(scope: Construct) -> lambda_.Code:
    """One asset for every function of a stack (CDK needs one Code instance per stack)."""
    stack = Stack.of(scope)
    code = getattr(stack, "_engram_functions_code", None)
    if code is None:
        code = lambda_.Code.from_asset(str(built_code()))
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
