"""The change journal's tools of the MCP server: list the runs that changed the user's memory, and undo
one (twins of `/v1/runs` and `POST /v1/runs/{id}/undo`; docs/journal.md)."""

from __future__ import annotations

from typing import Annotated, Any

from mcp.server.mcpserver import Context
from pydantic import Field

from engram.entrypoints.http.mcp.toolkit import READ, READ_ONLY, WRITE, WRITES, ToolList, caller, container_of
from engram.services.library.journal import change_view, run_view

TOOLS = ToolList()

RunId = Annotated[str, Field(min_length=1, max_length=200, description="A run id (`run_...`) from run_list.")]


@TOOLS.tool(READ_ONLY)
def run_list(
    ctx: Context,
    run_id: Annotated[
        str | None,
        Field(max_length=200, description="A run's id: list that run's changes instead of the runs."),
    ] = None,
    limit: Annotated[int, Field(ge=1, le=100, description="How many runs or changes (default 20).")] = 20,
    cursor: Annotated[str | None, Field(max_length=500, description="`next_cursor` of the last page.")] = None,
) -> dict[str, Any]:
    """What changed the user's memory, newest first: job runs (extract, dream, cleanup), imports, hand
    edits, merges and undos, each with counts of its changes. With run_id: that run's changes (the row
    before and after, and the model's reason)."""
    who = caller(ctx, READ)
    journal = container_of(ctx).journal
    if run_id:
        changes = journal.changes(who.namespace, run_id, limit=limit, cursor=cursor)
        return {
            "run": run_view(journal.get_run(who.namespace, run_id)),
            "changes": [change_view(x) for x in changes.items],
            "next_cursor": changes.next_cursor,
        }
    page = journal.runs(who.namespace, limit=limit, cursor=cursor)
    return {"runs": [run_view(r) for r in page.items], "next_cursor": page.next_cursor}


@TOOLS.tool(WRITES)
def run_undo(ctx: Context, run_id: RunId) -> dict[str, Any]:
    """Undo a run's changes (only when the user asks). A row changed again since the run is left alone
    and listed in `conflicts`. The undo is a run itself: undoing its `run_id` redoes the original."""
    who = caller(ctx, WRITE)
    return container_of(ctx).journal.undo(who.namespace, run_id, source="mcp")
