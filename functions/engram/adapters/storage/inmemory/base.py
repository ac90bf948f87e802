"""What every part of ``InMemoryMemoryStore`` shares: the dicts, the lock, ordering and paging."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from datetime import datetime
from typing import TypeVar

from engram.adapters.storage.common import check_limit, cut_page, decode_cursor
from engram.domain.models import (
    CacheEntry,
    Candidate,
    DailyLog,
    Digest,
    GlossaryTerm,
    IdempotencyRecord,
    Memory,
    MemoryEvent,
    Message,
    Page,
    Precious,
    Reminder,
    Thread,
    UsageRecord,
)
from engram.domain.ports import Clock

Row = TypeVar("Row", Memory, Candidate, Message, Precious, MemoryEvent, UsageRecord)


def newest_first(rows: Iterable[Row]) -> list[Row]:
    return sorted(rows, key=lambda row: (row.created_at, row.id), reverse=True)


def oldest_first(rows: Iterable[Row]) -> list[Row]:
    return sorted(rows, key=lambda row: (row.created_at, row.id))


def page(rows: Iterable[Row], limit: int, cursor: str | None) -> Page[Row]:
    """Newest first, starting after the cursor's row."""
    check_limit(limit)
    ordered = newest_first(rows)
    if cursor is not None:
        after = decode_cursor(cursor)
        ordered = [row for row in ordered if (row.created_at, row.id) < after]
    return cut_page(ordered, limit, lambda row: (row.created_at, row.id))


def delete_where(table: dict[str, dict[str, Row]], namespace: str, doomed: Callable[[Row], bool]) -> int:
    rows = table.get(namespace, {})
    ids = [row_id for row_id, row in rows.items() if doomed(row)]
    for row_id in ids:
        del rows[row_id]
    return len(ids)


def latest(a: datetime | None, b: datetime | None) -> datetime | None:
    return max((t for t in (a, b) if t is not None), default=None)


class InMemoryStoreBase:
    """Dicts keyed by namespace, then by id; one re-entrant lock makes every call atomic."""

    def __init__(self, *, clock: Clock) -> None:
        self._clock = clock  # decides cache expiry and stamps (docs/ARCHITECTURE.md, "One clock")
        self._lock = threading.RLock()
        self._memories: dict[str, dict[str, Memory]] = {}
        self._candidates: dict[str, dict[str, Candidate]] = {}
        self._messages: dict[str, dict[str, Message]] = {}
        # external id -> the id of the last message inserted with it (insert_message's duplicate check
        # without scanning every message of the namespace; a deleted message's entry is simply stale).
        self._message_keys: dict[str, dict[str, str]] = {}
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
