"""The REST API (`/v1/...`): a thin layer over the services. Handlers are sync (run in a thread pool)."""

from __future__ import annotations

import logging
from datetime import datetime, timedelta
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Body, Depends, Query, Request, Response
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field

from engram.domain.access import Principal
from engram.domain.errors import InvalidInput, NotFound
from engram.domain.models import MemoryFilter, MemoryType
from engram.domain.policies import DIGEST_RULE, MAX_CONTENT_CHARS, MAX_TAG_CHARS, MAX_TAGS
from engram.entrypoints.http.auth import require
from engram.entrypoints.http.openapi import CONFLICT
from engram.services.library import GlossaryIn, MessageIn
from engram.services.memories import MemoryPatch, MemoryWrite, WriteResult, parse_statuses
from engram.services.transfer import ExportDocument

log = logging.getLogger(__name__)

public = APIRouter()
router = APIRouter(prefix="/v1")

Read = Annotated[Principal, Depends(require("memory:read"))]
Write = Annotated[Principal, Depends(require("memory:write"))]
Export = Annotated[Principal, Depends(require("export:read"))]
CacheRead = Annotated[Principal, Depends(require("cache:read"))]
CacheWrite = Annotated[Principal, Depends(require("cache:write"))]


def _c(request: Request) -> Any:
    return request.app.state.container


# -- wire models ------------------------------------------------------------------------------
# Request bodies are strict: a JSON value of the wrong type is a 422, never coerced (0 is not false,
# true is not 1, a number is not a date), so the OpenAPI document says exactly what is accepted.
STRICT = ConfigDict(extra="forbid", strict=True)


def _not_a_number(value: Any) -> Any:
    if isinstance(value, (int, float)):
        raise ValueError("must be an ISO 8601 date-time string")
    return value


# Strict mode would refuse the ISO string itself (it wants a datetime object); numbers are refused above.
IsoDatetime = Annotated[datetime, Field(strict=False), BeforeValidator(_not_a_number)]


def _whole_number(value: Any) -> Any:
    return int(value) if isinstance(value, float) and value.is_integer() else value


# JSON Schema's "integer" includes 6.0; strict mode would refuse it. A string or 6.5 is still refused.
# The bounds go before the validator, or the OpenAPI document loses them (minimum/maximum).
WHOLE = BeforeValidator(_whole_number)
Text = Annotated[str, Field(min_length=1, max_length=MAX_CONTENT_CHARS, pattern=r"\S")]
TagList = Annotated[list[Annotated[str, Field(max_length=MAX_TAG_CHARS)]], Field(max_length=MAX_TAGS)]


class MemoryCreateRequest(MemoryWrite):
    """`POST /v1/memories`: with `fact_key` an upsert, without it a new memory."""

    model_config = STRICT

    content: Text
    tags: TagList = Field(default_factory=list)
    remind_at: IsoDatetime | None = None


class SupersedeRequest(MemoryCreateRequest):
    """A new version for an existing memory; `fact_key` defaults to the old one's."""


class MemoryPatchRequest(MemoryPatch):
    model_config = STRICT

    content: Text | None = None
    tags: TagList | None = None
    remind_at: IsoDatetime | None = None


class MessageRequest(MessageIn):
    model_config = STRICT

    created_at: IsoDatetime | None = None


class GlossaryRequest(GlossaryIn):
    model_config = STRICT


class ImportRequest(ExportDocument):
    model_config = STRICT


class SearchRequest(BaseModel):
    model_config = STRICT

    query: str = Field(min_length=1, max_length=8000)
    top_k: Annotated[int, Field(ge=1, le=50), WHOLE] | None = None
    types: list[MemoryType] = Field(default_factory=list)
    include_prompt: bool = False
    # Drop hits whose relevance (0-1) is below this; 0 keeps the full ranking (README: "Relevance").
    min_relevance: float = Field(default=0.0, ge=0.0, le=1.0)


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


class PreciousRequest(BaseModel):
    model_config = STRICT

    content: str = Field(min_length=1, max_length=20000, pattern=r"\S")
    reason: str | None = Field(default=None, max_length=1000)
    tags: list[str] = Field(default_factory=list)
    source_message_ids: list[str] = Field(default_factory=list)


