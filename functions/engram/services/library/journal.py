"""The change journal (docs/journal.md): every change a run makes to a row, with the row before and after
and why, kept in the memory event log next to the run's record; the runs list, one run's changes, and the
undo of a run (whose own undo redoes it).

A *run* is a job run (extract, dream, cleanup, history, ...), an import, a hand edit (one REST request,
MCP tool call or panel action), a hand merge, or an undo. Whoever starts one opens it with
``Journal.run(kind, ...)``; while it is open, every write through the journaled store
(``services/library/journaled_store.py``, the store every service is given) is recorded with it, and
``Journal.because(reason)`` names the model's reason for the writes it wraps. The run is a context
variable, so it follows the work into threads started with ``asyncio.to_thread`` and coroutines run on
the process loop (``services/sync_bridge.run_sync``). When the run closes, its record — one per namespace it
touched — is written: the event whose id is the run id, with the counts of its changes.

Over 400 lines on purpose: the runs, the recording and the undo of each row kind read as one contract
(what is recorded is exactly what can be reverted), and the per-kind reverts are short functions.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol

from engram.domain.errors import MESSAGE_CHARS, Conflict, EngramError, NotFound
from engram.domain.models import (
    MEMORY_COUNTERS,
    Candidate,
    DailyLog,
    Digest,
    GlossaryTerm,
    Memory,
    MemoryEvent,
    Page,
    Precious,
    Reminder,
    Thread,
    new_id,
)
from engram.domain.ports import (
    AuditRows,
    CandidateRows,
    Clock,
    JournalRows,
    KeyValueRows,
    MemoryRows,
    NoteRows,
    ReminderRows,
    ThreadRows,
)

log = logging.getLogger("engram.journal")

CHANGE = "change"  # the event kind of one recorded change
# The kinds of row the journal records (docs/journal.md, "What is recorded").
ROW_KINDS = ("memory", "candidate", "thread", "summary", "reminder", "precious", "glossary", "digest", "daily_log")
# A run's changes are read for an undo in pages of this many.
_UNDO_PAGE = 200


class JournalStore(
    MemoryRows, CandidateRows, ThreadRows, ReminderRows, NoteRows, AuditRows, JournalRows, KeyValueRows, Protocol
):
    """What the journal reads and writes: the rows it can revert, and the event log it keeps."""


@dataclass
class Run:
    """An open run: what it is, and what it changed so far in each namespace."""

    id: str
    kind: str
    source: str | None
    started_at: datetime
    detail: dict[str, Any] = field(default_factory=dict)
    changes: dict[str, Counter[str]] = field(default_factory=dict)
    # A job's own report of a namespace (``services/jobs/runs.record_run``), merged into the record.
    reports: dict[str, dict[str, Any]] = field(default_factory=dict)
    always_record: bool = True  # a job's run is recorded even when it changed nothing

    def count(self, namespace: str, row: str, op: str) -> None:
        self.changes.setdefault(namespace, Counter())[f"{row}.{op}"] += 1


_run: ContextVar[Run | None] = ContextVar("engram_journal_run", default=None)
_reason: ContextVar[str | None] = ContextVar("engram_journal_reason", default=None)


# What a memory's change is about: not the bookkeeping a replace also moves (the index's reference,
# the version) nor the counters (docs/ARCHITECTURE.md, "Write rules").
_BOOKKEEPING = frozenset({"index_ref", "version", *MEMORY_COUNTERS})


def memory_state(memory: Memory) -> dict[str, Any]:
    """The fields of a memory a change is about; two rows with the same state are the same memory."""
    return memory.model_dump(exclude=set(_BOOKKEEPING))


def current_run() -> Run | None:
    """The run open in this context, if any."""
    return _run.get()


def report_to_run(namespace: str, job: str, detail: dict[str, Any]) -> bool:
    """Keep a job's report of a namespace on the open run's record; ``False`` if no run is open
    (the caller then records it on its own: ``services/jobs/runs.record_run``)."""
    run = _run.get()
    if run is None:
        return False
    run.reports[namespace] = {"job": job, **detail}
    return True


def snapshot(row: Any) -> dict[str, Any] | None:
    """A row as the journal keeps it (JSON), or None for no row."""
    return None if row is None else dict(row.model_dump(mode="json"))


class Journal:
    """Opens runs, records their changes, lists them, and undoes a run (``undo``)."""

    def __init__(self, store: JournalStore, clock: Clock) -> None:
        self._store = store
        # Where an undo writes: the journaled store (``write_through``), so the undo is recorded as a run.
        self._rows: JournalStore = store
        self._clock = clock
        # Told which memories an undo rewrote, so the search index follows (bootstrap: the memory service).
        self.on_memories_changed: Callable[[str, list[str]], None] = lambda _namespace, _ids: None

    def write_through(self, rows: JournalStore) -> None:
        """Send an undo's writes through ``rows`` (the journaled store), so they are recorded too."""
        self._rows = rows

    # -- runs ------------------------------------------------------------------------------------
    @contextmanager
    def run(
        self,
        kind: str,
        *,
        source: str | None = None,
        detail: dict[str, Any] | None = None,
        always_record: bool = True,
    ) -> Iterator[Run]:
        """Open a run; every journaled write until it closes is one of its changes. ``kind`` names it
        (``job.dream``, ``import``, ``edit``, ``merge``, ``undo``, ...); ``source`` says who started it
        (``rest``, ``mcp``, ``panel``, ``cli``, ``schedule``, ...); ``detail`` is kept on its record. A
        run that changed nothing is recorded only with ``always_record`` (jobs: their runs list shows
        every run). Runs nest: the inner one takes the changes made while it is open."""
        run = Run(
            id=new_id("run"),
            kind=kind,
            source=source,
            started_at=self._clock.now(),
            detail=dict(detail or {}),
            always_record=always_record,
        )
        token = _run.set(run)
        try:
            yield run
        finally:
            _run.reset(token)
            self._close(run)

    @staticmethod
    @contextmanager
    def because(reason: str | None) -> Iterator[None]:
        """The reason (the model's, where there is one) of the changes written inside."""
        token = _reason.set(reason[:1000] if reason else None)
        try:
            yield
        finally:
            _reason.reset(token)

    def record(
        self,
        namespace: str,
        row: str,
        op: str,
        row_id: str,
        before: dict[str, Any] | None,
        after: dict[str, Any] | None,
        *,
        memory_id: str | None = None,
        reason: str | None = None,
    ) -> None:
        """Record one change with the open run (nothing if none is open). The journaled store calls this
        for every write; a caller records here only what does not pass through the store."""
        run = _run.get()
        if run is None:
            return
        detail: dict[str, Any] = {"row": row, "op": op, "id": row_id, "before": before, "after": after}
        why = reason or _reason.get()
        if why:
            detail["reason"] = why
        run.count(namespace, row, op)
        try:
            self._store.append_event(
                MemoryEvent(
                    id=new_id("evt"),
                    namespace=namespace,
                    kind=CHANGE,
                    memory_id=memory_id,
                    detail=detail,
                    created_at=self._clock.now(),
                    run_id=run.id,
                )
            )
        except EngramError as exc:  # the change itself is written; its record must not undo it
            log.warning("the journal could not record a %s %s of %s: %s", row, op, row_id, exc.code)

    def _close(self, run: Run) -> None:
        namespaces = set(run.changes) | set(run.reports)
        if not namespaces and run.always_record and run.detail.get("namespace"):
            namespaces = {str(run.detail["namespace"])}
        for namespace in sorted(namespaces):
            counts = run.changes.get(namespace, Counter())
            if not counts and namespace not in run.reports and not run.always_record:
                continue
            detail = {k: v for k, v in run.detail.items() if k != "namespace"}
            detail |= run.reports.get(namespace, {})
            detail |= {
                "source": run.source,
                "started_at": run.started_at.isoformat(),
                "changes": dict(sorted(counts.items())),
                "changed": sum(counts.values()),
            }
            try:
                self._store.append_event(
                    MemoryEvent(
                        id=run.id,
                        namespace=namespace,
                        kind=run.kind,
                        detail=detail,
                        created_at=self._clock.now(),
                        run_id=run.id,
                    )
                )
            except EngramError as exc:
                log.warning("the record of run %s (%s) could not be written: %s", run.id, run.kind, exc.code)

    # -- reading ---------------------------------------------------------------------------------
    def runs(self, namespace: str, *, limit: int = 50, cursor: str | None = None) -> Page[MemoryEvent]:
        """The runs list, newest first."""
        return self._store.list_runs(namespace, limit=limit, cursor=cursor)

    def get_run(self, namespace: str, run_id: str) -> MemoryEvent:
        found = self._store.get_run(namespace, run_id)
        if found is None:
            raise NotFound(f"run {run_id} not found", code="run_not_found")
        return found

    def changes(self, namespace: str, run_id: str, *, limit: int = 100, cursor: str | None = None) -> Page[MemoryEvent]:
        """One run's changes, in the order they were made."""
        self.get_run(namespace, run_id)
        return self._store.list_run_changes(namespace, run_id, limit=limit, cursor=cursor)

    # -- undo ------------------------------------------------------------------------------------
    def undo(self, namespace: str, run_id: str, *, source: str | None = None) -> dict[str, Any]:
        """Revert a run's changes, newest first, each row written only if it is still as the run left
        it (a memory: conditional on its version); a row changed since is left alone and reported in
        ``conflicts``. The undo is itself a run (kind ``undo``), so undoing it redoes the original."""
        target = self.get_run(namespace, run_id)
        changes: list[MemoryEvent] = []
        cursor: str | None = None
        while True:
            page = self._store.list_run_changes(namespace, run_id, limit=_UNDO_PAGE, cursor=cursor)
            changes.extend(page.items)
            cursor = page.next_cursor
            if cursor is None:
                break
        reverted = 0
        conflicts: list[dict[str, Any]] = []
        skipped: list[dict[str, Any]] = []
        memories: list[str] = []
        with self.run("undo", source=source, detail={"undoes": run_id, "undoes_kind": target.kind}) as run:
            for change in reversed(changes):
                row, row_id = str(change.detail.get("row")), str(change.detail.get("id"))
                where = {"row": row, "id": row_id, "op": change.detail.get("op")}
                try:
                    with self.because(f"undo of {run_id}"):
                        _revert(self._rows, self._clock, row, change.detail)
                except _Skip as exc:
                    skipped.append({**where, "reason": str(exc)})
                    continue
                except (Conflict, NotFound) as exc:
                    conflicts.append({**where, "error": exc.code, "message": exc.message[:MESSAGE_CHARS]})
                    continue
                reverted += 1
                if row == "memory":
                    memories.append(row_id)
        if memories:
            try:
                self.on_memories_changed(namespace, sorted(set(memories)))
            except EngramError as exc:  # the rows are right; a reindex repairs the mirror
                log.warning("the index could not follow the undo of %s: %s", run_id, exc.code)
        return {
            "run_id": run.id,
            "undoes": run_id,
            "reverted": reverted,
            "conflicts": conflicts,
            "skipped": skipped,
        }


