"""The memory tools of the MCP server: recall, search, list and read memories; write, correct, archive,
restore and delete them (twins of `/v1/memories...`, `/v1/search`, `/v1/recall`)."""

from __future__ import annotations

from typing import Annotated, Any

from mcp.server.mcpserver import Context
from mcp.server.mcpserver.exceptions import ToolError
from pydantic import Field

from engram.domain.models import MemoryFilter
from engram.entrypoints.http.mcp.toolkit import (
    DESTROYS,
    READ,
    READ_ONLY,
    WRITE,
    WRITES,
    Confidence,
    Content,
    FactKey,
    Importance,
    Layer,
    MemoryId,
    MinRelevance,
    Query,
    RemindAt,
    Status,
    Tags,
    ToolList,
    TopK,
    Type,
    Types,
    Version,
    aware,
    caller,
    container_of,
    drop_namespace,
    memory_json,
    written_json,
)
from engram.services.library.memories import MAX_LIST_OFFSET, MemoryPatch, MemoryWrite, parse_statuses

TOOLS = ToolList()


@TOOLS.tool(READ_ONLY)
def memory_search(
    ctx: Context,
    query: Query,
    top_k: TopK | None = None,
    types: Types | None = None,
    min_relevance: MinRelevance = 0.0,
) -> dict[str, Any]:
    """Search the user's memories (keywords + meaning, any language) and get the matching memories
    with scores and ids. Use it to find a memory you want to inspect, correct or delete. To get
    context for answering the user, prefer memory_recall."""
    who = caller(ctx, READ)
    result = container_of(ctx).recall.recall(
        who.namespace, query, top_k=top_k, types=tuple(types or ()), min_relevance=min_relevance
    )
    return {
        "items": [
            {"memory": memory_json(h.memory), "score": round(h.score, 6), "relevance": h.relevance} for h in result.hits
        ],
        "glossary_hits": [drop_namespace(g.model_dump(mode="json")) for g in result.glossary_hits],
    }


@TOOLS.tool(READ_ONLY)
def memory_recall(
    ctx: Context,
    query: Query,
    top_k: TopK | None = None,
    types: Types | None = None,
    min_relevance: MinRelevance | None = None,
) -> dict[str, Any]:
    """Recall what Engram knows that is relevant to `query` (usually the user's latest request),
    exactly as the chat gateway would inject it: scored hits plus `text`, ready to put into your
    context. Call it before answering questions about the user, their preferences or projects."""
    from engram.services.recall.pipeline import render_prompt

    who = caller(ctx, READ)
    result = container_of(ctx).recall.recall(
        who.namespace, query, top_k=top_k, types=tuple(types or ()), min_relevance=min_relevance
    )
    return {
        "text": render_prompt(result),
        "hits": [
            {
                "id": h.memory.id,
                "content": h.memory.content,
                "type": h.memory.type,
                "score": round(h.score, 6),
                "relevance": h.relevance,
            }
            for h in result.hits
        ],
        "glossary_hits": [{"term": g.term, "definition": g.definition} for g in result.glossary_hits],
    }


@TOOLS.tool(READ_ONLY)
def memory_list(
    ctx: Context,
    types: Types | None = None,
    status: Annotated[list[Status], Field(max_length=6, description="Statuses (default active; `all`).")] | None = None,
    layer: Layer | None = None,
    tag: Annotated[str, Field(min_length=1, max_length=64)] | None = None,
    pinned: bool | None = None,
    fact_key: FactKey | None = None,
    limit: Annotated[int, Field(ge=1, le=200, description="Page size (default 50).")] = 50,
    cursor: Annotated[str, Field(max_length=500, description="`next_cursor` of the previous page.")] | None = None,
    offset: Annotated[
        int, Field(ge=0, le=MAX_LIST_OFFSET, description="Skip this many first (instead of a cursor).")
    ] = 0,
) -> dict[str, Any]:
    """List memories by filter (newest first), one page at a time; pass `next_cursor` back for the
    next page. Use it to browse (e.g. all pinned memories, or archived ones); to find memories by
    meaning use memory_search."""
    who = caller(ctx, READ)
    filters = MemoryFilter(
        types=tuple(types or ()),
        statuses=parse_statuses(status),
        layer=layer,
        tag=tag,
        pinned=pinned,
        fact_key=fact_key,
    )
    if offset and cursor:
        raise ToolError("pass either cursor or offset, not both")
    page = container_of(ctx).memories.list_memories(who.namespace, filters, limit=limit, cursor=cursor, offset=offset)
    out: dict[str, Any] = {"items": [memory_json(m) for m in page.items], "next_cursor": page.next_cursor}
    if page.next_cursor:
        out["next_offset"] = offset + len(page.items)
    return out


@TOOLS.tool(READ_ONLY)
def memory_get(
    ctx: Context,
    id: MemoryId,
    include_versions: Annotated[bool, Field(description="Also return the whole version chain.")] = False,
) -> dict[str, Any]:
    """Read one memory by id (any status), optionally with its version chain (oldest first)."""
    who = caller(ctx, READ)
    out: dict[str, Any] = {"memory": memory_json(container_of(ctx).memories.get(who.namespace, id))}
    if include_versions:
        out["versions"] = [memory_json(m) for m in container_of(ctx).memories.versions(who.namespace, id)]
    return out


