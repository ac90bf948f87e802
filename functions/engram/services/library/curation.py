"""Curation by hand (README, "Curating by hand"): merging selected memories into one (a drafted text the
person edits, then the merge, and its undo) and the core-memory candidates.

A merge supersedes its sources by the merged memory in one transaction (``MemoryService.merge``) and
keeps the sources as they were in a ``merge`` event of the merged memory (``GET
/v1/memories/{id}/events``); undoing it writes them back exactly (every field but their ``version``,
which only grows) and erases the merged memory, provided none of them changed since (else
``version_conflict``, nothing written). The memory event log's retention bounds how long a merge can be
undone (``ENGRAM_RETENTION_EVENTS_DAYS``).

Each merge and each undone merge is one run of the change journal (docs/journal.md): listed with its
changes, and undoable there as well.

The draft's text comes from the extraction model when one is configured (``services/models/prompts.py``,
read by ``services/models/reply.parse_json_object``); otherwise, or when the model fails, the sources'
texts joined. Nothing is written by a draft.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Protocol

from engram.domain.errors import Conflict, EngramError, InvalidInput, NotFound, version_conflict
from engram.domain.models import MEMORY_TYPES, Memory, MemoryEvent, MemoryLayer, MemoryType, new_id
from engram.domain.policies import MAX_CONTENT_CHARS
from engram.domain.ports import AuditRows, ChatModel, Clock, MemoryRows
from engram.services.library.journal import Journal
from engram.services.library.memories import MemoryService, MemoryWrite
from engram.services.models import prompts
from engram.services.models.reply import as_str, as_str_list, parse_json_object

log = logging.getLogger(__name__)

MAX_MERGE_SOURCES = 10  # the merge event keeps every source as it was: bounded to fit one event row
MERGE_EVENT = "merge"
_LAYER_RANK: dict[str, int] = {"fragment": 0, "event": 1, "core": 2}
CORE_MIN_SIGHTINGS = 3  # recalled into a chat, or seen again, at least this often to be a core candidate


class CurationStore(MemoryRows, AuditRows, Protocol):
    """The memories a curation reads and the events that keep a merge undoable."""


@dataclass(frozen=True)
class MergeDraft:
    """A merged memory proposed for ``sources`` (nothing written): the person edits it, then merges."""

    sources: list[Memory]
    content: str
    type: MemoryType
    fact_key: str | None
    layer: MemoryLayer
    importance: float
    confidence: float
    pinned: bool
    tags: list[str]
    drafted_by: str  # "model" or "joined"
    note: str = ""  # why the model did not draft it, when it did not

    def to_dict(self) -> dict[str, Any]:
        return {
            "sources": [m.model_dump(mode="json") for m in self.sources],
            "content": self.content,
            "type": self.type,
            "fact_key": self.fact_key,
            "layer": self.layer,
            "importance": self.importance,
            "confidence": self.confidence,
            "pinned": self.pinned,
            "tags": self.tags,
            "drafted_by": self.drafted_by,
            "note": self.note,
        }


@dataclass(frozen=True)
class MergeResult:
    memory: Memory
    sources: list[Memory]
    run_id: str | None = None  # the merge's run in the change journal (docs/journal.md)

    def to_dict(self) -> dict[str, Any]:
        return {
            "memory": self.memory.model_dump(mode="json"),
            "sources": [m.model_dump(mode="json") for m in self.sources],
            "run_id": self.run_id,
        }


@dataclass(frozen=True)
class CoreCandidate:
    memory: Memory
    why: str

    def to_dict(self) -> dict[str, Any]:
        return {"memory": self.memory.model_dump(mode="json"), "why": self.why}


@dataclass(frozen=True)
class SourceRef:
    """A memory to merge, and the version the person read (``None``: as it is now)."""

    id: str
    version: int | None = None


@dataclass
class MergeFields:
    """What the merged memory is; unset fields come from the sources (``defaults_of``)."""

    content: str
    type: MemoryType | None = None
    fact_key: str | None = None
    layer: MemoryLayer | None = None
    importance: float | None = None
    confidence: float | None = None
    pinned: bool | None = None
    tags: list[str] | None = None
    set_fields: frozenset[str] = field(default_factory=frozenset)


def defaults_of(sources: Sequence[Memory]) -> dict[str, Any]:
    """The merged memory's fields when the person does not set them: the most common type (the first
    source's on a tie), the highest layer, importance and confidence, pinned if any source is, every
    tag, and the fact_key when exactly one key is held among the sources."""
    types = [m.type for m in sources]
    keys = list(dict.fromkeys(m.fact_key for m in sources if m.fact_key))
    return {
        "type": max(types, key=lambda t: (types.count(t), -types.index(t))),
        "fact_key": keys[0] if len(keys) == 1 else None,
        "layer": max((m.layer for m in sources), key=lambda layer: _LAYER_RANK[layer]),
        "importance": max(m.importance for m in sources),
        "confidence": max(m.confidence for m in sources),
        "pinned": any(m.pinned for m in sources),
        "tags": list(dict.fromkeys(t for m in sources for t in m.tags)),
    }


def joined(sources: Sequence[Memory]) -> str:
    """The sources' texts one after the other (the draft without a model), within the content limit."""
    text = "\n".join(dict.fromkeys(m.content.strip() for m in sources))
    return text if len(text) <= MAX_CONTENT_CHARS else text[: MAX_CONTENT_CHARS - 1] + "…"


