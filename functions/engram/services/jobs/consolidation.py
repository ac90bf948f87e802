"""Consolidation drafts (README, "Curating by hand"): for a date range or a selection of memories, the
model drafts a consolidated set — items that each replace one or more memories — as a queued job with
progress (the ``consolidate`` job of services/jobs/registry.py). The person edits, drops or accepts each
item; nothing changes until they confirm (``apply``), and each applied item is a merge
(``CurationService.merge_rows``) that can be undone on its own.

A draft's state (scope, progress, items) lives in the store under the namespace (a cache row kept
``KEEP``), so any process or Lambda instance reports the same progress, like a reindex
(services/index/reindex.py). Each item records the version of every memory it replaces as the model saw
it: applying an item whose memories changed since is refused for that item (``version_conflict``)
and the others go on.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Protocol

from engram.domain.errors import MESSAGE_CHARS, Conflict, EngramError, InvalidInput, NotConfigured, NotFound
from engram.domain.models import MEMORY_TYPES, Memory, MemoryType, new_id
from engram.domain.policies import MAX_CONTENT_CHARS, clean_content
from engram.domain.ports import ChatModel, Clock, JobQueue, KeyValueRows, MemoryRows
from engram.domain.wording import same_wording
from engram.services.library.curation import MAX_MERGE_SOURCES, CurationService, MergeFields, SourceRef
from engram.services.models import prompts
from engram.services.models.reply import as_list, as_str, as_str_list, as_unit, parse_json_object

log = logging.getLogger(__name__)

JOB = "consolidate"
STATE_PREFIX = "consolidation:"
LIST_KEY = "consolidations"  # the ids of the latest drafts, newest first
KEEP = timedelta(days=14)  # a draft not applied is forgotten after this
LISTED = 20  # drafts listed per namespace
BATCH = 40  # memories per model call
MAX_MEMORIES = 400  # memories one draft reads
MAX_ITEMS_CHARS = 200_000  # the items' text one draft keeps (the state is one store row)
STALE_AFTER = timedelta(minutes=20)  # a running draft without progress for this long was stopped


class ConsolidationStore(MemoryRows, KeyValueRows, Protocol):
    """The memories a draft reads and where its state is kept."""


@dataclass(frozen=True)
class ItemDecision:
    """The person's word on one item: accept it, with their edits (unset: as drafted)."""

    id: str
    content: str | None = None
    type: MemoryType | None = None
    importance: float | None = None
    tags: list[str] | None = None


