"""Every background job, and the one runner every way of starting one goes through (docs/ARCHITECTURE.md,
"Background jobs").

``JOBS`` is the registry: a job's name -> how its payload is read (the schema: a bad payload is
``InvalidInput`` naming what is missing), what it runs, and what follows a run (the search snapshot, the
metric names, when a run counts as failed). ``JobRunner`` runs a job by name and does those after-steps;
the Lambda handlers, the in-process scheduler, the CLI, REST "run now" and the in-process queue all call
it, so no start skips a step. Each service keeps the record of its own runs per namespace
(``services/jobs/runs.record_run``: a namespace's detail is only known inside the run).

Adding a job: one ``Job`` in ``JOBS`` (and, on AWS, the target that sends its name: infra/jobs.py).
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections.abc import Awaitable, Callable, Mapping
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Protocol

from engram.domain.errors import Conflict, InvalidInput
from engram.domain.models import IdempotencyRecord
from engram.domain.ports import Clock, KeyValueRows
from engram.services.library.journal import Journal
from engram.services.sync_bridge import run_sync

log = logging.getLogger("engram.jobs")

Report = dict[str, Any]

# The cleanup job runs often (after chats); it snapshots the replica index only once this many rows changed.
CLEANUP_SNAPSHOT_CHANGES = 200


class _HasReport(Protocol):
    def to_dict(self) -> dict[str, Any]: ...


class Extraction(Protocol):
    async def run(self, namespace: str | None = None) -> _HasReport: ...


class Dreaming(Protocol):
    async def run(self, date: str | None = None, force: bool = False, namespace: str | None = None) -> _HasReport: ...


class Cleanup(Protocol):
    def run(self, namespace: str | None = None) -> _HasReport: ...


class IndexRepair(Protocol):
    def repair(self, namespace: str) -> int: ...


class History(Protocol):
    async def rotate(self, namespace: str, thread: str) -> dict[str, Any]: ...


class Consolidation(Protocol):
    async def run(self, namespace: str, draft_id: str, *, deadline: float | None = None) -> dict[str, Any]: ...


class Reindex(Protocol):
    def run(self, namespace: str, run_id: str, *, deadline: float | None = None) -> dict[str, Any]: ...


@dataclass(frozen=True)
class JobServices:
    """What the jobs run on (the container's services; tests pass fakes)."""

    extraction: Extraction
    dreaming: Dreaming
    cleanup: Cleanup
    upkeep: IndexRepair
    reindex: Callable[[], Reindex]  # late: the reindex service needs the queue, which needs the runner
    history: History | None = None  # server-kept history (services/chat/history.py)
    consolidation: Consolidation | None = None  # consolidation drafts (services/jobs/consolidation.py)
    # Writes the replica index's snapshots of namespaces changed by at least n rows; returns how many.
    snapshot: Callable[[int], int] = lambda _min_changes: 0
    # Every run is a run of the change journal (services/library/journal.py): its changes are recorded with it.
    journal: Journal | None = None


@dataclass(frozen=True)
class JobResult:
    """A finished run: its JSON-ready report, and whether it failed (the scheduler retries it early)."""

    job: str
    report: Report
    failed: bool


# -- payloads (the schema of each job's input) ---------------------------------------------------


def _optional_str(payload: Mapping[str, Any], name: str, job: str) -> str | None:
    value = payload.get(name)
    if value is None or value == "":
        return None
    if not isinstance(value, str):
        raise InvalidInput(f"{job} job: {name!r} must be a string")
    return value


def _required_str(payload: Mapping[str, Any], name: str, job: str, needs: str) -> str:
    value = payload.get(name)
    if not isinstance(value, str) or not value:
        raise InvalidInput(f"{job} job needs {needs}")
    return value


# -- the jobs -------------------------------------------------------------------------------------


async def _extract(s: JobServices, payload: Mapping[str, Any], deadline: float | None) -> Report:
    report = await s.extraction.run(namespace=_optional_str(payload, "namespace", "extract"))
    return dict(report.to_dict())


async def _dream(s: JobServices, payload: Mapping[str, Any], deadline: float | None) -> Report:
    report = await s.dreaming.run(
        date=_optional_str(payload, "date", "dream"),
        force=bool(payload.get("force")),
        namespace=_optional_str(payload, "namespace", "dream"),
    )
    return dict(report.to_dict())


def _cleanup(s: JobServices, payload: Mapping[str, Any], deadline: float | None) -> Report:
    """``{"namespace": ...}`` (the chat path's request, a run now) or ``{"all": true}`` (the nightly run)."""
    namespace = None if payload.get("all") else _optional_str(payload, "namespace", "cleanup")
    if not payload.get("all") and not namespace:
        raise InvalidInput("cleanup job needs 'namespace' or 'all'")
    return dict(s.cleanup.run(namespace).to_dict())


def _index_repair(s: JobServices, payload: Mapping[str, Any], deadline: float | None) -> Report:
    namespace = _required_str(payload, "namespace", "index_repair", "'namespace'")
    return {"job": "index_repair", "repaired": s.upkeep.repair(namespace), "errors": 0}


def _reindex(s: JobServices, payload: Mapping[str, Any], deadline: float | None) -> Report:
    needs = "'namespace' and 'run_id'"
    namespace = _required_str(payload, "namespace", "reindex", needs)
    run_id = _required_str(payload, "run_id", "reindex", needs)
    state = s.reindex().run(namespace, run_id, deadline=deadline)
    return {"job": "reindex", "state": state.get("state"), "done": state.get("done"), "errors": 0}


async def _history(s: JobServices, payload: Mapping[str, Any], deadline: float | None) -> Report:
    """A thread's server-kept history is due a rotation (services/chat/history.py)."""
    needs = "'namespace' and 'thread'"
    namespace = _required_str(payload, "namespace", "history", needs)
    thread = _required_str(payload, "thread", "history", needs)
    if s.history is None:
        raise InvalidInput("history job: no history service")
    return dict(await s.history.rotate(namespace, thread))


async def _consolidate(s: JobServices, payload: Mapping[str, Any], deadline: float | None) -> Report:
    """Draft a consolidation the person asked for (services/jobs/consolidation.py)."""
    needs = "'namespace' and 'draft_id'"
    namespace = _required_str(payload, "namespace", "consolidate", needs)
    draft_id = _required_str(payload, "draft_id", "consolidate", needs)
    if s.consolidation is None:
        raise InvalidInput("consolidate job: no consolidation service")
    state = await s.consolidation.run(namespace, draft_id, deadline=deadline)
    return {"job": "consolidate", "state": state.get("state"), "items": len(state.get("items") or []), "errors": 0}


def _never_failed(report: Report) -> bool:
    return False


def _a_namespace_failed(report: Report) -> bool:
    """A namespace's run failed (the report's ``failed`` list; services/jobs/extraction.py and
    services/jobs/dreaming.py say what a failure is): the run retries just those namespaces. The run itself
    returns: a Lambda invocation must not raise for it (docs/aws.md, "Alarms")."""
    return bool(report.get("failed"))


# A job's body: the services, its payload, and when it must stop (a ``time.monotonic()`` value, or None).
JobBody = Callable[[JobServices, Mapping[str, Any], float | None], Report | Awaitable[Report]]


@dataclass(frozen=True)
class Job:
    """One background job: what it runs (a coroutine or a plain function) and what follows a run."""

    name: str
    run: JobBody
    # The replica snapshot after a run: of namespaces changed by at least this many rows (None: none).
    snapshot_min_changes: int | None
    metric: str  # counted once per run (Lambda: CloudWatch)
    error_metric: str | None = None  # the report's error count, per run
    failed: Callable[[Report], bool] = field(default=_never_failed)
    is_coroutine: bool = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "is_coroutine", inspect.iscoroutinefunction(self.run))

    def call(self, services: JobServices, payload: Mapping[str, Any], deadline: float | None) -> Report:
        """Run from synchronous code (a coroutine on the process's one loop)."""
        out = self.run(services, payload, deadline)
        return run_sync(out) if inspect.isawaitable(out) else out

    async def acall(self, services: JobServices, payload: Mapping[str, Any], deadline: float | None) -> Report:
        """Run on an event loop (a plain function in a worker thread)."""
        if self.is_coroutine:
            out = self.run(services, payload, deadline)
        else:
            out = await asyncio.to_thread(self.run, services, payload, deadline)
        return await out if inspect.isawaitable(out) else out


