"""The counts of a namespace (`GET /v1/stats`, MCP `memory_stats`, the boot package)."""

from __future__ import annotations

from typing import Any, Protocol

from engram.domain.ports import CandidateRows, MemoryRows, MessageRows, NoteRows
from engram.services.local_day import LocalDay


class StatsStore(MemoryRows, CandidateRows, MessageRows, NoteRows, Protocol):
    """What a namespace's stats count: memories, pending candidates, today's messages, notes, terms."""


class NamespaceStats:
    def __init__(self, store: StatsStore, day: LocalDay) -> None:
        self._store = store
        self._day = day

    def counts(self, namespace: str) -> dict[str, Any]:
        """Memories by status and type, pending review candidates, messages today and in all, precious
        notes, glossary terms."""
        counts = self._store.count_memories(namespace)
        pending = len(self._store.list_candidates(namespace, "pending", limit=1000).items)
        return {
            "memories": counts,
            "pending_candidates": pending,
            "messages_today": self._store.count_messages(namespace, since=self._day.start_of_today()),
            "messages_total": self._store.count_messages(namespace),
            "precious": len(self._store.list_precious(namespace, limit=10_000)),
            "glossary": len(self._store.list_glossary(namespace)),
        }
