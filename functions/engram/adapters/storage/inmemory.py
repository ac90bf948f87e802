"""``MemoryStore`` in process memory: for tests and ``ENGRAM_STORE=memory`` (lost on exit).

Rows are frozen models, so they are kept and handed out as they are. Cache values are stored as
JSON text, like every other adapter does, so a value that cannot be persisted fails here too.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterable, Sequence
from datetime import datetime
from typing import Any, TypeVar

from engram.adapters.storage.common import (
    check_limit,
    cut_page,
    decode_cursor,
    empty_memory_counts,
    encode_cursor,
    glossary_order,
    memory_matches,
    thread_position,
)
from engram.domain.errors import Conflict, InvalidInput, NotFound
from engram.domain.models import (
    CacheEntry,
    Candidate,
    DailyLog,
    Digest,
    GlossaryTerm,
    IdempotencyRecord,
    Memory,
    MemoryEvent,
    MemoryFilter,
    Message,
    Page,
    Precious,
    Reminder,
    Thread,
    UsageRecord,
    utcnow,
)

_Row = TypeVar("_Row", Memory, Candidate, Message, Precious, MemoryEvent, UsageRecord)


def _newest_first(rows: Iterable[_Row]) -> list[_Row]:
    return sorted(rows, key=lambda row: (row.created_at, row.id), reverse=True)


def _oldest_first(rows: Iterable[_Row]) -> list[_Row]:
    return sorted(rows, key=lambda row: (row.created_at, row.id))


def _page(rows: Iterable[_Row], limit: int, cursor: str | None) -> Page[_Row]:
    """Newest first, starting after the cursor's row."""
    check_limit(limit)
    ordered = _newest_first(rows)
    if cursor is not None:
        after = decode_cursor(cursor)
        ordered = [row for row in ordered if (row.created_at, row.id) < after]
    if len(ordered) <= limit:
        return Page(items=ordered)
    last = ordered[limit - 1]
    return Page(items=ordered[:limit], next_cursor=encode_cursor(last.created_at, last.id))


def _delete_where(table: dict[str, dict[str, _Row]], namespace: str, doomed: Callable[[_Row], bool]) -> int:
    rows = table.get(namespace, {})
    ids = [row_id for row_id, row in rows.items() if doomed(row)]
    for row_id in ids:
        del rows[row_id]
    return len(ids)


def _latest(a: datetime | None, b: datetime | None) -> datetime | None:
    return max((t for t in (a, b) if t is not None), default=None)


