"""The ``replica`` SearchIndex: a process-local copy of the hybrid index, kept in sync with a shared log.

Every process (a Lambda environment, an ``engram serve``) keeps its own ``SqliteSearchIndex`` per
namespace in a private directory (``/tmp`` on Lambda). The shared truth is the *document log* in the
store (``SearchLog``: one row per (namespace, memory_id) next to the memory row, with its text, type
and its vector in float16, plus a change sequence), so a replica is rebuilt without re-embedding:

- ``upsert``/``delete`` write the log row first (a delete leaves a tombstone), then apply it locally
  at once: a process always sees its own writes.
- Before a search the replica reads the rows changed since its last sync (one query on the
  change-sequence index), unless it synced less than ``sync_seconds`` ago. The query reaches back
  ``OVERLAP_MS`` so a write stamped a little earlier by another process (clock skew, a GSI that lags)
  is still seen; applying a row twice is harmless, and a row older than the one applied is skipped.
- A cold namespace loads the newest snapshot (``SnapshotStore``: the namespace's SQLite file and the
  sequence it covers) and applies the rows changed since; without a usable snapshot it reads the
  whole namespace from the log. ``snapshot(namespace)`` writes one (the jobs call it, docs/aws.md).
- ``reset`` bumps the shared *epoch*; a replica that sees a new epoch rebuilds from the log.

See docs/aws.md ("Search backends") for the costs and the freshness this buys.

Over 450 lines on purpose: the sync, the snapshots and the epoch share one per-namespace state under one
lock; the log's rows and ports are ``replica_log.py`` and ``document_log.py``.
"""

from __future__ import annotations

import json
import logging
import os
import secrets
import shutil
import sqlite3
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

from engram.adapters.files import private_dir
from engram.adapters.search.document_log import (
    LATE_OVERLAP_MS,
    OVERLAP_MS,
    SEQ,
    SNAPSHOT_MAGIC,
    TOMBSTONE_DAYS,
    LogMeta,
    LogRow,
    SearchLog,
    SnapshotStore,
    namespace_key,
    pack_vector,
    unit_vectors,
)
from engram.adapters.search.keyword_cache import KEYWORD_THRESHOLD
from engram.adapters.search.sqlite import PreparedDoc, SqliteSearchIndex
from engram.adapters.search.vector_cache import ANN_THRESHOLD
from engram.domain.deployment import REPLICA_CEILING_MESSAGE, REPLICA_WARN_SHARE
from engram.domain.errors import InvalidInput
from engram.domain.models import IndexedDoc, IndexInfo, SearchHit

log = logging.getLogger(__name__)
# The warning's fixed start (the stack's metric filter counts log lines that begin with it) and the share
# of the ceiling it starts at: domain/deployment.py, which the stack reads too.
CEILING_MESSAGE = REPLICA_CEILING_MESSAGE
CEILING_WARN_SHARE = REPLICA_WARN_SHARE
# Log rows a full hydrate applies at a time (docs/aws.md, "Replica sizes and ceiling").
HYDRATE_BATCH = 2000


class _Prefixed:
    """``head`` then the rest of ``body``, read in chunks (the snapshot's header before the SQLite file)."""

    def __init__(self, head: bytes, body: BinaryIO) -> None:
        self._head = head
        self._body = body

    def read(self, size: int = -1, /) -> bytes:
        if self._head:
            n = len(self._head) if size < 0 else size
            data, self._head = self._head[:n], self._head[n:]
            return data
        return self._body.read(size)


class _SnapshotSink:
    """Takes a snapshot blob in order: its header line is kept, the SQLite file after it goes to ``path``."""

    def __init__(self, path: Path) -> None:
        self._path = path
        self._file: BinaryIO | None = None
        self._head = bytearray()
        self._header: dict[str, Any] | None = None
        self._bad = False

    def write(self, data: bytes, /) -> int:
        chunk = bytes(data)
        if self._file is None and not self._bad:
            self._head += chunk
            end = self._head.find(b"\n", len(SNAPSHOT_MAGIC))
            if len(self._head) >= len(SNAPSHOT_MAGIC) and not self._head.startswith(SNAPSHOT_MAGIC):
                self._bad = True
            elif end >= 0:
                try:
                    self._header = json.loads(bytes(self._head[len(SNAPSHOT_MAGIC) : end]))
                except ValueError:
                    self._bad = True
                    return len(chunk)
                self._file = self._path.open("wb")
                self._file.write(self._head[end + 1 :])
                self._head = bytearray()
        elif self._file is not None:
            self._file.write(chunk)
        return len(chunk)

    def header(self) -> dict[str, Any] | None:
        return None if self._bad else self._header

    def close(self) -> None:
        if self._file is not None:
            self._file.close()


