"""ExtractFunction: EventBridge Scheduler every 4 h -> the ``extract`` job (input ``{"job": "extract"}``).

A manual invocation may add ``"namespace"`` to process one namespace only.
"""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools.utilities.typing import LambdaContext

from engram.entrypoints.lambdas.runtime import log_metrics, logger, run_job, tracer


@logger.inject_lambda_context(log_event=False)
@tracer.capture_lambda_handler(capture_response=False)
@log_metrics
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    return run_job("extract", event or {}, context).report
