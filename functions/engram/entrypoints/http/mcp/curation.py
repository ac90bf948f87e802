"""The curation tools of the MCP server (README, "Curating by hand"): check a text before saving it, merge
memories into one, undo a merge (twins of `/v1/memories/check`, `/v1/memories/merge`, `.../unmerge`)."""

from __future__ import annotations

from typing import Annotated, Any

from mcp.server.mcpserver import Context
from pydantic import Field

from engram.entrypoints.http.mcp.toolkit import (
    READ,
    READ_ONLY,
    WRITE,
    WRITES,
    Content,
    FactKey,
    MemoryId,
    Tags,
    ToolList,
    Type,
    caller,
    container_of,
    memory_json,
)
from engram.services.library.curation import MAX_MERGE_SOURCES, MergeFields, SourceRef
from engram.services.library.memories import MemoryWrite

SourceIds = Annotated[
    list[Annotated[str, Field(min_length=1, max_length=200)]],
    Field(min_length=2, max_length=MAX_MERGE_SOURCES, description="The active memories to merge (2-10 ids)."),
]

TOOLS = ToolList()


@TOOLS.tool(READ_ONLY)
def memory_check(
    ctx: Context, content: Content, fact_key: FactKey | None = None, type: Type = "fact"
) -> dict[str, Any]:
    """Before saving: what memory_upsert (with fact_key) or memory_remember (without) would do with this
    text — `created`, `seen` (already known) or `superseded` (replaces the memory named) — and the
    nearest existing memories. Nothing is written."""
    who = caller(ctx, READ)
    req = MemoryWrite(content=content, fact_key=fact_key, type=type, source="mcp")
    found = container_of(ctx).memories.check(who.namespace, req, dedup=fact_key is None)
    return {
        "action": found.action,
        "reason": found.reason,
        "memory": memory_json(found.target) if found.target else None,
        "near": [{"memory": memory_json(m), "similarity": None if s is None else round(s, 4)} for m, s in found.near],
    }


@TOOLS.tool(WRITES)
def memory_merge(
    ctx: Context, ids: SourceIds, content: Content, type: Type | None = None, tags: Tags | None = None
) -> dict[str, Any]:
    """Merge 2-10 memories that say overlapping things into one with your `content` (keep every fact,
    name, number and date). They become `superseded` by it; memory_unmerge undoes it exactly."""
    who = caller(ctx, WRITE)
    fields = MergeFields(content=content, type=type, tags=tags)
    fields.set_fields = frozenset(name for name, value in (("type", type), ("tags", tags)) if value is not None)
    result = container_of(ctx).curation.merge(who.namespace, [SourceRef(i) for i in ids], fields)
    return {"memory": memory_json(result.memory), "sources": [memory_json(m) for m in result.sources]}


@TOOLS.tool(WRITES)
def memory_unmerge(ctx: Context, id: MemoryId) -> dict[str, Any]:
    """Undo the merge that made memory `id`: its sources come back exactly as they were and it is
    erased. Refused if it or a source changed since the merge."""
    who = caller(ctx, WRITE)
    restored = container_of(ctx).curation.undo_merge(who.namespace, id)
    return {"restored": [memory_json(m) for m in restored], "removed": id}
