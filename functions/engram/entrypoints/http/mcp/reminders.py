"""The reminder tools of the MCP server: list, snooze and cancel reminders (twins of `/v1/reminders`)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from mcp.server.mcpserver import Context
from pydantic import Field

from engram.entrypoints.http.mcp.toolkit import (
    READ,
    READ_ONLY,
    WRITE,
    WRITES,
    MemoryId,
    RemindAt,
    ToolList,
    caller,
    container_of,
)

TOOLS = ToolList()


# -- reminders ------------------------------------------------------------------------
@TOOLS.tool(READ_ONLY)
def reminder_list(
    ctx: Context,
    status: Annotated[
        Literal["upcoming", "delivered", "missed"],
        Field(description="`upcoming` (not delivered yet), `delivered`, or `missed` (long past due, never shown)."),
    ] = "upcoming",
) -> dict[str, Any]:
    """The user's reminders (memories with a `remind_at`), soonest first, with their memory ids."""
    who = caller(ctx, READ)
    return {"items": container_of(ctx).reminders.list(who.namespace, status)}


@TOOLS.tool(WRITES)
def reminder_snooze(ctx: Context, memory_id: MemoryId, until: RemindAt) -> dict[str, Any]:
    """Move a reminder to a later time (a delivered or missed one fires again then)."""
    who = caller(ctx, WRITE)
    row = container_of(ctx).reminders.snooze(who.namespace, memory_id, until)
    return {"memory_id": row.memory_id, "remind_at": row.remind_at.isoformat(), "status": row.status}


@TOOLS.tool(WRITES)
def reminder_cancel(ctx: Context, memory_id: MemoryId) -> dict[str, Any]:
    """Stop a reminder so it is never shown; the memory itself stays (its remind_at is cleared)."""
    who = caller(ctx, WRITE)
    row = container_of(ctx).reminders.cancel(who.namespace, memory_id)
    return {"memory_id": row.memory_id, "status": row.status}
