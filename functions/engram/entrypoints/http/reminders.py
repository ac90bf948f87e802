"""REST for reminders (`/v1/reminders...`, docs/reminders.md): list, snooze, cancel."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, FastAPI, Query, Request
from pydantic import BaseModel

from engram.bootstrap import Container
from engram.domain.models import Reminder
from engram.entrypoints.http.rest_shared import STRICT, IsoDatetime, Read, Write, _c
from engram.services.library.reminders import ReminderView

router = APIRouter(prefix="/v1", tags=["reminders"])


class SnoozeRequest(BaseModel):
    model_config = STRICT

    until: IsoDatetime


def _reminder(row: Reminder) -> dict[str, Any]:
    return dict(row.model_dump(mode="json", exclude={"namespace", "lease_owner", "lease_until"}))


@router.get("/reminders")
def list_reminders(
    request: Request,
    who: Read,
    status: Annotated[ReminderView, Query(description="upcoming (default), delivered or missed")] = "upcoming",
    limit: Annotated[int, Query(ge=1, le=500)] = 100,
) -> dict[str, Any]:
    """Memories with a `remind_at`: `upcoming` (not delivered yet, soonest first, due ones included),
    `delivered`, or `missed` (more than `ENGRAM_REMINDER_MISSED_AFTER_DAYS` past due: never injected)."""
    return {"items": _c(request).reminders.list(who.namespace, status, limit=limit)}


@router.post("/reminders/{memory_id}/snooze")
def snooze_reminder(request: Request, memory_id: str, body: SnoozeRequest, who: Write) -> dict[str, Any]:
    """Move the reminder to `until` (a future time with its zone); a delivered or missed one fires again."""
    return _reminder(_c(request).reminders.snooze(who.namespace, memory_id, body.until))


@router.post("/reminders/{memory_id}/cancel")
def cancel_reminder(request: Request, memory_id: str, who: Write) -> dict[str, Any]:
    """Stop the reminder: the memory stays, its `remind_at` is cleared."""
    return _reminder(_c(request).reminders.cancel(who.namespace, memory_id))


def mount(app: FastAPI, container: Container) -> None:
    """Its routes on the app (``routes.py`` mounts every module)."""
    app.include_router(router)