class GlossaryPatch(BaseModel):
    model_config = STRICT

    term: str | None = Field(default=None, min_length=1, max_length=200)
    aliases: list[str] | None = None
    definition: str | None = Field(default=None, min_length=1, max_length=2000)


class BootPatch(BaseModel):
    model_config = STRICT

    digest: str = Field(description=DIGEST_RULE)


class DigestRequest(BaseModel):
    model_config = STRICT

    content: str = Field(description=DIGEST_RULE)


class IngestRequest(BaseModel):
    model_config = STRICT

    messages: list[MessageRequest] = Field(min_length=1, max_length=1000)


class DecisionRequest(BaseModel):
    model_config = STRICT

    target_id: str | None = None
    content: str | None = Field(default=None, max_length=4000)
    note: str | None = Field(default=None, max_length=1000)


class CacheRequest(BaseModel):
    model_config = STRICT

    value: Any
    ttl_seconds: int | None = Field(default=None, ge=1, le=365 * 86400)


def _write_body(result: WriteResult) -> dict[str, Any]:
    return {
        "memory": result.memory.model_dump(mode="json"),
        "created": result.created,
        "action": result.action,
        "reason": result.reason,
        "superseded": result.previous.model_dump(mode="json") if result.previous else None,
    }


# -- health -----------------------------------------------------------------------------------
@public.get("/health", tags=["health"])
def health(request: Request) -> dict[str, Any]:
    """Readiness (no auth, no network call: the Lambda Web Adapter polls it before the first request).
    Reports what this process last saw of the search index and the embedding model; `GET
    /v1/admin/health` checks the store and the index now."""
    container = _c(request)
    checks = shallow_checks(container)
    degraded = checks["search"]["status"] == "unavailable" or checks["embedder"]["status"] == "reindex_needed"
    return {"status": "degraded" if degraded else "ok", "version": request.app.version, "checks": checks}


def shallow_checks(container: Any) -> dict[str, Any]:
    """The search index's and the embedder's last known state (``unknown`` until first used)."""
    checks: dict[str, Any] = {"search": container.index.describe()}
    if container.embedder is None:
        checks["embedder"] = {"status": "off", "detail": "keyword search only"}
    else:
        checks["embedder"] = {
            "status": container.embedder.state,
            "model": container.embedder.model_id,
            "dimension": container.embedder.dimension,
        }
    return checks


# -- memories ---------------------------------------------------------------------------------
@router.post("/memories", tags=["memories"], status_code=201, responses=CONFLICT)
def create_memory(request: Request, response: Response, body: MemoryCreateRequest, who: Write) -> dict[str, Any]:
    """Remember something. With `fact_key`: same key + same meaning -> marked seen; same key + new
    content -> supersedes the old version. `external_id` makes retries idempotent."""
    result = _c(request).memories.write(who.namespace, body)
    if not result.created:
        response.status_code = 200
    return _write_body(result)


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
    fact_key: str | None = None,
    limit: Annotated[int, Query(ge=1, le=200)] = 50,
    cursor: str | None = None,
) -> dict[str, Any]:
    filters = MemoryFilter(
        types=tuple(type or ()), statuses=parse_statuses(status), layer=layer, tag=tag, pinned=pinned, fact_key=fact_key
    )
    page = _c(request).memories.list_memories(who.namespace, filters, limit=limit, cursor=cursor or None)
    return {"items": [m.model_dump(mode="json") for m in page.items], "next_cursor": page.next_cursor}


@router.get("/memories/{memory_id}", tags=["memories"])
def get_memory(request: Request, memory_id: str, who: Read) -> dict[str, Any]:
    return dict(_c(request).memories.get(who.namespace, memory_id).model_dump(mode="json"))


@router.patch("/memories/{memory_id}", tags=["memories"], responses=CONFLICT)
def patch_memory(request: Request, memory_id: str, body: MemoryPatchRequest, who: Write) -> dict[str, Any]:
    """Edit in place (no new version): content, type, fact_key, layer, importance, confidence,
    pinned, tags, remind_at."""
    return dict(_c(request).memories.update(who.namespace, memory_id, body).model_dump(mode="json"))


