"""REST for memories (`/v1/memories...`: write, list, read, edit, archive, restore, supersede, versions,
events) and search (`/v1/search/memories`, `/v1/search/conversations`)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, FastAPI, Header, Query, Request, Response
from pydantic import BaseModel, Field

from engram.bootstrap import Container
from engram.domain.errors import InvalidInput
from engram.domain.models import Memory, MemoryFilter, MemoryType
from engram.domain.policies import OPTIONAL_FACT_KEY_PATTERN, normalize_fact_key
from engram.entrypoints.http.openapi import CONFLICT, stated
from engram.entrypoints.http.rest_shared import STRICT, WHOLE, IsoDatetime, Read, TagList, Text, Write, _c, write_body
from engram.services.library.memories import MemoryPatch, MemoryWrite, parse_statuses

router = APIRouter()


class MemoryCreateRequest(MemoryWrite):
    """`POST /v1/memories`: with `fact_key` an upsert, without it a new memory."""

    model_config = STRICT

    content: Text
    tags: TagList = Field(default_factory=list)
    remind_at: IsoDatetime | None = None


# The version a client read (README, "Editing at the same time"): a write given one is refused with 409
# `version_conflict` when the memory changed since; without one the write applies to the current row.
Version = Annotated[int, Field(ge=1, description="The memory's `version` as you read it (or send `If-Match`)."), WHOLE]
IfMatch = Annotated[
    str | None,
    Header(description='The `ETag` of the memory as you read it (`"<version>"`); 409 if it changed since.'),
]
VersionQuery = Annotated[
    int | None, Query(ge=1, description="The memory's `version` as you read it (or send `If-Match`).")
]


class SupersedeRequest(MemoryCreateRequest):
    """A new version for an existing memory; `fact_key` defaults to the old one's. `version`: the
    old memory's version as you read it."""

    version: Version | None = None


class MemoryPatchRequest(MemoryPatch):
    model_config = STRICT

    content: Text | None = None
    tags: TagList | None = None
    remind_at: IsoDatetime | None = None
    version: Version | None = None


def etag(memory: Memory) -> str:
    """A memory's entity tag: its version, quoted (RFC 9110 strong validator)."""
    return f'"{memory.version}"'


def expected_version(if_match: str | None, version: int | None) -> int | None:
    """The version a write is conditional on, from ``If-Match`` and/or a ``version`` field (which must
    agree); ``None`` when neither is given (or ``If-Match: *``)."""
    from_header: int | None = None
    if if_match is not None and if_match.strip() != "*":
        tag = if_match.strip().removeprefix("W/").strip('"')
        if not tag.isdigit() or int(tag) < 1:
            raise InvalidInput(
                f'If-Match must be one ETag of this memory, like "3" (got {if_match[:40]!r})', code="invalid_if_match"
            )
        from_header = int(tag)
    if from_header is not None and version is not None and from_header != version:
        raise InvalidInput("If-Match and version name different versions", code="invalid_if_match")
    return from_header if from_header is not None else version


def _version_of_bodiless_call(if_match: IfMatch = None, version: VersionQuery = None) -> int | None:
    return expected_version(if_match, version)


# What a write without a body (DELETE, /archive, /restore) is conditional on: If-Match or ?version=.
ExpectedVersion = Annotated[int | None, Depends(_version_of_bodiless_call)]


def _tagged(response: Response, memory: Memory) -> dict[str, Any]:
    response.headers["ETag"] = etag(memory)
    return dict(memory.model_dump(mode="json"))


class SearchRequest(BaseModel):
    model_config = STRICT

    query: str = Field(min_length=1, max_length=8000)
    top_k: Annotated[int, Field(ge=1, le=50), WHOLE] | None = None
    types: list[MemoryType] = Field(default_factory=list)
    include_prompt: bool = False
    # Drop hits whose relevance (0-1) is below this; 0 keeps the full ranking (README: "Relevance").
    min_relevance: float | None = Field(default=None, ge=0.0, le=1.0)
    # Aelios' names (README, "Coming from Aelios"): `min_score` is min_relevance; `filter: false` skips
    # the model stages (reranker, compression).
    min_score: float | None = Field(default=None, ge=0.0, le=1.0)
    filter: bool = True

    @property
    def floor(self) -> float:
        """The relevance floor under either name; both is a rule beyond the schema (400, not 422)."""
        if self.min_relevance is not None and self.min_score is not None:
            raise InvalidInput("pass either min_relevance or min_score (its Aelios name), not both")
        return self.min_relevance if self.min_relevance is not None else (self.min_score or 0.0)


