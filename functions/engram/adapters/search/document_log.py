"""The replica search backend's shared *document log*: its rows, the ``SearchLog`` and
``SnapshotStore`` ports the replica reads (``search/replica.py``) and their adapters implement
(``search/replica_log.py``, ``storage/snapshots.py``), and the compact vector and sequence helpers
both sides use."""

from __future__ import annotations

import hashlib
import threading
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np

# A sync re-reads this much before its cursor: writes committed late or stamped by a skewed clock.
OVERLAP_MS = 5_000
# Before a snapshot (and at a reconcile) the replica re-reads this far back: a row whose log entry landed
# later than OVERLAP_MS after its sequence number (throttled retries, GSI lag) is applied there at the
# latest, so no snapshot carries the gap on.
LATE_OVERLAP_MS = 15 * 60_000
# Tombstones are kept this long; a snapshot older than that cannot be trusted to know every delete.
TOMBSTONE_DAYS = 30
SNAPSHOT_MAGIC = b"ENGRAMSNAP1\n"


@dataclass(frozen=True)
class LogRow:
    """One document of the shared log: the current state of (namespace, memory_id)."""

    namespace: str
    memory_id: str
    seq: int  # change sequence: epoch milliseconds of the write (strictly increasing per process)
    deleted: bool = False
    type: str = "fact"
    text: str = ""
    vector: bytes | None = None  # little-endian float16, ``dimension`` values
    dimension: int | None = None
    epoch: int = 0  # the index epoch the vector was written under (``reset`` bumps it)


@dataclass(frozen=True)
class LogMeta:
    """The shared embedding model record: ``reset`` writes it, the first vector records a dimension."""

    model_id: str | None = None
    dimension: int | None = None
    epoch: int = 0


class SearchLog(Protocol):
    """Where a replica's documents live for every process (SQLite locally, DynamoDB on AWS)."""

    def put(self, row: LogRow) -> None: ...

    def changed_since(self, namespace: str, seq: int) -> list[LogRow]:
        """Rows of the namespace with ``seq`` > the given one, tombstones included."""
        ...

    def all_rows(self, namespace: str) -> Iterable[LogRow]:
        """Every live (not deleted) row of the namespace."""
        ...

    def count(self, namespace: str) -> int:
        """How many live (not deleted) rows the namespace has (what a full replica holds)."""
        ...

    def namespaces(self) -> list[str]: ...

    def meta(self) -> LogMeta: ...

    def record_dimension(self, dimension: int) -> LogMeta:
        """Record ``dimension`` unless one is recorded; return the meta in force afterwards."""
        ...

    def reset(self, model_id: str, dimension: int) -> LogMeta:
        """Record the model and start a new epoch (every older vector stops counting)."""
        ...

    def ping(self) -> None: ...


class ByteSource(Protocol):
    def read(self, size: int = -1, /) -> bytes: ...


class ByteSink(Protocol):
    def write(self, data: bytes, /) -> int: ...


class SnapshotStore(Protocol):
    """Blobs by key: S3 on AWS (``storage/snapshots.py``), a directory locally (``storage/blobs.py``).

    Streamed both ways, so a snapshot of any size never sits in memory (docs/aws.md, "Replica sizes and
    ceiling"): ``put_stream`` reads ``stream`` to its end in chunks; ``get_into`` writes the blob to
    ``sink`` in order, in chunks, and returns False (writing nothing) when there is none.
    """

    def put_stream(self, key: str, stream: ByteSource) -> None: ...

    def get_into(self, key: str, sink: ByteSink) -> bool: ...


# -- compact vectors ------------------------------------------------------------------------------
def unit_vectors(blobs: Sequence[bytes]) -> list[np.ndarray]:
    """``pack_vector`` blobs as unit float32 vectors, decoded together (rows of one matrix per length)."""
    out: list[np.ndarray] = [np.empty(0, np.float32)] * len(blobs)
    by_length: dict[int, list[int]] = {}
    for i, blob in enumerate(blobs):
        by_length.setdefault(len(blob), []).append(i)
    for positions in by_length.values():
        matrix = np.frombuffer(b"".join(blobs[i] for i in positions), dtype="<f2").reshape(len(positions), -1)
        matrix = matrix.astype(np.float32)
        norms = np.linalg.norm(matrix, axis=1, keepdims=True)
        np.divide(matrix, norms, out=matrix, where=norms > 0)
        for i, row in zip(positions, matrix, strict=True):
            out[i] = row
    return out


def pack_vector(vector: Sequence[float]) -> bytes:
    """A unit vector as float16 (half the size of float32; cosine changes by < 1e-3)."""
    arr = np.asarray(vector, dtype=np.float32).reshape(-1)
    norm = float(np.linalg.norm(arr))
    if norm > 0:
        arr = arr / norm
    return arr.astype("<f2").tobytes()


def unpack_vector(blob: bytes) -> tuple[float, ...]:
    return tuple(np.frombuffer(blob, dtype="<f2").astype(np.float32).tolist())


class _SeqClock:
    """Epoch milliseconds, strictly increasing within the process."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._last = 0

    def next(self) -> int:
        with self._lock:
            self._last = max(self._last + 1, int(time.time() * 1000))
            return self._last


SEQ = _SeqClock()


def namespace_key(namespace: str) -> str:
    return hashlib.sha1(namespace.encode("utf-8")).hexdigest()[:24]
