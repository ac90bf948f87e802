"""Jobs over REST (`/v1/jobs`, scope `admin`) and the in-process scheduler of `engram serve`.

A REST run acts on the caller's namespace only.
"""

from __future__ import annotations

import asyncio
import datetime
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, suppress
from typing import Annotated, Any

from fastapi import APIRouter, Body, Depends, FastAPI, Query, Request
from pydantic import BaseModel, ConfigDict, Field, field_validator

from engram.bootstrap import Container, snapshot_search
from engram.domain.access import Principal
from engram.entrypoints.http.auth import require
from engram.entrypoints.http.openapi import CONFLICT
from engram.entrypoints.http.state import container_of
from engram.entrypoints.jobs import CLEANUP_SNAPSHOT_CHANGES
from engram.services.jobs import last_runs
from engram.services.scheduler import Scheduler, daily_at, every_hours

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
            datetime.date.fromisoformat(value)  # ValueError -> 422 naming the field
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
    report = await _c(request).extraction.run(namespace=who.namespace)
    return dict(report.to_dict())


@router.post("/dream", responses=CONFLICT)
async def dream_now(
    request: Request, who: Admin, body: Annotated[DreamRequest | None, Body()] = None
) -> dict[str, Any]:
    """Dream one day now (default yesterday; `force` repeats a day already dreamt)."""
    body = body or DreamRequest()
    report = await _c(request).dreaming.run(date=body.date, force=body.force, namespace=who.namespace)
    return dict(report.to_dict())


@router.post("/cleanup", responses=CONFLICT)
def cleanup_now(request: Request, who: Admin) -> dict[str, Any]:
    """Apply the retention periods to your namespace now."""
    return dict(_c(request).cleanup.run(who.namespace).to_dict())


def build_scheduler(container: Container) -> Scheduler:
    s = container.settings
    scheduler = Scheduler(clock=container.clock)

    async def extract() -> object:
        report = await container.extraction.run()
        await asyncio.to_thread(snapshot_search, container)
        return report

    async def dream() -> object:
        report = await container.dreaming.run()
        await asyncio.to_thread(snapshot_search, container)
        return not any(ns.status == "failed" for ns in report.namespaces)

    async def cleanup() -> object:
        report = await asyncio.to_thread(container.cleanup.run)
        await asyncio.to_thread(snapshot_search, container, min_changes=CLEANUP_SNAPSHOT_CHANGES)
        return report

    def timezone() -> str:
        # The admin panel may change the time zone at run time; the daily schedules follow it.
        return str(container.runtime.get("timezone"))

    if container.extraction.configured:
        scheduler.add("extract", every_hours(s.extract_interval_hours), extract)
    if container.dreaming.configured:
        scheduler.add("dream", daily_at(s.dream_hour, s.dream_minute, timezone), dream)
    scheduler.add("cleanup", daily_at(s.cleanup_hour, s.cleanup_minute, timezone), cleanup)
    return scheduler


def install(app: FastAPI, container: Container) -> None:
    app.include_router(router)
    if not container.settings.scheduler_enabled:
        return

    @asynccontextmanager
    async def scheduler_running(app: FastAPI) -> AsyncIterator[None]:
        scheduler = build_scheduler(container)
        app.state.scheduler = scheduler
        task = asyncio.create_task(scheduler.serve(), name="engram-scheduler")
        try:
            yield
        finally:
            task.cancel()
            with suppress(asyncio.CancelledError):
                await task

    app.state.startup_hooks.append(scheduler_running)
