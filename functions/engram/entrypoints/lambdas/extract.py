"""ExtractFunction: EventBridge Scheduler every 4 h -> ``extraction.run`` (input ``{"job": "extract"}``).

A manual invocation may add ``"namespace"`` to process one namespace only.
"""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.typing import LambdaContext

from engram.bootstrap import snapshot_search
from engram.entrypoints.lambdas.runtime import get_container, logger, metrics, report_dict, tracer
from engram.services.loop import run_sync


@logger.inject_lambda_context(log_event=False)
@tracer.capture_lambda_handler(capture_response=False)
@metrics.log_metrics(capture_cold_start_metric=True)
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    namespace = (event or {}).get("namespace") or None
    service = get_container().extraction
    report = report_dict(run_sync(service.run(namespace=namespace)))
    snapshot_search(get_container())
    logger.info(
        "extraction done", extra={"memories_created": report.get("created"), "job_errors": report.get("errors")}
    )
    metrics.add_metric(name="ExtractionRuns", unit=MetricUnit.Count, value=1)
    metrics.add_metric(name="ExtractionErrors", unit=MetricUnit.Count, value=int(report.get("errors") or 0))
    return report