class ConversationSearchRequest(BaseModel):
    model_config = STRICT

    query: str = Field(min_length=1, max_length=8000, pattern=r"\S")
    # The thread the caller is in: never searched (its history is already in view).
    exclude_thread: str | None = Field(default=None, min_length=1, max_length=200)
    threads: Annotated[int, Field(ge=1, le=10), WHOLE] | None = None
    fragments: Annotated[int, Field(ge=1, le=10), WHOLE] | None = None
    neighbours: Annotated[int, Field(ge=0, le=5), WHOLE] | None = None
    min_relevance: float = Field(default=0.0, ge=0.0, le=1.0)
    include_prompt: bool = False


# -- memories ---------------------------------------------------------------------------------
_REPLAYED: dict[int | str, dict[str, Any]] = {
    200: {
        "description": "Nothing new was created: a retry with an `external_id` seen before (`action`: `existing`), "
        "the same memory seen again (`seen`), or a change to a protected memory filed for review (`proposed`). "
        "The body has the shape of the 201."
    },
    **CONFLICT,
}


@router.post("/memories", tags=["memories"], status_code=201, responses=_REPLAYED)
def create_memory(request: Request, response: Response, body: MemoryCreateRequest, who: Write) -> dict[str, Any]:
    """Remember something. With `fact_key`: same key + same meaning -> marked seen; same key + new
    content -> supersedes the old version. `external_id` makes retries idempotent."""
    result = _c(request).memories.write(who.namespace, body)
    if not result.created:
        response.status_code = 200
    return write_body(result)


@router.get("/memories", tags=["memories"])
def list_memories(
    request: Request,
    who: Read,
    type: Annotated[list[MemoryType] | None, Query()] = None,
    status: Annotated[
        list[Literal["active", "superseded", "archived", "deleted", "expired", "all"]] | None,
        Query(description="active (default), superseded, archived, deleted, expired, or all"),
    ] = None,
    layer: Literal["fragment", "event", "core"] | None = None,
    tag: str | None = None,
    pinned: bool | None = None,
    fact_key: Annotated[
        str | None,
        Query(description="Only the memory under this key.", json_schema_extra=stated(OPTIONAL_FACT_KEY_PATTERN)),
    ] = None,
    limit: Annotated[int, Query(ge=1, le=200)] = 50,
    cursor: str | None = None,
) -> dict[str, Any]:
    # The key as it is stored: `Pet:Cat Name` finds `pet:cat_name`; an invalid one is a 400 (invalid_fact_key).
    key = normalize_fact_key(fact_key) if fact_key else None
    filters = MemoryFilter(
        types=tuple(type or ()), statuses=parse_statuses(status), layer=layer, tag=tag, pinned=pinned, fact_key=key
    )
    page = _c(request).memories.list_memories(who.namespace, filters, limit=limit, cursor=cursor or None)
    return {"items": [m.model_dump(mode="json") for m in page.items], "next_cursor": page.next_cursor}


@router.get("/memories/{memory_id}", tags=["memories"])
def get_memory(request: Request, response: Response, memory_id: str, who: Read) -> dict[str, Any]:
    """One memory, with its `version` (also its `ETag`): send it back with an edit to be told (409)
    when the memory changed in between."""
    return _tagged(response, _c(request).memories.get(who.namespace, memory_id))


@router.patch("/memories/{memory_id}", tags=["memories"], responses=CONFLICT)
def patch_memory(
    request: Request,
    response: Response,
    memory_id: str,
    body: MemoryPatchRequest,
    who: Write,
    if_match: IfMatch = None,
) -> dict[str, Any]:
    """Edit in place (no new version): content, type, fact_key, layer, importance, confidence,
    pinned, tags, remind_at. With `If-Match` or `version`: 409 `version_conflict` if the memory changed since."""
    version = expected_version(if_match, body.version)
    return _tagged(response, _c(request).memories.update(who.namespace, memory_id, body, version=version))


@router.delete("/memories/{memory_id}", tags=["memories"], responses=CONFLICT)
def delete_memory(
    request: Request, response: Response, memory_id: str, who: Write, version: ExpectedVersion
) -> dict[str, Any]:
    """Soft delete (restorable; hard-deleted by retention after 30 days)."""
    return _tagged(response, _c(request).memories.set_status(who.namespace, memory_id, "deleted", version=version))


@router.post("/memories/{memory_id}/archive", tags=["memories"], responses=CONFLICT)
def archive_memory(
    request: Request, response: Response, memory_id: str, who: Write, version: ExpectedVersion
) -> dict[str, Any]:
    return _tagged(response, _c(request).memories.set_status(who.namespace, memory_id, "archived", version=version))