class InMemoryMemoryStore:
    """Dicts keyed by namespace, then by id; one re-entrant lock makes every call atomic."""

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self._memories: dict[str, dict[str, Memory]] = {}
        self._candidates: dict[str, dict[str, Candidate]] = {}
        self._messages: dict[str, dict[str, Message]] = {}
        self._precious: dict[str, dict[str, Precious]] = {}
        self._glossary: dict[str, dict[str, GlossaryTerm]] = {}
        self._digests: dict[str, Digest] = {}
        self._daily_logs: dict[str, dict[str, DailyLog]] = {}
        self._events: dict[str, dict[str, MemoryEvent]] = {}
        self._usage: dict[str, dict[str, UsageRecord]] = {}
        self._idempotency: dict[str, dict[str, IdempotencyRecord]] = {}
        self._cursors: dict[str, dict[str, str]] = {}
        self._cache: dict[str, dict[str, CacheEntry]] = {}
        self._threads: dict[str, dict[str, Thread]] = {}
        self._reminders: dict[str, dict[str, Reminder]] = {}

    # -- memories -------------------------------------------------------------------------
    @staticmethod
    def _check_memory_unique(memory: Memory, rows: dict[str, Memory]) -> None:
        """Raise ``Conflict`` if ``memory`` breaks a uniqueness rule among ``rows`` (its namespace)."""
        if memory.external_id is None and (memory.fact_key is None or memory.status != "active"):
            return  # no rule can apply: skip the scan (it ran on every write)
        for other in rows.values():
            if other.id == memory.id:
                continue
            same_key = memory.fact_key is not None and other.fact_key == memory.fact_key
            if same_key and memory.status == "active" and other.status == "active":
                raise Conflict(f"fact_key {memory.fact_key!r} already has an active memory ({other.id})")
            if memory.external_id is not None and other.external_id == memory.external_id:
                raise Conflict(f"external_id {memory.external_id!r} is already used by memory {other.id}")

    def insert_memory(self, memory: Memory) -> Memory:
        with self._lock:
            rows = self._memories.setdefault(memory.namespace, {})
            if memory.id in rows:
                raise Conflict(f"memory {memory.id} already exists")
            self._check_memory_unique(memory, rows)
            rows[memory.id] = memory
            return memory

    def update_memory(self, memory: Memory) -> Memory:
        with self._lock:
            self.get_memory(memory.namespace, memory.id)
            rows = self._memories[memory.namespace]
            self._check_memory_unique(memory, rows)
            rows[memory.id] = memory
            return memory

    def get_memory(self, namespace: str, memory_id: str) -> Memory:
        with self._lock:
            memory = self._memories.get(namespace, {}).get(memory_id)
        if memory is None:
            raise NotFound(f"memory {memory_id} not found")
        return memory

    def get_memories(self, namespace: str, memory_ids: Sequence[str]) -> list[Memory]:
        with self._lock:
            rows = self._memories.get(namespace, {})
            return [rows[memory_id] for memory_id in memory_ids if memory_id in rows]

    def find_active_by_fact_key(self, namespace: str, fact_key: str) -> Memory | None:
        with self._lock:
            rows = self._memories.get(namespace, {}).values()
            return next((m for m in rows if m.status == "active" and m.fact_key == fact_key), None)

    def find_by_external_id(self, namespace: str, external_id: str) -> Memory | None:
        with self._lock:
            rows = self._memories.get(namespace, {}).values()
            return next((m for m in rows if m.external_id == external_id), None)

    def list_memories(
        self, namespace: str, filters: MemoryFilter, *, limit: int = 50, cursor: str | None = None
    ) -> Page[Memory]:
        with self._lock:
            rows = [m for m in self._memories.get(namespace, {}).values() if memory_matches(m, filters)]
        return _page(rows, limit, cursor)

    def iter_memories(self, namespace: str, statuses: Sequence[str] = ()) -> Iterable[Memory]:
        with self._lock:
            rows = [m for m in self._memories.get(namespace, {}).values() if not statuses or m.status in statuses]
        return _oldest_first(rows)

    def supersede(self, old: Memory, new: Memory) -> tuple[Memory, Memory]:
        if old.namespace != new.namespace:
            raise InvalidInput("supersede needs both memories in the same namespace")
        with self._lock:
            self.get_memory(old.namespace, old.id)
            rows = self._memories[old.namespace]
            if new.id in rows:
                raise Conflict(f"memory {new.id} already exists")
            # Check both rows against the state after the swap before touching anything.
            after = {**rows, old.id: old, new.id: new}
            self._check_memory_unique(old, after)
            self._check_memory_unique(new, after)
            rows[old.id] = old
            rows[new.id] = new
            return old, new

    def delete_memory_row(self, namespace: str, memory_id: str) -> None:
        with self._lock:
            self._memories.get(namespace, {}).pop(memory_id, None)

    def count_memories(self, namespace: str) -> dict[str, dict[str, int]]:
        counts = empty_memory_counts()
        with self._lock:
            for memory in self._memories.get(namespace, {}).values():
                counts["status"][memory.status] += 1
                if memory.status == "active":
                    counts["type"][memory.type] += 1
                    counts["layer"][memory.layer] += 1
        return counts

    def memories_changed_before(
        self, namespace: str, statuses: Sequence[str], before: datetime, *, limit: int = 500
    ) -> list[Memory]:
        check_limit(limit)

        def changed_at(memory: Memory) -> datetime:
            return memory.status_changed_at or memory.updated_at

        with self._lock:
            rows = [
                m for m in self._memories.get(namespace, {}).values() if m.status in statuses and changed_at(m) < before
            ]
        return sorted(rows, key=lambda m: (changed_at(m), m.id))[:limit]

    def memories_unseen_since(self, namespace: str, before: datetime, *, limit: int = 500) -> list[Memory]:
        check_limit(limit)

        def seen_at(memory: Memory) -> datetime:
            return memory.last_seen_at or memory.created_at

        with self._lock:
            rows = self._memories.get(namespace, {}).values()
            unseen = [m for m in rows if m.status == "active" and seen_at(m) < before]
        return sorted(unseen, key=lambda m: (seen_at(m), m.id))[:limit]

    # -- review candidates ----------------------------------------------------------------
    def insert_candidate(self, candidate: Candidate) -> Candidate:
        with self._lock:
            rows = self._candidates.setdefault(candidate.namespace, {})
            if candidate.id in rows:
                raise Conflict(f"candidate {candidate.id} already exists")
            rows[candidate.id] = candidate
            return candidate

    def update_candidate(self, candidate: Candidate) -> Candidate:
        with self._lock:
            self.get_candidate(candidate.namespace, candidate.id)
            self._candidates[candidate.namespace][candidate.id] = candidate
            return candidate

    def get_candidate(self, namespace: str, candidate_id: str) -> Candidate:
        with self._lock:
            candidate = self._candidates.get(namespace, {}).get(candidate_id)
        if candidate is None:
            raise NotFound(f"candidate {candidate_id} not found")
        return candidate

    def list_candidates(
        self, namespace: str, status: str | None = "pending", *, limit: int = 50, cursor: str | None = None
    ) -> Page[Candidate]:
        with self._lock:
            rows = [c for c in self._candidates.get(namespace, {}).values() if status is None or c.status == status]
        return _page(rows, limit, cursor)

    # -- messages -------------------------------------------------------------------------
    def insert_message(self, message: Message) -> tuple[Message, bool]:
        with self._lock:
            rows = self._messages.setdefault(message.namespace, {})
            if message.external_id is not None:
                stored = next((m for m in rows.values() if m.external_id == message.external_id), None)
                if stored is not None:
                    return stored, False
            if message.id in rows:
                raise Conflict(f"message {message.id} already exists")
            message = message.model_copy(update={"stored_at": message.stored_at or message.created_at})
            rows[message.id] = message
            self._count_in_thread(message)
            return message, True

    def _count_in_thread(self, message: Message) -> None:
        threads = self._threads.setdefault(message.namespace, {})
        thread = threads.get(message.conversation_id) or Thread(
            namespace=message.namespace, id=message.conversation_id, created_at=message.created_at
        )
        threads[thread.id] = thread.model_copy(
            update={
                "message_count": thread.message_count + 1,
                "last_message_at": message.created_at,
                "deleted_at": None,
            }
        )

    def list_messages(
        self,
        namespace: str,
        *,
        since: datetime | None = None,
        until: datetime | None = None,
        limit: int = 100,
        after_id: str | None = None,
    ) -> list[Message]:
        check_limit(limit)
        with self._lock:
            rows = self._messages.get(namespace, {})
            after = None
            if after_id is not None:
                if after_id not in rows:
                    raise NotFound(f"message {after_id} not found")
                after = (rows[after_id].created_at, after_id)
            selected = [
                m
                for m in rows.values()
                if (since is None or m.created_at >= since)
                and (until is None or m.created_at < until)
                and (after is None or (m.created_at, m.id) > after)
            ]
        return _oldest_first(selected)[:limit]

    def list_messages_stored(
        self,
        namespace: str,
        *,
        after: tuple[datetime, str] | None = None,
        since: datetime | None = None,
        until: datetime | None = None,
        limit: int = 100,
    ) -> list[Message]:
        check_limit(limit)
        with self._lock:
            rows = [(m.stored_at, m) for m in self._messages.get(namespace, {}).values() if m.stored_at is not None]
        picked = [
            (at, m)
            for at, m in rows
            if (since is None or at >= since)
            and (until is None or at < until)
            and (after is None or (at, m.id) > after)
        ]
        return [m for _, m in sorted(picked, key=lambda row: (row[0], row[1].id))][:limit]

    def count_messages(self, namespace: str, *, since: datetime | None = None) -> int:
        with self._lock:
            return sum(1 for m in self._messages.get(namespace, {}).values() if since is None or m.created_at >= since)

    def delete_messages_before(self, namespace: str, before: datetime) -> int:
        with self._lock:
            gone = [m for m in self._messages.get(namespace, {}).values() if m.created_at < before]
            self._uncount(namespace, gone)
            return _delete_where(self._messages, namespace, lambda m: m.created_at < before)

    def _uncount(self, namespace: str, messages: Sequence[Message]) -> None:
        threads = self._threads.get(namespace, {})
        for message in messages:
            thread = threads.get(message.conversation_id)
            if thread is not None:
                threads[thread.id] = thread.model_copy(update={"message_count": max(0, thread.message_count - 1)})

    # -- threads ----------------------------------------------------------------------------
    def get_thread(self, namespace: str, thread_id: str) -> Thread:
        with self._lock:
            thread = self._threads.get(namespace, {}).get(thread_id)
        if thread is None:
            raise NotFound(f"thread {thread_id} not found")
        return thread

    def list_threads(
        self, namespace: str, *, deleted: bool = False, limit: int = 50, cursor: str | None = None
    ) -> Page[Thread]:
        check_limit(limit)
        with self._lock:
            rows = [t for t in self._threads.get(namespace, {}).values() if (t.deleted_at is not None) == deleted]
        ordered = sorted(rows, key=thread_position, reverse=True)
        if cursor is not None:
            after = decode_cursor(cursor)
            ordered = [t for t in ordered if thread_position(t) < after]
        return cut_page(ordered, limit, thread_position)

    def update_thread(
        self, namespace: str, thread_id: str, *, title: str | None, deleted_at: datetime | None
    ) -> Thread:
        with self._lock:
            thread = self.get_thread(namespace, thread_id).model_copy(update={"title": title, "deleted_at": deleted_at})
            self._threads[namespace][thread_id] = thread
            return thread

    def list_thread_messages(
        self, namespace: str, thread_id: str, *, limit: int = 100, cursor: str | None = None
    ) -> Page[Message]:
        check_limit(limit)
        with self._lock:
            rows = _oldest_first(
                m for m in self._messages.get(namespace, {}).values() if m.conversation_id == thread_id
            )
        if cursor is not None:
            after = decode_cursor(cursor)
            rows = [m for m in rows if (m.created_at, m.id) > after]
        return cut_page(rows, limit, lambda m: (m.created_at, m.id))

    def get_messages(self, namespace: str, message_ids: Sequence[str]) -> list[Message]:
        with self._lock:
            rows = self._messages.get(namespace, {})
            return [rows[i] for i in message_ids if i in rows]

    def messages_around(self, namespace: str, message: Message, *, before: int, after: int) -> list[Message]:
        with self._lock:
            thread = [
                m for m in self._messages.get(namespace, {}).values() if m.conversation_id == message.conversation_id
            ]
        at = (message.created_at, message.id)
        thread.sort(key=lambda m: (m.created_at, m.id))
        earlier = [m for m in thread if (m.created_at, m.id) < at]
        later = [m for m in thread if (m.created_at, m.id) > at]
        head = earlier[len(earlier) - before :] if before > 0 else []
        return [*head, message, *later[: max(0, after)]]

    def move_thread(self, namespace: str, source: str, target: str) -> int:
        with self._lock:
            into = self.get_thread(namespace, target)
            rows = self._messages.get(namespace, {})
            moved = [m for m in rows.values() if m.conversation_id == source]
            for message in moved:
                rows[message.id] = message.model_copy(update={"conversation_id": target})
            gone = self._threads.get(namespace, {}).pop(source, None)
            if gone is not None:
                self._threads[namespace][target] = into.model_copy(
                    update={
                        "message_count": into.message_count + gone.message_count,
                        "last_message_at": _latest(into.last_message_at, gone.last_message_at),
                    }
                )
            return len(moved)

    def purge_thread(self, namespace: str, thread_id: str) -> int:
        with self._lock:
            self._threads.get(namespace, {}).pop(thread_id, None)
            return _delete_where(self._messages, namespace, lambda m: m.conversation_id == thread_id)

    # -- reminders --------------------------------------------------------------------------
    def put_reminder(self, reminder: Reminder) -> Reminder:
        with self._lock:
            self._reminders.setdefault(reminder.namespace, {})[reminder.memory_id] = reminder
        return reminder

    def find_reminder(self, namespace: str, memory_id: str) -> Reminder | None:
        with self._lock:
            return self._reminders.get(namespace, {}).get(memory_id)

    def list_reminders(
        self,
        namespace: str,
        status: str,
        *,
        due_after: datetime | None = None,
        due_before: datetime | None = None,
        limit: int = 100,
    ) -> list[Reminder]:
        check_limit(limit)
        with self._lock:
            rows = [
                r
                for r in self._reminders.get(namespace, {}).values()
                if r.status == status
                and (due_after is None or r.remind_at >= due_after)
                and (due_before is None or r.remind_at <= due_before)
            ]
        return sorted(rows, key=lambda r: (r.remind_at, r.memory_id))[:limit]

    def claim_reminder(self, namespace: str, memory_id: str, owner: str, *, now: datetime, until: datetime) -> bool:
        with self._lock:
            row = self._reminders.get(namespace, {}).get(memory_id)
            if row is None or row.status != "pending" or (row.lease_until is not None and row.lease_until >= now):
                return False
            self._reminders[namespace][memory_id] = row.model_copy(update={"lease_owner": owner, "lease_until": until})
            return True

    def settle_reminder(self, namespace: str, memory_id: str, owner: str, *, delivered_at: datetime | None) -> bool:
        with self._lock:
            row = self._reminders.get(namespace, {}).get(memory_id)
            if row is None or row.lease_owner != owner:
                return False
            changes: dict[str, Any] = {"lease_owner": None, "lease_until": None}
            if delivered_at is not None:
                changes.update(status="delivered", delivered_at=delivered_at)
            self._reminders[namespace][memory_id] = row.model_copy(update=changes)
            return True

    # -- precious, glossary, digest, daily log ---------------------------------------------
    def insert_precious(self, precious: Precious) -> Precious:
        with self._lock:
            rows = self._precious.setdefault(precious.namespace, {})
            if precious.id in rows:
                raise Conflict(f"precious {precious.id} already exists")
            rows[precious.id] = precious
            return precious

    def list_precious(self, namespace: str, *, limit: int = 100) -> list[Precious]:
        check_limit(limit)
        with self._lock:
            return _newest_first(self._precious.get(namespace, {}).values())[:limit]

    def delete_precious(self, namespace: str, precious_id: str) -> None:
        with self._lock:
            if self._precious.get(namespace, {}).pop(precious_id, None) is None:
                raise NotFound(f"precious {precious_id} not found")

    def put_glossary_term(self, term: GlossaryTerm) -> GlossaryTerm:
        with self._lock:
            self._glossary.setdefault(term.namespace, {})[term.id] = term
            return term

    def get_glossary_term(self, namespace: str, term_id: str) -> GlossaryTerm:
        with self._lock:
            term = self._glossary.get(namespace, {}).get(term_id)
        if term is None:
            raise NotFound(f"glossary term {term_id} not found")
        return term

    def list_glossary(self, namespace: str) -> list[GlossaryTerm]:
        with self._lock:
            return sorted(self._glossary.get(namespace, {}).values(), key=glossary_order)

    def delete_glossary_term(self, namespace: str, term_id: str) -> None:
        with self._lock:
            if self._glossary.get(namespace, {}).pop(term_id, None) is None:
                raise NotFound(f"glossary term {term_id} not found")

    def get_digest(self, namespace: str) -> Digest | None:
        with self._lock:
            return self._digests.get(namespace)

    def put_digest(self, digest: Digest) -> Digest:
        with self._lock:
            self._digests[digest.namespace] = digest
            return digest

    def get_daily_log(self, namespace: str, date: str) -> DailyLog | None:
        with self._lock:
            return self._daily_logs.get(namespace, {}).get(date)

    def put_daily_log(self, log: DailyLog) -> DailyLog:
        with self._lock:
            self._daily_logs.setdefault(log.namespace, {})[log.date] = log
            return log

    def list_daily_logs(self, namespace: str, *, limit: int = 30) -> list[DailyLog]:
        check_limit(limit)
        with self._lock:
            logs = self._daily_logs.get(namespace, {}).values()
            return sorted(logs, key=lambda log: log.date, reverse=True)[:limit]

    # -- events, usage, idempotency, cursors, cache -----------------------------------------
    def append_event(self, event: MemoryEvent) -> None:
        with self._lock:
            rows = self._events.setdefault(event.namespace, {})
            if event.id in rows:
                raise Conflict(f"event {event.id} already exists")
            rows[event.id] = event

    def list_events(
        self, namespace: str, *, memory_id: str | None = None, kind: str | None = None, limit: int = 50
    ) -> list[MemoryEvent]:
        check_limit(limit)
        with self._lock:
            events = [
                e
                for e in self._events.get(namespace, {}).values()
                if (memory_id is None or e.memory_id == memory_id) and (kind is None or e.kind == kind)
            ]
        return _newest_first(events)[:limit]

    def delete_events_before(self, namespace: str, before: datetime) -> int:
        with self._lock:
            return _delete_where(self._events, namespace, lambda e: e.created_at < before)

    def append_usage(self, usage: UsageRecord) -> None:
        with self._lock:
            rows = self._usage.setdefault(usage.namespace, {})
            if usage.id in rows:
                raise Conflict(f"usage record {usage.id} already exists")
            rows[usage.id] = usage

    def list_usage(self, namespace: str, *, since: datetime | None = None) -> list[UsageRecord]:
        with self._lock:
            rows = [u for u in self._usage.get(namespace, {}).values() if since is None or u.created_at >= since]
        return _oldest_first(rows)

    def delete_usage_before(self, namespace: str, before: datetime) -> int:
        with self._lock:
            return _delete_where(self._usage, namespace, lambda u: u.created_at < before)

    def get_idempotency(self, namespace: str, key: str) -> IdempotencyRecord | None:
        with self._lock:
            return self._idempotency.get(namespace, {}).get(key)

    def put_idempotency(self, record: IdempotencyRecord) -> bool:
        with self._lock:
            rows = self._idempotency.setdefault(record.namespace, {})
            if record.key in rows:
                return False
            rows[record.key] = record
            return True

    def delete_idempotency_before(self, namespace: str, before: datetime) -> int:
        with self._lock:
            rows = self._idempotency.get(namespace, {})
            keys = [key for key, record in rows.items() if record.created_at < before]
            for key in keys:
                del rows[key]
            return len(keys)

    def get_cursor(self, namespace: str, name: str) -> str | None:
        with self._lock:
            return self._cursors.get(namespace, {}).get(name)

    def set_cursor(self, namespace: str, name: str, value: str) -> None:
        with self._lock:
            self._cursors.setdefault(namespace, {})[name] = value

    def get_cache(self, namespace: str, key: str) -> Any | None:
        with self._lock:
            entry = self._cache.get(namespace, {}).get(key)
        if entry is None or (entry.expires_at is not None and entry.expires_at <= utcnow()):
            return None
        return json.loads(entry.value)

    def put_cache(self, namespace: str, key: str, value: Any, *, expires_at: datetime | None = None) -> None:
        try:
            text = json.dumps(value)
        except (TypeError, ValueError) as exc:
            raise InvalidInput(f"cache value for {key!r} is not JSON-serializable") from exc
        entry = CacheEntry(namespace=namespace, key=key, value=text, expires_at=expires_at, updated_at=utcnow())
        with self._lock:
            self._cache.setdefault(namespace, {})[key] = entry

    def delete_cache(self, namespace: str, key: str) -> None:
        with self._lock:
            self._cache.get(namespace, {}).pop(key, None)

    def list_namespaces(self) -> list[str]:
        with self._lock:
            tables: list[dict[str, Any]] = [
                self._memories,
                self._messages,
                self._candidates,
                self._precious,
                self._glossary,
            ]
            names = {namespace for table in tables for namespace, rows in table.items() if rows}
            names.update(self._digests)
        return sorted(names)

    def ping(self) -> None:
        """Always reachable."""