class ConsolidationService:
    def __init__(
        self,
        store: ConsolidationStore,
        curation: CurationService,
        clock: Clock,
        model: ChatModel | None,
        queue: JobQueue | None = None,
    ) -> None:
        self._store = store
        self._curation = curation
        self._clock = clock
        self._model = model
        self._queue = queue

    def attach_queue(self, queue: JobQueue) -> None:
        """The queue is built after the job runner, which runs this service's job."""
        self._queue = queue

    # -- starting and reading ----------------------------------------------------------------------
    def start(
        self,
        namespace: str,
        *,
        since: datetime | None = None,
        until: datetime | None = None,
        memory_ids: Sequence[str] = (),
    ) -> dict[str, Any]:
        """Record a new draft of the memories created in [``since``, ``until``) or of ``memory_ids`` and
        queue its job; returns its state (``running``, then ``ready`` with the items)."""
        if self._model is None:
            raise NotConfigured(
                "consolidation drafts need a model: set ENGRAM_EXTRACT_MODEL (or ENGRAM_CHAT_MODEL) "
                "and ENGRAM_UPSTREAM_BASE_URL"
            )
        if memory_ids and (since or until):
            raise InvalidInput("pass either memory_ids or a date range, not both", code="consolidation_scope")
        if not memory_ids and not (since or until):
            raise InvalidInput("pass memory_ids or a date range (since, until)", code="consolidation_scope")
        if since and until and since >= until:
            raise InvalidInput("since must be before until", code="consolidation_scope")
        if len(memory_ids) > MAX_MEMORIES:
            raise InvalidInput(f"a draft takes at most {MAX_MEMORIES} memories", code="consolidation_scope")
        for listed in self.drafts(namespace):
            if listed["state"] == "running" and not self._stale(listed):
                raise Conflict(f"draft {listed['id']} of this namespace is still running", code="job_running")
        now = self._clock.now().isoformat()
        state: dict[str, Any] = {
            "id": new_id("cons"),
            "state": "running",
            "scope": {
                "since": since.isoformat() if since else None,
                "until": until.isoformat() if until else None,
                "memory_ids": list(dict.fromkeys(memory_ids)),
            },
            "memories": 0,
            "done": 0,
            "total": 0,
            "items": [],
            "errors": [],
            "results": [],
            "note": "",
            "created_at": now,
            "updated_at": now,
        }
        self._save(namespace, state)
        ids = [state["id"], *(i for i in self._ids(namespace) if i != state["id"])][:LISTED]
        self._store.put_cache(namespace, LIST_KEY, ids, expires_at=self._clock.now() + KEEP)
        if self._queue is None:
            raise NotConfigured("consolidation drafts need the job queue")
        try:
            self._queue.enqueue(JOB, {"namespace": namespace, "draft_id": state["id"]})
        except EngramError as exc:
            self._finish(namespace, state, "error", f"could not queue the draft: {exc.message}"[:MESSAGE_CHARS])
            raise
        return state

    def get(self, namespace: str, draft_id: str) -> dict[str, Any]:
        state = self._store.get_cache(namespace, STATE_PREFIX + draft_id)
        if not isinstance(state, dict):
            raise NotFound(f"consolidation draft {draft_id} not found (drafts are kept {KEEP.days} days)")
        return state

    def drafts(self, namespace: str) -> list[dict[str, Any]]:
        """The latest drafts, newest first, without their items."""
        out = []
        for draft_id in self._ids(namespace):
            state = self._store.get_cache(namespace, STATE_PREFIX + draft_id)
            if isinstance(state, dict):
                out.append({k: v for k, v in state.items() if k != "items"} | {"item_count": len(state["items"])})
        return out

    def _ids(self, namespace: str) -> list[str]:
        ids = self._store.get_cache(namespace, LIST_KEY)
        return [str(i) for i in ids] if isinstance(ids, list) else []

    # -- the job -------------------------------------------------------------------------------------
    async def run(self, namespace: str, draft_id: str, *, deadline: float | None = None) -> dict[str, Any]:
        """Draft (or continue drafting) ``draft_id``: one model call per batch of memories, the state
        saved after each. A batch the model fails is recorded and skipped; a draft whose every batch
        failed is an ``error``. With ``deadline`` it stops between batches and queues its continuation."""
        state = self.get(namespace, draft_id)
        if state["state"] != "running":
            return state
        model = self._model
        if model is None:
            return self._finish(namespace, state, "error", "no model is configured any more")
        memories = self._scope(namespace, state)
        batches = [memories[i : i + BATCH] for i in range(0, len(memories), BATCH)]
        state.update(memories=len(memories), total=len(batches))
        first = int(state["done"])
        for number in range(first, len(batches)):
            # Every invocation drafts at least one batch, whatever its deadline.
            if deadline is not None and number > first and time.monotonic() >= deadline:
                self._save(namespace, state)
                if self._queue is not None:
                    self._queue.enqueue(JOB, {"namespace": namespace, "draft_id": draft_id})
                return state
            batch = batches[number]
            try:
                reply = await model.complete(prompts.consolidate_messages(batch), json_mode=True, temperature=0.0)
                self._add_items(state, batch, parse_consolidation(reply, batch))
            except EngramError as exc:
                log.warning("consolidation batch %d of %s failed: %s", number, draft_id, exc.code)
                state["errors"].append({"batch": number, "error": exc.code, "message": exc.message[:MESSAGE_CHARS]})
            state["done"] = number + 1
            self._save(namespace, state)
        if batches and len(state["errors"]) == len(batches):
            return self._finish(namespace, state, "error", "the model could not draft any batch")
        return self._finish(namespace, state, "ready", "" if memories else "no active memories in this scope")

    def _scope(self, namespace: str, state: dict[str, Any]) -> list[Memory]:
        """The active memories of the draft's scope, oldest first (at most ``MAX_MEMORIES``)."""
        scope = state["scope"]
        if scope["memory_ids"]:
            rows = [m for m in self._store.get_memories(namespace, scope["memory_ids"]) if m.status == "active"]
            return sorted(rows, key=lambda m: (m.created_at, m.id))
        since = datetime.fromisoformat(scope["since"]) if scope["since"] else None
        until = datetime.fromisoformat(scope["until"]) if scope["until"] else None
        found = []
        for memory in self._store.iter_memories(namespace, ("active",)):
            if (since is None or memory.created_at >= since) and (until is None or memory.created_at < until):
                found.append(memory)
                if len(found) >= MAX_MEMORIES:
                    state["note"] = f"only the first {MAX_MEMORIES} memories of the range were read"
                    break
        return found

    def _add_items(self, state: dict[str, Any], batch: Sequence[Memory], items: list[dict[str, Any]]) -> None:
        versions = {m.id: m.version for m in batch}
        used = sum(len(i["content"]) for i in state["items"])
        for item in items:
            used += len(item["content"])
            if used > MAX_ITEMS_CHARS:
                state["note"] = "the draft is at its size limit: later items were left out"
                return
            item["id"] = f"it{len(state['items']) + 1}"
            item["sources"] = [{"id": i, "version": versions[i]} for i in item.pop("source_ids")]
            state["items"].append(item)

    # -- the person's decision -----------------------------------------------------------------------
    def apply(self, namespace: str, draft_id: str, accepted: Sequence[ItemDecision]) -> dict[str, Any]:
        """Apply the accepted items (with the person's edits); every other item is dropped. Each item is
        one merge; an item whose memories changed since the draft is refused alone (its error in
        ``results``). The draft is ``applied`` afterwards and cannot be applied again."""
        state = self.get(namespace, draft_id)
        if state["state"] != "ready":
            raise Conflict(f"draft {draft_id} is {state['state']}; only a ready draft can be applied", code="not_ready")
        items = {i["id"]: i for i in state["items"]}
        unknown = [d.id for d in accepted if d.id not in items]
        if unknown:
            raise InvalidInput(f"draft {draft_id} has no item {unknown[0]!r}", code="unknown_item")
        results: list[dict[str, Any]] = []
        for decision in accepted:
            item = items[decision.id]
            results.append(self._apply_item(namespace, item, decision))
        for item_id in items.keys() - {d.id for d in accepted}:
            results.append({"item": item_id, "status": "dropped"})
        state["results"] = results
        return self._finish(namespace, state, "applied", "")

    def _apply_item(self, namespace: str, item: dict[str, Any], decision: ItemDecision) -> dict[str, Any]:
        fields = MergeFields(content=decision.content if decision.content is not None else item["content"])
        chosen = {
            "type": decision.type or item.get("type"),
            "importance": decision.importance if decision.importance is not None else item.get("importance"),
            "tags": decision.tags if decision.tags is not None else item.get("tags"),
        }
        for name, value in chosen.items():
            if value is not None:
                setattr(fields, name, value)
        fields.set_fields = frozenset(name for name, value in chosen.items() if value is not None)
        try:
            refs = [SourceRef(s["id"], s["version"]) for s in item["sources"]]
            sources = self._curation.read_sources(namespace, refs)
            result = self._curation.merge_rows(sources, fields, source="consolidation")
        except EngramError as exc:
            return {"item": item["id"], "status": "refused", "error": exc.code, "message": exc.message[:MESSAGE_CHARS]}
        return {"item": item["id"], "status": "applied", "memory_id": result.memory.id}

    def discard(self, namespace: str, draft_id: str) -> dict[str, Any]:
        """Drop the whole draft (nothing was changed by it)."""
        state = self.get(namespace, draft_id)
        if state["state"] == "applied":
            raise Conflict(f"draft {draft_id} was applied; undo its merges instead", code="not_ready")
        return self._finish(namespace, state, "discarded", state.get("note", ""))

    # -- state ---------------------------------------------------------------------------------------
    def _finish(self, namespace: str, state: dict[str, Any], to: str, note: str) -> dict[str, Any]:
        state.update(state=to, note=note or state.get("note", ""))
        self._save(namespace, state)
        return state

    def _stale(self, state: dict[str, Any]) -> bool:
        return self._clock.now() - datetime.fromisoformat(state["updated_at"]) > STALE_AFTER

    def _save(self, namespace: str, state: dict[str, Any]) -> None:
        state["updated_at"] = self._clock.now().isoformat()
        self._store.put_cache(namespace, STATE_PREFIX + state["id"], state, expires_at=self._clock.now() + KEEP)


