"""The overview tools of the MCP server: the boot package, the digest, the counts and the whole export
(twins of `/v1/memory_boot`, `/v1/digest`, `/v1/stats`, `/v1/export`)."""

from __future__ import annotations

from typing import Any

from mcp.server.mcpserver import Context

from engram.entrypoints.http.mcp.toolkit import EXPORT, READ, READ_ONLY, Toolbox, caller, drop_namespace, jsonable


def register(tools: Toolbox) -> None:
    """The boot package, the digest, counts and the export."""
    c, tool = tools.container, tools.tool

    # -- overview -------------------------------------------------------------------------
    @tool(READ_ONLY)
    def memory_boot(ctx: Context) -> dict[str, Any]:
        """The cold-boot package for a new session: digest, yesterday's log, pinned/identity/persona
        memories, the long tail (the next memories by importance), precious notes, glossary, today's
        latest messages and stats. Call once at the start of a session."""
        who = caller(ctx, READ)
        return dict(drop_namespace(jsonable(c.boot.package(who.namespace))))

    @tool(READ_ONLY)
    def digest_get(ctx: Context) -> dict[str, Any]:
        """Read the digest (the user's ≤500-character summary); empty when none was written yet."""
        who = caller(ctx, READ)
        digest = c.notes.get_digest(who.namespace)
        return {
            "content": digest.content if digest else "",
            "updated_at": digest.updated_at.isoformat() if digest else None,
        }

    @tool(READ_ONLY)
    def memory_stats(ctx: Context) -> dict[str, Any]:
        """Counts: memories by status and type, pending review candidates, messages, precious notes, glossary."""
        who = caller(ctx, READ)
        return dict(jsonable(c.stats.counts(who.namespace)))

    @tool(READ_ONLY)
    def memory_export(ctx: Context) -> dict[str, Any]:
        """Export every row of the user's memory as one JSON document (memories, messages, precious,
        glossary, digest, logs). Large; use only when the user asks for a backup or export."""
        who = caller(ctx, EXPORT)
        return dict(c.transfer.export(who.namespace))
