"""Engram's data model.

Every row belongs to a namespace (one user). Models are frozen: change one with ``model_copy(update=...)``.
Timestamps are timezone-aware UTC datetimes; stores keep them as ISO-8601 strings.
"""

from __future__ import annotations

import os
import threading
import time
from datetime import datetime
from typing import Any, Generic, Literal, TypeVar, get_args

from pydantic import BaseModel, ConfigDict, Field

MemoryType = Literal[
    "fact",
    "preference",
    "instruction",
    "event",
    "task",
    "identity",
    "persona",
    "project",
    "boundary",
    "excerpt",
    "note",
    "relationship",
    "skill",
]
MEMORY_TYPES: tuple[str, ...] = get_args(MemoryType)
MemoryLayer = Literal["fragment", "event", "core"]
MemoryStatus = Literal["active", "superseded", "archived", "deleted", "expired"]
MEMORY_STATUSES: tuple[str, ...] = get_args(MemoryStatus)
CandidateStatus = Literal["pending", "approved", "discarded", "merged"]
MessageRole = Literal["system", "user", "assistant", "tool"]

# Types that never expire by retention and always join the boot block.
DURABLE_TYPES: frozenset[str] = frozenset({"identity", "persona"})

_CROCKFORD = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
# Every pair of Crockford characters (lower case), so an id's 26 characters are 13 look-ups of 10 bits.
_PAIRS = [a + b for a in _CROCKFORD.lower() for b in _CROCKFORD.lower()]
_PAIR_SHIFTS = tuple(range(120, -10, -10))
_MS_BITS, _RAND_BITS = (1 << 50) - 1, (1 << 80) - 1


_id_lock = threading.Lock()
_last_id: tuple[int, int] = (0, 0)


def new_id(prefix: str) -> str:
    """A time-ordered, URL-safe id: ``<prefix>_<10 chars ms time><16 chars random>`` (ULID layout).

    Monotonic within a process: ids made in the same millisecond still sort in creation order, so
    listings ordered by (created_at, id) are stable even when a clock is frozen in tests.
    """
    global _last_id
    with _id_lock:
        ms = int(time.time() * 1000)
        last_ms, last_rand = _last_id
        if ms <= last_ms:
            ms, rand = last_ms, last_rand + 1
        else:
            rand = int.from_bytes(os.urandom(10), "big") >> 1  # headroom for increments
        _last_id = (ms, rand)
    # 10 characters of the time's low 50 bits, then 16 of the random part's low 80, 5 bits each, most
    # significant first: the 130 bits read 10 at a time.
    bits = (ms & _MS_BITS) << 80 | (rand & _RAND_BITS)
    pairs = _PAIRS
    return f"{prefix.lower()}_" + "".join([pairs[(bits >> shift) & 1023] for shift in _PAIR_SHIFTS])


class Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class Memory(Frozen):
    id: str
    namespace: str
    content: str
    type: MemoryType = "fact"
    fact_key: str | None = None
    layer: MemoryLayer = "fragment"
    importance: float = Field(default=0.5, ge=0.0, le=1.0)
    confidence: float = Field(default=0.8, ge=0.0, le=1.0)
    pinned: bool = False
    tags: tuple[str, ...] = ()
    status: MemoryStatus = "active"
    supersedes_id: str | None = None
    superseded_by_id: str | None = None
    source: str = "api"
    source_message_ids: tuple[str, ...] = ()
    external_id: str | None = None
    remind_at: datetime | None = None
    seen_count: int = Field(default=0, ge=0)
    last_seen_at: datetime | None = None
    last_injected_at: datetime | None = None
    recall_count: int = Field(default=0, ge=0)
    created_at: datetime
    updated_at: datetime
    status_changed_at: datetime | None = None
    expires_at: datetime | None = None
    # Where the search index keeps this memory's document, if the index assigns its own ids.
    index_ref: str | None = None
    # How many times the row was replaced (docs/ARCHITECTURE.md, "Write rules"): a replace is
    # conditional on the version it read and stores version + 1. Rows from before versions read as 1.
    version: int = Field(default=1, ge=1)


# The bookkeeping of a memory: changed only by the store's atomic increments (``record_injected``,
# ``record_seen``), never by a replace of the row, and never counted in its ``version``.
MEMORY_COUNTERS: tuple[str, ...] = ("seen_count", "last_seen_at", "recall_count", "last_injected_at")


class Candidate(Frozen):
    """A memory waiting for the owner's review (low confidence, or proposed by a job)."""

    id: str
    namespace: str
    content: str
    type: MemoryType = "fact"
    fact_key: str | None = None
    importance: float = Field(default=0.5, ge=0.0, le=1.0)
    confidence: float = Field(default=0.5, ge=0.0, le=1.0)
    tags: tuple[str, ...] = ()
    source: str = "extraction"
    source_message_ids: tuple[str, ...] = ()
    status: CandidateStatus = "pending"
    target_memory_id: str | None = None
    result_memory_id: str | None = None
    decision_note: str | None = None
    created_at: datetime
    decided_at: datetime | None = None


