"""Writing and curating memories: upsert by fact key, versions, status changes.

The store is the source of truth; the search index mirrors active memories through the index upkeep
(``services/index/upkeep.py``: every write here calls ``upkeep.sync`` / ``upkeep.unindex``, and an index
failure never loses a write: it is recorded there and repaired later).

Over 450 lines on purpose: every write path (create, upsert, supersede, update, status change, restore)
and the race handling they share stay in one class; the versioned replace is ``library/versions.py``.
Request models and the same-wording rule live in ``domain/`` (``policies.py``, ``wording.py``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Annotated, Any, Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field

from engram.domain.errors import Conflict, EngramError, InvalidInput, NotFound, is_version_conflict
from engram.domain.models import (
    MEMORY_STATUSES,
    Candidate,
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
    OPTIONAL_FACT_KEY_PATTERN,
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
from engram.services.index.upkeep import IndexUpkeep
from engram.services.library.versions import VERSION_ATTEMPTS, back_off, kept_changing, read_at, replace_memory
from engram.services.runtime_settings import Live

log = logging.getLogger(__name__)


WriteAction = Literal["created", "seen", "superseded", "existing", "proposed"]
MAX_LIST_OFFSET = 10_000  # offset paging reads the rows it skips; beyond this, page by cursor
_SKIP_PAGE = 200  # rows read per step of an offset skip
_MAX_CHAIN = 1000  # versions followed to find the active head of a chain without a key
_KEY_ATTEMPTS = 10  # rounds of an upsert that lost its key to concurrent writers before a clean 409


# The pattern is stated in the OpenAPI document and checked by normalize_fact_key (a 400
# `invalid_fact_key`, entrypoints/http/openapi.stated), not by pydantic.
FactKeyField = Annotated[str, Field(json_schema_extra={"pattern": OPTIONAL_FACT_KEY_PATTERN})]


class MemoryWrite(BaseModel):
    """A request to remember something. ``fact_key`` makes it an upsert."""

    model_config = ConfigDict(extra="forbid")

    content: str
    type: MemoryType = "fact"
    fact_key: FactKeyField | None = None
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
    fact_key: FactKeyField | None = None
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
class WritePlan:
    """What a write decided before acting: ``target`` is the memory it sees, supersedes, finds or proposes
    a change to (``None`` for a new one); ``vector`` the new text's, when one was computed."""

    action: WriteAction
    reason: str
    target: Memory | None
    vector: list[float] | None


@dataclass(frozen=True)
class WriteCheck:
    """``MemoryService.check``: what a write would do, and the nearest active memories (with cosines
    when vectors are on)."""

    action: WriteAction
    reason: str
    target: Memory | None
    near: list[tuple[Memory, float | None]]

    def to_dict(self) -> dict[str, Any]:
        return {
            "action": self.action,
            "reason": self.reason,
            "memory": self.target.model_dump(mode="json") if self.target else None,
            "protected": bool(self.target and is_protected(self.target)),
            "near": [
                {"memory": m.model_dump(mode="json"), "similarity": None if s is None else round(s, 4)}
                for m, s in self.near
            ],
        }


