"""The runs of background jobs: one run per (job, namespace) at a time, a record of each run, the latest runs
(`GET /v1/jobs`). Reading the JSON a model answered with: ``services/models/reply.py``."""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from engram.domain.errors import MESSAGE_CHARS, Conflict, EngramError
from engram.domain.models import MemoryEvent, new_id
from engram.domain.ports import AuditRows, Clock
from engram.services.library.journal import report_to_run

log = logging.getLogger("engram.jobs")

JOB_KINDS = ("extract", "dream", "cleanup")


def event_kind(job: str) -> str:
    return f"job.{job}"


class NamespaceLocks:
    """One non-blocking lock per (job, namespace): a second run of the same job waits for nothing,
    it is refused (``Conflict``) so two runs never read the same window in one process."""

    def __init__(self) -> None:
        self._guard = threading.Lock()
        self._locks: dict[tuple[str, str], threading.Lock] = {}

    @contextmanager
    def hold(self, job: str, namespace: str) -> Iterator[None]:
        with self._guard:
            lock = self._locks.setdefault((job, namespace), threading.Lock())
        if not lock.acquire(blocking=False):
            raise Conflict(f"a {job} run for namespace {namespace!r} is already in progress", code="job_running")
        try:
            yield
        finally:
            lock.release()


def failure_of(exc: Exception, what: str, namespace: str) -> dict[str, Any]:
    """The report entry of a namespace's run that failed with ``exc`` (logged here: an unexpected
    exception with its traceback). The run goes on with the next namespace (docs/aws.md, "Alarms")."""
    if isinstance(exc, EngramError):
        log.warning("%s for %s: %s", what, namespace, exc.code)
        return {"error": exc.code, "message": exc.message[:MESSAGE_CHARS]}
    log.exception("%s for %s", what, namespace)
    return {"error": "internal_error", "message": f"{type(exc).__name__}: {exc}"[:MESSAGE_CHARS]}


def record_run(store: AuditRows, clock: Clock, job: str, namespace: str, detail: dict[str, Any]) -> None:
    """Log the one-line summary of a job run and keep it as an event row (``GET /v1/jobs``): the record of
    the journal's open run (``services/library/journal.py``), else an event of its own. A record
    that cannot be written is logged, never raised: the run's work is done and must not be repeated."""
    counts = " ".join(f"{k}={v}" for k, v in detail.items() if isinstance(v, int | float | bool) or v is None)
    errors = detail.get("errors") or []
    log.info("%s ns=%s %s errors=%d", job, namespace, counts, len(errors))
    if report_to_run(namespace, job, detail):  # the run's record, written when the run closes (docs/journal.md)
        return
    try:
        store.append_event(
            MemoryEvent(
                id=new_id("evt"),
                namespace=namespace,
                kind=event_kind(job),
                detail=detail,
                created_at=clock.now(),
            )
        )
    except Exception:
        log.warning("the record of a %s run of %s could not be written", job, namespace, exc_info=True)


def last_runs(store: AuditRows, namespace: str, limit: int = 20) -> list[dict[str, Any]]:
    """The latest recorded runs of every job in a namespace, newest first."""
    runs: list[dict[str, Any]] = []
    for job in JOB_KINDS:
        for event in store.list_events(namespace, kind=event_kind(job), limit=limit):
            runs.append({"job": job, "at": event.created_at.isoformat(), **event.detail})
    runs.sort(key=lambda r: r["at"], reverse=True)
    return runs[:limit]
