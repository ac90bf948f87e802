"""What every job Lambda shares: Powertools logger/tracer/metrics, one container per process, and
``run_job``: a job by name through the container's one runner (``services/jobs/registry.py``), then its metrics.

Handlers stay thin: name the job and pass the event as its payload. The container is built on the first
invocation (not at import) from ENGRAM_* settings by ``engram.bootstrap`` and reused by later
invocations of the same execution environment.
"""

from __future__ import annotations

import functools
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any, Protocol, TypeVar

from aws_lambda_powertools import Logger, Metrics, Tracer
from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.typing import LambdaContext

from engram.bootstrap import build_container
from engram.domain.deployment import METRICS_NAMESPACE, METRICS_SERVICE
from engram.domain.ports import Clock, KeyValueRows
from engram.entrypoints.logs import configure_logging
from engram.services.jobs.registry import JOBS, JobResult, JobRunner
from engram.settings import load_settings

# Service and namespace defaults keep local runs and tests working without POWERTOOLS_* variables.
logger = Logger(service=METRICS_SERVICE)
tracer = Tracer(service=METRICS_SERVICE)
metrics = Metrics(namespace=METRICS_NAMESPACE, service=METRICS_SERVICE)

Event = TypeVar("Event")
Response = TypeVar("Response")
_cold_lock = threading.Lock()
_cold_start = True  # no invocation of this process has succeeded yet


def log_metrics(handler: Callable[[Event, LambdaContext], Response]) -> Callable[[Event, LambdaContext], Response]:
    """Publish the invocation's metrics when it ends, and the ``ColdStart`` metric with the process's first
    invocation that succeeds: Powertools' ``metrics.log_metrics(capture_cold_start_metric=True)``, except
    that an invocation that added no application metric publishes none, without a warning. Those are the
    invocations that ran no job: a redelivered SQS message acknowledged without running it, a duplicate
    refused while the first delivery still runs, a job refused before it ran (its error is Lambda's own
    ``Errors`` metric). Powertools warns on each ("No application metrics to publish"); its
    ``raise_on_empty_metrics`` would fail them instead."""

    @functools.wraps(handler)
    def publish(event: Event, context: LambdaContext) -> Response:
        global _cold_start
        try:
            response = handler(event, context)
            with _cold_lock:
                first, _cold_start = _cold_start, False
            if first:
                metrics.provider.add_cold_start_metric(context=context)  # its own EMF line, as Powertools writes it
        finally:
            if metrics.metric_set:
                metrics.flush_metrics()
        return response

    return publish


class JobContainer(Protocol):
    """What the job Lambdas use of the container (a ``bootstrap.Container``): the runner, and the store and
    clock of SQS deliveries' claims. Tests give a smaller one through ``set_container_factory``."""

    @property
    def store(self) -> KeyValueRows: ...

    @property
    def clock(self) -> Clock: ...

    @property
    def jobs(self) -> JobRunner: ...


_lock = threading.Lock()
_container: JobContainer | None = None
_factory: Callable[[], JobContainer] | None = None


def set_container_factory(factory: Callable[[], JobContainer] | None) -> None:
    """Replace how the container is built (tests), and forget the one built so far."""
    global _container, _factory
    with _lock:
        _factory, _container = factory, None


def get_container() -> JobContainer:
    global _container
    with _lock:
        if _container is None:
            if _factory is not None:
                _container = _factory()
            else:
                # ENGRAM_LOG_LEVEL rules the `engram` loggers, whose records Powertools writes as JSON.
                base = load_settings()
                configure_logging(base.log_level)
                _container = build_container(base)
        return _container


# A long job (reindex) leaves this much of the invocation to the other records of an SQS batch, and gets
# at least MIN_SLICE_S (it always finishes its current batch of memories first).
REINDEX_MARGIN_S = 90.0
MIN_SLICE_S = 10.0


def deadline(context: LambdaContext | None) -> float | None:
    """When a long job must stop (a ``time.monotonic()`` value), from the invocation's remaining time."""
    if context is None:
        return None
    remaining = context.get_remaining_time_in_millis() / 1000
    return time.monotonic() + max(MIN_SLICE_S, remaining - REINDEX_MARGIN_S)


def run_job(name: str, payload: Mapping[str, Any], context: LambdaContext | None) -> JobResult:
    """Run one job through the container's runner, log its summary and count it (its error count too)."""
    result = get_container().jobs.run(name, payload, deadline=deadline(context))
    job, report = JOBS[name], result.report
    logger.info(f"{name} done", extra={"job_errors": report.get("errors"), "job_failed": result.failed})
    metrics.add_metric(name=job.metric, unit=MetricUnit.Count, value=1)
    if job.error_metric is not None:
        metrics.add_metric(name=job.error_metric, unit=MetricUnit.Count, value=int(report.get("errors") or 0))
    return result
