"""DreamFunction: EventBridge Scheduler at 04:10 local time -> ``dreaming.run`` (``{"job": "dream"}``).

A manual invocation may add ``"date": "YYYY-MM-DD"``, ``"force": true`` and ``"namespace"``.
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
    event = event or {}
    service = get_container().dreaming
    report = report_dict(
        run_sync(
            service.run(
                date=event.get("date") or None, force=bool(event.get("force")), namespace=event.get("namespace")
            )
        )
    )
    snapshot_search(get_container())
    logger.info("dreaming done", extra={"dream_date": report.get("date"), "job_errors": report.get("errors")})
    metrics.add_metric(name="DreamRuns", unit=MetricUnit.Count, value=1)
    metrics.add_metric(name="DreamErrors", unit=MetricUnit.Count, value=int(report.get("errors") or 0))
    return report
