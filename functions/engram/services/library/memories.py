"""Writing and curating memories: upsert by fact key, versions, status changes, index sync.

The store is the source of truth; the search index mirrors active memories. An index failure never
loses a write: the row is kept, the failure is recorded in the store (an ``index_failed`` event for the
memory and a per-namespace "index dirty" flag), and ``repair_index`` (run by the cleanup job, and queued
when the index answers again) or `engram reindex` brings the mirror back in line.

Over 400 lines on purpose: every write and its index sync (or the recorded failure) happen in one call,
so the writes and the mirror's upkeep stay in one class. Request models and the same-wording rule live
in ``domain/`` (``policies.py``, ``wording.py``).
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field

from engram.domain.errors import Conflict, EngramError, InvalidInput, NotFound, is_version_conflict, version_conflict
from engram.domain.models import (
    MEMORY_STATUSES,
    Candidate,
    IndexedDoc,
    Memory,
    MemoryEvent,
    MemoryFilter,
    MemoryLayer,
    MemoryType,
    Page,
    Reminder,
    new_id,
)
from engram.domain.policies import (
    clean_content,
    clean_tags,
    cosine,
    decide_upsert,
    normalize_fact_key,
)
from engram.domain.ports import (
    AuditRows,
    CandidateRows,
    Clock,
    Embedder,
    KeyValueRows,
    MemoryRows,
    ReminderRows,
    SearchIndex,
)
from engram.domain.wording import near_duplicate, salient_difference, same_wording
from engram.services.index.guard import is_index_unavailable

log = logging.getLogger(__name__)

INDEX_DIRTY = "index:dirty"  # cache key: this namespace has index writes to repair
INDEX_REPAIRED = "index:repaired"  # cursor: index_failed events up to this time are repaired
REPAIR_EVENTS = 1000  # more failures than this since the last repair: reindex the whole namespace
REPAIR_SETTLE = timedelta(seconds=10)  # event listings may lag writes (DynamoDB indexes: ~1 s)

WriteAction = Literal["created", "seen", "superseded", "existing", "proposed"]
_REINDEX_READ = 500  # memories read per round of reindex_ids
MAX_LIST_OFFSET = 10_000  # offset paging reads the rows it skips; beyond this, page by cursor
_SKIP_PAGE = 200  # rows read per step of an offset skip
_MAX_CHAIN = 1000  # versions followed to find the active head of a chain without a key
_KEY_ATTEMPTS = 10  # rounds of an upsert that lost its key to concurrent writers before a clean 409
_VERSION_ATTEMPTS = 8  # fresh reads of a row other writers keep changing, before a clean 409


class MemoryWrite(BaseModel):
    """A request to remember something. ``fact_key`` makes it an upsert."""

    model_config = ConfigDict(extra="forbid")

    content: str
    type: MemoryType = "fact"
    fact_key: str | None = None
    layer: MemoryLayer = "fragment"
    importance: float = Field(default=0.5, ge=0.0, le=1.0)
    confidence: float = Field(default=0.8, ge=0.0, le=1.0)
    pinned: bool = False
    tags: list[str] = Field(default_factory=list)
    source: str = "api"
    source_message_ids: list[str] = Field(default_factory=list)
    external_id: str | None = Field(default=None, max_length=200)
    remind_at: datetime | None = None


class MemoryPatch(BaseModel):
    """Fields to change in place (no new version). Unset fields stay as they are."""

    model_config = ConfigDict(extra="forbid")

    content: str | None = None
    type: MemoryType | None = None
    fact_key: str | None = None
    layer: MemoryLayer | None = None
    importance: float | None = Field(default=None, ge=0.0, le=1.0)
    confidence: float | None = Field(default=None, ge=0.0, le=1.0)
    pinned: bool | None = None
    tags: list[str] | None = None
    remind_at: datetime | None = None


def parse_statuses(status: Sequence[str] | None) -> tuple[str, ...]:
    """Statuses a listing asks for: none -> active only; ``all`` -> every status (empty tuple)."""
    if not status:
        return ("active",)
    if "all" in status:
        return ()
    bad = [s for s in status if s not in MEMORY_STATUSES]
    if bad:
        raise InvalidInput(f"unknown status {bad[0]!r}; one of {', '.join(MEMORY_STATUSES)} or all")
    return tuple(status)


@dataclass(frozen=True)
class WriteResult:
    memory: Memory
    action: WriteAction
    previous: Memory | None = None  # the superseded row, when action == "superseded"
    reason: str = ""
    candidate: Candidate | None = None  # the review candidate, when action == "proposed"

    @property
    def created(self) -> bool:
        return self.action in ("created", "superseded")


@dataclass(frozen=True)
class MemoryRules:
    """When a new memory is the same as an existing one.

    ``settings.py`` holds the defaults (written once); ``from_settings`` maps them.
    """

    dedup_cosine: float

    @classmethod
    def from_settings(cls, s: Any) -> MemoryRules:
        return cls(dedup_cosine=s.dedup_cosine)


class MemoriesStore(MemoryRows, CandidateRows, ReminderRows, AuditRows, KeyValueRows, Protocol):
    """Memories with their reminders, events, the index-repair bookkeeping, and the review queue
    (where automation's changes to a protected memory go)."""


def is_protected(memory: Memory) -> bool:
    """A memory automation may not change on its own: pinned, or in the ``core`` layer. Extraction's and
    dreaming's changes to it go to the review queue (README, "Review queue")."""
    return memory.pinned or memory.layer == "core"


class MemoryService:
    def __init__(
        self,
        store: MemoriesStore,
        index: SearchIndex,
        embedder: Embedder | None,
        clock: Clock,
        rules: MemoryRules | Callable[[], MemoryRules],
    ) -> None:
        self._store = store
        self._index = index
        self._embedder = embedder
        self._clock = clock
        # A callable is read per use (runtime settings change the rules without a restart).
        self._rules_of: Callable[[], MemoryRules] = rules if callable(rules) else (lambda: rules)
        # Namespaces whose index writes failed in this process (the store keeps the durable record).
        self._dirty: set[str] = set()
        self._dirty_lock = threading.Lock()

    @property
    def _rules(self) -> MemoryRules:
        return self._rules_of()

    # -- writes -----------------------------------------------------------------------------
    def write(self, namespace: str, req: MemoryWrite, *, dedup: bool = False, automated: bool = False) -> WriteResult:
        """Remember ``req``: idempotent by ``external_id``; with ``fact_key`` an upsert (same
        wording -> seen, changed -> supersede); without a key create.

        ``dedup`` is for machine-written texts (extraction, "remember ..." in a chat, MCP
        memory_remember): a near-duplicate (same wording, or cosine >= ``dedup_cosine`` with the same
        numbers, names, places and negation; ``domain/wording.py``) is marked seen instead: the
        memory holding the key, or without a key an active memory of the same type.

        ``automated`` is for jobs (extraction): a change to a protected memory (pinned or core,
        ``is_protected``) is not applied but proposed for review, a candidate targeting it (action
        ``proposed``); an ordinary memory is superseded as usual."""
        content = clean_content(req.content)
        tags = clean_tags(req.tags)
        fact_key = normalize_fact_key(req.fact_key) if req.fact_key else None

        if req.external_id:
            existing = self._store.find_by_external_id(namespace, req.external_id)
            if existing is not None:
                return WriteResult(existing, "existing", reason="external_id seen before")

        if fact_key:
            return self._upsert_retrying(namespace, req, content, tags, fact_key, dedup=dedup, automated=automated)
        vector: list[float] | None = None
        if dedup:
            vector = self._embed_document(content)
            twin = self._find_twin(namespace, content, req.type, vector)
            if twin is not None:
                return WriteResult(self._mark_seen(twin, tags), "seen", reason="near-identical memory")
        return self._create(namespace, req, content, tags, None, vector)

    def _upsert_retrying(
        self,
        namespace: str,
        req: MemoryWrite,
        content: str,
        tags: tuple[str, ...],
        fact_key: str,
        *,
        dedup: bool,
        automated: bool,
    ) -> WriteResult:
        """Upsert by key; when a concurrent writer changed the key between our read and our write
        (the store refuses a second active row), read again and decide again. Each lost round means
        another writer's version landed, so a few rounds settle any burst; a clean Conflict after."""
        lost: Conflict | None = None
        for attempt in range(_KEY_ATTEMPTS):
            _back_off(attempt)
            try:
                return self._upsert(namespace, req, content, tags, fact_key, dedup=dedup, automated=automated)
            except Conflict as exc:
                if req.external_id and (prior := self._store.find_by_external_id(namespace, req.external_id)):
                    return WriteResult(prior, "existing", reason="external_id seen before")
                lost = exc
        raise Conflict(
            f"fact_key {fact_key!r} was changed by other writes at the same time {_KEY_ATTEMPTS} times in a row; "
            "try again",
            code="fact_key_conflict",
        ) from lost

    def _upsert(
        self,
        namespace: str,
        req: MemoryWrite,
        content: str,
        tags: tuple[str, ...],
        fact_key: str,
        *,
        dedup: bool,
        automated: bool,
    ) -> WriteResult:
        vector: list[float] | None = None
        current = self._store.find_active_by_fact_key(namespace, fact_key)
        similarity = None
        if (
            current is not None
            and dedup
            and not same_wording(current.content, content)
            and salient_difference(current.content, content) is None
        ):
            vector = self._embed_document(content)
            other = self._embed_document(current.content) if vector is not None else None
            if vector is not None and other is not None:
                similarity = cosine(vector, other)
        decision = decide_upsert(current, content, similarity, self._rules.dedup_cosine, explicit=not dedup)
        if current is None:
            return self._create(namespace, req, content, tags, fact_key, vector)
        if decision.action == "seen":
            return WriteResult(self._mark_seen(current, tags), "seen", reason=decision.reason)
        if automated and is_protected(current):
            candidate = self.propose_change(current, req)
            return WriteResult(
                current, "proposed", reason="protected memory: change proposed for review", candidate=candidate
            )
        new = self._new_memory(namespace, req, content, tags, fact_key, supersedes=current.id)
        old, new = self._swap(current, new, reason=decision.reason)
        self._sync_index(new, vector)
        self._sync_reminder(new)
        return WriteResult(new, "superseded", previous=old, reason=decision.reason)

    def _create(
        self,
        namespace: str,
        req: MemoryWrite,
        content: str,
        tags: tuple[str, ...],
        fact_key: str | None,
        vector: list[float] | None,
    ) -> WriteResult:
        memory = self._new_memory(namespace, req, content, tags, fact_key, supersedes=None)
        try:
            memory = self._store.insert_memory(memory)
        except Conflict:
            # A concurrent writer won the race for this external id: answer like a retry.
            if req.external_id and (prior := self._store.find_by_external_id(namespace, req.external_id)):
                return WriteResult(prior, "existing", reason="external_id seen before")
            raise
        self._event(namespace, "created", memory.id, {"source": memory.source})
        self._sync_index(memory, vector)
        self._sync_reminder(memory)
        return WriteResult(memory, "created", reason="new memory")

    def propose_change(self, target: Memory, req: MemoryWrite) -> Candidate:
        """File ``req`` in the review queue as a new version of ``target`` (a protected memory that
        automation may not change on its own); the owner's accept supersedes it keeping its pin and
        layer (``services/library/candidates.py``). A pending candidate for the same target with the same
        wording is returned instead of filing a second one."""
        content = clean_content(req.content)
        for pending in self._store.list_candidates(target.namespace, "pending", limit=200).items:
            if pending.target_memory_id == target.id and same_wording(pending.content, content):
                return pending
        candidate = Candidate(
            id=new_id("cand"),
            namespace=target.namespace,
            content=content,
            type=req.type,
            fact_key=target.fact_key,
            importance=req.importance,
            confidence=req.confidence,
            tags=clean_tags(req.tags),
            source=req.source,
            source_message_ids=tuple(req.source_message_ids),
            target_memory_id=target.id,
            created_at=self._clock.now(),
        )
        self._event(target.namespace, "proposed", target.id, {"candidate": candidate.id, "source": req.source})
        return self._store.insert_candidate(candidate)

    def supersede(self, namespace: str, old_id: str, req: MemoryWrite, *, version: int | None = None) -> WriteResult:
        """Replace ``old_id`` by a new version (explicit correction). The new row keeps the old
        row's fact_key unless ``req`` names one. With ``version`` (the one the caller read), a memory
        that changed since is refused (``Conflict``, ``version_conflict``); without, a lost race is
        retried from a fresh read (docs/ARCHITECTURE.md, "Write rules")."""
        for attempt in range(_VERSION_ATTEMPTS):
            _back_off(attempt)
            old = self._read_at(namespace, old_id, version)
            if old.status != "active":
                raise Conflict(f"memory {old_id} is {old.status}; only an active memory can be superseded")
            content = clean_content(req.content)
            tags = clean_tags(req.tags) if req.tags else old.tags
            fact_key = normalize_fact_key(req.fact_key) if req.fact_key else old.fact_key
            if fact_key and fact_key != old.fact_key:
                taken = self._store.find_active_by_fact_key(namespace, fact_key)
                if taken is not None:
                    raise Conflict(f"fact_key {fact_key!r} is already used by active memory {taken.id}")
            new = self._new_memory(namespace, req, content, tags, fact_key, supersedes=old.id)
            try:
                old, new = self._swap(old, new, reason="explicit supersede")
            except Conflict as exc:
                if version is not None or not is_version_conflict(exc):
                    raise
                continue
            self._sync_index(new, None)
            self._sync_reminder(new)
            return WriteResult(new, "superseded", previous=old, reason="explicit supersede")
        raise _kept_changing(old_id)

    def update(self, namespace: str, memory_id: str, patch: MemoryPatch, *, version: int | None = None) -> Memory:
        """Edit in place (``version``: as ``supersede``)."""

        fields: list[str] = []

        def change(memory: Memory) -> Memory | None:
            changes = self._patch_changes(namespace, memory, patch)
            fields[:] = sorted(changes)
            if not changes:
                return None
            return memory.model_copy(update={**changes, "updated_at": self._clock.now()})

        memory, updated = self._replace(namespace, memory_id, change, version=version)
        if updated is memory:
            return memory
        self._event(namespace, "updated", memory_id, {"fields": fields})
        if updated.status == "active":
            self._sync_index(updated, None)
        if updated.remind_at != memory.remind_at:
            self._sync_reminder(updated, cleared=updated.remind_at is None)
        return updated

    def _patch_changes(self, namespace: str, memory: Memory, patch: MemoryPatch) -> dict[str, Any]:
        changes: dict[str, Any] = {}
        fields = patch.model_fields_set
        if "content" in fields and patch.content is not None:
            changes["content"] = clean_content(patch.content)
        if "tags" in fields and patch.tags is not None:
            changes["tags"] = clean_tags(patch.tags)
        if "fact_key" in fields:
            key = normalize_fact_key(patch.fact_key) if patch.fact_key else None
            if key and key != memory.fact_key and memory.status == "active":
                taken = self._store.find_active_by_fact_key(namespace, key)
                if taken is not None:
                    raise Conflict(f"fact_key {key!r} is already used by active memory {taken.id}")
            changes["fact_key"] = key
        for name in ("type", "layer", "importance", "confidence", "pinned", "remind_at"):
            if name in fields:
                value = getattr(patch, name)
                if value is None and name != "remind_at":
                    raise InvalidInput(f"{name} cannot be null", code="invalid_field")
                changes[name] = value
        return changes

    def set_status(
        self,
        namespace: str,
        memory_id: str,
        status: Literal["archived", "deleted"],
        reason: str = "",
        *,
        version: int | None = None,
    ) -> Memory:
        """Archive or (softly) delete (``version``: as ``supersede``)."""

        def change(memory: Memory) -> Memory | None:
            if memory.status == status:
                return None
            now = self._clock.now()
            return memory.model_copy(update={"status": status, "status_changed_at": now, "updated_at": now})

        memory, updated = self._replace(namespace, memory_id, change, version=version)
        if updated is not memory:
            self._event(namespace, status, memory_id, {"reason": reason} if reason else {})
            self._unindex(memory)
        return updated

    def restore(self, namespace: str, memory_id: str, *, version: int | None = None) -> Memory:
        """Make a superseded, archived, deleted or expired memory active again. The active memory it
        replaces (the holder of its fact_key, or the active head of its chain: ``_holder_of``) is
        superseded by the restored version, in the same transaction (``version``: as ``supersede``)."""
        for attempt in range(_VERSION_ATTEMPTS):
            _back_off(attempt)
            memory = self._read_at(namespace, memory_id, version)
            if memory.status == "active":
                return memory
            now = self._clock.now()
            holder = self._holder_of(namespace, memory)
            revived = memory.model_copy(
                update={"status": "active", "status_changed_at": now, "updated_at": now, "superseded_by_id": None}
            )
            rows = [revived]
            if holder is not None:
                retired = {"status": "superseded", "superseded_by_id": memory.id, "status_changed_at": now}
                rows.insert(0, holder.model_copy(update={**retired, "updated_at": now}))
            try:
                revived = self._store.update_memories(rows)[-1]
            except Conflict:
                # Lost a race: the row or the holder of its key changed since it was read. The next
                # round reads both again (and refuses a row no longer at the caller's ``version``).
                continue
            if holder is not None:
                self._unindex(holder)
            self._event(namespace, "restored", memory_id, {"replaced": holder.id} if holder else {})
            self._sync_index(revived, None)
            return revived
        raise _kept_changing(memory_id)

    def _read_at(self, namespace: str, memory_id: str, version: int | None) -> Memory:
        """The memory, refused (``version_conflict``) if it is no longer at the ``version`` the caller read."""
        memory = self._store.get_memory(namespace, memory_id)
        if version is not None and memory.version != version:
            raise version_conflict(memory_id, version, memory.version)
        return memory

    def _replace(
        self, namespace: str, memory_id: str, change: Callable[[Memory], Memory | None], *, version: int | None
    ) -> tuple[Memory, Memory]:
        """Read the row, ``change`` it and write it back at the version read: (as read, as written; the
        same object when ``change`` found nothing to do). With ``version`` (what a person or a job read
        before deciding) a row that moved on is refused; without, a lost race is retried from a fresh
        read (docs/ARCHITECTURE.md, "Write rules")."""
        for attempt in range(_VERSION_ATTEMPTS):
            _back_off(attempt)
            memory = self._read_at(namespace, memory_id, version)
            changed = change(memory)
            if changed is None:
                return memory, memory
            try:
                return memory, self._store.update_memory(changed)
            except Conflict as exc:
                if version is not None or not is_version_conflict(exc):
                    raise
        raise _kept_changing(memory_id)

    def _holder_of(self, namespace: str, memory: Memory) -> Memory | None:
        """The active memory a restored version replaces: the holder of its fact_key, else (a chain without
        a key, e.g. moved in from Pawwake) the active version its ``superseded_by_id`` links lead to."""
        if memory.fact_key:
            return self._store.find_active_by_fact_key(namespace, memory.fact_key)
        seen = {memory.id}
        later = memory.superseded_by_id
        while later is not None and later not in seen and len(seen) <= _MAX_CHAIN:
            seen.add(later)
            try:
                row = self._store.get_memory(namespace, later)
            except NotFound:
                return None
            if row.status == "active":
                return row
            later = row.superseded_by_id
        return None

    def _sync_reminder(self, memory: Memory, *, cleared: bool = False) -> None:
        """A new or changed ``remind_at`` (re)arms the memory's reminder; a cleared one cancels it
        (docs/reminders.md). Called only when ``remind_at`` was set or changed."""
        if memory.remind_at is not None:
            self._store.put_reminder(
                Reminder(namespace=memory.namespace, memory_id=memory.id, remind_at=memory.remind_at)
            )
        elif cleared:
            row = self._store.find_reminder(memory.namespace, memory.id)
            if row is not None and row.status == "pending":
                self._store.put_reminder(
                    row.model_copy(update={"status": "cancelled", "lease_owner": None, "lease_until": None})
                )

    def mark_seen(self, namespace: str, memory_id: str) -> Memory:
        return self._mark_seen(self._store.get_memory(namespace, memory_id), ())

    # -- reads ------------------------------------------------------------------------------
    def get(self, namespace: str, memory_id: str) -> Memory:
        return self._store.get_memory(namespace, memory_id)

    def list_memories(
        self, namespace: str, filters: MemoryFilter, *, limit: int = 50, cursor: str | None = None, offset: int = 0
    ) -> Page[Memory]:
        """One page of memories, newest first: after ``cursor``, or after the first ``offset`` of them
        (offset paging, as cf-agent-memory's tools page; the store pages by cursor, so the skipped rows
        are read, up to ``MAX_LIST_OFFSET``)."""
        if offset > MAX_LIST_OFFSET:
            raise InvalidInput(f"offset is at most {MAX_LIST_OFFSET}; page with next_cursor beyond it")
        while offset > 0:
            skipped = self._store.list_memories(namespace, filters, limit=min(offset, _SKIP_PAGE), cursor=cursor)
            offset -= len(skipped.items)
            cursor = skipped.next_cursor
            if cursor is None:
                return Page(items=[], next_cursor=None)
        return self._store.list_memories(namespace, filters, limit=limit, cursor=cursor)

    def versions(self, namespace: str, memory_id: str) -> list[Memory]:
        """The whole version chain of a memory, oldest first."""
        memory = self._store.get_memory(namespace, memory_id)
        chain = [memory]
        seen = {memory.id}
        back = memory
        while back.supersedes_id and back.supersedes_id not in seen:
            try:
                back = self._store.get_memory(namespace, back.supersedes_id)
            except NotFound:
                break
            chain.insert(0, back)
            seen.add(back.id)
        fwd = memory
        while fwd.superseded_by_id and fwd.superseded_by_id not in seen:
            try:
                fwd = self._store.get_memory(namespace, fwd.superseded_by_id)
            except NotFound:
                break
            chain.append(fwd)
            seen.add(fwd.id)
        return chain

    # -- index maintenance ------------------------------------------------------------------
    def reindex(self, namespace: str, *, progress: Any = None) -> int:
        """Re-embed and re-index every active memory of ``namespace``; returns the count. Raises
        if the index is unavailable."""
        return self.index_memories(list(self._store.iter_memories(namespace, ("active",))), progress)

    def reindex_ids(self, namespace: str, memory_ids: Sequence[str], *, progress: Any = None) -> int:
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

    def resync_index(self, namespace: str, memory_ids: Sequence[str]) -> None:
        """Bring the index in line with these rows as they are now: the active ones indexed, the others
        taken out (after an undo rewrote them: docs/journal.md). A failure is recorded for repair."""
        rows = self._store.get_memories(namespace, list(memory_ids))
        for memory in rows:
            if memory.status != "active":
                self._unindex(memory)
        self.index_memories([m for m in rows if m.status == "active"], strict=False)

    def index_memories(self, active: Sequence[Memory], progress: Any = None, *, strict: bool = True) -> int:
        """Embed and index ``active`` in batches; ``progress(n)`` after each batch. ``strict``: an
        unavailable index or embedder raises instead of being recorded for repair."""
        done = 0
        batch = 32
        for start in range(0, len(active), batch):
            chunk = active[start : start + batch]
            vectors: list[list[float]] | list[None] = [None] * len(chunk)
            if self._embedder is not None:
                try:
                    vectors = self._embedder.embed_documents([m.content for m in chunk])
                except EngramError as exc:
                    if strict:
                        raise
                    log.warning("embedding failed, indexing without vectors: %s", exc.code)
            for memory, vector in zip(chunk, vectors, strict=True):
                self._sync_index(memory, vector, embed=vector is None and not strict, strict=strict, recheck=False)
            # Memories retired while the batch was indexed (their unindex ran before our upsert) leave it.
            stored = {m.id: m for m in self._store.get_memories(chunk[0].namespace, [m.id for m in chunk])}
            for memory in chunk:
                current = stored.get(memory.id)
                if current is None or current.status != "active":
                    self._unindex(current or memory)
            done += len(chunk)
            if progress is not None:
                progress(len(chunk))
        return done

    def take_dirty(self) -> list[str]:
        """Namespaces whose index writes failed in this process since the last call."""
        with self._dirty_lock:
            dirty, self._dirty = sorted(self._dirty), set()
        return dirty

    def mark_index_repaired(self, namespace: str, until: datetime) -> None:
        """Every index failure recorded up to ``until`` is repaired (a reindex of the namespace ran)."""
        self._store.set_cursor(namespace, INDEX_REPAIRED, until.isoformat())
        self._clear_dirty(namespace, until)

    def _clear_dirty(self, namespace: str, until: datetime) -> None:
        flag = self._store.get_cache(namespace, INDEX_DIRTY)
        # A failure recorded after ``until`` keeps the flag for the next repair.
        if flag is not None and datetime.fromisoformat(flag["at"]) <= until:
            self._store.delete_cache(namespace, INDEX_DIRTY)

    def repair_index(self, namespace: str) -> int:
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
            self.mark_index_repaired(namespace, started)
            return count
        ids = list(dict.fromkeys(e.memory_id for e in reversed(pending) if e.memory_id))
        memories = self._store.get_memories(namespace, ids)
        count = self.index_memories([m for m in memories if m.status == "active"])
        for gone in (m for m in memories if m.status != "active"):
            self._index.delete(namespace, gone.id, gone.index_ref)
            count += 1
        if pending:
            self.mark_index_repaired(namespace, max(e.created_at for e in pending))
        elif started - datetime.fromisoformat(flag["at"]) > REPAIR_SETTLE:
            # Nothing newer than the cursor, and the flag is older than a listing's lag: stale.
            self._clear_dirty(namespace, started)
        log.info("index repair of %s: %d memories", namespace, count)
        return count

    # -- internals --------------------------------------------------------------------------
    def _new_memory(
        self,
        namespace: str,
        req: MemoryWrite,
        content: str,
        tags: tuple[str, ...],
        fact_key: str | None,
        *,
        supersedes: str | None,
    ) -> Memory:
        now = self._clock.now()
        return Memory(
            id=new_id("mem"),
            namespace=namespace,
            content=content,
            type=req.type,
            fact_key=fact_key,
            layer=req.layer,
            importance=req.importance,
            confidence=req.confidence,
            pinned=req.pinned,
            tags=tags,
            source=req.source,
            source_message_ids=tuple(req.source_message_ids),
            external_id=req.external_id,
            remind_at=req.remind_at,
            supersedes_id=supersedes,
            created_at=now,
            updated_at=now,
            last_seen_at=now,
            seen_count=1,
        )

    def _swap(self, current: Memory, new: Memory, *, reason: str) -> tuple[Memory, Memory]:
        now = self._clock.now()
        old = current.model_copy(
            update={"status": "superseded", "superseded_by_id": new.id, "status_changed_at": now, "updated_at": now}
        )
        old, new = self._store.supersede(old, new)
        self._unindex(current)
        self._event(new.namespace, "superseded", current.id, {"by": new.id, "reason": reason})
        return old, new

    def _mark_seen(self, memory: Memory, tags: Sequence[str]) -> Memory:
        """Count a sighting (an atomic increment that never changes the row otherwise); tags it did
        not have are then added by a versioned replace."""
        seen = self._store.record_seen(memory.namespace, memory.id, self._clock.now())
        if any(tag not in seen.tags for tag in tags):

            def add_tags(current: Memory) -> Memory | None:
                merged = tuple(dict.fromkeys((*current.tags, *tags)))
                return current.model_copy(update={"tags": merged}) if merged != current.tags else None

            seen = self._replace(memory.namespace, memory.id, add_tags, version=None)[1]
        self._event(memory.namespace, "seen", memory.id, {})
        return seen

    def _find_twin(self, namespace: str, content: str, type_: str, vector: list[float] | None) -> Memory | None:
        try:
            hits = (
                self._index.vector_search(namespace, vector, k=5, types=(type_,))
                if vector is not None
                else self._index.keyword_search(namespace, content, k=5, types=(type_,))
            )
        except EngramError as exc:  # no twin check without the index; the write itself goes on
            log.warning("duplicate check skipped: %s", exc.code)
            return None
        # Keyword scores are not cosines: without a vector only the same wording makes a twin.
        scores = {h.memory_id: h.score for h in hits} if vector is not None else {}
        for memory in self._store.get_memories(namespace, list(scores or (h.memory_id for h in hits))):
            if memory.status == "active" and near_duplicate(
                memory.content, content, scores.get(memory.id), self._rules.dedup_cosine
            ):
                return memory
        return None

    def _embed_document(self, text: str) -> list[float] | None:
        return self._try_embed(text)[0]

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

    def _sync_index(
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
            self._index_failed(memory.namespace, memory.id, exc.code, "upsert")
            return
        if missing is not None:
            self._index_failed(memory.namespace, memory.id, missing, "embed")
        if recheck:
            # An archive, delete or supersede that landed while this document was written unindexed
            # before it: read the row after the write, so that the index keeps no retired memory.
            try:
                current = self._store.get_memory(memory.namespace, memory.id)
            except NotFound:
                current = None
            if current is None or current.status != "active":
                self._unindex(memory.model_copy(update={"index_ref": ref}))
                return
        if ref != (memory.index_ref or memory.id):  # None means "the memory id", as the local index uses

            def set_ref(current: Memory) -> Memory | None:
                return current.model_copy(update={"index_ref": ref}) if current.index_ref != ref else None

            self._replace(memory.namespace, memory.id, set_ref, version=None)

    def _unindex(self, memory: Memory) -> None:
        try:
            self._index.delete(memory.namespace, memory.id, memory.index_ref)
        except EngramError as exc:
            log.warning("index delete failed for %s: %s", memory.id, exc.code)
            self._index_failed(memory.namespace, memory.id, exc.code, "delete")

    def _index_failed(self, namespace: str, memory_id: str, code: str, op: str) -> None:
        """Record what the index misses, in the store, so that ``repair_index`` finds it."""
        with self._dirty_lock:
            self._dirty.add(namespace)
        try:
            self._record_index_failure(namespace, memory_id, code, op)
        except EngramError as exc:  # the write itself is stored; a reindex still repairs the mirror
            log.warning("could not record the index failure of %s: %s", memory_id, exc.code)

    def _record_index_failure(self, namespace: str, memory_id: str, code: str, op: str) -> None:
        record_index_failure(self._store, namespace, memory_id, code, op, self._clock.now())

    def _event(self, namespace: str, kind: str, memory_id: str | None, detail: dict[str, Any]) -> None:
        self._store.append_event(
            MemoryEvent(
                id=new_id("evt"),
                namespace=namespace,
                kind=kind,
                memory_id=memory_id,
                detail=detail,
                created_at=self._clock.now(),
            )
        )


class IndexRepairRecords(AuditRows, KeyValueRows, Protocol):
    """Where a missed index write is recorded for ``MemoryService.repair_index``."""


def record_index_failure(
    store: IndexRepairRecords, namespace: str, memory_id: str, code: str, op: str, now: datetime
) -> None:
    """Record what the index misses, in the store, so that ``MemoryService.repair_index`` finds it."""
    store.append_event(
        MemoryEvent(
            id=new_id("evt"),
            namespace=namespace,
            kind="index_failed",
            memory_id=memory_id,
            detail={"error": code, "op": op},
            created_at=now,
        )
    )
    store.put_cache(namespace, INDEX_DIRTY, {"at": now.isoformat()})


def _back_off(attempt: int) -> None:
    """Before another round of a write that lost a race: let the winner finish; spread the retries."""
    if attempt:
        time.sleep(random.uniform(0, 0.005 * attempt))


def _kept_changing(memory_id: str) -> Conflict:
    return Conflict(
        f"memory {memory_id} was changed by other writes at the same time {_VERSION_ATTEMPTS} times in a row; "
        "try again",
        code="version_conflict",
    )
