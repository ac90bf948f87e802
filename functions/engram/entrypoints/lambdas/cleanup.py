"""CleanupFunction: the jobs queue's consumer; SQS batches -> one job per message, with partial batch failures.

Bodies are ``{"job": "cleanup", "payload": {"namespace": "..."}}`` (from ``SqsJobQueue``),
``{"job": "cleanup", "payload": {"all": true}}`` (the nightly schedule) or
``{"job": "index_repair", "payload": {"namespace": "..."}}`` (queued when the search index answers
again after index writes failed) or ``{"job": "reindex", "payload": {"namespace", "run_id"}}`` (the
admin panel's and REST's reindex, services/index/reindex.py: it stops before this invocation's deadline and
queues its own continuation) or ``{"job": "history", "payload": {"namespace", "thread"}}`` (a thread's
server-kept history is due a rotation: services/chat/history.py) or ``{"job": "consolidate", "payload":
{"namespace", "draft_id"}}`` (a consolidation draft the person asked for, services/jobs/consolidation.py:
like a reindex, it stops between batches before the deadline and queues its continuation). A failed record is reported
back (ReportBatchItemFailures) and retried by SQS, then dead-lettered. Each message id is processed
once (``services/jobs/registry.run_once``: a conditional put claims it, so two deliveries at once never both
run; after success it is kept as an idempotency key, and a redelivery is acknowledged unprocessed).
"""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

from aws_lambda_powertools.utilities.batch import BatchProcessor, EventType, process_partial_response
from aws_lambda_powertools.utilities.batch.types import PartialItemFailureResponse
from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord
from aws_lambda_powertools.utilities.typing import LambdaContext

from engram.domain.errors import InvalidInput
from engram.entrypoints.lambdas.runtime import get_container, log_metrics, logger, run_job, tracer
from engram.services.jobs.registry import JOBS_NAMESPACE, job_named, run_once

__all__ = ["JOBS_NAMESPACE", "decode_job", "handler", "record_handler"]


def decode_job(body: str) -> tuple[str, dict[str, Any]]:
    """The (job, payload) of a message body (the format ``SqsJobQueue`` writes); ``InvalidInput`` otherwise."""
    try:
        data = json.loads(body)
    except (TypeError, ValueError) as exc:
        raise InvalidInput("job message is not JSON") from exc
    if not isinstance(data, dict) or not isinstance(data.get("job"), str) or not data["job"]:
        raise InvalidInput("job message needs a 'job' name")
    payload = data.get("payload") or {}
    if not isinstance(payload, dict):
        raise InvalidInput("job payload must be an object")
    return data["job"], payload


def _idempotency_key(record: SQSRecord) -> str:
    return f"sqs:{record.message_id}"


# A claim on a message outlives the longest invocation (the function's 15-minute limit) before another
# delivery may take it over.
CLAIM_LEASE = timedelta(minutes=16)


@tracer.capture_method(capture_response=False)
def record_handler(record: SQSRecord, lambda_context: LambdaContext | None = None) -> dict[str, Any]:
    container = get_container()
    job, payload = decode_job(record.body)
    job_named(job)  # an unknown job is refused before anything is claimed
    namespace = "*" if payload.get("all") else str(payload.get("namespace") or "*")
    report = run_once(
        container.store,
        container.clock,
        _idempotency_key(record),
        CLAIM_LEASE,
        lambda: run_job(job, payload, lambda_context).report,
        keep={"job": job, "namespace": namespace},
    )
    if report is None:
        logger.info("message already processed", extra={"message_id": record.message_id})
        return {"skipped": True}
    return report


@logger.inject_lambda_context(log_event=False)
@tracer.capture_lambda_handler(capture_response=False)
@log_metrics
def handler(event: dict[str, Any], context: LambdaContext) -> PartialItemFailureResponse:
    # A processor per invocation: it collects the batch's successes and failures as it goes, so one shared
    # by every invocation would mix two batches handled at once (one Lambda instance never does; two
    # handlers in one process, as tests/integration/test_lambda_handlers.py runs them, do).
    processor = BatchProcessor(event_type=EventType.SQS)
    return process_partial_response(event=event, record_handler=record_handler, processor=processor, context=context)