@router.delete("/memories/{memory_id}", tags=["memories"])
def delete_memory(request: Request, memory_id: str, who: Write) -> dict[str, Any]:
    """Soft delete (restorable; hard-deleted by retention after 30 days)."""
    return dict(_c(request).memories.set_status(who.namespace, memory_id, "deleted").model_dump(mode="json"))


@router.post("/memories/{memory_id}/archive", tags=["memories"])
def archive_memory(request: Request, memory_id: str, who: Write) -> dict[str, Any]:
    return dict(_c(request).memories.set_status(who.namespace, memory_id, "archived").model_dump(mode="json"))


@router.post("/memories/{memory_id}/restore", tags=["memories"], responses=CONFLICT)
def restore_memory(request: Request, memory_id: str, who: Write) -> dict[str, Any]:
    """Make a superseded, archived or deleted version active again (it replaces the current holder of its key)."""
    return dict(_c(request).memories.restore(who.namespace, memory_id).model_dump(mode="json"))


@router.post("/memories/{memory_id}/supersede", tags=["memories"], status_code=201, responses=CONFLICT)
def supersede_memory(request: Request, memory_id: str, body: SupersedeRequest, who: Write) -> dict[str, Any]:
    return _write_body(_c(request).memories.supersede(who.namespace, memory_id, body))


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
    `min_relevance` drops the hits below it. `include_prompt` adds the injectable text."""
    from engram.services.recall import render_prompt

    result = _c(request).recall.recall(
        who.namespace, body.query, top_k=body.top_k, types=tuple(body.types), min_relevance=body.min_relevance
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


# -- precious, glossary, digest, boot ---------------------------------------------------------
@router.get("/precious", tags=["precious"])
def list_precious(request: Request, who: Read, limit: Annotated[int, Query(ge=1, le=1000)] = 100) -> dict[str, Any]:
    return {"items": [p.model_dump(mode="json") for p in _c(request).library.list_precious(who.namespace, limit)]}


@router.post("/precious", tags=["precious"], status_code=201)
def add_precious(request: Request, body: PreciousRequest, who: Write) -> dict[str, Any]:
    """Keep a verbatim note forever (append-only)."""
    note = _c(request).library.add_precious(
        who.namespace, body.content, reason=body.reason, tags=body.tags, source_message_ids=body.source_message_ids
    )
    return dict(note.model_dump(mode="json"))


@router.delete("/precious/{precious_id}", tags=["precious"])
def delete_precious(request: Request, precious_id: str, who: Write) -> dict[str, Any]:
    _c(request).library.delete_precious(who.namespace, precious_id)  # NotFound -> 404
    return {"deleted": precious_id}


@router.get("/glossary", tags=["glossary"])
def list_glossary(request: Request, who: Read) -> dict[str, Any]:
    return {"items": [g.model_dump(mode="json") for g in _c(request).library.list_glossary(who.namespace)]}


@router.post("/glossary", tags=["glossary"], status_code=201)
def set_glossary(request: Request, body: GlossaryRequest, who: Write) -> dict[str, Any]:
    """Create a term (or replace the term of the same name)."""
    return dict(_c(request).library.set_term(who.namespace, body).model_dump(mode="json"))


@router.get("/glossary/{term_id}", tags=["glossary"])
def get_glossary(request: Request, term_id: str, who: Read) -> dict[str, Any]:
    return dict(_c(request).library.get_term(who.namespace, term_id).model_dump(mode="json"))


@router.patch("/glossary/{term_id}", tags=["glossary"])
def patch_glossary(request: Request, term_id: str, body: GlossaryPatch, who: Write) -> dict[str, Any]:
    library = _c(request).library
    current = library.get_term(who.namespace, term_id)
    merged = GlossaryIn(
        term=body.term if body.term is not None else current.term,
        aliases=body.aliases if body.aliases is not None else list(current.aliases),
        definition=body.definition if body.definition is not None else current.definition,
    )
    return dict(library.set_term(who.namespace, merged, term_id=term_id).model_dump(mode="json"))


@router.delete("/glossary/{term_id}", tags=["glossary"])
def delete_glossary(request: Request, term_id: str, who: Write) -> dict[str, Any]:
    _c(request).library.delete_term(who.namespace, term_id)
    return {"deleted": term_id}


@router.get("/digest", tags=["boot"])
def get_digest(request: Request, who: Read) -> dict[str, Any]:
    digest = _c(request).library.get_digest(who.namespace)
    return {
        "content": digest.content if digest else "",
        "updated_at": digest.updated_at.isoformat() if digest else None,
    }


@router.put("/digest", tags=["boot"])
def put_digest(request: Request, body: DigestRequest, who: Write) -> dict[str, Any]:
    """Set the L1 summary (at most 500 characters kept, cut at a sentence end; over 2,000 refused)."""
    digest = _c(request).library.set_digest(who.namespace, body.content)
    return {"content": digest.content, "updated_at": digest.updated_at.isoformat()}


@router.get("/memory_boot", tags=["boot"])
def get_boot(request: Request, who: Read) -> dict[str, Any]:
    """The cold-boot package: digest, yesterday's log, stable memories, precious notes, glossary, stats."""
    return _jsonable(_c(request).boot.package(who.namespace))