def _write(
    content: Content,
    type: Type,
    layer: Layer,
    importance: Importance,
    confidence: Confidence,
    pinned: bool,
    tags: Tags | None,
    **extra: Any,
) -> MemoryWrite:
    """A memory write made by a tool (``source`` ``mcp``; no tags given: none), with what only that tool sets."""
    return MemoryWrite(
        content=content,
        type=type,
        layer=layer,
        importance=importance,
        confidence=confidence,
        pinned=pinned,
        tags=tags or [],
        source="mcp",
        **extra,
    )


@TOOLS.tool(WRITES)
def memory_upsert(
    ctx: Context,
    fact_key: FactKey,
    content: Content,
    type: Type = "fact",
    layer: Layer = "fragment",
    importance: Importance = 0.5,
    confidence: Confidence = 0.8,
    pinned: bool = False,
    tags: Tags | None = None,
    external_id: Annotated[str, Field(max_length=200, description="Makes retries idempotent.")] | None = None,
) -> dict[str, Any]:
    """Save a fact under a stable `fact_key`. Same key and the same text (case, punctuation and filler
    words aside) -> the memory is marked seen (no duplicate); same key with any other change -> the old
    version is superseded (history kept).
    Use this for facts that can change: where the user lives, their editor, a project's stack."""
    who = caller(ctx, WRITE)
    req = _write(content, type, layer, importance, confidence, pinned, tags, fact_key=fact_key, external_id=external_id)
    return written_json(container_of(ctx).memories.write(who.namespace, req))


@TOOLS.tool(WRITES)
def memory_remember(
    ctx: Context,
    content: Content,
    type: Type = "fact",
    layer: Layer = "fragment",
    importance: Importance = 0.5,
    confidence: Confidence = 0.8,
    pinned: bool = False,
    tags: Tags | None = None,
    remind_at: RemindAt | None = None,
) -> dict[str, Any]:
    """Remember something without inventing a key (events, observations, one-off details). If a
    near-identical memory of the same type exists it is marked seen instead of duplicated (never
    when numbers, names, places or negation differ). Use
    memory_upsert instead when the fact has a natural key and may change later. With `remind_at`
    it is also a reminder: Engram puts it into the user's first chat turn after that time."""
    who = caller(ctx, WRITE)
    req = _write(content, type, layer, importance, confidence, pinned, tags, remind_at=aware(remind_at))
    return written_json(container_of(ctx).memories.write(who.namespace, req, dedup=True))


@TOOLS.tool(WRITES)
def memory_update(
    ctx: Context,
    id: MemoryId,
    content: Content | None = None,
    type: Type | None = None,
    fact_key: FactKey | None = None,
    layer: Layer | None = None,
    importance: Importance | None = None,
    confidence: Confidence | None = None,
    pinned: bool | None = None,
    tags: Tags | None = None,
    version: Version | None = None,
) -> dict[str, Any]:
    """Edit a memory in place (no new version): fix a typo, re-tag, pin/unpin, change importance.
    Only the fields you pass change. When a fact itself changed, use memory_supersede instead."""
    who = caller(ctx, WRITE)
    fields = {
        "content": content,
        "type": type,
        "fact_key": fact_key,
        "layer": layer,
        "importance": importance,
        "confidence": confidence,
        "pinned": pinned,
        "tags": tags,
    }
    given = {k: v for k, v in fields.items() if v is not None}
    if not given:
        raise ToolError("nothing to change: pass at least one field besides id")
    return {
        "memory": memory_json(
            container_of(ctx).memories.update(who.namespace, id, MemoryPatch(**given), version=version)
        )
    }


@TOOLS.tool(WRITES)
def memory_supersede(
    ctx: Context,
    id: Annotated[str, Field(min_length=1, max_length=200, description="The active memory to replace.")],
    content: Content,
    type: Type = "fact",
    fact_key: FactKey | None = None,
    layer: Layer = "fragment",
    importance: Importance = 0.5,
    confidence: Confidence = 0.8,
    pinned: bool = False,
    tags: Tags | None = None,
    version: Version | None = None,
) -> dict[str, Any]:
    """Replace an outdated or wrong memory with a corrected version. The old one becomes
    `superseded` (restorable with memory_restore); the new one keeps its fact_key unless you pass one."""
    who = caller(ctx, WRITE)
    req = _write(content, type, layer, importance, confidence, pinned, tags, fact_key=fact_key)
    return written_json(container_of(ctx).memories.supersede(who.namespace, id, req, version=version))


@TOOLS.tool(WRITES)
def memory_archive(ctx: Context, id: MemoryId, version: Version | None = None) -> dict[str, Any]:
    """Archive a memory that is no longer relevant but should not be forgotten: it leaves recall
    and default listings; memory_restore brings it back."""
    who = caller(ctx, WRITE)
    return {
        "memory": memory_json(container_of(ctx).memories.set_status(who.namespace, id, "archived", version=version))
    }


@TOOLS.tool(WRITES)
def memory_restore(ctx: Context, id: MemoryId, version: Version | None = None) -> dict[str, Any]:
    """Make an archived, deleted or superseded memory active again (it replaces the current holder
    of its fact_key, if any)."""
    who = caller(ctx, WRITE)
    return {"memory": memory_json(container_of(ctx).memories.restore(who.namespace, id, version=version))}


@TOOLS.tool(DESTROYS)
def memory_delete(ctx: Context, id: MemoryId, version: Version | None = None) -> dict[str, Any]:
    """Delete a memory that is wrong or that the user asked you to forget. Soft delete: restorable
    with memory_restore for 30 days, then removed for good."""
    who = caller(ctx, WRITE)
    return {"memory": memory_json(container_of(ctx).memories.set_status(who.namespace, id, "deleted", version=version))}
