"""DreamFunction: EventBridge Scheduler at 04:10 local time -> the ``dream`` job (``{"job": "dream"}``).

A manual invocation may add ``"date": "YYYY-MM-DD"``, ``"force": true`` and ``"namespace"``.
"""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools.utilities.typing import LambdaContext

from engram.entrypoints.lambdas.runtime import log_metrics, logger, run_job, tracer


@logger.inject_lambda_context(log_event=False)
@tracer.capture_lambda_handler(capture_response=False)
@log_metrics
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    return run_job("dream", event or {}, context).report