def run_view(record: MemoryEvent) -> dict[str, Any]:
    """A run's record as REST, MCP and the panel show it."""
    detail = dict(record.detail)
    return {
        "id": record.id,
        "kind": record.kind,
        "at": record.created_at.isoformat(),
        "source": detail.pop("source", None),
        "changed": detail.pop("changed", 0),
        "changes": detail.pop("changes", {}),
        "undoes": detail.pop("undoes", None),
        "detail": detail,
    }


def change_view(change: MemoryEvent) -> dict[str, Any]:
    """One recorded change as REST, MCP and the panel show it (rows without their namespace)."""
    detail = change.detail

    def row(value: Any) -> Any:
        return {k: v for k, v in value.items() if k != "namespace"} if isinstance(value, dict) else value

    return {
        "id": change.id,
        "at": change.created_at.isoformat(),
        "row": detail.get("row"),
        "op": detail.get("op"),
        "row_id": detail.get("id"),
        "reason": detail.get("reason"),
        "before": row(detail.get("before")),
        "after": row(detail.get("after")),
    }


class _Skip(Exception):
    """A change that cannot be reverted (the row was erased for good, messages moved or purged)."""


def _same(current: Any, after: dict[str, Any] | None, model: type[Any]) -> bool:
    if after is None:
        return current is None
    return current is not None and current == model.model_validate(after)


