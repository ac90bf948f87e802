"""An approximate kNN graph (HNSW via ``usearch``) for namespaces too big to scan exactly per query.

Optional: without ``usearch`` installed, ``AnnGraph.available()`` is False and callers scan exactly.
Keys are stable integers per memory id, so the graph is patched in place on upsert/delete.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np


class AnnGraph:
    def __init__(self, dimension: int) -> None:
        from usearch.index import Index

        self._index: Any = Index(
            ndim=dimension, metric="ip", dtype="f32", connectivity=16, expansion_add=128, expansion_search=96
        )
        self._key_of: dict[str, int] = {}
        self._id_of: dict[int, str] = {}
        self._next = 0

    @staticmethod
    def available() -> bool:
        try:
            import usearch.index  # noqa: F401
        except ImportError:
            return False
        return True

    def __len__(self) -> int:
        return len(self._key_of)

    def add_many(self, memory_ids: Sequence[str], vectors: np.ndarray) -> None:
        keys = np.arange(self._next, self._next + len(memory_ids), dtype=np.uint64)
        self._next += len(memory_ids)
        for key, mid in zip(keys.tolist(), memory_ids, strict=True):
            self._key_of[mid] = key
            self._id_of[key] = mid
        if len(keys):
            self._index.add(keys, np.ascontiguousarray(vectors, dtype=np.float32))

    def put(self, memory_id: str, vector: np.ndarray) -> None:
        self.remove(memory_id)
        self.add_many([memory_id], vector.reshape(1, -1))

    def remove(self, memory_id: str) -> None:
        key = self._key_of.pop(memory_id, None)
        if key is not None:
            del self._id_of[key]
            self._index.remove(key)

    def search(self, query: np.ndarray, count: int) -> list[tuple[str, float]]:
        if not self._key_of:
            return []
        matches = self._index.search(np.ascontiguousarray(query, dtype=np.float32), min(count, len(self._key_of)))
        out: list[tuple[str, float]] = []
        for key, distance in zip(matches.keys.tolist(), matches.distances.tolist(), strict=True):
            mid = self._id_of.get(int(key))
            if mid is not None:
                out.append((mid, 1.0 - float(distance)))
        return out
