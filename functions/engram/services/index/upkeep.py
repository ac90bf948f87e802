"""The memory index's upkeep: mirroring memories into the search index, recording what it missed, and
repairing it (docs/ARCHITECTURE.md, "Ports and their adapters": the store is the truth, the index a mirror).

An index failure never loses a write: the row is kept, the failure is recorded in the store (an
``index_failed`` event for the memory and a per-namespace "index dirty" flag) and the namespace is
noted in this process; ``repair`` (run by the cleanup job, and queued when the index answers again:
``take_dirty``) or a reindex (``services/index/reindex.py`` over ``index_memories``) brings the mirror
back in line. ``health`` is what the admin panel shows. Nothing else reads or writes the flag.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Protocol

from engram.domain.errors import EngramError, NotFound
from engram.domain.models import IndexedDoc, Memory, MemoryEvent, new_id
from engram.domain.ports import AuditRows, Clock, Embedder, KeyValueRows, MemoryRows, SearchIndex
from engram.services.index.guard import is_index_unavailable
from engram.services.library.versions import replace_memory

log = logging.getLogger(__name__)

INDEX_DIRTY = "index:dirty"  # cache key: this namespace has index writes to repair
INDEX_REPAIRED = "index:repaired"  # cursor: index_failed events up to this time are repaired
REPAIR_EVENTS = 1000  # more failures than this since the last repair: reindex the whole namespace
REPAIR_SETTLE = timedelta(seconds=10)  # event listings may lag writes (DynamoDB indexes: ~1 s)
_REINDEX_READ = 500  # memories read per round of reindex_ids
_BATCH = 32  # memories embedded and indexed per batch

Progress = Callable[[int], object]


class UpkeepStore(MemoryRows, AuditRows, KeyValueRows, Protocol):
    """The memories mirrored, and where a missed index write is recorded (events, the dirty flag, the cursor)."""


@dataclass(frozen=True)
class IndexHealth:
    """Whether a namespace's index misses writes: ``pending_since`` is when the oldest unrepaired failure
    was recorded (``None``: nothing to repair)."""

    pending_since: datetime | None

    @property
    def status(self) -> str:
        return "pending" if self.pending_since is not None else "ok"


class IndexUpkeep:
    def __init__(self, store: UpkeepStore, index: SearchIndex, embedder: Embedder | None, clock: Clock) -> None:
        self._store = store
        self._index = index
        self._embedder = embedder
        self._clock = clock
        # Namespaces whose index writes failed in this process (the store keeps the durable record).
        self._dirty: set[str] = set()
        self._dirty_lock = threading.Lock()

    # -- the mirror of one memory ---------------------------------------------------------------
    def embed_document(self, text: str) -> list[float] | None:
        """The document vector, or ``None`` (no embedder, or it cannot run now)."""
        return self._try_embed(text)[0]

    def sync(
        self,
        memory: Memory,
        vector: Sequence[float] | None,
        *,
        embed: bool = True,
        strict: bool = False,
        recheck: bool = True,
    ) -> None:
        """Mirror ``memory`` into the index. A failure is recorded for repair; with ``strict`` an
        unavailable index raises instead (a reindex or repair must not report work it did not do).
        ``recheck``: read the row again after the write and take the document out if the memory was
        retired meanwhile (batches do it once per batch instead: ``index_memories``)."""
        missing: str | None = None
        if vector is None and embed:
            vector, missing = self._try_embed(memory.content)
        try:
            ref = self._index.upsert(
                IndexedDoc(
                    memory_id=memory.id,
                    namespace=memory.namespace,
                    text=memory.content,
                    type=memory.type,
                    vector=tuple(vector) if vector is not None else None,
                    importance=memory.importance,
                    pinned=memory.pinned,
                    created_at=memory.created_at,
                )
            )
        except EngramError as exc:
            if strict and is_index_unavailable(exc):
                raise
            log.warning("index upsert failed for %s: %s", memory.id, exc.code)
            self._failed(memory.namespace, memory.id, exc.code, "upsert")
            return
        if missing is not None:
            self._failed(memory.namespace, memory.id, missing, "embed")
        if recheck:
            # An archive, delete or supersede that landed while this document was written unindexed
            # before it: read the row after the write, so that the index keeps no retired memory.
            try:
                current = self._store.get_memory(memory.namespace, memory.id)
            except NotFound:
                current = None
            if current is None or current.status != "active":
                self.unindex(memory.model_copy(update={"index_ref": ref}))
                return
        if ref != (memory.index_ref or memory.id):  # None means "the memory id", as the local index uses

            def set_ref(current: Memory) -> Memory | None:
                return current.model_copy(update={"index_ref": ref}) if current.index_ref != ref else None

            replace_memory(self._store, memory.namespace, memory.id, set_ref, version=None)

    def unindex(self, memory: Memory) -> None:
        """Take ``memory``'s document out of the index; a failure is recorded for repair."""
        try:
            self._index.delete(memory.namespace, memory.id, memory.index_ref)
        except EngramError as exc:
            log.warning("index delete failed for %s: %s", memory.id, exc.code)
            self._failed(memory.namespace, memory.id, exc.code, "delete")

    def record_failure(self, namespace: str, memory_id: str, code: str, op: str) -> None:
        """Record in the store what the index misses (``op``: upsert, delete, embed), for ``repair``."""
        now = self._clock.now()
        self._store.append_event(
            MemoryEvent(
                id=new_id("evt"),
                namespace=namespace,
                kind="index_failed",
                memory_id=memory_id,
                detail={"error": code, "op": op},
                created_at=now,
            )
        )
        self._store.put_cache(namespace, INDEX_DIRTY, {"at": now.isoformat()})

    # -- many memories --------------------------------------------------------------------------
    def reindex(self, namespace: str, *, progress: Progress | None = None) -> int:
        """Re-embed and re-index every active memory of ``namespace``; returns the count. Raises
        if the index is unavailable."""
        return self.index_memories(list(self._store.iter_memories(namespace, ("active",))), progress)

    def reindex_ids(self, namespace: str, memory_ids: Sequence[str], *, progress: Progress | None = None) -> int:
        """Embed and index these memories (the active ones) in bounded batches; ``progress(n)``
        after each batch. Returns how many were indexed."""
        done = 0
        for start in range(0, len(memory_ids), _REINDEX_READ):
            chunk = memory_ids[start : start + _REINDEX_READ]
            memories = [m for m in self._store.get_memories(namespace, chunk) if m.status == "active"]
            done += self.index_memories(memories, progress, strict=False)
            if progress is not None and len(memories) < len(chunk):
                progress(len(chunk) - len(memories))  # the ids that were no longer active
        return done

    def resync(self, namespace: str, memory_ids: Sequence[str]) -> None:
        """Bring the index in line with these rows as they are now: the active ones indexed, the others
        taken out (after an undo rewrote them: docs/journal.md). A failure is recorded for repair."""
        rows = self._store.get_memories(namespace, list(memory_ids))
        for memory in rows:
            if memory.status != "active":
                self.unindex(memory)
        self.index_memories([m for m in rows if m.status == "active"], strict=False)

    def index_memories(self, active: Sequence[Memory], progress: Progress | None = None, *, strict: bool = True) -> int:
        """Embed and index ``active`` in batches; ``progress(n)`` after each batch. ``strict``: an
        unavailable index or embedder raises instead of being recorded for repair."""
        done = 0
        for start in range(0, len(active), _BATCH):
            chunk = active[start : start + _BATCH]
            vectors: list[list[float]] | list[None] = [None] * len(chunk)
            if self._embedder is not None:
                try:
                    vectors = self._embedder.embed_documents([m.content for m in chunk])
                except EngramError as exc:
                    if strict:
                        raise
                    log.warning("embedding failed, indexing without vectors: %s", exc.code)
            for memory, vector in zip(chunk, vectors, strict=True):
                self.sync(memory, vector, embed=vector is None and not strict, strict=strict, recheck=False)
            # Memories retired while the batch was indexed (their unindex ran before our upsert) leave it.
            stored = {m.id: m for m in self._store.get_memories(chunk[0].namespace, [m.id for m in chunk])}
            for memory in chunk:
                current = stored.get(memory.id)
                if current is None or current.status != "active":
                    self.unindex(current or memory)
            done += len(chunk)
            if progress is not None:
                progress(len(chunk))
        return done

    # -- repair ---------------------------------------------------------------------------------
    def health(self, namespace: str) -> IndexHealth:
        """Whether ``namespace``'s index has missed writes still to repair (reads the store; may raise)."""
        flag = self._store.get_cache(namespace, INDEX_DIRTY)
        return IndexHealth(pending_since=datetime.fromisoformat(flag["at"]) if flag is not None else None)

    def take_dirty(self) -> list[str]:
        """Namespaces whose index writes failed in this process since the last call."""
        with self._dirty_lock:
            dirty, self._dirty = sorted(self._dirty), set()
        return dirty

    def mark_repaired(self, namespace: str, until: datetime) -> None:
        """Every index failure recorded up to ``until`` is repaired (a reindex of the namespace ran)."""
        self._store.set_cursor(namespace, INDEX_REPAIRED, until.isoformat())
        self._clear_dirty(namespace, until)

    def repair(self, namespace: str) -> int:
        """Re-index the memories whose index writes failed (recorded in the store); returns how many
        were repaired. Raises if the index is still unavailable (the record stays for the next try)."""
        flag = self._store.get_cache(namespace, INDEX_DIRTY)
        if flag is None:
            return 0
        started = self._clock.now()
        raw = self._store.get_cursor(namespace, INDEX_REPAIRED)
        since = datetime.fromisoformat(raw) if raw else None
        events = self._store.list_events(namespace, kind="index_failed", limit=REPAIR_EVENTS)
        pending = [e for e in events if since is None or e.created_at > since]
        if len(events) >= REPAIR_EVENTS and len(pending) == len(events):
            count = self.reindex(namespace)  # too many to repair one by one
            self.mark_repaired(namespace, started)
            return count
        ids = list(dict.fromkeys(e.memory_id for e in reversed(pending) if e.memory_id))
        memories = self._store.get_memories(namespace, ids)
        count = self.index_memories([m for m in memories if m.status == "active"])
        for gone in (m for m in memories if m.status != "active"):
            self._index.delete(namespace, gone.id, gone.index_ref)
            count += 1
        if pending:
            self.mark_repaired(namespace, max(e.created_at for e in pending))
        elif started - datetime.fromisoformat(flag["at"]) > REPAIR_SETTLE:
            # Nothing newer than the cursor, and the flag is older than a listing's lag: stale.
            self._clear_dirty(namespace, started)
        log.info("index repair of %s: %d memories", namespace, count)
        return count

    # -- internals ------------------------------------------------------------------------------
    def _try_embed(self, text: str) -> tuple[list[float] | None, str | None]:
        """The document vector, or ``None`` and the error code when the document must be repaired
        later (an embedder that cannot run now; not a model change, which needs a reindex anyway)."""
        if self._embedder is None:
            return None, None
        try:
            return self._embedder.embed_documents([text])[0], None
        except EngramError as exc:
            log.warning("embedding failed, continuing without a vector: %s", exc.code)
            return None, None if exc.code == "reindex_needed" else exc.code

    def _failed(self, namespace: str, memory_id: str, code: str, op: str) -> None:
        """Note the namespace in this process and record the failure in the store."""
        with self._dirty_lock:
            self._dirty.add(namespace)
        try:
            self.record_failure(namespace, memory_id, code, op)
        except EngramError as exc:  # the write itself is stored; a reindex still repairs the mirror
            log.warning("could not record the index failure of %s: %s", memory_id, exc.code)

    def _clear_dirty(self, namespace: str, until: datetime) -> None:
        flag = self._store.get_cache(namespace, INDEX_DIRTY)
        # A failure recorded after ``until`` keeps the flag for the next repair.
        if flag is not None and datetime.fromisoformat(flag["at"]) <= until:
            self._store.delete_cache(namespace, INDEX_DIRTY)