@dataclass
class _Namespace:
    index: SqliteSearchIndex
    path: Path
    cursor: int = 0  # the highest seq applied from the log
    synced_at: float = 0.0  # time.monotonic() of the last sync
    epoch: int = 0
    applied: dict[str, int] | None = None  # memory_id -> seq of the row applied last
    changes_since_snapshot: int = 0


class ReplicaSearchIndex:
    """``SearchIndex`` as a private replica of ``log`` (see the module docstring)."""

    def __init__(
        self,
        log: SearchLog,
        directory: str | Path,
        *,
        snapshots: SnapshotStore | None = None,
        sync_seconds: float = 1.0,
        ann_threshold: int | None = None,
        keyword_threshold: int | None = None,
        ceiling: int = 0,
        helper_threads: bool = True,
    ) -> None:
        """``ann_threshold`` / ``keyword_threshold``: the local index's (``search/sqlite.py``), its defaults
        when None. ``helper_threads=False`` where no thread may outlive a response (Lambda, as
        ``RecallService``'s): a loaded namespace's keyword postings and vectors are not loaded on a helper
        thread, the first search loads what it needs."""
        base = private_dir(Path(directory))
        # Private to this process: two processes on one data dir never share a replica file.
        self._dir = private_dir(base / f"{os.getpid()}-{secrets.token_hex(4)}")
        self._log = log
        self._snapshots = snapshots
        self._sync_seconds = sync_seconds
        self._ann_threshold = ANN_THRESHOLD if ann_threshold is None else ann_threshold
        self._keyword_threshold = KEYWORD_THRESHOLD if keyword_threshold is None else keyword_threshold
        self._ceiling = ceiling
        self._helper_threads = helper_threads
        self._lock = threading.RLock()
        self._spaces: dict[str, _Namespace] = {}
        self._meta: LogMeta | None = None

    # -- plumbing -------------------------------------------------------------------------------
    def _open_index(self, path: Path) -> SqliteSearchIndex:
        return SqliteSearchIndex(
            path, ann_persist=False, ann_threshold=self._ann_threshold, keyword_threshold=self._keyword_threshold
        )

    def _current_meta(self) -> LogMeta:
        if self._meta is None:
            self._meta = self._log.meta()
        return self._meta

    def _space(self, namespace: str) -> _Namespace:
        """The namespace's replica, loaded (snapshot + deltas, or the whole log) on first use."""
        space = self._spaces.get(namespace)
        if space is None:
            meta = self._log.meta()
            self._meta = meta
            space = self._load(namespace, meta)
            self._spaces[namespace] = space
            self._check_ceiling(namespace, space)
        return space

    def _fresh(self, namespace: str, *, force: bool = False) -> _Namespace:
        space = self._space(namespace)
        if force or time.monotonic() - space.synced_at >= self._sync_seconds:
            self._sync(namespace, space)
        return space

    def _load(self, namespace: str, meta: LogMeta, *, use_snapshot: bool = True) -> _Namespace:
        path = self._dir / f"{namespace_key(namespace)}.sqlite3"
        for leftover in (path, *(Path(f"{path}{s}") for s in ("-wal", "-shm"))):
            leftover.unlink(missing_ok=True)
        restored = self._restore_snapshot(namespace, path, meta) if use_snapshot else None
        index = self._open_index(path)
        space = _Namespace(index=index, path=path, epoch=meta.epoch, applied=dict(restored[1]) if restored else {})
        if restored is None:
            self._prepare(index, meta)
            # An empty vector cache now, so the whole log's vectors go into it as they are written instead
            # of being read back from SQLite by the first search.
            index.warm(namespace)
            # In batches: the whole namespace's rows (~3 KB each at 1024 dimensions) are never held at once.
            batch: list[LogRow] = []
            total = 0
            for row in self._log.all_rows(namespace):
                batch.append(row)
                if len(batch) == HYDRATE_BATCH:
                    self._apply(space, batch, meta)
                    total, batch = total + len(batch), []
            self._apply(space, batch, meta)
            space.changes_since_snapshot = total + len(batch)
        else:
            cursor = space.cursor = restored[0]
            rows = self._log.changed_since(namespace, max(0, cursor - OVERLAP_MS))
            self._apply(space, rows, meta)
            # The overlap re-applies rows the snapshot holds already: only later ones count as changes.
            space.changes_since_snapshot = sum(1 for r in rows if r.seq > cursor)
        space.synced_at = time.monotonic()
        # The keyword postings (and, from a snapshot, the vectors) load on a helper thread, not on the first
        # search's time; that search ranks keywords by FTS5 meanwhile (search/sqlite.py). Without helper
        # threads (Lambda freezes the instance after a response, a thread with it) the first search loads them.
        if self._helper_threads:
            index.warm_in_background([namespace])
        return space

    @staticmethod
    def _prepare(index: SqliteSearchIndex, meta: LogMeta) -> None:
        if meta.model_id is not None and meta.dimension is not None:
            index.reset(meta.model_id, meta.dimension)

    def _restore_snapshot(self, namespace: str, path: Path, meta: LogMeta) -> tuple[int, dict[str, int]] | None:
        """Write the namespace's snapshot to ``path``; the seq it covers and the seq of its latest rows, or
        None if none is usable."""
        if self._snapshots is None:
            return None
        sink = _SnapshotSink(path)
        try:
            found = self._snapshots.get_into(f"{namespace_key(namespace)}/index.snapshot", sink)
        except Exception as exc:  # a snapshot is an optimisation: the log is the truth
            log.warning("could not read the search snapshot: %s", exc)
            found = False
        finally:
            sink.close()
        header = sink.header() if found else None
        too_old = time.time() * 1000 - TOMBSTONE_DAYS * 86_400_000 * 0.9
        if (
            header is None
            or header.get("epoch") != meta.epoch
            or header.get("namespace") != namespace
            or header["seq"] < too_old
        ):
            path.unlink(missing_ok=True)
            return None
        os.chmod(path, 0o600)
        return int(header["seq"]), {str(k): int(v) for k, v in (header.get("recent") or {}).items()}

    def _apply(self, space: _Namespace, rows: Sequence[LogRow], meta: LogMeta) -> None:
        applied = space.applied if space.applied is not None else {}
        live: dict[str, LogRow] = {}
        gone: list[tuple[str, str]] = []
        fresh = 0
        for row in sorted(rows, key=lambda r: r.seq):
            if row.seq <= applied.get(row.memory_id, 0):
                continue  # applied already (the overlap re-reads it), or older than what was applied
            applied[row.memory_id] = row.seq
            fresh += 1
            space.cursor = max(space.cursor, row.seq)
            if row.deleted:
                live.pop(row.memory_id, None)
                gone.append((row.namespace, row.memory_id))
                continue
            live[row.memory_id] = row
        for namespace, memory_id in gone:
            if memory_id not in live:
                space.index.delete(namespace, memory_id)
        # One float16 decode and normalization for every vector of the batch (a hydrate applies thousands).
        usable = [r.vector is not None and r.epoch == meta.epoch for r in live.values()]
        blobs = [r.vector for r, ok in zip(live.values(), usable, strict=True) if ok and r.vector is not None]
        decoded = iter(unit_vectors(blobs))
        docs = [
            PreparedDoc(r.namespace, r.memory_id, r.type, r.text, next(decoded) if ok else None)
            for r, ok in zip(live.values(), usable, strict=True)
        ]
        space.index.write_prepared(docs)
        space.changes_since_snapshot += fresh

    def _sync(self, namespace: str, space: _Namespace) -> None:
        meta = self._log.meta()
        self._meta = meta
        if meta.epoch != space.epoch:  # another process reset the index: rebuild from the log
            space.index.close()
            self._spaces[namespace] = self._load(namespace, meta)
            return
        rows = self._log.changed_since(namespace, max(0, space.cursor - OVERLAP_MS))
        self._apply(space, rows, meta)
        space.synced_at = time.monotonic()

    def _catch_up(self, namespace: str, space: _Namespace, overlap_ms: int) -> None:
        rows = self._log.changed_since(namespace, max(0, space.cursor - overlap_ms))
        self._apply(space, rows, self._current_meta())

    def _check_ceiling(self, namespace: str, space: _Namespace) -> None:
        """Warn (never refuse) when the loaded indexes near the ceiling the deployment is sized for."""
        if not self._ceiling:
            return
        held = sum(s.index.info(name).documents for name, s in self._spaces.items())
        if held >= CEILING_WARN_SHARE * self._ceiling:
            log.warning(
                "%s: %d memories held, %d%% of the %d this deployment is sized for; raise "
                "engram:replica_expected_memories or move to search_backend=opensearch (docs/aws.md)",
                CEILING_MESSAGE,
                held,
                round(100 * held / self._ceiling),
                self._ceiling,
            )

    # -- the port -------------------------------------------------------------------------------
    def upsert(self, doc: IndexedDoc) -> str:
        with self._lock:
            space = self._fresh(doc.namespace)  # a reset elsewhere changes the model this write must match
            meta = self._current_meta()
            blob: bytes | None = None
            if doc.vector is not None:
                if meta.dimension is None:
                    meta = self._meta = self._log.record_dimension(len(doc.vector))
                if len(doc.vector) != meta.dimension:
                    raise InvalidInput(
                        f"vector has {len(doc.vector)} dimensions; the index holds {meta.dimension}",
                        code="dimension_mismatch",
                    )
                blob = pack_vector(doc.vector)
            row = LogRow(
                namespace=doc.namespace,
                memory_id=doc.memory_id,
                seq=SEQ.next(),
                type=doc.type,
                text=doc.text,
                vector=blob,
                dimension=meta.dimension if blob is not None else None,
                epoch=meta.epoch,
            )
            self._log.put(row)
            self._apply(space, [row], meta)
        return doc.memory_id

    def upsert_many(self, docs: Sequence[IndexedDoc]) -> None:
        """One log row and one apply per document, under one hold of the lock."""
        with self._lock:
            for doc in docs:
                self.upsert(doc)

    def delete(self, namespace: str, memory_id: str, ref: str | None = None) -> None:
        with self._lock:
            row = LogRow(namespace=namespace, memory_id=memory_id, seq=SEQ.next(), deleted=True)
            self._log.put(row)
            space = self._space(namespace)
            self._apply(space, [row], self._current_meta())

    def keyword_search(self, namespace: str, query: str, *, k: int = 50, types: Sequence[str] = ()) -> list[SearchHit]:
        with self._lock:
            space = self._fresh(namespace)
        return space.index.keyword_search(namespace, query, k=k, types=types)

    def vector_search(
        self, namespace: str, vector: Sequence[float], *, k: int = 50, types: Sequence[str] = ()
    ) -> list[SearchHit]:
        with self._lock:
            space = self._fresh(namespace)
            meta = self._current_meta()
            if meta.dimension is not None and len(vector) != meta.dimension:
                raise InvalidInput(
                    f"query vector has {len(vector)} dimensions; the index holds {meta.dimension}",
                    code="dimension_mismatch",
                )
        return space.index.vector_search(namespace, vector, k=k, types=types)

    def neighbour_density(self, namespace: str, memory_ids: Sequence[str], *, k: int = 10) -> dict[str, float]:
        with self._lock:
            space = self._fresh(namespace)
        return space.index.neighbour_density(namespace, memory_ids, k=k)

    def info(self, namespace: str | None = None) -> IndexInfo:
        with self._lock:
            names = [namespace] if namespace is not None else sorted(set(self._log.namespaces()) | set(self._spaces))
            documents = vectors = 0
            for name in names:
                counts = self._fresh(name).index.info(name)
                documents += counts.documents
                vectors += counts.vectors
            meta = self._log.meta()
            self._meta = meta
        return IndexInfo(model_id=meta.model_id, dimension=meta.dimension, documents=documents, vectors=vectors)

    def reset(self, model_id: str, dimension: int) -> None:
        if dimension <= 0:
            raise InvalidInput("dimension must be positive")
        with self._lock:
            meta = self._log.reset(model_id, dimension)
            self._meta = meta
            for space in self._spaces.values():
                space.index.reset(model_id, dimension)
                space.epoch = meta.epoch

    def ping(self) -> None:
        self._log.ping()

    # -- snapshots and life cycle -----------------------------------------------------------------
    def sync(self, namespace: str) -> None:
        """Apply every change of the log now (tests, and before a snapshot)."""
        with self._lock:
            self._fresh(namespace, force=True)

    def snapshot(self, namespace: str, *, min_changes: int = 1) -> bool:
        """Write the namespace's snapshot if ``min_changes`` rows were applied since the last one."""
        if self._snapshots is None:
            return False
        with self._lock:
            space = self._fresh(namespace, force=True)
            # Late log entries (a row written more than OVERLAP_MS after its seq) are applied now at the latest.
            self._catch_up(namespace, space, LATE_OVERLAP_MS)
            if space.changes_since_snapshot < min_changes:
                return False
            # The rows a cold replica's first sync re-reads (the overlap): it skips those it already holds.
            recent = {m: q for m, q in (space.applied or {}).items() if q > space.cursor - OVERLAP_MS}
            header = {
                "namespace": namespace,
                "seq": space.cursor,
                "epoch": space.epoch,
                "format": "sqlite",
                "recent": recent,
            }
            copy = space.path.with_suffix(".copy")
            copy.unlink(missing_ok=True)
            conn = sqlite3.connect(str(space.path))
            try:
                conn.execute("VACUUM INTO ?", (str(copy),))
            finally:
                conn.close()
            space.changes_since_snapshot = 0
        # Streamed from the consistent copy: the snapshot is never in memory (docs/aws.md, "Replica sizes").
        head = SNAPSHOT_MAGIC + json.dumps(header).encode("utf-8") + b"\n"
        size = len(head) + copy.stat().st_size
        try:
            with copy.open("rb") as body:
                self._snapshots.put_stream(f"{namespace_key(namespace)}/index.snapshot", _Prefixed(head, body))
        finally:
            copy.unlink(missing_ok=True)
        log.info("wrote the search snapshot of a namespace (%d bytes, seq %d)", size, header["seq"])
        self._check_ceiling(namespace, space)
        return True

    def reconcile(self, namespace: str) -> bool:
        """Hold the namespace's replica against the log and rebuild it from the log on a mismatch.

        After the late catch-up (``LATE_OVERLAP_MS``), the replica must hold as many documents as the log
        has live rows. A row whose log entry landed later still (a retry after a long outage) was skipped
        by every sync: the counts differ, and the namespace is rebuilt from the whole log here and its
        snapshot written, so every cold start gets the rebuild (the nightly cleanup job calls this;
        docs/aws.md, "Search backends"). Returns whether it rebuilt.
        """
        with self._lock:
            space = self._fresh(namespace, force=True)
            self._catch_up(namespace, space, LATE_OVERLAP_MS)
            held, logged = space.index.info(namespace).documents, self._log.count(namespace)
            if held == logged:
                return False
            log.warning(
                "the search replica of a namespace holds %d documents, its log %d: rebuilding it from the log",
                held,
                logged,
            )
            space.index.close()
            meta = self._log.meta()
            self._meta = meta
            rebuilt = self._spaces[namespace] = self._load(namespace, meta, use_snapshot=False)
            rebuilt.changes_since_snapshot = max(rebuilt.changes_since_snapshot, 1)
        try:  # the rebuild reaches every cold start through its snapshot
            self.snapshot(namespace)
        except Exception:  # the next job's snapshot tries again (the rebuild is marked changed)
            log.exception("writing the search snapshot of a rebuilt replica failed")
        return True

    def reconcile_all(self) -> list[str]:
        """``reconcile`` every namespace of the log; the namespaces rebuilt."""
        with self._lock:
            names = sorted(set(self._log.namespaces()) | set(self._spaces))
        return [name for name in names if self.reconcile(name)]

    def snapshot_all(self, *, min_changes: int = 1) -> int:
        """``snapshot`` every namespace of the log (a cold job loads each from its snapshot + deltas)."""
        with self._lock:
            names = sorted(set(self._log.namespaces()) | set(self._spaces))
        written = 0
        for name in names:
            try:
                written += self.snapshot(name, min_changes=min_changes)
            except Exception:  # a snapshot only speeds up cold starts: the next run tries again
                log.exception("writing a search snapshot failed")
        return written

    def close(self) -> None:
        with self._lock:
            for space in self._spaces.values():
                space.index.close()
            self._spaces.clear()
            shutil.rmtree(self._dir, ignore_errors=True)