def _changed_since(row: str, row_id: str) -> Conflict:
    return Conflict(f"{row} {row_id} was changed after the run; left as it is", code="version_conflict")


def _revert(store: JournalStore, clock: Clock, row: str, detail: dict[str, Any]) -> None:
    """Write one change's ``before`` back, if the row is still at its ``after`` (else ``Conflict``)."""
    before, after, row_id = detail.get("before"), detail.get("after"), str(detail.get("id"))
    revert = _REVERTS.get(row)
    if revert is None or detail.get("op") in ("erase", "purge", "move"):
        raise _Skip(f"a {row} {detail.get('op')} cannot be undone")
    revert(store, clock, row_id, before, after)


def _revert_memory(
    store: JournalStore, clock: Clock, row_id: str, before: dict[str, Any] | None, after: dict[str, Any] | None
) -> None:
    if after is None:
        raise _Skip("the memory was erased for good")
    namespace = str(after["namespace"])
    try:
        current = store.get_memory(namespace, row_id)
    except NotFound:
        raise _Skip("the memory was erased for good since") from None
    if memory_state(current) != memory_state(Memory.model_validate(after)):
        raise _changed_since("memory", row_id)
    now = clock.now()
    if before is None:  # created by the run: deleted (restorable; retention erases it later)
        target = current.model_copy(update={"status": "deleted", "status_changed_at": now, "updated_at": now})
    else:  # written at the version just read: a write since then makes this one fail (Conflict)
        target = Memory.model_validate(before).model_copy(
            update={"version": current.version, "index_ref": current.index_ref}
        )
    store.update_memory(target)


