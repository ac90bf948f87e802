"""The in-memory vectors of one namespace for ``SqliteSearchIndex`` (``search/sqlite.py``): a growable
unit-row matrix scanned exactly, plus an HNSW graph (``search/ann.py``) for namespaces of at least
``ANN_THRESHOLD`` vectors, built off the query path and saved next to the SQLite file."""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from engram.adapters.search.ann import AnnGraph
from engram.domain.models import SearchHit

log = logging.getLogger(__name__)

# Namespaces with at least this many vectors are searched through an HNSW graph (if usearch is installed).
ANN_THRESHOLD = 20_000


class VectorCache:
    """The vectors of one namespace as a growable matrix; rows are unit length.

    ``lock`` is the index's lock (held by every caller of ``put``/``remove``/``search``); the
    background graph build takes it only to publish the finished graph.
    """

    def __init__(
        self,
        dimension: int,
        generation: int,
        ann_threshold: int = ANN_THRESHOLD,
        *,
        lock: threading.RLock | None = None,
        ann_path: Path | None = None,
        background: bool = True,
    ) -> None:
        self.dimension = dimension
        self.ann_threshold = ann_threshold
        self.ann: AnnGraph | None = None
        self.ann_dirty = False
        self.ann_path = ann_path
        self._lock = lock or threading.RLock()
        self._background = background
        self._builder: threading.Thread | None = None
        # Writes that happen while the graph is being built, replayed onto it before it is published.
        self._pending: list[tuple[str, np.ndarray | None]] | None = None
        self.generation = generation
        self.ids: list[str] = []
        self.rows: dict[str, int] = {}
        self.types: list[str] = []
        self.type_codes: dict[str, int] = {}
        self.codes = np.zeros(16, dtype=np.int32)
        self.matrix = np.zeros((16, dimension), dtype=np.float32)

    @property
    def size(self) -> int:
        return len(self.ids)

    def _code(self, type_: str) -> int:
        return self.type_codes.setdefault(type_, len(self.type_codes))

    def put(self, memory_id: str, type_: str, vector: np.ndarray) -> None:
        row = self.rows.get(memory_id)
        if row is None:
            row = self.size
            if row >= self.matrix.shape[0]:
                grow = max(16, self.matrix.shape[0])
                self.matrix = np.concatenate([self.matrix, np.zeros((grow, self.dimension), np.float32)])
                self.codes = np.concatenate([self.codes, np.zeros(grow, np.int32)])
            self.ids.append(memory_id)
            self.types.append(type_)
            self.rows[memory_id] = row
        else:
            self.types[row] = type_
        self.matrix[row] = vector
        self.codes[row] = self._code(type_)
        if self.ann is not None:
            self.ann.put(memory_id, vector)
            self.ann_dirty = True
        elif self._pending is not None:
            self._pending.append((memory_id, vector.copy()))

    def remove(self, memory_id: str) -> None:
        row = self.rows.pop(memory_id, None)
        if row is None:
            return
        if self.ann is not None:
            self.ann.remove(memory_id)
            self.ann_dirty = True
        elif self._pending is not None:
            self._pending.append((memory_id, None))
        last = self.size - 1
        if row != last:
            moved = self.ids[last]
            self.ids[row] = moved
            self.types[row] = self.types[last]
            self.rows[moved] = row
            self.matrix[row] = self.matrix[last]
            self.codes[row] = self.codes[last]
        self.ids.pop()
        self.types.pop()

    def _approximate(self, query: np.ndarray, k: int, types: Sequence[str]) -> list[SearchHit] | None:
        """Hits from the HNSW graph, or None when the namespace is small (or a type filter starves it)."""
        if self.size < self.ann_threshold or not AnnGraph.available():
            return None
        if self.ann is None:
            self.start_ann()
            if self.ann is None:
                return None  # still building: scan exactly meanwhile
        wanted = set(types)
        found = self.ann.search(query, k * 4 if wanted else k)
        hits = [
            SearchHit(memory_id=mid, score=min(1.0, max(-1.0, score)))
            for mid, score in found
            if not wanted or self.types[self.rows[mid]] in wanted
        ]
        if wanted and len(hits) < k:
            return None
        return hits[:k]

    # -- the graph's life cycle -----------------------------------------------------------------
    def start_ann(self) -> None:
        """Build (or load and reconcile) the graph: in a background thread, or right here if not ``background``."""
        if self.ann is not None or self._builder is not None or not AnnGraph.available():
            return
        ids = list(self.ids)
        matrix = self.matrix[: self.size].copy()
        self._pending = []
        if not self._background:
            self._publish(self._build(ids, matrix))
            return
        self._builder = threading.Thread(
            target=self._build_in_background, args=(ids, matrix), name="engram-ann-build", daemon=True
        )
        self._builder.start()

    def _build(self, ids: list[str], matrix: np.ndarray) -> tuple[AnnGraph, bool]:
        graph = AnnGraph.load(self.ann_path, self.dimension) if self.ann_path is not None else None
        if graph is not None:
            changed = graph.sync(ids, matrix)
            log.info("loaded the saved ANN graph (%d vectors, %d reconciled)", len(ids), changed)
            return graph, changed > 0
        graph = AnnGraph(self.dimension)
        graph.add_many(ids, matrix)
        return graph, True

    def _build_in_background(self, ids: list[str], matrix: np.ndarray) -> None:
        try:
            graph, changed = self._build(ids, matrix)
            if changed and self.ann_path is not None:
                try:
                    graph.save(self.ann_path)  # the snapshot; later writes are reconciled on the next load
                except OSError as exc:
                    log.warning("could not save the ANN graph: %s", exc)
                changed = False
            with self._lock:
                self._publish((graph, changed))
        except Exception:  # the exact scan keeps answering; the next query retries the build
            log.exception("building the ANN graph failed")
            with self._lock:
                self._pending = None
                self._builder = None

    def _publish(self, built: tuple[AnnGraph, bool]) -> None:
        graph, dirty = built
        for memory_id, vector in self._pending or ():
            if vector is None:
                graph.remove(memory_id)
            else:
                graph.put(memory_id, vector)
        self.ann_dirty = dirty or bool(self._pending)
        self._pending = None
        self.ann = graph

    def wait_for_ann(self, timeout: float | None = None) -> bool:
        builder = self._builder
        if builder is not None:
            builder.join(timeout)
        return self.ann is not None

    def save_ann(self) -> None:
        if self.ann is not None and self.ann_dirty and self.ann_path is not None:
            try:
                self.ann.save(self.ann_path)
                self.ann_dirty = False
            except OSError as exc:
                log.warning("could not save the ANN graph: %s", exc)

    def search(self, query: np.ndarray, k: int, types: Sequence[str]) -> list[SearchHit]:
        n = self.size
        if n == 0:
            return []
        approximate = self._approximate(query, k, types)
        if approximate is not None:
            return approximate
        scores = self.matrix[:n] @ query
        if types:
            wanted = [self.type_codes[t] for t in set(types) if t in self.type_codes]
            if not wanted:
                return []
            scores = np.where(np.isin(self.codes[:n], wanted), scores, -np.inf)
        k = min(k, n)
        top = np.argpartition(-scores, k - 1)[:k] if k < n else np.arange(n)
        top = top[np.argsort(-scores[top], kind="stable")]
        return [
            SearchHit(memory_id=self.ids[i], score=min(1.0, max(-1.0, score)))
            for i, score in zip(top.tolist(), scores[top].tolist(), strict=True)
            if score != -np.inf
        ]
