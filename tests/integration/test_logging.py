"""ENGRAM_LOG_LEVEL on every entry point, seen from outside the process: run.sh (the Lambda Web
Adapter's bootstrap: JSON lines with the request ids), the `engram` CLI (text lines) and a Lambda job
handler (JSON lines with the invocation id). Keys never reach the output."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.servers import free_port

ROOT = Path(__file__).resolve().parents[2]
RUN_SH = ROOT / "functions" / "run.sh"
KEY = "ek_logging_test_secret_0042"


def _env(tmp_path: Path, level: str, **extra: str) -> dict[str, str]:
    return {
        "PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin",
        "PYTHONPATH": str(ROOT / "functions"),
        "ENGRAM_STORE": "memory",
        "ENGRAM_SEARCH": "memory",
        "ENGRAM_EMBEDDER": "none",
        "ENGRAM_QUEUE": "inline",
        "ENGRAM_SCHEDULER_ENABLED": "false",
        "ENGRAM_API_KEY": KEY,
        "ENGRAM_DATA_DIR": str(tmp_path),
        "ENGRAM_LOG_LEVEL": level,
        "HOME": str(tmp_path),
        **extra,
    }


def _json_lines(output: str) -> list[dict[str, Any]]:
    lines = []
    for line in output.splitlines():
        if line.startswith("{"):
            lines.append(json.loads(line))
    return lines


def _serve_once(tmp_path: Path, level: str) -> tuple[str, httpx.Response]:
    """Start run.sh as the adapter would on Lambda, send one authenticated request, stop it."""
    port = free_port()
    env = _env(
        tmp_path,
        level,
        AWS_LWA_PORT=str(port),
        LAMBDA_TASK_ROOT=str(RUN_SH.parent),
        AWS_LAMBDA_FUNCTION_NAME="engram-api",
    )
    process = subprocess.Popen(
        ["bash", str(RUN_SH)], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and process.poll() is None:
            try:
                httpx.get(f"http://127.0.0.1:{port}/health", timeout=2)
                break
            except httpx.TransportError:
                time.sleep(0.2)
        # A key in the query string too (clients that cannot send headers): it must not be logged either
        response = httpx.get(
            f"http://127.0.0.1:{port}/v1/stats?api_key={KEY}",
            headers={"Authorization": f"Bearer {KEY}", "x-amzn-request-id": "c0ffee00-0000-4000-8000-000000000001"},
            timeout=10,
        )
    finally:
        process.terminate()
        try:
            output, _ = process.communicate(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            output, _ = process.communicate()
    return output, response


def test_run_sh_writes_info_json_lines_with_both_request_ids(tmp_path: Path) -> None:
    # Given the API function's bootstrap with ENGRAM_LOG_LEVEL=INFO on Lambda
    output, response = _serve_once(tmp_path, "INFO")
    assert response.status_code == 200, output[-2000:]
    # Then the request is logged as one JSON line carrying Engram's and the invocation's request ids
    lines = [r for r in _json_lines(output) if r.get("message", "").startswith("GET /v1/stats -> 200")]
    assert len(lines) == 1, output[-2000:]
    (line,) = lines
    assert line["level"] == "INFO" and line["service"] == "engram"
    assert line["request_id"] == response.headers["x-request-id"]
    assert line["function_request_id"] == "c0ffee00-0000-4000-8000-000000000001"
    # And the key appears nowhere in the output
    assert KEY not in output


def test_run_sh_log_level_warning_hides_info(tmp_path: Path) -> None:
    # Given ENGRAM_LOG_LEVEL=WARNING / Then a successful request writes nothing
    output, response = _serve_once(tmp_path, "WARNING")
    assert response.status_code == 200, output[-2000:]
    assert "GET /v1/stats" not in output


@pytest.mark.parametrize(("level", "shown"), [("INFO", True), ("WARNING", False)])
def test_cli_job_command_logs_at_engram_log_level(tmp_path: Path, level: str, shown: bool) -> None:
    # Given the CLI's cleanup command on a local data directory
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "engram.entrypoints.cli",
            "cleanup",
            "--namespace",
            "default",
            "--data-dir",
            str(tmp_path),
        ],
        env=_env(tmp_path, level, ENGRAM_STORE="sqlite", ENGRAM_SEARCH="local"),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    # Then the job's summary line is a text line at INFO, shown only when the level allows it
    summary = [line for line in result.stderr.splitlines() if " INFO engram.jobs: cleanup ns=" in line]
    assert bool(summary) is shown, result.stderr[-2000:]
    assert KEY not in result.stderr + result.stdout


LAMBDA_JOB = """
import json, sys
from engram.entrypoints.lambdas import cleanup

class Context:
    function_name = "engram-cleanup"
    memory_limit_in_mb = 1024
    invoked_function_arn = "arn:aws:lambda:eu-west-1:111122223333:function:engram-cleanup"
    aws_request_id = "feedface-0000-4000-8000-000000000002"

    def get_remaining_time_in_millis(self):  # a real LambdaContext has it; the job runner reads the deadline
        return 900_000

body = json.dumps({"job": "cleanup", "payload": {"namespace": "default"}})
event = {"Records": [{"messageId": "m-1", "body": body, "attributes": {}, "eventSource": "aws:sqs"}]}
print(json.dumps({"result": cleanup.handler(event, Context())}))
"""


@pytest.mark.parametrize(("level", "shown"), [("INFO", True), ("ERROR", False)])
def test_lambda_job_handler_logs_json_with_the_invocation_id(tmp_path: Path, level: str, shown: bool) -> None:
    # Given the cleanup function's handler run as Lambda runs it (Powertools, JSON lines on stdout)
    env = _env(
        tmp_path,
        level,
        AWS_LAMBDA_FUNCTION_NAME="engram-cleanup",
        POWERTOOLS_SERVICE_NAME="engram",
        POWERTOOLS_METRICS_NAMESPACE="Engram",
        POWERTOOLS_TRACE_DISABLED="true",
    )
    result = subprocess.run(
        [sys.executable, "-c", LAMBDA_JOB], env=env, capture_output=True, text=True, timeout=120, cwd=tmp_path
    )
    assert result.returncode == 0, result.stderr[-2000:]
    # Then the job's summary (logged by engram.jobs, not the handler) is a JSON line with the invocation id
    lines = [r for r in _json_lines(result.stdout) if str(r.get("message", "")).startswith("cleanup ns=default")]
    assert bool(lines) is shown, result.stdout[-2000:]
    if shown:
        assert lines[0]["level"] == "INFO"
        assert lines[0]["function_request_id"] == "feedface-0000-4000-8000-000000000002"
    assert KEY not in result.stdout + result.stderr
