"""REST for the change journal (`/v1/runs...`, docs/journal.md): the runs list (job runs, imports, hand
edits, merges, undos; newest first, with counts of changes), one run and its changes (paged, in the order
they were made), and the undo of a run (the undo of an undo redoes it)."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, FastAPI, Query, Request

from engram.bootstrap import Container
from engram.entrypoints.http.rest_shared import Read, Write, _c
from engram.services.library.journal import change_view, run_view

router = APIRouter(prefix="/v1", tags=["runs"])


def mount(app: FastAPI, container: Container) -> None:
    """Its routes on the app (``routes.py`` mounts every module)."""
    app.include_router(router)


Cursor = Annotated[str | None, Query(max_length=500, description="`next_cursor` of the previous page")]


@router.get("/runs")
def list_runs(
    request: Request, who: Read, limit: Annotated[int, Query(ge=1, le=200)] = 50, cursor: Cursor = None
) -> dict[str, Any]:
    """Every run that changed something (job runs, imports, hand edits, merges, undos), newest first: its
    kind, who started it (`source`), when, and the counts of its changes per row kind and operation."""
    page = _c(request).journal.runs(who.namespace, limit=limit, cursor=cursor)
    return {"items": [run_view(r) for r in page.items], "next_cursor": page.next_cursor}


@router.get("/runs/{run_id}")
def get_run(request: Request, run_id: str, who: Read) -> dict[str, Any]:
    """One run's record (404 `run_not_found` for a run of another namespace or past retention)."""
    return run_view(_c(request).journal.get_run(who.namespace, run_id))


@router.get("/runs/{run_id}/changes")
def run_changes(
    request: Request,
    run_id: str,
    who: Read,
    limit: Annotated[int, Query(ge=1, le=500)] = 100,
    cursor: Cursor = None,
) -> dict[str, Any]:
    """The run's changes in the order it made them: the row (`row` kind, `row_id`), the operation, the
    row `before` and `after` (null: none), and the model's `reason` where there is one."""
    page = _c(request).journal.changes(who.namespace, run_id, limit=limit, cursor=cursor)
    return {"items": [change_view(c) for c in page.items], "next_cursor": page.next_cursor}


@router.post("/runs/{run_id}/undo")
def undo_run(request: Request, run_id: str, who: Write) -> dict[str, Any]:
    """Revert the run's changes, newest first. A row changed again since the run is left alone and listed
    in `conflicts`; what cannot be reverted (a memory erased for good, moved or purged messages) is listed
    in `skipped`. The undo is a run itself (`run_id`): undoing it redoes the original."""
    source = "rest" if request.headers.get("authorization") or request.headers.get("x-api-key") else "panel"
    return _c(request).journal.undo(who.namespace, run_id, source=source)
