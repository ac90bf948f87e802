"""INTERIM recall (plain RRF of keyword + vector hits); replaced by the full pipeline of issue 3."""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict

from engram.domain.models import GlossaryTerm, Memory


@dataclass(frozen=True)
class RecallConfig:
    top_k: int = 5
    candidates: int = 50
    rrf_k: int = 60

    @classmethod
    def from_settings(cls, settings: Any) -> RecallConfig:
        return cls(top_k=settings.recall_top_k, candidates=settings.recall_candidates, rrf_k=settings.recall_rrf_k)


class RecallHit(BaseModel):
    model_config = ConfigDict(frozen=True)
    memory: Memory
    score: float


class RecallResult(BaseModel):
    hits: list[RecallHit]
    glossary_hits: list[GlossaryTerm] = []
    meta: dict[str, Any] = {}


class RecallService:
    def __init__(self, store: Any, index: Any, embedder: Any, reranker: Any, compressor: Any, clock: Any,
                 config: RecallConfig | Callable[[], RecallConfig]) -> None:
        self._store, self._index, self._embedder = store, index, embedder
        # A callable is read per recall (runtime settings change it without a restart).
        self._config_of: Callable[[], RecallConfig] = config if callable(config) else (lambda: config)

    @property
    def _config(self) -> RecallConfig:
        return self._config_of()

    def recall(self, namespace: str, query: str, *, top_k: int | None = None, types: Sequence[str] = (),
               exclude_ids: Collection[str] = (), record_injection: bool = False) -> RecallResult:
        k = top_k or self._config.top_k
        scores: dict[str, float] = {}
        lists = [self._index.keyword_search(namespace, query, k=self._config.candidates, types=types)]
        if self._embedder is not None:
            vec = self._embedder.embed_query(query)
            lists.append(self._index.vector_search(namespace, vec, k=self._config.candidates, types=types))
        for hits in lists:
            for rank, hit in enumerate(hits):
                scores[hit.memory_id] = scores.get(hit.memory_id, 0.0) + 1.0 / (self._config.rrf_k + rank + 1)
        ranked = sorted(scores, key=lambda i: -scores[i])
        memories = [m for m in self._store.get_memories(namespace, ranked) if m.status == "active"
                    and m.id not in exclude_ids]
        return RecallResult(hits=[RecallHit(memory=m, score=scores[m.id]) for m in memories[:k]], meta={"interim": True})


def render_prompt(result: RecallResult) -> str:
    return "\n".join(f"- {h.memory.content}" for h in result.hits)
