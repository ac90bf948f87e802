"""A keyword-only stand-in for ``RecallService`` (same call shape) used until/unless the real one is wired.

Real parts underneath (the store and the search index); only the fusion/rerank pipeline is skipped.
``fail=True`` makes every call raise, to test that a recall failure never fails a chat.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from engram.domain.models import Memory


@dataclass(frozen=True)
class Hit:
    memory: Memory
    score: float


@dataclass(frozen=True)
class Result:
    hits: list[Hit]
    glossary_hits: list[Any] = field(default_factory=list)
    meta: dict[str, Any] = field(default_factory=dict)


class KeywordRecall:
    def __init__(self, store: Any, index: Any, *, fail: bool = False) -> None:
        self.store = store
        self.index = index
        self.fail = fail
        self.calls: list[str] = []

    def recall(
        self,
        namespace: str,
        query: str,
        *,
        top_k: int | None = None,
        types: Sequence[str] = (),
        exclude_ids: Sequence[str] = (),
        record_injection: bool = False,
    ) -> Result:
        self.calls.append(query)
        if self.fail:
            raise RuntimeError("recall is down")
        hits = [
            h
            for h in self.index.keyword_search(namespace, query, k=top_k or 5, types=types)
            if h.memory_id not in set(exclude_ids)
        ]
        memories = {m.id: m for m in self.store.get_memories(namespace, [h.memory_id for h in hits])}
        return Result([Hit(memories[h.memory_id], h.score) for h in hits if h.memory_id in memories])
