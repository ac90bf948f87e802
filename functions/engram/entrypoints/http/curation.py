"""REST for curation by hand (README, "Curating by hand"): the duplicate check before a save
(`/v1/memories/check`), merges and their undo (`/v1/memories/merge...`, `/v1/memories/{id}/unmerge`),
the core-memory candidates (`/v1/memories/core_candidates`) and consolidation drafts
(`/v1/consolidations...`). Composed into `/v1` before ``memories`` (its fixed paths go before
`/memories/{id}`)."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, FastAPI, Query, Request
from pydantic import BaseModel, Field

from engram.bootstrap import Container
from engram.domain.models import MemoryLayer, MemoryType
from engram.entrypoints.http.memories import Version
from engram.entrypoints.http.openapi import CONFLICT, error_response
from engram.entrypoints.http.rest_shared import STRICT, IsoDatetime, Read, TagList, Text, Write, _c
from engram.services.jobs.consolidation import MAX_MEMORIES, ItemDecision
from engram.services.library.curation import MAX_MERGE_SOURCES, MergeFields, SourceRef
from engram.services.library.memories import FactKeyField, MemoryWrite

router = APIRouter(tags=["curation"])

# A source id that is not in your namespace: 404 (it is in the body, so the document would not say so).
_SOURCES = {**CONFLICT, 404: error_response("404", "A memory named in `sources` is not in your namespace.")}
_NEEDS_MODEL = {
    **CONFLICT,
    503: error_response("503", "No extraction model is configured (the message says which setting)."),
}

MemoryId = Annotated[str, Field(min_length=1, max_length=200)]


class CheckRequest(MemoryWrite):
    """`POST /v1/memories/check`: the body a `POST /v1/memories` would send."""

    model_config = STRICT

    content: Text
    tags: TagList = Field(default_factory=list)
    remind_at: IsoDatetime | None = None
    dedup: bool = Field(
        default=False, description="Answer for a machine-written text (MCP memory_remember): near-identical = seen."
    )


class SourceRequest(BaseModel):
    model_config = STRICT

    id: MemoryId
    version: Version | None = None


Sources = Annotated[list[SourceRequest], Field(min_length=2, max_length=MAX_MERGE_SOURCES)]


class DraftRequest(BaseModel):
    model_config = STRICT

    sources: Sources


class MergeRequest(BaseModel):
    """The merged memory as the person confirmed it; unset fields come from the sources."""

    model_config = STRICT

    sources: Sources
    content: Text
    type: MemoryType | None = None
    fact_key: FactKeyField | None = Field(default=None, max_length=200)
    layer: MemoryLayer | None = None
    importance: float | None = Field(default=None, ge=0.0, le=1.0)
    confidence: float | None = Field(default=None, ge=0.0, le=1.0)
    pinned: bool | None = None
    tags: TagList | None = None


class ConsolidationRequest(BaseModel):
    model_config = STRICT

    since: IsoDatetime | None = Field(default=None, description="Memories created at or after this instant.")
    until: IsoDatetime | None = Field(default=None, description="Memories created before this instant.")
    memory_ids: list[MemoryId] = Field(default_factory=list, max_length=MAX_MEMORIES)


class ItemRequest(BaseModel):
    model_config = STRICT

    id: str = Field(min_length=1, max_length=20)
    content: Text | None = None
    type: MemoryType | None = None
    importance: float | None = Field(default=None, ge=0.0, le=1.0)
    tags: TagList | None = None


class ApplyRequest(BaseModel):
    model_config = STRICT

    items: list[ItemRequest] = Field(max_length=1000, description="The accepted items; every other is dropped.")


def _refs(sources: list[SourceRequest]) -> list[SourceRef]:
    return [SourceRef(s.id, s.version) for s in sources]


# -- before a save ------------------------------------------------------------------------------------
@router.post("/memories/check", tags=["memories"])
def check_memory(request: Request, body: CheckRequest, who: Read) -> dict[str, Any]:
    """What `POST /v1/memories` with this body would do now, without writing: `action` (`created`,
    `seen`, `superseded`, `existing`), the memory it would touch, and the nearest active memories (with
    their cosine when vectors are on)."""
    req = MemoryWrite(**body.model_dump(exclude={"dedup"}, exclude_unset=True))
    return _c(request).memories.check(who.namespace, req, dedup=body.dedup).to_dict()


# -- merges ------------------------------------------------------------------------------------------
@router.post("/memories/merge/draft", responses=_SOURCES)
async def draft_merge(request: Request, body: DraftRequest, who: Write) -> dict[str, Any]:
    """The merged memory proposed for 2-10 active memories (nothing is written): drafted by the extraction
    model when one is configured, else the texts joined (`drafted_by`)."""
    return (await _c(request).curation.draft(who.namespace, _refs(body.sources))).to_dict()


@router.post("/memories/merge", status_code=201, responses=_SOURCES)
def merge_memories(request: Request, body: MergeRequest, who: Write) -> dict[str, Any]:
    """Merge 2-10 active memories into one: they are superseded by it (linked to it) in one transaction.
    A source changed since the `version` given: 409 `version_conflict`, nothing written. Undo with
    `POST /v1/memories/{id}/unmerge`."""
    fields = MergeFields(**body.model_dump(exclude={"sources"}))
    fields.set_fields = frozenset(body.model_fields_set - {"sources", "content"})
    return _c(request).curation.merge(who.namespace, _refs(body.sources), fields).to_dict()


@router.post("/memories/{memory_id}/unmerge", responses=CONFLICT)
def unmerge_memory(request: Request, memory_id: str, who: Write) -> dict[str, Any]:
    """Undo the merge that made this memory: its sources are restored exactly as they were and it is
    erased. 409 `version_conflict` if it or a source changed since the merge (nothing written)."""
    restored = _c(request).curation.undo_merge(who.namespace, memory_id)
    return {"restored": [m.model_dump(mode="json") for m in restored], "removed": memory_id}


@router.get("/memories/core_candidates", tags=["memories"])
def core_candidates(request: Request, who: Read, limit: Annotated[int, Query(ge=1, le=100)] = 20) -> dict[str, Any]:
    """Active memories recalled or said again often (3 times or more) that are neither pinned nor core,
    the most used first: promote one with `PATCH /v1/memories/{id}` (`layer: core` or `pinned: true`)."""
    found = _c(request).curation.core_candidates(who.namespace, limit=limit)
    return {"items": [c.to_dict() for c in found]}


# -- consolidation drafts ----------------------------------------------------------------------------
@router.post("/consolidations", status_code=202, responses=_NEEDS_MODEL)
def start_consolidation(request: Request, body: ConsolidationRequest, who: Write) -> dict[str, Any]:
    """Ask the model for a consolidated set of the memories created in [`since`, `until`) or of
    `memory_ids` (a queued job; poll `GET /v1/consolidations/{id}` for `done`/`total` and the items).
    Nothing changes until you apply it."""
    return _c(request).consolidation.start(
        who.namespace, since=body.since, until=body.until, memory_ids=body.memory_ids
    )


@router.get("/consolidations")
def list_consolidations(request: Request, who: Read) -> dict[str, Any]:
    """The latest drafts, newest first (without their items; kept 14 days)."""
    return {"items": _c(request).consolidation.drafts(who.namespace)}


@router.get("/consolidations/{draft_id}")
def get_consolidation(request: Request, draft_id: str, who: Read) -> dict[str, Any]:
    """One draft: its state (`running`, `ready`, `applied`, `discarded`, `error`), progress and items,
    each item with the memories it replaces as they are now."""
    container = _c(request)
    state = container.consolidation.get(who.namespace, draft_id)
    ids = [s["id"] for item in state["items"] for s in item["sources"]]
    rows = {m.id: m.model_dump(mode="json") for m in container.store.get_memories(who.namespace, ids)}
    items = [
        {**item, "sources": [{**s, "memory": rows.get(s["id"])} for s in item["sources"]]} for item in state["items"]
    ]
    return {**state, "items": items}


@router.post("/consolidations/{draft_id}/apply", responses=CONFLICT)
def apply_consolidation(request: Request, draft_id: str, body: ApplyRequest, who: Write) -> dict[str, Any]:
    """Apply the accepted items (with your edits); the others are dropped. Each item is a merge (undo it
    with `POST /v1/memories/{id}/unmerge`); an item whose memories changed since the draft is refused
    alone (its `results` entry says why)."""
    decisions = [ItemDecision(**i.model_dump(exclude_unset=True)) for i in body.items]
    return _c(request).consolidation.apply(who.namespace, draft_id, decisions)


@router.post("/consolidations/{draft_id}/discard", responses=CONFLICT)
def discard_consolidation(request: Request, draft_id: str, who: Write) -> dict[str, Any]:
    return _c(request).consolidation.discard(who.namespace, draft_id)


def mount(app: FastAPI, container: Container) -> None:
    """Its routes on the app (``routes.py`` mounts every module)."""
    app.include_router(router, prefix="/v1")
