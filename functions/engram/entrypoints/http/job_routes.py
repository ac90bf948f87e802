"""Jobs over REST (`/v1/jobs`, scope `admin`): the latest runs, and a run now (through the container's job
runner, services/jobs/registry.py: the same after-steps as a scheduled run). A REST run acts on the caller's
namespace only. The in-process schedule of `engram serve`: ``entrypoints/http/schedule.py``."""

from __future__ import annotations

import datetime
import logging
from typing import Annotated, Any

from fastapi import APIRouter, Body, Depends, FastAPI, Query, Request
from pydantic import BaseModel, ConfigDict, Field, field_validator
from pydantic_core import PydanticCustomError

from engram.bootstrap import Container
from engram.domain.access import Principal
from engram.domain.policies import DATE_OUT_OF_RANGE
from engram.entrypoints.http.auth import require
from engram.entrypoints.http.openapi import CONFLICT
from engram.entrypoints.http.state import container_of
from engram.services.jobs.runs import last_runs

log = logging.getLogger(__name__)

router = APIRouter(prefix="/v1/jobs", tags=["jobs"])
Admin = Annotated[Principal, Depends(require("admin"))]


class DreamRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    date: str | None = Field(
        default=None,
        pattern=r"^\d{4}-\d{2}-\d{2}$",
        json_schema_extra={"format": "date"},
        description="YYYY-MM-DD; default yesterday",
    )
    force: bool = False

    @field_validator("date")
    @classmethod
    def _a_real_day(cls, value: str | None) -> str | None:
        if value is not None:
            day = datetime.date.fromisoformat(value)  # ValueError -> 400 naming the field
            if day == datetime.date.max:  # the day after it, where the dream's window ends, cannot be held
                raise PydanticCustomError(DATE_OUT_OF_RANGE, f"{value} is out of range (the last day is 9999-12-30)")
        return value


def _c(request: Request) -> Container:
    return container_of(request)


@router.get("")
def list_runs(request: Request, who: Admin, limit: Annotated[int, Query(ge=1, le=200)] = 20) -> dict[str, Any]:
    """The latest job runs of your namespace, newest first."""
    return {"runs": last_runs(_c(request).store, who.namespace, limit)}


@router.post("/extract", responses=CONFLICT)
async def extract_now(request: Request, who: Admin) -> dict[str, Any]:
    """Extract your new messages now; returns what was created, seen, superseded or queued for review."""
    return (await _c(request).jobs.run_async("extract", {"namespace": who.namespace})).report


@router.post("/dream", responses=CONFLICT)
async def dream_now(
    request: Request, who: Admin, body: Annotated[DreamRequest | None, Body()] = None
) -> dict[str, Any]:
    """Dream one day now (default yesterday; `force` repeats a day already dreamt)."""
    body = body or DreamRequest()
    payload = {"date": body.date, "force": body.force, "namespace": who.namespace}
    return (await _c(request).jobs.run_async("dream", payload)).report


@router.post("/cleanup", responses=CONFLICT)
def cleanup_now(request: Request, who: Admin) -> dict[str, Any]:
    """Apply the retention periods to your namespace now."""
    return _c(request).jobs.run("cleanup", {"namespace": who.namespace}).report


def mount(app: FastAPI, container: Container) -> None:
    """A lazy route group (entrypoints/http/routes.py); the schedule is ``schedule.mount``'s, with ``create_app``."""
    app.include_router(router)
