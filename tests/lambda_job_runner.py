"""A stand-in for the Lambda Python runtime of one job function (run by tests/lambda_harness.py).

``python lambda_job_runner.py <module.handler>`` imports the handler (Lambda's init phase), prints
``{"ready": true}``, then reads one event per line on stdin and answers one line per event on the
original stdout: ``{"result": ...}`` or ``{"error": {"errorType", "errorMessage", "stackTrace"}}``
(the runtime's error shape). Everything the handler prints (Powertools' JSON logs and metrics) goes
to stderr. One process serves every invocation, like a warm execution environment; the harness
freezes it between invocations. Standalone on purpose: the process sees only the function's code
(``LAMBDA_TASK_ROOT`` on ``PYTHONPATH``), not the test suite.
"""

from __future__ import annotations

import importlib
import json
import os
import sys
import time
import traceback
import uuid
from typing import Any


class LambdaContext:
    """The attributes of the runtime's context object that handlers and Powertools read."""

    def __init__(self, timeout_ms: int) -> None:
        name = os.environ.get("AWS_LAMBDA_FUNCTION_NAME", "engram-job")
        region = os.environ.get("AWS_REGION", "us-east-1")
        self.function_name = name
        self.function_version = os.environ.get("AWS_LAMBDA_FUNCTION_VERSION", "$LATEST")
        self.invoked_function_arn = f"arn:aws:lambda:{region}:123456789012:function:{name}"
        self.memory_limit_in_mb = int(os.environ.get("AWS_LAMBDA_FUNCTION_MEMORY_SIZE", "1024"))
        self.aws_request_id = str(uuid.uuid4())
        self.log_group_name = f"/aws/lambda/{name}"
        self.log_stream_name = time.strftime("%Y/%m/%d/[$LATEST]") + uuid.uuid4().hex
        self.identity = None
        self.client_context = None
        self._deadline = time.monotonic() + timeout_ms / 1000

    def get_remaining_time_in_millis(self) -> int:
        return max(0, int((self._deadline - time.monotonic()) * 1000))


def main() -> None:
    module_name, _, function_name = sys.argv[1].rpartition(".")
    timeout_ms = int(sys.argv[2]) if len(sys.argv) > 2 else 900_000
    answers = os.fdopen(os.dup(1), "w", encoding="utf-8")
    os.dup2(2, 1)  # the handler's prints (logs, EMF metrics) go to stderr, never into the answers
    handler = getattr(importlib.import_module(module_name), function_name)
    answers.write(json.dumps({"ready": True}) + "\n")
    answers.flush()
    for line in sys.stdin:
        event = json.loads(line)
        out: dict[str, Any]
        try:
            out = {"result": handler(event, LambdaContext(timeout_ms))}
        except Exception as exc:  # reported like the runtime does; the process stays warm
            out = {
                "error": {
                    "errorType": type(exc).__name__,
                    "errorMessage": str(exc),
                    "stackTrace": traceback.format_exc().splitlines(),
                }
            }
        sys.stdout.flush()
        answers.write(json.dumps(out, default=str) + "\n")
        answers.flush()


if __name__ == "__main__":
    main()