@router.patch("/memory_boot", tags=["boot"])
def patch_boot(request: Request, body: BootPatch, who: Write) -> dict[str, Any]:
    """Write the digest (L1 summary: at most 500 characters kept, cut at a sentence end; over 2,000 refused)."""
    c = _c(request)
    c.library.set_digest(who.namespace, body.digest)
    return _jsonable(c.boot.package(who.namespace))


# -- review candidates --------------------------------------------------------------------------
@router.get("/candidates", tags=["review"])
def list_candidates(
    request: Request,
    who: Read,
    status: Literal["pending", "approved", "discarded", "merged", "all"] = "pending",
    limit: Annotated[int, Query(ge=1, le=200)] = 50,
    cursor: str | None = None,
) -> dict[str, Any]:
    page = _c(request).candidates.list_candidates(
        who.namespace, None if status == "all" else status, limit=limit, cursor=cursor or None
    )
    return {"items": [c.model_dump(mode="json") for c in page.items], "next_cursor": page.next_cursor}


@router.post("/candidates/{candidate_id}/{decision}", tags=["review"], responses=CONFLICT)
def decide_candidate(
    request: Request,
    candidate_id: str,
    decision: Literal["approve", "discard", "merge", "supersede"],
    who: Write,
    body: Annotated[DecisionRequest | None, Body()] = None,
) -> dict[str, Any]:
    """approve -> a memory; discard; merge into `target_id` (optionally with merged `content`);
    supersede `target_id` with the candidate's text."""
    body = body or DecisionRequest()
    service = _c(request).candidates
    if decision == "discard":
        return {"candidate": service.discard(who.namespace, candidate_id, note=body.note).model_dump(mode="json")}
    if decision == "approve":
        cand, result = service.approve(who.namespace, candidate_id, content=body.content, note=body.note)
    else:
        if not body.target_id:
            raise InvalidInput(f"{decision} needs 'target_id': the memory to {decision}", code="missing_target")
        action = service.merge if decision == "merge" else service.supersede
        cand, result = action(who.namespace, candidate_id, body.target_id, content=body.content, note=body.note)
    return {"candidate": cand.model_dump(mode="json"), **_write_body(result)}


# -- messages, stats, export/import -------------------------------------------------------------
@router.post("/ingest/messages", tags=["messages"])
def ingest_messages(request: Request, body: IngestRequest, who: Write) -> dict[str, Any]:
    """Store raw chat messages for the extraction job; each message is stored once (send `id` or
    `created_at` to keep identical repeats apart)."""
    return dict(_c(request).library.ingest(who.namespace, body.messages))


@router.get("/stats", tags=["stats"])
def stats(request: Request, who: Read) -> dict[str, Any]:
    return dict(_c(request).library.stats(who.namespace))


@router.get("/export", tags=["export"])
def export(request: Request, who: Export) -> dict[str, Any]:
    """Every row of your namespace as one JSON document (the format `POST /v1/import` takes)."""
    return dict(_c(request).transfer.export(who.namespace))