@router.post("/memories/{memory_id}/restore", tags=["memories"], responses=CONFLICT)
def restore_memory(
    request: Request, response: Response, memory_id: str, who: Write, version: ExpectedVersion
) -> dict[str, Any]:
    """Make a superseded, archived or deleted version active again (it replaces the current holder of its key)."""
    return _tagged(response, _c(request).memories.restore(who.namespace, memory_id, version=version))


class EraseRequest(BaseModel):
    """An erase cannot be undone: the body says so on purpose."""

    model_config = STRICT

    confirm: Literal[True] = Field(description="`true`: erase for good, no restore afterwards.")


@router.post("/memories/{memory_id}/erase", tags=["memories"], responses=CONFLICT)
def erase_memory(
    request: Request, memory_id: str, body: EraseRequest, who: Write, version: ExpectedVersion
) -> dict[str, Any]:
    """Erase a deleted, archived, superseded or expired memory for good (`{"confirm": true}`; 409
    `still_active` for an active one: delete it first). No restore afterwards."""
    erased = _c(request).memories.erase(who.namespace, memory_id, version=version)
    return {"erased": erased.id}


@router.post("/memories/{memory_id}/supersede", tags=["memories"], status_code=201, responses=CONFLICT)
def supersede_memory(
    request: Request, memory_id: str, body: SupersedeRequest, who: Write, if_match: IfMatch = None
) -> dict[str, Any]:
    version = expected_version(if_match, body.version)
    return write_body(_c(request).memories.supersede(who.namespace, memory_id, body, version=version))


@router.get("/memories/{memory_id}/versions", tags=["memories"])
def memory_versions(request: Request, memory_id: str, who: Read) -> dict[str, Any]:
    chain = _c(request).memories.versions(who.namespace, memory_id)
    return {"items": [m.model_dump(mode="json") for m in chain]}


@router.get("/memories/{memory_id}/events", tags=["memories"])
def memory_events(request: Request, memory_id: str, who: Read) -> dict[str, Any]:
    container = _c(request)
    container.memories.get(who.namespace, memory_id)
    events = container.store.list_events(who.namespace, memory_id=memory_id, limit=100)
    return {"items": [ev.model_dump(mode="json") for ev in events]}


# -- search -----------------------------------------------------------------------------------
@router.post("/search/memories", tags=["search"])
def search_memories(request: Request, body: SearchRequest, who: Read) -> dict[str, Any]:
    """Hybrid recall: keyword (CJK-aware) + vectors, fused; each hit has a `relevance` in [0, 1] and
    `min_relevance` (or `min_score`) drops the hits below it. `filter: false` skips the reranker and
    compression. `include_prompt` adds the injectable text."""
    from engram.services.recall.pipeline import render_prompt

    result = _c(request).recall.recall(
        who.namespace,
        body.query,
        top_k=body.top_k,
        types=tuple(body.types),
        min_relevance=body.floor,
        refine=body.filter,
    )
    out: dict[str, Any] = {
        "items": [
            {"memory": hit.memory.model_dump(mode="json"), "score": round(hit.score, 6), "relevance": hit.relevance}
            for hit in result.hits
        ],
        "glossary_hits": [g.model_dump(mode="json") for g in result.glossary_hits],
        "meta": result.meta,
    }
    if body.include_prompt:
        out["prompt"] = render_prompt(result)
    return out


@router.post("/search/conversations", tags=["search"])
def search_conversations(request: Request, body: ConversationSearchRequest, who: Read) -> dict[str, Any]:
    """Fragments of past conversations (docs/conversations.md): matched messages, each with its
    neighbours, from at most `threads` threads x `fragments` per thread, best thread first. Nothing is
    marked seen. `include_prompt` adds the text the chat gateway would inject (within its budget)."""
    service = _c(request).conversations
    result = service.search(
        who.namespace,
        body.query,
        exclude_thread=body.exclude_thread,
        threads=body.threads,
        fragments=body.fragments,
        neighbours=body.neighbours,
        min_relevance=body.min_relevance,
    )
    out: dict[str, Any] = {"items": [f.to_dict() for f in result.fragments], "meta": result.meta}
    if body.include_prompt:
        out["prompt"] = service.render(result.fragments, _c(request).settings.chat_patch_max_tokens)[0]
    return out


def mount(app: FastAPI, container: Container) -> None:
    """Its routes on the app (``routes.py`` mounts every module)."""
    app.include_router(router, prefix="/v1")
