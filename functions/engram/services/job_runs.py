"""The runs of background jobs: one run per (job, namespace) at a time, a record of each run, the latest runs
(`GET /v1/jobs`). Reading the JSON a model answered with: ``services/model_reply.py``."""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from engram.domain.errors import Conflict
from engram.domain.models import MemoryEvent, new_id
from engram.domain.ports import AuditRows, Clock

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


def record_run(store: AuditRows, clock: Clock, job: str, namespace: str, detail: dict[str, Any]) -> None:
    """Log the one-line summary of a job run and keep it as an event row (``GET /v1/jobs``)."""
    counts = " ".join(f"{k}={v}" for k, v in detail.items() if isinstance(v, int | float | bool) or v is None)
    errors = detail.get("errors") or []
    log.info("%s ns=%s %s errors=%d", job, namespace, counts, len(errors))
    store.append_event(
        MemoryEvent(
            id=new_id("evt"),
            namespace=namespace,
            kind=event_kind(job),
            detail=detail,
            created_at=clock.now(),
        )
    )


def last_runs(store: AuditRows, namespace: str, limit: int = 20) -> list[dict[str, Any]]:
    """The latest recorded runs of every job in a namespace, newest first."""
    runs: list[dict[str, Any]] = []
    for job in JOB_KINDS:
        for event in store.list_events(namespace, kind=event_kind(job), limit=limit):
            runs.append({"job": job, "at": event.created_at.isoformat(), **event.detail})
    runs.sort(key=lambda r: r["at"], reverse=True)
    return runs[:limit]
