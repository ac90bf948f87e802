"""REST for the review queue (`/v1/candidates`): what the jobs proposed, approved, discarded, merged or
superseding a memory by the owner (services/library/candidates.py)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter, Body, FastAPI, Query, Request
from pydantic import BaseModel, Field

from engram.bootstrap import Container
from engram.domain.errors import InvalidInput
from engram.entrypoints.http.openapi import CONFLICT
from engram.entrypoints.http.rest_shared import STRICT, Read, Write, _c, write_body

router = APIRouter()


class DecisionRequest(BaseModel):
    model_config = STRICT

    target_id: str | None = None
    content: str | None = Field(default=None, max_length=4000)
    note: str | None = Field(default=None, max_length=1000)


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
    return {"candidate": cand.model_dump(mode="json"), **write_body(result)}


def mount(app: FastAPI, container: Container) -> None:
    """Its routes on the app (``routes.py`` mounts every module)."""
    app.include_router(router, prefix="/v1")