JOBS: dict[str, Job] = {
    job.name: job
    for job in (
        Job("extract", _extract, 1, "ExtractionRuns", "ExtractionErrors", failed=_a_namespace_failed),
        Job("dream", _dream, 1, "DreamRuns", "DreamErrors", failed=_a_namespace_failed),
        Job("cleanup", _cleanup, CLEANUP_SNAPSHOT_CHANGES, "CleanupRuns"),
        Job("index_repair", _index_repair, None, "IndexRepairRuns"),
        Job("reindex", _reindex, 1, "ReindexRuns"),
        Job("history", _history, None, "HistoryRotations"),
        Job("consolidate", _consolidate, None, "ConsolidationRuns"),
    )
}


def job_named(name: str) -> Job:
    job = JOBS.get(name)
    if job is None:
        raise InvalidInput(f"unknown job {name!r}", code="unknown_job")
    return job


class JobRunner:
    """Runs a job by name, then its after-steps; ``run`` from synchronous code (CLI, Lambda, the
    in-process queue's threads), ``run_async`` on an event loop (REST, the scheduler). Async jobs run
    on the process's one loop (``services/sync_bridge.py``), so a warm Lambda reuses its model client."""

    def __init__(self, services: JobServices) -> None:
        self._services = services

    def run(self, name: str, payload: Mapping[str, Any], *, deadline: float | None = None) -> JobResult:
        job = job_named(name)
        with self._journaled(job, payload):
            report = job.call(self._services, payload, deadline)
        return self._finish(job, report)

    async def run_async(self, name: str, payload: Mapping[str, Any], *, deadline: float | None = None) -> JobResult:
        job = job_named(name)
        with self._journaled(job, payload):
            report = await job.acall(self._services, payload, deadline)
        return await asyncio.to_thread(self._finish, job, report)

    def _journaled(self, job: Job, payload: Mapping[str, Any]) -> AbstractContextManager[object]:
        """The run of the change journal this job run is (docs/journal.md); none without a journal."""
        if self._services.journal is None:
            return nullcontext()
        return self._services.journal.run(f"job.{job.name}", source="job", always_record=False)

    def snapshot(self, min_changes: int = 1) -> int:
        """Write the replica index's snapshots now (of namespaces changed by at least ``min_changes`` rows)."""
        return self._services.snapshot(min_changes)

    def _finish(self, job: Job, report: Report) -> JobResult:
        """The one place a finished run is judged and followed up (snapshot; metrics: the caller's)."""
        if job.snapshot_min_changes is not None:
            try:
                self._services.snapshot(job.snapshot_min_changes)
            except Exception:  # a snapshot only speeds up cold starts: never fail the job for it
                log.exception("writing the search snapshots after %s failed", job.name)
        return JobResult(job=job.name, report=report, failed=job.failed(report))