def _revert_candidate(
    store: JournalStore, clock: Clock, row_id: str, before: dict[str, Any] | None, after: dict[str, Any] | None
) -> None:
    if after is None:
        raise _Skip("the candidate is gone")
    current = _find(lambda: store.get_candidate(str(after["namespace"]), row_id))
    if not _same(current, after, Candidate):
        raise _changed_since("candidate", row_id)
    if before is None:  # filed by the run: dismissed
        store.update_candidate(
            Candidate.model_validate(after).model_copy(
                update={"status": "discarded", "decided_at": clock.now(), "decision_note": "undone"}
            )
        )
    else:
        store.update_candidate(Candidate.model_validate(before))


def _revert_thread(
    store: JournalStore, clock: Clock, row_id: str, before: dict[str, Any] | None, after: dict[str, Any] | None
) -> None:
    if before is None or after is None:
        raise _Skip("a thread's creation or removal follows its messages")
    current = _find(lambda: store.get_thread(str(after["namespace"]), row_id))
    if current is None or (current.title, current.deleted_at) != _thread_state(after):
        raise _changed_since("thread", row_id)
    title, deleted_at = _thread_state(before)
    store.update_thread(current.namespace, row_id, title=title, deleted_at=deleted_at)


def _thread_state(row: dict[str, Any]) -> tuple[str | None, datetime | None]:
    thread = Thread.model_validate(row)
    return thread.title, thread.deleted_at


