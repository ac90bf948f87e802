"""This process's writes to a namespace while ``SqliteSearchIndex`` loads its caches in the background.

``SqliteSearchIndex.warm_in_background`` reads a namespace's rows (tokens and vectors) and its generation
in one read transaction on a connection of its own, builds the keyword postings and the vector matrix
without holding the index's lock, then publishes them under the lock. Writes this process made meanwhile
are recorded here (each with the generation it moved from and to) and replayed onto the new caches before
they are published, exactly as they would have patched caches already loaded. If the recorded writes do
not lead from the snapshot's generation to the current one without a gap (another process wrote, or the
index was reset), the load is dropped and the next query loads the namespace as before.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import NamedTuple

import numpy as np


class WrittenDoc(NamedTuple):
    """One document of a write: ``tokens`` None when it was deleted; ``vector`` None when it has none."""

    memory_id: str
    type: str
    tokens: str | None
    vector: np.ndarray | None


class PendingWrites:
    """The writes recorded while one namespace loads, in commit order (all under the index's lock)."""

    def __init__(self) -> None:
        self._writes: list[tuple[int, int, Sequence[WrittenDoc]]] = []
        self.claimed = False  # a loader is on it (another asking for the same namespace leaves it be)
        self.vectors_done = threading.Event()  # the loader published the vectors (or has none to publish)

    def record(self, old_generation: int, new_generation: int, docs: Sequence[WrittenDoc]) -> None:
        self._writes.append((old_generation, new_generation, docs))

    def since(self, generation: int, current: int) -> list[WrittenDoc] | None:
        """The documents written after ``generation`` in order, if this process's writes alone moved it to
        ``current``; None if something else moved it too (the load is then out of date)."""
        out: list[WrittenDoc] = []
        at = generation
        for old, new, docs in self._writes:
            if new <= generation:
                continue  # committed before the load's snapshot: in its rows already
            if old != at:
                return None
            out.extend(docs)
            at = new
        return out if at == current else None