# -- each queued message once -------------------------------------------------------------------

# Idempotency keys of the jobs queue live in this namespace (retention deletes them after 7 days).
JOBS_NAMESPACE = "_jobs"


def run_once(
    store: KeyValueRows,
    clock: Clock,
    key: str,
    lease: timedelta,
    run: Callable[[], Report],
    keep: Mapping[str, Any] | None = None,
) -> Report | None:
    """Run ``run`` once for ``key`` however many deliveries of it arrive, at once or later (SQS delivers
    at least once); ``None`` when it already ran. A delivery first claims the key with a conditional put
    (the store's put-if-absent: of two at once, one wins); one that finds the claim held by a live run
    raises ``Conflict`` so the queue retries it later. A failed run gives the claim up (the queue retries
    the message); a claim older than ``lease`` (its process died) is taken over. A run that succeeds
    keeps ``key`` (with ``keep`` and the report's error count) before it lets the claim go, and the
    winner of a claim reads ``key`` again, so a late duplicate never runs it twice.

    Why not Powertools' idempotency utility: its persistence layer writes its own item shape straight
    to a DynamoDB table, outside the store's ports (no SQLite or in-memory store, no contract suite);
    the store's conditional put gives the same guarantee on every store."""
    if store.get_idempotency(JOBS_NAMESPACE, key) is not None:
        return None
    claim = f"{key}:claim"
    now = clock.now()
    mine = IdempotencyRecord(
        namespace=JOBS_NAMESPACE, key=claim, value={"until": (now + lease).isoformat()}, created_at=now
    )
    if not store.put_idempotency(mine):
        held = store.get_idempotency(JOBS_NAMESPACE, claim)
        if held is not None and _lease_end(held) > now:
            raise Conflict(f"job message {key!r} is being processed by another delivery", code="job_running")
        store.delete_idempotency(JOBS_NAMESPACE, claim)  # its holder died: take the claim over
        if not store.put_idempotency(mine):
            raise Conflict(f"job message {key!r} is being processed by another delivery", code="job_running")
    try:
        if store.get_idempotency(JOBS_NAMESPACE, key) is not None:  # done meanwhile by the claim's last holder
            return None
        report = run()
    except BaseException:
        store.delete_idempotency(JOBS_NAMESPACE, claim)
        raise
    done = {**(keep or {}), "errors": report.get("errors", 0)}
    store.put_idempotency(IdempotencyRecord(namespace=JOBS_NAMESPACE, key=key, value=done, created_at=clock.now()))
    store.delete_idempotency(JOBS_NAMESPACE, claim)
    return report


def _lease_end(record: IdempotencyRecord) -> datetime:
    until = (record.value or {}).get("until")
    return datetime.fromisoformat(until) if isinstance(until, str) else record.created_at
