"""CleanupFunction: the jobs queue's consumer; SQS batches -> one job per message, with partial batch failures.

Bodies are ``{"job": "cleanup", "payload": {"namespace": "..."}}`` (from ``SqsJobQueue``),
``{"job": "cleanup", "payload": {"all": true}}`` (the nightly schedule) or
``{"job": "index_repair", "payload": {"namespace": "..."}}`` (queued when the search index answers
again after index writes failed) or ``{"job": "reindex", "payload": {"namespace", "run_id"}}`` (the
admin panel's and REST's reindex, services/reindex.py: it stops before this invocation's deadline and
queues its own continuation) or ``{"job": "history", "payload": {"namespace", "thread"}}`` (a thread's
server-kept history is due a rotation: services/history.py). A failed record is reported
back (ReportBatchItemFailures) and retried by SQS, then dead-lettered. Each message id is processed
once: after success it is kept as an idempotency key, and a redelivery is acknowledged unprocessed.
"""

from __future__ import annotations

import json
import time
from typing import Any

from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.batch import BatchProcessor, EventType, process_partial_response
from aws_lambda_powertools.utilities.batch.types import PartialItemFailureResponse
from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord
from aws_lambda_powertools.utilities.typing import LambdaContext

from engram.bootstrap import snapshot_search
from engram.domain.errors import InvalidInput
from engram.domain.models import IdempotencyRecord
from engram.entrypoints.job_runner import CLEANUP_SNAPSHOT_CHANGES
from engram.entrypoints.lambdas.runtime import get_container, logger, metrics, report_dict, tracer
from engram.services.loop import run_sync

# Idempotency keys of the queue live in this namespace (retention deletes them after 7 days).
JOBS_NAMESPACE = "_jobs"

processor = BatchProcessor(event_type=EventType.SQS)


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


# A reindex leaves this much of the invocation to the other records of the batch, and gets at least
# MIN_SLICE_S (it always finishes its current batch of memories first).
REINDEX_MARGIN_S = 90.0
MIN_SLICE_S = 10.0


@tracer.capture_method(capture_response=False)
def record_handler(record: SQSRecord, lambda_context: LambdaContext | None = None) -> dict[str, Any]:
    container = get_container()
    store = container.store
    key = _idempotency_key(record)
    if store.get_idempotency(JOBS_NAMESPACE, key) is not None:
        logger.info("message already processed", extra={"message_id": record.message_id})
        return {"skipped": True}
    job, payload = decode_job(record.body)
    if job == "cleanup":
        namespace = None if payload.get("all") else payload.get("namespace")
        if not payload.get("all") and not namespace:
            raise InvalidInput("cleanup job needs 'namespace' or 'all'")
        report = report_dict(container.cleanup.run(namespace))
        snapshot_search(container, min_changes=CLEANUP_SNAPSHOT_CHANGES)
    elif job == "index_repair":
        namespace = payload.get("namespace")
        if not isinstance(namespace, str) or not namespace:
            raise InvalidInput("index_repair job needs 'namespace'")
        report = {"job": job, "repaired": container.memories.repair_index(namespace), "errors": 0}
    elif job == "reindex":
        namespace, run_id = payload.get("namespace"), payload.get("run_id")
        if not isinstance(namespace, str) or not isinstance(run_id, str) or not namespace or not run_id:
            raise InvalidInput("reindex job needs 'namespace' and 'run_id'")
        state = container.reindex.run(namespace, run_id, deadline=_deadline(lambda_context))
        report = {"job": job, "state": state.get("state"), "done": state.get("done"), "errors": 0}
        snapshot_search(container)
    elif job == "history":
        namespace, thread = payload.get("namespace"), payload.get("thread")
        if not isinstance(namespace, str) or not isinstance(thread, str) or not namespace or not thread:
            raise InvalidInput("history job needs 'namespace' and 'thread'")
        report = run_sync(container.history.rotate(namespace, thread))
    else:
        raise InvalidInput(f"the jobs queue got an unknown {job!r} job")
    store.put_idempotency(
        IdempotencyRecord(
            namespace=JOBS_NAMESPACE,
            key=key,
            value={"job": job, "namespace": namespace or "*", "errors": report.get("errors", 0)},
            created_at=container.clock.now(),
        )
    )
    metric = {
        "cleanup": "CleanupRuns",
        "index_repair": "IndexRepairRuns",
        "reindex": "ReindexRuns",
        "history": "HistoryRotations",
    }[job]
    metrics.add_metric(name=metric, unit=MetricUnit.Count, value=1)
    return report


def _deadline(context: LambdaContext | None) -> float | None:
    """When a long job must stop (a ``time.monotonic()`` value), from the invocation's remaining time."""
    if context is None:
        return None
    remaining = context.get_remaining_time_in_millis() / 1000
    return time.monotonic() + max(MIN_SLICE_S, remaining - REINDEX_MARGIN_S)


@logger.inject_lambda_context(log_event=False)
@tracer.capture_lambda_handler(capture_response=False)
@metrics.log_metrics(capture_cold_start_metric=True)
def handler(event: dict[str, Any], context: LambdaContext) -> PartialItemFailureResponse:
    return process_partial_response(event=event, record_handler=record_handler, processor=processor, context=context)
