"""The overview tools of the MCP server: the boot package, the digest, the counts and the whole export
(twins of `/v1/memory_boot`, `/v1/digest`, `/v1/stats`, `/v1/export`)."""

from __future__ import annotations

from typing import Any

from mcp.server.mcpserver import Context

from engram.entrypoints.http.mcp.toolkit import (
    EXPORT,
    READ,
    READ_ONLY,
    ToolList,
    caller,
    container_of,
    drop_namespace,
    jsonable,
)

TOOLS = ToolList()


# -- overview -------------------------------------------------------------------------
@TOOLS.tool(READ_ONLY)
def memory_boot(ctx: Context) -> dict[str, Any]:
    """The cold-boot package for a new session: digest, yesterday's log, pinned/identity/persona
    memories, the long tail (the next memories by importance), precious notes, glossary, today's
    latest messages and stats. Call once at the start of a session."""
    who = caller(ctx, READ)
    return dict(drop_namespace(jsonable(container_of(ctx).boot.package(who.namespace))))


@TOOLS.tool(READ_ONLY)
def digest_get(ctx: Context) -> dict[str, Any]:
    """Read the digest (the user's ≤500-character summary); empty when none was written yet."""
    who = caller(ctx, READ)
    digest = container_of(ctx).notes.get_digest(who.namespace)
    return {
        "content": digest.content if digest else "",
        "updated_at": digest.updated_at.isoformat() if digest else None,
    }


@TOOLS.tool(READ_ONLY)
def memory_stats(ctx: Context) -> dict[str, Any]:
    """Counts: memories by status and type, pending review candidates, messages, precious notes, glossary."""
    who = caller(ctx, READ)
    return dict(jsonable(container_of(ctx).stats.counts(who.namespace)))


@TOOLS.tool(READ_ONLY)
def memory_export(ctx: Context) -> dict[str, Any]:
    """Export every row of the user's memory as one JSON document (memories, messages, precious,
    glossary, digest, logs). Large; use only when the user asks for a backup or export."""
    who = caller(ctx, EXPORT)
    return dict(container_of(ctx).transfer.export(who.namespace))