ImportFormat = Literal["engram", "aelios", "pawwake", "mem0", "text"]
# The body's shape depends on `from` (an Engram export, another system's JSON, or text), which a schema
# cannot tie to a query parameter: the body is any JSON (or text), checked by the format's reader (400).
_IMPORT_BODY: dict[str, Any] = {
    "requestBody": {
        "required": True,
        "content": {
            "application/json": {
                "schema": {
                    "anyOf": [{"type": "object"}, {"type": "array"}, {"type": "string"}],
                    "description": "`from=engram`: an export (`GET /v1/export`); `aelios`: its memory export "
                    "`{data, meta}`; `pawwake`: its JSON backup; `mem0`: `{results: [...]}` or a list; "
                    "`text`: a JSON string",
                }
            },
            "text/plain": {"schema": {"type": "string", "description": "`from=text`: one memory per line"}},
        },
    }
}


@router.post("/import", tags=["export"], responses=CONFLICT, openapi_extra=_IMPORT_BODY)
def import_(
    request: Request,
    who: Write,
    body: Annotated[Any, Body(include_in_schema=False)] = None,
    source: Annotated[ImportFormat, Query(alias="from", description="the format of the body")] = "engram",
    dry_run: Annotated[bool, Query(description="report what would happen; write nothing")] = False,
    score: Annotated[bool, Query(description="`from=text`: ask the extraction model for type and importance")] = False,
) -> dict[str, Any]:
    """Import into your namespace. `from=engram` (default) takes an export (from any namespace);
    `aelios`, `pawwake`, `mem0` and `text` move in from those systems (docs: README, "Moving in").
    Each row is checked with the API's rules: an invalid row is refused and reported, a row already
    present (same id, external id or identical content) is skipped; importing the same file twice adds
    nothing. `dry_run=true` writes nothing and reports the same counts. Returns `created`, `skipped`
    and `refused` per row kind and the `problems` with their reasons (`source`: where in the file)."""
    from pydantic import ValidationError

    from engram.services.import_formats import convert
    from engram.services.moving_in import score as score_rows

    container = _c(request)
    if body is None:
        raise InvalidInput("the body is empty: send the file to import", code="empty_body")
    if score and source != "text":
        raise InvalidInput("score applies to from=text only", code="invalid_option")
    if source == "engram":
        try:
            document = ImportRequest.model_validate(body)
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(part) for part in first["loc"]) or "body"
            raise InvalidInput(f"not an Engram export: {where}: {first['msg']}", code="invalid_export") from exc
        return dict(container.transfer.import_(who.namespace, document, dry_run=dry_run))
    converted = convert(source, body)
    if score:
        import anyio.from_thread

        anyio.from_thread.run(score_rows, converted, container.moving_in.model)
    return dict(container.moving_in.run(who.namespace, converted, dry_run=dry_run))


# -- cache ------------------------------------------------------------------------------------
@router.get("/cache/{key}", tags=["cache"])
def get_cache(request: Request, key: str, who: CacheRead) -> dict[str, Any]:
    value = _c(request).store.get_cache(who.namespace, key)
    if value is None:
        raise NotFound(f"no cache entry {key!r}")
    return {"key": key, "value": value}


@router.put("/cache/{key}", tags=["cache"])
def put_cache(request: Request, key: str, body: CacheRequest, who: CacheWrite) -> dict[str, Any]:
    container = _c(request)
    expires: datetime | None = None
    if body.ttl_seconds:
        expires = container.clock.now() + timedelta(seconds=body.ttl_seconds)
    container.store.put_cache(who.namespace, key, body.value, expires_at=expires)
    return {"key": key, "value": body.value, "expires_at": expires.isoformat() if expires else None}


@router.delete("/cache/{key}", tags=["cache"])
def delete_cache(request: Request, key: str, who: CacheWrite) -> dict[str, Any]:
    _c(request).store.delete_cache(who.namespace, key)
    return {"deleted": key}


def _jsonable(data: dict[str, Any]) -> dict[str, Any]:
    from fastapi.encoders import jsonable_encoder

    return dict(jsonable_encoder(data))
