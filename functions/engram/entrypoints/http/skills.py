"""The skills library over REST (`/v1/skills...`), one route per MCP skill tool (README, "Skills").

Reads need `memory:read`, writes `memory:write`; every call stays in the key's namespace.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, FastAPI, Path, Query, Request, Response
from pydantic import BaseModel, ConfigDict, Field

from engram.bootstrap import Container
from engram.domain.access import Principal
from engram.domain.errors import InvalidInput
from engram.domain.skills import (
    AGENT_ID_PATTERN,
    MAX_DESCRIPTION_CHARS,
    MAX_SKILL_CHARS,
    MAX_SKILL_FILES,
    MAX_SKILL_TAGS,
    SKILL_NAME_PATTERN,
    agent_id,
)
from engram.entrypoints.http.auth import require
from engram.entrypoints.http.openapi import CONFLICT, stated
from engram.entrypoints.http.state import container_of
from engram.services.library.skills import ImportResult, SkillService, skill_json, version_json

router = APIRouter(prefix="/v1/skills", tags=["skills"])

Read = Annotated[Principal, Depends(require("memory:read"))]
Write = Annotated[Principal, Depends(require("memory:write"))]
STRICT = ConfigDict(extra="forbid", strict=True)
# The patterns are stated in the document and checked by the domain (400 invalid_skill_name /
# invalid_agent_id: openapi.stated).
Name = Annotated[str, Field(min_length=1, max_length=64, json_schema_extra=stated(SKILL_NAME_PATTERN))]
NamePath = Annotated[
    str, Path(description="The skill's name (case is folded).", json_schema_extra=stated(SKILL_NAME_PATTERN))
]


class SkillImportRequest(BaseModel):
    """`POST /v1/skills`: a SKILL.md (front matter `name`, `description`, `tags` optional) and text files."""

    model_config = STRICT

    content: str = Field(min_length=1, max_length=MAX_SKILL_CHARS, description="The SKILL.md text.")
    name: Name | None = Field(default=None, description="Default: `name:` of the front matter.")
    description: str | None = Field(default=None, max_length=MAX_DESCRIPTION_CHARS)
    tags: list[Annotated[str, Field(max_length=64)]] | None = Field(default=None, max_length=MAX_SKILL_TAGS)
    files: dict[str, str] | None = Field(
        default=None,
        max_length=MAX_SKILL_FILES,
        description="Resource files as text, by relative path (replace the current ones; omitted: kept). "
        "Binary files: `PUT /v1/skills/{name}/files/{path}`.",
    )


class AllocateRequest(BaseModel):
    model_config = STRICT

    agent_id: str = Field(
        min_length=1,
        max_length=64,
        description="`claude-code`, `codex`, `cursor` or any id.",
        json_schema_extra=stated(AGENT_ID_PATTERN),
    )
    allocated: bool = Field(default=True, description="`false` removes the allocation.")


class RestoreRequest(BaseModel):
    model_config = STRICT

    version: int | None = Field(
        default=None,
        ge=1,
        le=1_000_000,
        strict=False,  # JSON has one number type: 3.0 is version 3 (3.5 is still refused)
        description="Write this version again as the newest; omitted: undo a delete.",
    )


def _service(request: Request) -> SkillService:
    return container_of(request).skills


def _imported(result: ImportResult, response: Response) -> dict[str, Any]:
    response.status_code = 201 if result.created else 200
    return {
        "skill": skill_json(result.skill),
        "version": version_json(result.version, content=False),
        "created": result.created,
    }


_CREATED: dict[int | str, dict[str, Any]] = {**CONFLICT, 201: {"description": "A new version was written."}}


@router.post("", responses=_CREATED)
def import_skill(request: Request, body: SkillImportRequest, who: Write, response: Response) -> dict[str, Any]:
    """Import a SKILL.md: version n+1 when anything changed, the same version (200, nothing written)
    when nothing did; 201 when a version was written."""
    files = {path: text.encode() for path, text in body.files.items()} if body.files is not None else None
    result = _service(request).import_(
        who.namespace, body.content, name=body.name, description=body.description, tags=body.tags, files=files
    )
    return _imported(result, response)


@router.get("")
def list_skills(
    request: Request,
    who: Read,
    agent: Annotated[
        str | None,
        Query(
            max_length=64,
            description="Only skills allocated to this agent.",
            json_schema_extra=stated(AGENT_ID_PATTERN),
        ),
    ] = None,
    tag: Annotated[str | None, Query(max_length=64)] = None,
    query: Annotated[
        str | None,
        Query(min_length=1, max_length=500, description="Search: keywords, and meaning when an embedder is on."),
    ] = None,
    deleted: Annotated[bool, Query(description="The deleted skills that can still be restored.")] = False,
    limit: Annotated[int, Query(ge=1, le=200)] = 50,
) -> dict[str, Any]:
    """The skills (by name), filtered; with `query` a search (keywords, and vectors when an embedder is on),
    best first, with scores in [0, 1]."""
    service = _service(request)
    if query is not None:
        hits = service.search(who.namespace, query, limit=limit)
        return {"items": [{**skill_json(s), "score": score} for s, score in hits]}
    agent = agent_id(agent) if agent is not None else None  # 400 invalid_agent_id, like an allocation's
    skills = service.list_skills(who.namespace, agent=agent, tag=tag, deleted=deleted)[:limit]
    return {"items": [skill_json(s) for s in skills]}


@router.get("/{name}")
def get_skill(
    request: Request, name: NamePath, who: Read, version: Annotated[int | None, Query(ge=1, le=1_000_000)] = None
) -> dict[str, Any]:
    """A skill with the full text of its latest version (or of `version`)."""
    skill, row = _service(request).get(who.namespace, name, version)
    return {"skill": skill_json(skill), "version": version_json(row)}


@router.get("/{name}/versions")
def skill_versions(request: Request, name: NamePath, who: Read) -> dict[str, Any]:
    """Every version, oldest first (without their text: `GET /v1/skills/{name}?version=N`)."""
    rows = _service(request).versions(who.namespace, name)
    return {"items": [version_json(v, content=False) for v in rows]}


@router.post("/{name}/allocate")
def allocate_skill(request: Request, name: NamePath, body: AllocateRequest, who: Write) -> dict[str, Any]:
    """Allocate the skill to an agent (its name and description then reach that agent's chats)."""
    skill = _service(request).allocate(who.namespace, name, body.agent_id, allocated=body.allocated)
    return {"skill": skill_json(skill)}


@router.delete("/{name}")
def delete_skill(request: Request, name: NamePath, who: Write) -> dict[str, Any]:
    """Soft delete: gone from listings, search and chats; `POST .../restore` brings it back for 30 days."""
    return {"skill": skill_json(_service(request).delete(who.namespace, name))}


@router.post("/{name}/restore", responses=_CREATED)
def restore_skill(
    request: Request, name: NamePath, who: Write, response: Response, body: RestoreRequest | None = None
) -> dict[str, Any]:
    """Undo a delete; with `version`, write that version again as the newest."""
    service = _service(request)
    if body is not None and body.version is not None:
        return _imported(service.restore_version(who.namespace, name, body.version), response)
    return {"skill": skill_json(service.restore(who.namespace, name))}


_FILE_BODY: dict[str, Any] = {
    "requestBody": {
        "required": True,
        "content": {"application/octet-stream": {"schema": {"type": "string", "format": "binary"}}},
    }
}


@router.put("/{name}/files/{path:path}", responses=_CREATED, openapi_extra=_FILE_BODY)
async def put_skill_file(request: Request, name: NamePath, path: str, who: Write, response: Response) -> dict[str, Any]:
    """Add or replace a resource file (the raw body; at most 256 KiB, 2 MiB per skill, safe relative
    paths only): a new version when the bytes changed."""
    from starlette.concurrency import run_in_threadpool

    data = await request.body()
    if not data:
        raise InvalidInput("the file is empty", code="empty_file")
    result = await run_in_threadpool(_service(request).put_file, who.namespace, name, path, data)
    return _imported(result, response)


@router.get(
    "/{name}/files/{path:path}",
    response_class=Response,
    responses={200: {"content": {"application/octet-stream": {"schema": {"type": "string", "format": "binary"}}}}},
)
def get_skill_file(
    request: Request,
    name: NamePath,
    path: str,
    who: Read,
    version: Annotated[int | None, Query(ge=1, le=1_000_000)] = None,
) -> Response:
    """A resource file's bytes (of the latest version, or of `version`)."""
    file, data = _service(request).get_file(who.namespace, name, path, version)
    headers = {"x-engram-sha256": file.sha256, "x-content-type-options": "nosniff"}
    return Response(data, media_type="application/octet-stream", headers=headers)


def mount(app: FastAPI, container: Container) -> None:
    """Its routes on the app (``routes.py`` mounts every module)."""
    app.include_router(router)
