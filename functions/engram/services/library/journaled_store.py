"""The store every service is given: the real store, with each write of a journaled row kind recorded
in the open run's journal (``services/library/journal.py``, docs/journal.md).

Reads, messages, counters (``record_seen``, ``record_injected``), reminder leases (``claim_reminder``,
``settle_reminder``: a chat turn's delivery), events, usage, idempotency keys and the cache pass through
unrecorded. A write made while no run is open is not recorded (the chat path's own writes). The row
before a write is read only while a run is open, so the chat path pays nothing.

Erasing a memory for good (``delete_memory_row``) also deletes every event about it, the journal's
changes included, whether or not a run is open: nothing of its text is kept (README, "Erasure").
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from engram.domain.errors import NotFound
from engram.domain.models import Candidate, DailyLog, Digest, GlossaryTerm, Memory, Precious, Reminder, Thread
from engram.domain.ports import Clock, MemoryStore
from engram.services.library.journal import Journal, current_run, find_precious, memory_state, snapshot


class JournaledStore:
    """A ``MemoryStore`` that records its writes in the journal; everything else is the wrapped store's
    (``__getattr__``), so a method added to the port passes through until it is listed here."""

    def __init__(self, store: MemoryStore, journal: Journal, *, cursor_prefixes: Sequence[str] = ()) -> None:
        self._inner = store
        self._journal = journal
        # Cursors that hold a row the journal keeps (a thread's kept summary: services/chat/history.py).
        self._cursor_prefixes = tuple(cursor_prefixes)

    @property
    def inner(self) -> MemoryStore:
        return self._inner

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    # -- memories ------------------------------------------------------------------------------
    def _memory_before(self, namespace: str, memory_id: str) -> Memory | None:
        if current_run() is None:
            return None
        try:
            return self._inner.get_memory(namespace, memory_id)
        except NotFound:
            return None

    def _record(
        self, namespace: str, row: str, op: str, row_id: str, before: Any, after: Any, *, memory_id: str | None = None
    ) -> None:
        """Record a change with the open run; rows are turned into JSON only when one is open."""
        if current_run() is None:
            return
        before = before if isinstance(before, dict) or before is None else snapshot(before)
        after = after if isinstance(after, dict) or after is None else snapshot(after)
        self._journal.record(namespace, row, op, row_id, before, after, memory_id=memory_id)

    def _memory(self, op: str, before: Memory | None, after: Memory) -> None:
        if before is not None and memory_state(before) == memory_state(after):
            return  # bookkeeping only (the index's reference): nothing a person would call a change
        self._record(after.namespace, "memory", op, after.id, before, after, memory_id=after.id)

    def insert_memory(self, memory: Memory) -> Memory:
        stored = self._inner.insert_memory(memory)
        self._memory("create", None, stored)
        return stored

    def update_memory(self, memory: Memory) -> Memory:
        before = self._memory_before(memory.namespace, memory.id)
        stored = self._inner.update_memory(memory)
        self._memory(_op_of(before, stored), before, stored)
        return stored

    def update_memories(self, memories: Sequence[Memory]) -> list[Memory]:
        befores = [self._memory_before(m.namespace, m.id) for m in memories]
        stored = self._inner.update_memories(memories)
        for before, after in zip(befores, stored, strict=True):
            self._memory(_op_of(before, after), before, after)
        return stored

    def supersede(self, old: Memory, new: Memory) -> tuple[Memory, Memory]:
        before = self._memory_before(old.namespace, old.id)
        retired, created = self._inner.supersede(old, new)
        self._memory("supersede", before, retired)
        self._memory("create", None, created)
        return retired, created

    def supersede_many(self, olds: Sequence[Memory], new: Memory) -> tuple[list[Memory], Memory]:
        befores = [self._memory_before(m.namespace, m.id) for m in olds]
        retired, created = self._inner.supersede_many(olds, new)
        for before, after in zip(befores, retired, strict=True):
            self._memory("supersede", before, after)
        self._memory("create", None, created)
        return retired, created

    def delete_memory_row(self, namespace: str, memory_id: str, *, version: int | None = None) -> bool:
        deleted = self._inner.delete_memory_row(namespace, memory_id, version=version)
        if deleted:
            self._inner.delete_memory_events(namespace, memory_id)
            # The record keeps only that it happened: nothing of the text (and no memory_id, so a later
            # erasure finds nothing to remove).
            self._journal.record(namespace, "memory", "erase", memory_id, None, None)
        return deleted

    # -- candidates ----------------------------------------------------------------------------
    def insert_candidate(self, candidate: Candidate) -> Candidate:
        stored = self._inner.insert_candidate(candidate)
        self._record(stored.namespace, "candidate", "create", stored.id, None, stored)
        return stored

    def update_candidate(self, candidate: Candidate) -> Candidate:
        before = None
        if current_run() is not None:
            before = _found(lambda: self._inner.get_candidate(candidate.namespace, candidate.id))
        stored = self._inner.update_candidate(candidate)
        self._record(stored.namespace, "candidate", "update", stored.id, before, stored)
        return stored

    # -- threads and their kept summaries ----------------------------------------------------
    def update_thread(
        self, namespace: str, thread_id: str, *, title: str | None, deleted_at: datetime | None
    ) -> Thread:
        before = _found(lambda: self._inner.get_thread(namespace, thread_id)) if current_run() is not None else None
        stored = self._inner.update_thread(namespace, thread_id, title=title, deleted_at=deleted_at)
        op = "delete" if stored.deleted_at and not (before and before.deleted_at) else "update"
        if before is not None and before.deleted_at and not stored.deleted_at:
            op = "restore"
        self._record(namespace, "thread", op, thread_id, before, stored)
        return stored

    def move_thread(self, namespace: str, source: str, target: str) -> int:
        before = _found(lambda: self._inner.get_thread(namespace, source)) if current_run() is not None else None
        moved = self._inner.move_thread(namespace, source, target)
        self._record(namespace, "thread", "move", source, before, {"into": target, "moved": moved})
        return moved

    def purge_thread(self, namespace: str, thread_id: str) -> int:
        purged = self._inner.purge_thread(namespace, thread_id)
        self._record(namespace, "thread", "purge", thread_id, None, {"messages": purged})
        return purged

    def set_cursor(self, namespace: str, name: str, value: str) -> None:
        if not name.startswith(self._cursor_prefixes) or current_run() is None:
            self._inner.set_cursor(namespace, name, value)
            return
        before = self._inner.get_cursor(namespace, name)
        self._inner.set_cursor(namespace, name, value)
        self._cursor(namespace, name, before, value)

    def replace_cursor(self, namespace: str, name: str, value: str, *, expected: str | None) -> bool:
        replaced = self._inner.replace_cursor(namespace, name, value, expected=expected)
        if replaced and name.startswith(self._cursor_prefixes):
            self._cursor(namespace, name, expected, value)
        return replaced

    def _cursor(self, namespace: str, name: str, before: str | None, after: str) -> None:
        if before != after:
            self._record(
                namespace,
                "summary",
                "update" if before else "create",
                name,
                {"namespace": namespace, "value": before} if before is not None else None,
                {"namespace": namespace, "value": after},
            )

    # -- reminders -----------------------------------------------------------------------------
    def put_reminder(self, reminder: Reminder) -> Reminder:
        before = self._inner.find_reminder(reminder.namespace, reminder.memory_id) if current_run() else None
        stored = self._inner.put_reminder(reminder)
        op = "create" if before is None else "update"
        self._record(stored.namespace, "reminder", op, stored.memory_id, before, stored)
        return stored

    # -- notes ---------------------------------------------------------------------------------
    def insert_precious(self, precious: Precious) -> Precious:
        stored = self._inner.insert_precious(precious)
        self._record(stored.namespace, "precious", "create", stored.id, None, stored)
        return stored

    def delete_precious(self, namespace: str, precious_id: str) -> None:
        before = None
        if current_run() is not None:
            before = find_precious(self._inner, namespace, precious_id)
        self._inner.delete_precious(namespace, precious_id)
        self._record(namespace, "precious", "delete", precious_id, before, None)

    def put_glossary_term(self, term: GlossaryTerm) -> GlossaryTerm:
        before = None
        if current_run() is not None:
            before = _found(lambda: self._inner.get_glossary_term(term.namespace, term.id))
        stored = self._inner.put_glossary_term(term)
        op = "create" if before is None else "update"
        self._record(stored.namespace, "glossary", op, stored.id, before, stored)
        return stored

    def delete_glossary_term(self, namespace: str, term_id: str) -> None:
        before = _found(lambda: self._inner.get_glossary_term(namespace, term_id)) if current_run() else None
        self._inner.delete_glossary_term(namespace, term_id)
        self._record(namespace, "glossary", "delete", term_id, before, None)

    def put_digest(self, digest: Digest) -> Digest:
        before = self._inner.get_digest(digest.namespace) if current_run() is not None else None
        stored = self._inner.put_digest(digest)
        op = "create" if before is None else "rewrite"
        self._record(stored.namespace, "digest", op, stored.namespace, before, stored)
        return stored

    def put_daily_log(self, log: DailyLog) -> DailyLog:
        before = self._inner.get_daily_log(log.namespace, log.date) if current_run() is not None else None
        stored = self._inner.put_daily_log(log)
        op = "create" if before is None else "rewrite"
        self._record(stored.namespace, "daily_log", op, stored.date, before, stored)
        return stored


def _op_of(before: Memory | None, after: Memory) -> str:
    """What a replace of a memory did, in the journal's words."""
    if before is None or before.status == after.status:
        return "update"
    if after.status == "active":
        return "restore"
    return {"superseded": "supersede", "archived": "archive", "expired": "expire", "deleted": "delete"}[after.status]


def _found(read: Any) -> Any:
    try:
        return read()
    except NotFound:
        return None


def journaled(
    store: MemoryStore, clock: Clock, *, cursor_prefixes: Sequence[str] = ()
) -> tuple[Journal, JournaledStore]:
    """The journal over ``store`` and the journaled store every service is given, wired to each other."""
    journal = Journal(store, clock)
    rows = JournaledStore(store, journal, cursor_prefixes=cursor_prefixes)
    journal.write_through(rows)
    return journal, rows
