"""An approximate kNN graph (HNSW via ``usearch``) for namespaces too big to scan exactly per query.

Optional: without ``usearch`` installed, ``AnnGraph.available()`` is False and callers scan exactly.
Keys are stable integers per memory id, so the graph is patched in place on upsert/delete.

A graph can be saved next to the SQLite file (``save``: one file, graph and id map together, replaced
atomically) and loaded back (``load``); ``sync`` then reconciles it with the namespace's current
vectors (adds, removes and re-adds changed rows, found by a per-row digest of the vector bytes), so a
stale file costs only the difference, never a rebuild. An unreadable file is ignored (rebuilt).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np

from engram.adapters.files import write_private

# The graph's shape and search breadth. A graph usearch restores from its saved bytes searches with the
# library's default expansion (64), not the one it was built with, so the constructor sets both expansions
# on any index it is given: a graph reloaded after a restart (``load``), or an index a caller passes,
# answers as the one built in the background does.
CONNECTIVITY = 16
EXPANSION_ADD = 128
EXPANSION_SEARCH = 96

_DIGEST_COEFFS = np.random.default_rng(20261130).integers(1, 2**63, size=4096, dtype=np.uint64) | np.uint64(1)


def row_digests(matrix: np.ndarray) -> np.ndarray:
    """One uint64 per row that changes when any byte of the row's float32 vector changes."""
    rows = np.ascontiguousarray(matrix, dtype=np.float32)
    out = np.empty(rows.shape[0], dtype=np.uint64)
    coeffs = _DIGEST_COEFFS[: rows.shape[1]]
    for start in range(0, rows.shape[0], 4096):
        chunk = rows[start : start + 4096].view(np.uint32).astype(np.uint64)
        out[start : start + 4096] = (chunk * coeffs).sum(axis=1, dtype=np.uint64)  # wraps mod 2**64
    return out


class AnnGraph:
    def __init__(self, dimension: int, index: Any = None) -> None:
        from usearch.index import Index

        self.dimension = dimension
        if index is None:
            index = Index(ndim=dimension, metric="ip", dtype="f32", connectivity=CONNECTIVITY)
        # Set on any index, a given one too (usearch does not keep the search breadth in saved bytes).
        index.expansion_add, index.expansion_search = EXPANSION_ADD, EXPANSION_SEARCH
        self._index: Any = index
        self._key_of: dict[str, int] = {}
        self._id_of: dict[int, str] = {}
        self._digest: dict[str, int] = {}
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

    def add_many(self, memory_ids: Sequence[str], vectors: np.ndarray, digests: np.ndarray | None = None) -> None:
        if not len(memory_ids):
            return
        vectors = np.ascontiguousarray(vectors, dtype=np.float32).reshape(len(memory_ids), -1)
        digests = row_digests(vectors) if digests is None else digests
        keys = np.arange(self._next, self._next + len(memory_ids), dtype=np.uint64)
        self._next += len(memory_ids)
        for key, mid, digest in zip(keys.tolist(), memory_ids, digests.tolist(), strict=True):
            self._key_of[mid] = key
            self._id_of[key] = mid
            self._digest[mid] = digest
        self._index.add(keys, vectors)

    def put(self, memory_id: str, vector: np.ndarray) -> None:
        self.remove(memory_id)
        self.add_many([memory_id], vector.reshape(1, -1))

    def remove(self, memory_id: str) -> None:
        key = self._key_of.pop(memory_id, None)
        if key is not None:
            del self._id_of[key]
            self._digest.pop(memory_id, None)
            self._index.remove(key)

    def remove_many(self, memory_ids: Sequence[str]) -> None:
        keys = [self._key_of.pop(mid) for mid in memory_ids if mid in self._key_of]
        for key in keys:
            self._digest.pop(self._id_of.pop(key), None)
        if keys:
            self._index.remove(np.asarray(keys, dtype=np.uint64))

    def sync(self, memory_ids: Sequence[str], vectors: np.ndarray) -> int:
        """Make the graph hold exactly these rows; returns how many rows were added, re-added or removed."""
        digests = row_digests(vectors)
        wanted = dict(zip(memory_ids, digests.tolist(), strict=True))
        stale = [mid for mid, d in self._digest.items() if wanted.get(mid) != d]
        self.remove_many(stale)
        rows = [i for i, mid in enumerate(memory_ids) if mid not in self._key_of]
        if rows:
            self.add_many([memory_ids[i] for i in rows], vectors[rows], digests[rows])
        return len(stale) + len(rows)

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

    # -- persistence ---------------------------------------------------------------------------
    def save(self, path: Path) -> None:
        """Write the graph and its id map as one file, atomically (a unique temp file, then a rename)."""
        ids = list(self._key_of)

        def write(fh: BinaryIO) -> None:
            np.savez(
                fh,
                graph=np.frombuffer(bytes(self._index.save()), dtype=np.uint8),
                ids=np.asarray(ids, dtype=str),
                keys=np.asarray([self._key_of[m] for m in ids], dtype=np.uint64),
                digests=np.asarray([self._digest[m] for m in ids], dtype=np.uint64),
                next=np.asarray([self._next], dtype=np.uint64),
                dimension=np.asarray([self.dimension], dtype=np.int64),
            )

        write_private(path, write)  # owner-only, a unique temp file, then a rename (adapters/files.py)

    @classmethod
    def load(cls, path: Path, dimension: int) -> AnnGraph | None:
        """The graph saved at ``path``, or None (missing, unreadable or another dimension)."""
        if not path.exists():
            return None
        try:
            from usearch.index import Index

            with np.load(path) as data:
                if int(data["dimension"][0]) != dimension:
                    return None
                index = Index.restore(data["graph"].tobytes())
                ids = [str(m) for m in data["ids"].tolist()]
                keys = data["keys"].tolist()
                digests = data["digests"].tolist()
                next_key = int(data["next"][0])
            if index is None or index.ndim != dimension or len(ids) != len(index):
                return None
            graph = cls(dimension, index)  # sets the expansions the restored bytes do not keep
            graph._key_of = dict(zip(ids, keys, strict=True))
            graph._id_of = dict(zip(keys, ids, strict=True))
            graph._digest = dict(zip(ids, digests, strict=True))
            graph._next = next_key
            return graph
        except Exception:  # truncated zip, bad pickle-free arrays, usearch refusing the buffer: rebuild
            return None