@dataclass(frozen=True)
class MemoryRules:
    """When a new memory is the same as an existing one.

    ``settings.py`` holds the defaults (written once); ``bootstrap/configs.py`` maps them.
    """

    dedup_cosine: float


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
        rules: MemoryRules | Live[MemoryRules],
        upkeep: IndexUpkeep | None = None,
    ) -> None:
        self._store = store
        self._index = index  # read for the duplicate check; written only through the upkeep
        self._clock = clock
        self._rules = Live.of(rules)
        # The index's mirror of these memories (one per container, shared with reindex, cleanup and the
        # guard's repairs; its own when none is given).
        self.upkeep = upkeep or IndexUpkeep(store, index, embedder, clock)

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
        plan = self._plan_unkeyed(namespace, req, content, dedup=dedup)
        if plan.target is not None:
            return WriteResult(self._mark_seen(plan.target, tags), "seen", reason=plan.reason)
        return self._create(namespace, req, content, tags, None, plan.vector)

    def check(self, namespace: str, req: MemoryWrite, *, dedup: bool = False, near: int = 5) -> WriteCheck:
        """What ``write(namespace, req, dedup=dedup)`` would do now, written nowhere (``POST
        /v1/memories/check``): the action and the memory it would touch, decided by the write's own
        steps (``_plan_unkeyed``, ``_plan_keyed``), and the ``near`` closest active memories. Pinned or
        core memories are named as such: a person's write supersedes them, a job's is proposed."""
        content = clean_content(req.content)
        # Checked first, as write() checks it: a bad key is refused even when the external id was seen.
        fact_key = normalize_fact_key(req.fact_key) if req.fact_key else None
        vector = self.upkeep.embed_document(content)
        plan: WritePlan | None = None
        if req.external_id and (existing := self._store.find_by_external_id(namespace, req.external_id)):
            plan = WritePlan("existing", "external_id seen before", existing, vector)
        elif fact_key:
            plan = self._plan_keyed(namespace, req, content, fact_key, dedup=dedup)
        else:
            plan = self._plan_unkeyed(namespace, req, content, dedup=dedup, vector=vector)
        return WriteCheck(plan.action, plan.reason, plan.target, self._near(namespace, content, None, vector, near))

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
            back_off(attempt)
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
        plan = self._plan_keyed(namespace, req, content, fact_key, dedup=dedup, automated=automated)
        current, vector = plan.target, plan.vector
        if current is None:
            return self._create(namespace, req, content, tags, fact_key, vector)
        if plan.action == "seen":
            return WriteResult(self._mark_seen(current, tags), "seen", reason=plan.reason)
        if plan.action == "proposed":
            candidate = self.propose_change(current, req)
            return WriteResult(current, "proposed", reason=plan.reason, candidate=candidate)
        new = self._new_memory(namespace, req, content, tags, fact_key, supersedes=current.id)
        old, new = self._swap(current, new, reason=plan.reason)
        self.upkeep.sync(new, vector)
        self._sync_reminder(new)
        return WriteResult(new, "superseded", previous=old, reason=plan.reason)

    def _plan_keyed(
        self, namespace: str, req: MemoryWrite, content: str, fact_key: str, *, dedup: bool, automated: bool = False
    ) -> WritePlan:
        """The decision of an upsert by ``fact_key`` (``domain/policies.decide_upsert``), from the store now."""
        vector: list[float] | None = None
        current = self._store.find_active_by_fact_key(namespace, fact_key)
        similarity = None
        if (
            current is not None
            and dedup
            and not same_wording(current.content, content)
            and salient_difference(current.content, content) is None
        ):
            vector = self.upkeep.embed_document(content)
            other = self.upkeep.embed_document(current.content) if vector is not None else None
            if vector is not None and other is not None:
                similarity = cosine(vector, other)
        decision = decide_upsert(current, content, similarity, self._rules().dedup_cosine, explicit=not dedup)
        if current is None:
            return WritePlan("created", decision.reason, None, vector)
        if decision.action == "seen":
            return WritePlan("seen", decision.reason, current, vector)
        if automated and is_protected(current):
            return WritePlan("proposed", "protected memory: change proposed for review", current, vector)
        return WritePlan("superseded", decision.reason, current, vector)

    def _plan_unkeyed(
        self, namespace: str, req: MemoryWrite, content: str, *, dedup: bool, vector: list[float] | None = None
    ) -> WritePlan:
        """The decision of a write without a key: a new memory, or (``dedup``) the near-identical twin seen."""
        if not dedup:
            return WritePlan("created", "new memory", None, vector)
        vector = vector if vector is not None else self.upkeep.embed_document(content)
        twin = self._find_twin(namespace, content, req.type, vector)
        if twin is not None:
            return WritePlan("seen", "near-identical memory", twin, vector)
        return WritePlan("created", "new memory", None, vector)

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
        self.upkeep.sync(memory, vector)
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
        for attempt in range(VERSION_ATTEMPTS):
            back_off(attempt)
            old = read_at(self._store, namespace, old_id, version)
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
            self.upkeep.sync(new, None)
            self._sync_reminder(new)
            return WriteResult(new, "superseded", previous=old, reason="explicit supersede")
        raise kept_changing(old_id)

    def merge(self, sources: Sequence[Memory], req: MemoryWrite, *, reason: str) -> tuple[list[Memory], Memory]:
        """Supersede every one of ``sources`` (each at the version it was read: a row changed since is
        refused with ``version_conflict``, nothing written) by one new memory, in one transaction
        (``supersede_many``). The new memory links back to the first source; each source links to it.
        Its ``fact_key`` may be one a source holds; one held by another active memory is refused."""
        namespace = sources[0].namespace
        inactive = [m.id for m in sources if m.status != "active"]
        if inactive:
            raise Conflict(f"memory {inactive[0]} is not active; only active memories can be merged")
        content = clean_content(req.content)
        fact_key = normalize_fact_key(req.fact_key) if req.fact_key else None
        if fact_key and fact_key not in {m.fact_key for m in sources}:
            taken = self._store.find_active_by_fact_key(namespace, fact_key)
            if taken is not None:
                raise Conflict(f"fact_key {fact_key!r} is already used by active memory {taken.id}")
        new = self._new_memory(namespace, req, content, clean_tags(req.tags), fact_key, supersedes=sources[0].id)
        now = self._clock.now()
        retired = {"status": "superseded", "superseded_by_id": new.id, "status_changed_at": now, "updated_at": now}
        stored, new = self._store.supersede_many([m.model_copy(update=retired) for m in sources], new)
        for memory in sources:
            self.upkeep.unindex(memory)
            self._event(namespace, "superseded", memory.id, {"by": new.id, "reason": reason})
        self._event(namespace, "created", new.id, {"source": new.source, "merged": [m.id for m in sources]})
        self.upkeep.sync(new, None)
        self._sync_reminder(new)
        return stored, self._store.get_memory(namespace, new.id)

    def unmerge(self, merged: Memory, before: Sequence[Memory], after: Sequence[Memory]) -> list[Memory]:
        """Undo a ``merge``: ``before`` (the sources as they were) written back over ``after`` (the sources
        as the merge left them), and ``merged`` taken out, in one transaction, then its row erased. Every
        row must still be as the merge left it (``merged`` at the version the caller read after the
        merge): one changed since is refused (``version_conflict``) and nothing is written. The
        sources' counters stay as they are (a replace never writes them)."""
        namespace = merged.namespace
        now = self._clock.now()
        gone = merged.model_copy(update={"status": "deleted", "status_changed_at": now, "updated_at": now})
        versions = {m.id: m.version for m in after}
        rows = [gone, *(m.model_copy(update={"version": versions[m.id]}) for m in before)]
        written = self._store.update_memories(rows)
        self.upkeep.unindex(merged)
        try:
            self._store.delete_memory_row(namespace, merged.id, version=written[0].version)
        except EngramError as exc:  # it stays deleted; retention erases it
            log.warning("the undone merge %s could not be erased: %s", merged.id, exc.code)
        self._event(namespace, "unmerged", merged.id, {"restored": [m.id for m in before]})
        for memory in written[1:]:
            self._event(namespace, "restored", memory.id, {"unmerged": merged.id})
            self.upkeep.sync(memory, None)
        return written[1:]

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
            self.upkeep.sync(updated, None)
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
            self.upkeep.unindex(memory)
        return updated

    def erase(self, namespace: str, memory_id: str, *, version: int | None = None) -> Memory:
        """Erase a memory for good (the panel's "Erase for good"): only one already out of use (deleted,
        archived, superseded or expired; delete it first), at the ``version`` given, or as it is now.
        Its document leaves the index; a reminder of it no longer finds it. Returns the row as erased."""
        memory = read_at(self._store, namespace, memory_id, version)
        if memory.status == "active":
            raise Conflict(f"memory {memory_id} is active: delete it first, then erase it", code="still_active")
        self.upkeep.unindex(memory)
        self._store.delete_memory_row(namespace, memory_id, version=memory.version)
        self._event(namespace, "erased", None, {"memory": memory_id})
        return memory

    def restore(self, namespace: str, memory_id: str, *, version: int | None = None) -> Memory:
        """Make a superseded, archived, deleted or expired memory active again. The active memory it
        replaces (the holder of its fact_key, or the active head of its chain: ``_holder_of``) is
        superseded by the restored version, in the same transaction (``version``: as ``supersede``)."""
        for attempt in range(VERSION_ATTEMPTS):
            back_off(attempt)
            memory = read_at(self._store, namespace, memory_id, version)
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
                self.upkeep.unindex(holder)
            self._event(namespace, "restored", memory_id, {"replaced": holder.id} if holder else {})
            self.upkeep.sync(revived, None)
            return revived
        raise kept_changing(memory_id)

    def _replace(
        self, namespace: str, memory_id: str, change: Callable[[Memory], Memory | None], *, version: int | None
    ) -> tuple[Memory, Memory]:
        return replace_memory(self._store, namespace, memory_id, change, version=version)

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
        self.upkeep.unindex(current)
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
        for memory, score in self._near(namespace, content, type_, vector, 5):
            if near_duplicate(memory.content, content, score, self._rules().dedup_cosine):
                return memory
        return None

    def _near(
        self, namespace: str, content: str, type_: str | None, vector: list[float] | None, k: int
    ) -> list[tuple[Memory, float | None]]:
        """The ``k`` active memories nearest ``content`` (of ``type_`` when given), best first, each with its
        cosine (``None`` without a vector: keyword scores are not cosines, so then only the same wording
        makes a twin). Empty while the index cannot answer: the write itself goes on."""
        types = (type_,) if type_ else ()
        try:
            hits = (
                self._index.vector_search(namespace, vector, k=k, types=types)
                if vector is not None
                else self._index.keyword_search(namespace, content, k=k, types=types)
            )
        except EngramError as exc:
            log.warning("duplicate check skipped: %s", exc.code)
            return []
        scores: dict[str, float | None] = {h.memory_id: (h.score if vector is not None else None) for h in hits}
        rows = self._store.get_memories(namespace, list(scores))
        return [(m, scores[m.id]) for m in rows if m.status == "active"]

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