class Message(Frozen):
    id: str
    namespace: str
    conversation_id: str = "default"
    role: MessageRole
    content: str
    model: str | None = None
    usage: dict[str, int] = Field(default_factory=dict)
    # Client- or gateway-chosen key that makes storing this message idempotent.
    external_id: str | None = None
    created_at: datetime
    # Why the turn got no answer (the gateway stores a user's turn even when the upstream fails).
    error: str | None = None
    # When Engram stored it (the storing service's clock; ``created_at`` if not given): extraction
    # reads messages in this order, so history
    # imported with old ``created_at`` times is still read once (docs/ARCHITECTURE.md, "Background jobs").
    stored_at: datetime | None = None


class Thread(Frozen):
    """A conversation: the messages stored under one ``conversation_id`` (docs/threads.md).

    The row appears with its first message; ``message_count`` and ``last_message_at`` (the time of the
    last message stored) are kept by the store. ``deleted_at`` set: in the recycle bin (a new message
    brings it back; cleanup purges it later).
    """

    namespace: str
    id: str
    title: str | None = None
    message_count: int = Field(default=0, ge=0)
    last_message_at: datetime | None = None
    created_at: datetime
    deleted_at: datetime | None = None


ReminderStatus = Literal["pending", "delivered", "cancelled"]


class Reminder(Frozen):
    """The delivery state of a memory's ``remind_at`` (docs/reminders.md).

    One row per memory. A chat turn claims a due row for ``lease_until`` (so two concurrent turns
    cannot both take it) and marks it delivered once the upstream answered; a failed turn releases it.
    """

    namespace: str
    memory_id: str
    remind_at: datetime
    status: ReminderStatus = "pending"
    delivered_at: datetime | None = None
    lease_owner: str | None = None
    lease_until: datetime | None = None


class Precious(Frozen):
    """A verbatim note kept forever (append-only: never edited, only deleted by the owner)."""

    id: str
    namespace: str
    content: str
    source: str = "api"
    reason: str | None = None
    tags: tuple[str, ...] = ()
    source_message_ids: tuple[str, ...] = ()
    created_at: datetime


class GlossaryTerm(Frozen):
    id: str
    namespace: str
    term: str
    aliases: tuple[str, ...] = ()
    definition: str
    created_at: datetime
    updated_at: datetime


class Digest(Frozen):
    """The L1 summary of a user (at most 500 characters)."""

    namespace: str
    content: str
    updated_at: datetime


class DailyLog(Frozen):
    namespace: str
    date: str  # YYYY-MM-DD in the configured time zone
    title: str = ""
    summary: str = ""
    sections: tuple[dict[str, str], ...] = ()
    created_at: datetime


class MemoryEvent(Frozen):
    """Audit trail: what happened to a memory (or what a job did), and why.

    The change journal (docs/journal.md) is kept in the same log: a run's record is the event whose
    ``id`` is its ``run_id`` (kind ``job.<name>``, ``import``, ``edit``, ``undo``, ...), and each change
    the run made is an event of kind ``change`` with that ``run_id`` (its row, before, after and why in
    ``detail``; ``memory_id`` set when the row is a memory, so the memory's history lists it).
    """

    id: str
    namespace: str
    kind: str
    memory_id: str | None = None
    detail: dict[str, Any] = Field(default_factory=dict)
    created_at: datetime
    run_id: str | None = None

    @property
    def is_run(self) -> bool:
        """Whether this event is the record of a run (not one of its changes)."""
        return self.run_id is not None and self.id == self.run_id


class UsageRecord(Frozen):
    id: str
    namespace: str
    model: str
    thread: str | None = None  # the conversation of the chat turn (rows written before it was kept: None)
    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    created_at: datetime


class IdempotencyRecord(Frozen):
    namespace: str
    key: str
    value: dict[str, Any] = Field(default_factory=dict)
    created_at: datetime


class CacheEntry(Frozen):
    namespace: str
    key: str
    value: Any
    expires_at: datetime | None = None
    updated_at: datetime


class MemoryFilter(Frozen):
    """Filters for listing memories. ``statuses`` defaults to active only; empty means every status."""

    types: tuple[str, ...] = ()
    statuses: tuple[str, ...] = ("active",)
    layer: str | None = None
    tag: str | None = None
    pinned: bool | None = None
    fact_key: str | None = None

    @property
    def listed_statuses(self) -> tuple[str, ...]:
        """The statuses a listing covers: the ones named, or every status (``status=all``)."""
        return self.statuses or MEMORY_STATUSES


T = TypeVar("T")


class Page(BaseModel, Generic[T]):
    """One page of a listing; pass ``next_cursor`` back to get the next one (None: no more)."""

    items: list[T]
    next_cursor: str | None = None


class SearchHit(Frozen):
    """A memory id with a score from one retrieval method; higher is better."""

    memory_id: str
    score: float


class IndexedDoc(Frozen):
    """What the search index keeps of a memory (active memories only)."""

    memory_id: str
    namespace: str
    text: str
    type: str
    vector: tuple[float, ...] | None = None
    importance: float = 0.5
    pinned: bool = False
    created_at: datetime


class IndexInfo(Frozen):
    """The embedding model the index was built with; ``None`` fields: nothing recorded yet."""

    model_id: str | None = None
    dimension: int | None = None
    documents: int = 0
    vectors: int = 0
