"""Rows and helpers the store contract suites share (one suite per protocol of domain/ports.py)."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from engram.domain.models import Candidate, GlossaryTerm, Memory, MemoryEvent, Message, Precious, UsageRecord

NS = "alice"
OTHER = "bob"
T0 = datetime(2025, 3, 1, 12, 0, tzinfo=UTC)


def at(minutes: float) -> datetime:
    return T0 + timedelta(minutes=minutes)


def a_memory(memory_id: str, *, namespace: str = NS, minute: float = 0, **fields: Any) -> Memory:
    defaults = {"content": f"content of {memory_id}", "created_at": at(minute), "updated_at": at(minute)}
    return Memory(id=memory_id, namespace=namespace, **{**defaults, **fields})


def a_candidate(candidate_id: str, *, namespace: str = NS, minute: float = 0, **fields: Any) -> Candidate:
    defaults = {"content": f"candidate {candidate_id}", "created_at": at(minute)}
    return Candidate(id=candidate_id, namespace=namespace, **{**defaults, **fields})


def a_message(message_id: str, *, namespace: str = NS, minute: float = 0, **fields: Any) -> Message:
    defaults = {"role": "user", "content": f"message {message_id}", "created_at": at(minute)}
    return Message(id=message_id, namespace=namespace, **{**defaults, **fields})


def a_precious(precious_id: str, *, namespace: str = NS, minute: float = 0) -> Precious:
    return Precious(id=precious_id, namespace=namespace, content=f"verbatim {precious_id}", created_at=at(minute))


def a_term(term_id: str, term: str, *, namespace: str = NS) -> GlossaryTerm:
    return GlossaryTerm(
        id=term_id, namespace=namespace, term=term, definition=f"{term} means", created_at=T0, updated_at=T0
    )


def an_event(event_id: str, *, namespace: str = NS, minute: float = 0, **fields: Any) -> MemoryEvent:
    defaults = {"kind": "created", "created_at": at(minute)}
    return MemoryEvent(id=event_id, namespace=namespace, **{**defaults, **fields})


def a_usage(usage_id: str, *, namespace: str = NS, minute: float = 0, thread: str | None = "t1") -> UsageRecord:
    return UsageRecord(
        id=usage_id, namespace=namespace, model="gpt-x", thread=thread, input_tokens=10, created_at=at(minute)
    )


def ids(rows: Any) -> list[str]:
    return [row.id for row in rows]


def all_pages(fetch: Callable[[str | None], Any], *, max_pages: int = 20) -> list[list[str]]:
    """Follow cursors from the first page to the last; the ids of each page (a cursor loop fails)."""
    pages: list[list[str]] = []
    cursor: str | None = None
    for _ in range(max_pages):
        page = fetch(cursor)
        pages.append(ids(page.items))
        cursor = page.next_cursor
        if cursor is None:
            return pages
    pytest.fail(f"no last page after {max_pages} pages: {pages}")