def parse_consolidation(reply: str, batch: Sequence[Memory]) -> list[dict[str, Any]]:
    """The valid items of a model's consolidation (``prompts.CONSOLIDATE_SYSTEM``): sources from the batch
    only, each memory in at most one item, at most ``MAX_MERGE_SOURCES`` per item, a usable content; a
    one-memory item that keeps its wording is no change and left out. ``InvalidInput``
    (``invalid_model_output``) without an ``items`` list."""
    data = parse_json_object(reply)
    if not isinstance(data.get("items"), list):
        raise InvalidInput("the model answer has no 'items' list", code="invalid_model_output")
    by_id = {m.id: m for m in batch}
    taken: set[str] = set()
    out = []
    for raw in as_list(data["items"]):
        if not isinstance(raw, dict):
            continue
        ids = [i for i in dict.fromkeys(as_str_list(raw.get("source_ids"), MAX_MERGE_SOURCES + 1)) if i in by_id]
        content = as_str(raw.get("content"))
        if not ids or len(ids) > MAX_MERGE_SOURCES or taken & set(ids) or not content:
            continue
        try:
            content = clean_content(content[:MAX_CONTENT_CHARS])
        except InvalidInput:
            continue
        if len(ids) == 1 and same_wording(by_id[ids[0]].content, content):
            continue
        taken.update(ids)
        out.append(
            {
                "source_ids": ids,
                "content": content,
                "type": raw.get("type") if raw.get("type") in MEMORY_TYPES else None,
                "importance": as_unit(raw["importance"], 0.5) if "importance" in raw else None,
                "tags": as_str_list(raw.get("tags")) or None,
                "reason": as_str(raw.get("reason"))[:300],
            }
        )
    return out
