"""What the background jobs share: reading model JSON, recording runs, per-namespace locks."""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from engram.domain.errors import Conflict, InvalidInput
from engram.domain.models import MemoryEvent, new_id
from engram.domain.ports import AuditRows, Clock

log = logging.getLogger("engram.jobs")

JOB_KINDS = ("extract", "dream", "cleanup")


def event_kind(job: str) -> str:
    return f"job.{job}"


def parse_json_object(text: str) -> dict[str, Any]:
    """The first JSON object in a model reply: bare, in a ```json fence, or wrapped in prose.

    Raises ``InvalidInput`` (code ``invalid_model_output``) when there is none.
    """
    decoder = json.JSONDecoder()
    stripped = text.strip()
    candidates = [stripped]
    # Fenced blocks first: prose around a fence often contains stray braces.
    # The language tag ("json") before the first brace is skipped by the brace search below.
    candidates[:0] = stripped.split("```")[1::2]
    for candidate in candidates:
        start = candidate.find("{")
        while start != -1:
            try:
                value, _ = decoder.raw_decode(candidate, start)
            except json.JSONDecodeError:
                start = candidate.find("{", start + 1)
                continue
            if isinstance(value, dict):
                return value
            start = candidate.find("{", start + 1)
    raise InvalidInput("the model did not answer with a JSON object", code="invalid_model_output")


def as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def as_str(value: Any) -> str:
    return value.strip() if isinstance(value, str) else ""


def as_unit(value: Any, default: float) -> float:
    """A number clamped to [0, 1]; ``default`` when it is not a number."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        try:
            value = float(str(value))
        except ValueError:
            return default
    number = float(value)
    if number != number:  # NaN
        return default
    return min(max(number, 0.0), 1.0)


def as_str_list(value: Any, limit: int = 20) -> list[str]:
    return [v.strip() for v in as_list(value) if isinstance(v, str) and v.strip()][:limit]


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