class CurationService:
    def __init__(
        self,
        store: CurationStore,
        memories: MemoryService,
        clock: Clock,
        model: ChatModel | None = None,
        *,
        journal: Journal | None = None,
    ) -> None:
        self._journal = journal
        self._store = store
        self._memories = memories
        self._clock = clock
        # The extraction model (bootstrap: it follows the runtime settings, so the panel can change it).
        self._model = model

    # -- merging -----------------------------------------------------------------------------------
    def sources(self, namespace: str, refs: Sequence[SourceRef]) -> list[Memory]:
        """The memories to merge, each refused if gone, not active, or changed since the version given."""
        ids = [r.id for r in refs]
        if len(set(ids)) != len(ids):
            raise InvalidInput("a memory is named twice in the merge", code="duplicate_source")
        if not 2 <= len(ids) <= MAX_MERGE_SOURCES:
            raise InvalidInput(f"a merge takes 2 to {MAX_MERGE_SOURCES} memories (got {len(ids)})", code="merge_size")
        return self.read_sources(namespace, refs)

    def read_sources(self, namespace: str, refs: Sequence[SourceRef]) -> list[Memory]:
        """The memories as they are now, each refused if gone, not active, or not at the version given."""
        found = {m.id: m for m in self._store.get_memories(namespace, [r.id for r in refs])}
        rows = []
        for ref in refs:
            memory = found.get(ref.id)
            if memory is None:
                raise NotFound(f"memory {ref.id} not found")
            if ref.version is not None and memory.version != ref.version:
                raise version_conflict(ref.id, ref.version, memory.version)
            if memory.status != "active":
                raise Conflict(f"memory {ref.id} is {memory.status}; only active memories can be merged")
            rows.append(memory)
        return rows

    async def draft(self, namespace: str, refs: Sequence[SourceRef]) -> MergeDraft:
        """The merged memory proposed for these memories (nothing is written)."""
        sources = self.sources(namespace, refs)
        base = defaults_of(sources)
        content, drafted_by, note = joined(sources), "joined", ""
        model = self._model
        if model is None:
            note = "no extraction model is configured: the texts are joined"
        else:
            try:
                reply = await model.complete(prompts.merge_messages(sources), json_mode=True, temperature=0.0)
                proposed = parse_merge_reply(reply)
            except EngramError as exc:
                log.warning("merge draft model call failed for %s: %s", namespace, exc.code)
                note = f"the model could not draft it ({exc.code}): the texts are joined"
            else:
                content, drafted_by = proposed.pop("content"), "model"
                base.update(proposed)
        return MergeDraft(sources=sources, content=content, drafted_by=drafted_by, note=note, **base)

    def merge(
        self, namespace: str, refs: Sequence[SourceRef], fields: MergeFields, *, source: str = "merge"
    ) -> MergeResult:
        """Merge the memories into one with ``fields``: the sources are superseded by it, and kept as they
        were in its ``merge`` event, so ``undo_merge`` restores them."""
        return self.merge_rows(self.sources(namespace, refs), fields, source=source)

    def merge_rows(self, sources: Sequence[Memory], fields: MergeFields, *, source: str = "merge") -> MergeResult:
        """``merge`` of rows already read (a consolidation item may have one source: a rewrite)."""
        if not 1 <= len(sources) <= MAX_MERGE_SOURCES:
            raise InvalidInput(f"a merge takes 1 to {MAX_MERGE_SOURCES} memories", code="merge_size")
        base = defaults_of(sources)
        chosen = {name: getattr(fields, name) for name in fields.set_fields if name != "content"}
        values = {**base, **chosen}
        req = MemoryWrite(
            content=fields.content,
            type=values["type"],
            fact_key=values["fact_key"],
            layer=values["layer"],
            importance=values["importance"],
            confidence=values["confidence"],
            pinned=values["pinned"],
            tags=list(values["tags"] or []),
            source=source,
            source_message_ids=list(dict.fromkeys(i for m in sources for i in m.source_message_ids))[:200],
        )
        with self._run("merge", source, [m.id for m in sources]) as run_id:
            stored, merged = self._memories.merge(sources, req, reason=f"merged ({source})")
        self._store.append_event(
            MemoryEvent(
                id=new_id("evt"),
                namespace=merged.namespace,
                kind=MERGE_EVENT,
                memory_id=merged.id,
                detail={
                    "before": [m.model_dump(mode="json") for m in sources],
                    "after_versions": {m.id: m.version for m in stored},
                    "merged_version": merged.version,
                    "source": source,
                    "run_id": run_id,
                },
                created_at=self._clock.now(),
            )
        )
        return MergeResult(memory=merged, sources=stored, run_id=run_id)

    @contextmanager
    def _run(self, kind: str, source: str, ids: list[str]) -> Iterator[str | None]:
        """The merge (or its undo) as one run of the change journal: listed in the runs, undone there too."""
        if self._journal is None:
            yield None
            return
        with self._journal.run(kind, source=source, detail={"memories": ids}) as run:
            yield run.id

    def undo_merge(self, namespace: str, merged_id: str) -> list[Memory]:
        """Restore the sources of the merge that made ``merged_id`` exactly as they were, and erase the
        merged memory. Refused (``version_conflict``, nothing written) when the merged memory or a source
        changed after the merge; ``NotFound`` (``not_merged``) for a memory no merge made."""
        merged = self._store.get_memory(namespace, merged_id)
        events = self._store.list_events(namespace, memory_id=merged_id, kind=MERGE_EVENT, limit=1)
        if not events:
            raise NotFound(f"memory {merged_id} was not made by a merge (or its record expired)", code="not_merged")
        detail = events[0].detail
        before = [Memory.model_validate(row) for row in detail["before"]]
        if merged.version != detail["merged_version"]:
            raise Conflict(
                f"memory {merged_id} changed after the merge (version {detail['merged_version']} -> "
                f"{merged.version}); undo refused so that change is not lost",
                code="version_conflict",
            )
        after = self._store.get_memories(namespace, [m.id for m in before])
        versions = {str(k): int(v) for k, v in detail["after_versions"].items()}
        moved = [m.id for m in after if m.version != versions.get(m.id)]
        if len(after) != len(before) or moved:
            missing = moved or sorted({m.id for m in before} - {m.id for m in after})
            raise Conflict(
                f"memory {missing[0]} changed after the merge; undo refused so that change is not lost",
                code="version_conflict",
            )
        with self._run("unmerge", "merge", [merged_id]):
            return self._memories.unmerge(merged, before, after)

    # -- core candidates ---------------------------------------------------------------------------
    def core_candidates(self, namespace: str, *, limit: int = 20) -> list[CoreCandidate]:
        """Active memories recalled into chats or seen again often (``CORE_MIN_SIGHTINGS``) that are
        neither pinned nor in the core layer: the most used first, for the person to promote."""
        found: list[Memory] = []
        for memory in self._store.iter_memories(namespace, ("active",)):
            if memory.pinned or memory.layer == "core":
                continue
            if memory.recall_count >= CORE_MIN_SIGHTINGS or memory.seen_count >= CORE_MIN_SIGHTINGS:
                found.append(memory)
        found.sort(key=lambda m: (m.recall_count + m.seen_count, m.importance, m.created_at), reverse=True)
        return [CoreCandidate(m, _why(m)) for m in found[:limit]]


def _why(memory: Memory) -> str:
    parts = []
    if memory.recall_count:
        parts.append(f"recalled into {memory.recall_count} chat turn{'s' if memory.recall_count != 1 else ''}")
    if memory.seen_count > 1:
        parts.append(f"said again {memory.seen_count - 1} time{'s' if memory.seen_count != 2 else ''}")
    return ", ".join(parts)


def parse_merge_reply(reply: str) -> dict[str, Any]:
    """The merged memory a model answered (``prompts.MERGE_SYSTEM``): its content (required), and its type
    and tags when valid (importance and the rest come from the sources); ``InvalidInput``
    (``invalid_model_output``) without a content."""
    data = parse_json_object(reply)
    content = as_str(data.get("content"))
    if not content or len(content) > MAX_CONTENT_CHARS:
        raise InvalidInput("the model's merge has no usable content", code="invalid_model_output")
    out: dict[str, Any] = {"content": content}
    if data.get("type") in MEMORY_TYPES:
        out["type"] = data["type"]
    tags = as_str_list(data.get("tags"))
    if tags:
        out["tags"] = tags
    return out