def _revert_summary(
    store: JournalStore, clock: Clock, row_id: str, before: dict[str, Any] | None, after: dict[str, Any] | None
) -> None:
    namespace = str((after or before or {}).get("namespace"))
    expected = (after or {}).get("value")
    # Conditional on the value the run left (KeyValueRows.replace_cursor): a summary edited since stays.
    if not store.replace_cursor(namespace, row_id, str((before or {}).get("value") or ""), expected=expected):
        raise _changed_since("summary", row_id)


def _revert_reminder(
    store: JournalStore, clock: Clock, row_id: str, before: dict[str, Any] | None, after: dict[str, Any] | None
) -> None:
    if after is None:
        raise _Skip("the reminder is gone")
    current = store.find_reminder(str(after["namespace"]), row_id)
    if not _same(current, after, Reminder):
        raise _changed_since("reminder", row_id)
    if before is None:  # set by the run: cancelled
        store.put_reminder(Reminder.model_validate(after).model_copy(update={"status": "cancelled"}))
    else:
        store.put_reminder(Reminder.model_validate(before))


def _revert_precious(
    store: JournalStore, clock: Clock, row_id: str, before: dict[str, Any] | None, after: dict[str, Any] | None
) -> None:
    namespace = str((after or before or {}).get("namespace"))
    current = find_precious(store, namespace, row_id)
    if not _same(current, after, Precious):
        raise _changed_since("precious", row_id)
    if before is None:
        store.delete_precious(namespace, row_id)
    else:
        store.insert_precious(Precious.model_validate(before))


def _revert_glossary(
    store: JournalStore, clock: Clock, row_id: str, before: dict[str, Any] | None, after: dict[str, Any] | None
) -> None:
    namespace = str((after or before or {}).get("namespace"))
    current = _find(lambda: store.get_glossary_term(namespace, row_id))
    if not _same(current, after, GlossaryTerm):
        raise _changed_since("glossary", row_id)
    if before is None:
        store.delete_glossary_term(namespace, row_id)
    else:
        store.put_glossary_term(GlossaryTerm.model_validate(before))


def _revert_digest(
    store: JournalStore, clock: Clock, row_id: str, before: dict[str, Any] | None, after: dict[str, Any] | None
) -> None:
    current = store.get_digest(row_id)
    if not _same(current, after, Digest):
        raise _changed_since("digest", row_id)
    previous = Digest.model_validate(before) if before else Digest(namespace=row_id, content="", updated_at=clock.now())
    store.put_digest(previous)


def _revert_daily_log(
    store: JournalStore, clock: Clock, row_id: str, before: dict[str, Any] | None, after: dict[str, Any] | None
) -> None:
    namespace = str((after or before or {}).get("namespace"))
    current = store.get_daily_log(namespace, row_id)
    if not _same(current, after, DailyLog):
        raise _changed_since("daily log", row_id)
    if before is None:  # written by the run: emptied (the store keeps no deletion of a day)
        store.put_daily_log(DailyLog(namespace=namespace, date=row_id, created_at=clock.now()))
    else:
        store.put_daily_log(DailyLog.model_validate(before))


def find_precious(store: NoteRows, namespace: str, precious_id: str) -> Precious | None:
    """A precious note by id (the port lists them: notes are few and never edited)."""
    return next((p for p in store.list_precious(namespace, limit=1000) if p.id == precious_id), None)


def _find(read: Callable[[], Any]) -> Any:
    try:
        return read()
    except NotFound:
        return None


_REVERTS: dict[str, Callable[[JournalStore, Clock, str, dict[str, Any] | None, dict[str, Any] | None], None]] = {
    "memory": _revert_memory,
    "candidate": _revert_candidate,
    "thread": _revert_thread,
    "summary": _revert_summary,
    "reminder": _revert_reminder,
    "precious": _revert_precious,
    "glossary": _revert_glossary,
    "digest": _revert_digest,
    "daily_log": _revert_daily_log,
}
