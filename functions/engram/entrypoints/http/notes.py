"""REST for the notes beside the memories: precious notes (`/v1/precious`), the glossary
(`/v1/glossary`), the digest (`/v1/digest`) and the boot package (`/v1/memory_boot`)."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, FastAPI, Query, Request
from pydantic import BaseModel, Field

from engram.bootstrap import Container
from engram.domain.policies import DIGEST_RULE
from engram.entrypoints.http.rest_shared import STRICT, Read, Write, _c
from engram.services.library.notes import GlossaryIn

router = APIRouter()


class GlossaryRequest(GlossaryIn):
    model_config = STRICT


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


# -- precious, glossary, digest, boot ---------------------------------------------------------
@router.get("/precious", tags=["precious"])
def list_precious(request: Request, who: Read, limit: Annotated[int, Query(ge=1, le=1000)] = 100) -> dict[str, Any]:
    return {"items": [p.model_dump(mode="json") for p in _c(request).notes.list_precious(who.namespace, limit)]}


@router.post("/precious", tags=["precious"], status_code=201)
def add_precious(request: Request, body: PreciousRequest, who: Write) -> dict[str, Any]:
    """Keep a verbatim note forever (append-only)."""
    note = _c(request).notes.add_precious(
        who.namespace, body.content, reason=body.reason, tags=body.tags, source_message_ids=body.source_message_ids
    )
    return dict(note.model_dump(mode="json"))


@router.delete("/precious/{precious_id}", tags=["precious"])
def delete_precious(request: Request, precious_id: str, who: Write) -> dict[str, Any]:
    _c(request).notes.delete_precious(who.namespace, precious_id)  # NotFound -> 404
    return {"deleted": precious_id}


@router.get("/glossary", tags=["glossary"])
def list_glossary(request: Request, who: Read) -> dict[str, Any]:
    return {"items": [g.model_dump(mode="json") for g in _c(request).notes.list_glossary(who.namespace)]}


@router.post("/glossary", tags=["glossary"], status_code=201)
def set_glossary(request: Request, body: GlossaryRequest, who: Write) -> dict[str, Any]:
    """Create a term (or replace the term of the same name)."""
    return dict(_c(request).notes.set_term(who.namespace, body).model_dump(mode="json"))


@router.get("/glossary/{term_id}", tags=["glossary"])
def get_glossary(request: Request, term_id: str, who: Read) -> dict[str, Any]:
    return dict(_c(request).notes.get_term(who.namespace, term_id).model_dump(mode="json"))


@router.patch("/glossary/{term_id}", tags=["glossary"])
def patch_glossary(request: Request, term_id: str, body: GlossaryPatch, who: Write) -> dict[str, Any]:
    notes = _c(request).notes
    current = notes.get_term(who.namespace, term_id)
    merged = GlossaryIn(
        term=body.term if body.term is not None else current.term,
        aliases=body.aliases if body.aliases is not None else list(current.aliases),
        definition=body.definition if body.definition is not None else current.definition,
    )
    return dict(notes.set_term(who.namespace, merged, term_id=term_id).model_dump(mode="json"))


@router.delete("/glossary/{term_id}", tags=["glossary"])
def delete_glossary(request: Request, term_id: str, who: Write) -> dict[str, Any]:
    _c(request).notes.delete_term(who.namespace, term_id)
    return {"deleted": term_id}


@router.get("/digest", tags=["boot"])
def get_digest(request: Request, who: Read) -> dict[str, Any]:
    digest = _c(request).notes.get_digest(who.namespace)
    return {
        "content": digest.content if digest else "",
        "updated_at": digest.updated_at.isoformat() if digest else None,
    }


@router.put("/digest", tags=["boot"])
def put_digest(request: Request, body: DigestRequest, who: Write) -> dict[str, Any]:
    """Set the L1 summary (at most 500 characters kept, cut at a sentence end; over 2,000 refused)."""
    digest = _c(request).notes.set_digest(who.namespace, body.content)
    return {"content": digest.content, "updated_at": digest.updated_at.isoformat()}


@router.get("/memory_boot", tags=["boot"])
def get_boot(request: Request, who: Read) -> dict[str, Any]:
    """The cold-boot package: digest, yesterday's log, stable memories, the long tail (the next memories
    by importance), precious notes, glossary, today's latest messages and count, stats (the same as MCP
    `memory_boot`)."""
    return _jsonable(_c(request).boot.package(who.namespace))


@router.patch("/memory_boot", tags=["boot"])
def patch_boot(request: Request, body: BootPatch, who: Write) -> dict[str, Any]:
    """Write the digest (L1 summary: at most 500 characters kept, cut at a sentence end; over 2,000 refused)."""
    c = _c(request)
    c.notes.set_digest(who.namespace, body.digest)
    return _jsonable(c.boot.package(who.namespace))


def _jsonable(data: dict[str, Any]) -> dict[str, Any]:
    from fastapi.encoders import jsonable_encoder

    return dict(jsonable_encoder(data))


def mount(app: FastAPI, container: Container) -> None:
    """Its routes on the app (``routes.py`` mounts every module)."""
    app.include_router(router, prefix="/v1")
