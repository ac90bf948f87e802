"""Helpers every ``MemoryStore`` adapter shares, so listings behave the same on every backend."""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Any, TypeVar, get_args

from engram.domain.errors import InvalidInput
from engram.domain.models import (
    MEMORY_STATUSES,
    MEMORY_TYPES,
    CandidateStatus,
    GlossaryTerm,
    Memory,
    MemoryFilter,
    MemoryLayer,
    Page,
    Thread,
)

MEMORY_LAYERS: tuple[str, ...] = get_args(MemoryLayer)
CANDIDATE_STATUSES: tuple[str, ...] = get_args(CandidateStatus)


def to_iso(value: datetime) -> str:
    """Fixed-width ISO-8601 UTC text (microseconds), so text order equals time order.

    A naive datetime is taken to be UTC already.
    """
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    return value.astimezone(UTC).isoformat(timespec="microseconds")


def encode_cursor(created_at: datetime, row_id: str) -> str:
    """An opaque cursor pointing at the last row of a page ordered by (created_at, id) desc."""
    raw = json.dumps([to_iso(created_at), row_id], separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_cursor(cursor: str) -> tuple[datetime, str]:
    """The (created_at, id) a cursor points at; ``InvalidInput`` if it was not made by ``encode_cursor``."""
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        created_at, row_id = json.loads(raw)
        stamp = datetime.fromisoformat(created_at)
    except (binascii.Error, UnicodeDecodeError, ValueError, TypeError) as exc:
        raise InvalidInput("invalid cursor", code="invalid_cursor") from exc
    if not isinstance(row_id, str) or stamp.tzinfo is None:
        raise InvalidInput("invalid cursor", code="invalid_cursor")
    return stamp, row_id


_T = TypeVar("_T")


def thread_position(thread: Thread) -> tuple[datetime, str]:
    """Where a thread sorts in a listing: its last activity, then its id."""
    return (thread.last_message_at or thread.created_at, thread.id)


def cut_page(rows: list[_T], limit: int, position: Callable[[_T], tuple[datetime, str]]) -> Page[_T]:
    """The first ``limit`` of ``rows`` (fetched one beyond), with a cursor at the last one if more follow."""
    if len(rows) <= limit:
        return Page(items=rows)
    return Page(items=rows[:limit], next_cursor=encode_cursor(*position(rows[limit - 1])))


def cache_text(key: str, value: Any, *, ensure_ascii: bool = True) -> str:
    """The JSON text a cache entry keeps; a value JSON cannot hold is ``InvalidInput``."""
    try:
        return json.dumps(value, ensure_ascii=ensure_ascii)
    except (TypeError, ValueError) as exc:
        raise InvalidInput(f"cache value for {key!r} is not JSON-serializable") from exc


def check_limit(limit: int) -> None:
    if limit < 1:
        raise InvalidInput(f"limit must be at least 1, got {limit}")


def empty_memory_counts() -> dict[str, dict[str, int]]:
    """The shape of ``count_memories``: every known status, type and layer, starting at zero."""
    return {
        "status": dict.fromkeys(MEMORY_STATUSES, 0),
        "type": dict.fromkeys(MEMORY_TYPES, 0),
        "layer": dict.fromkeys(MEMORY_LAYERS, 0),
    }


def glossary_order(term: GlossaryTerm) -> tuple[str, str]:
    """Glossaries list alphabetically, ignoring case (ties by id)."""
    return term.term.casefold(), term.id


def memory_matches(memory: Memory, filters: MemoryFilter) -> bool:
    """Whether ``list_memories`` with ``filters`` shows ``memory`` (every backend applies the same rule)."""
    return (
        memory.status in filters.listed_statuses
        and (not filters.types or memory.type in filters.types)
        and (filters.layer is None or memory.layer == filters.layer)
        and (filters.tag is None or filters.tag in memory.tags)
        and (filters.pinned is None or memory.pinned == filters.pinned)
        and (filters.fact_key is None or memory.fact_key == filters.fact_key)
    )


def replaced(memory: Memory) -> Memory:
    """``memory`` as a replace stores it: one version on (docs/ARCHITECTURE.md, "Write rules")."""
    return memory.model_copy(update={"version": memory.version + 1})


def check_supersede(olds: Sequence[Memory], new: Memory) -> None:
    """``supersede_many``'s precondition on every store: at least one old row, all in the new one's namespace."""
    if not olds or any(old.namespace != new.namespace for old in olds):
        raise InvalidInput("supersede needs at least one old memory, all in the new one's namespace")
