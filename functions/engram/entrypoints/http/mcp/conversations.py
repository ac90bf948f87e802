"""The conversation tools of the MCP server: store raw messages, search past conversations, list threads
and read one (twins of `/v1/messages`, `/v1/search/conversations`, `/v1/threads`)."""

from __future__ import annotations

from typing import Annotated, Any

from mcp.server.mcpserver import Context
from mcp.server.mcpserver.exceptions import ToolError
from pydantic import Field

from engram.entrypoints.http.mcp.toolkit import (
    READ,
    READ_ONLY,
    WRITE,
    WRITES,
    MinRelevance,
    Query,
    ToolList,
    caller,
    container_of,
    drop_namespace,
)
from engram.services.library.messages import MessageIn, ThreadId

TOOLS = ToolList()


@TOOLS.tool(WRITES)
def memory_ingest(
    ctx: Context,
    messages: Annotated[list[MessageIn], Field(min_length=1, max_length=1000)],
) -> dict[str, Any]:
    """Store raw conversation messages; the extraction job later turns them into memories. Each
    message is stored once (give `id` to keep identical repeats apart)."""
    who = caller(ctx, WRITE)
    return dict(container_of(ctx).messages.ingest(who.namespace, messages))


@TOOLS.tool(READ_ONLY)
def conversation_search(
    ctx: Context,
    query: Query,
    exclude_thread: Annotated[
        ThreadId | None,
        Field(description="The thread you are in: left out of the search."),
    ] = None,
    threads: Annotated[int | None, Field(ge=1, le=10, description="At most this many threads.")] = None,
    fragments: Annotated[int | None, Field(ge=1, le=10, description="At most this many fragments per thread.")] = None,
    neighbours: Annotated[
        int | None, Field(ge=0, le=5, description="Messages kept either side of each matched message.")
    ] = None,
    min_relevance: MinRelevance = 0.0,
) -> dict[str, Any]:
    """Search what was said in the user's past conversations (threads): each fragment is a matched
    message with its neighbouring messages, its thread's id and title and its date, best thread
    first. Use it when the user asks what you talked about before ("what did we say about the trip?");
    for facts about the user prefer memory_recall."""
    who = caller(ctx, READ)
    result = container_of(ctx).conversations.search(
        who.namespace,
        query,
        exclude_thread=exclude_thread,
        threads=threads,
        fragments=fragments,
        neighbours=neighbours,
        min_relevance=min_relevance,
    )
    return {"items": [f.to_dict() for f in result.fragments]}


# -- threads --------------------------------------------------------------------------
@TOOLS.tool(READ_ONLY)
def thread_list(
    ctx: Context,
    limit: Annotated[int, Field(ge=1, le=200, description="Page size (default 50).")] = 50,
    cursor: Annotated[str, Field(max_length=500, description="`next_cursor` of the previous page.")] | None = None,
) -> dict[str, Any]:
    """The user's conversations (threads), most recently active first: id, title, message count and
    last message time. Read one with thread_messages."""
    who = caller(ctx, READ)
    page = container_of(ctx).threads.list(who.namespace, limit=limit, cursor=cursor)
    return {
        "items": [drop_namespace(t.model_dump(mode="json")) for t in page.items],
        "next_cursor": page.next_cursor,
    }


@TOOLS.tool(READ_ONLY)
def thread_messages(
    ctx: Context,
    thread_id: Annotated[ThreadId, Field(description="A thread id from thread_list.")],
    limit: Annotated[int, Field(ge=1, le=200, description="Page size (default 50).")] = 50,
    cursor: Annotated[str, Field(max_length=500, description="`next_cursor` of the previous page.")] | None = None,
) -> dict[str, Any]:
    """The messages of one conversation, oldest first, one page at a time (what was actually said)."""
    who = caller(ctx, READ)
    page = container_of(ctx).threads.messages(who.namespace, thread_id, limit=limit, cursor=cursor)
    items = [
        {"id": m.id, "role": m.role, "content": m.content, "created_at": m.created_at.isoformat()} for m in page.items
    ]
    return {"items": items, "next_cursor": page.next_cursor}


# -- the summary of a thread's server-kept history (README, "Server-kept history") ------------
@TOOLS.tool(READ_ONLY)
def thread_summary(
    ctx: Context,
    thread_id: Annotated[str, Field(min_length=1, max_length=200, description="A thread id.")],
) -> dict[str, Any]:
    """The running summary the server keeps of a thread's older turns (for clients that send only
    their newest message); empty when none was written yet."""
    who = caller(ctx, READ)
    return container_of(ctx).history.state(who.namespace, thread_id).to_dict()


@TOOLS.tool(WRITES)
def thread_summary_set(
    ctx: Context,
    thread_id: Annotated[str, Field(min_length=1, max_length=200, description="The thread to change.")],
    summary: Annotated[str, Field(max_length=50_000, description="The new summary; empty clears it.")] | None = None,
    from_thread: Annotated[
        str, Field(min_length=1, max_length=200, description="Start this thread from that thread's summary.")
    ]
    | None = None,
) -> dict[str, Any]:
    """Edit or clear a thread's kept summary, or start a (new) thread from another thread's summary.
    Pass exactly one of summary or from_thread."""
    who = caller(ctx, WRITE)
    if (summary is None) == (from_thread is None):
        raise ToolError("pass exactly one of summary or from_thread")
    if from_thread is not None:
        return container_of(ctx).history.copy_summary(who.namespace, thread_id, from_thread).to_dict()
    return container_of(ctx).history.set_summary(who.namespace, thread_id, summary or "").to_dict()
