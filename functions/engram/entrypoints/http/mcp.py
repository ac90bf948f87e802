"""The MCP server at `/mcp`: Engram's memory as tools for Claude Code, Codex, Cursor and any MCP client.

Built on the official `mcp` SDK (2.x): streamable HTTP, stateless, JSON responses. Every tool is one
call into the same services as the REST API and needs the scope of its REST twin. Requests pass a gate
first (host allowlist, API key -> Principal, 401 JSON before any MCP handling); tools read the
principal from the ASGI scope, so a key only ever touches its own namespace.

Error mapping (the MCP row of the house table): Engram errors a model can fix (not found, conflict,
invalid input, missing scope, too long) -> ``ToolError`` with the message; argument-schema failures
and unknown tools -> the SDK's own tool errors; anything else -> the SDK's generic
"Error executing tool X" (logged with its traceback); the server keeps running.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Annotated, Any, Literal, TypeVar, cast
from urllib.parse import parse_qsl, urlencode, urlsplit

from fastapi import FastAPI
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.transport_security import TransportSecuritySettings
from mcp.types import ToolAnnotations
from pydantic import Field, ValidationError
from pydantic_core import to_jsonable_python
from starlette.requests import Request
from starlette.types import ASGIApp, Receive, Scope, Send

from engram import __version__
from engram.bootstrap import Container
from engram.domain.access import KeyRing, Principal
from engram.domain.errors import EngramError, Forbidden, RateLimited, Unauthorized
from engram.domain.models import Memory, MemoryFilter, MemoryLayer, MemoryType
from engram.domain.policies import DIGEST_MAX_CHARS, MAX_CONTENT_CHARS, MAX_TAGS
from engram.entrypoints.http.auth import token_from
from engram.entrypoints.http.errors import engram_error_response, error_response
from engram.services.library import GlossaryIn, MessageIn
from engram.services.memories import MemoryPatch, MemoryWrite, WriteResult, parse_statuses
from engram.services.ratelimit import RequestLimits

log = logging.getLogger(__name__)

PATH = "/mcp"
PRINCIPAL_KEY = "engram.principal"  # where the gate leaves the Principal in the ASGI scope

READ, WRITE, EXPORT = "memory:read", "memory:write", "export:read"

INSTRUCTIONS = """\
Engram is the user's long-term memory, shared across chat windows, clients and models.
- At the start of a session call memory_boot once: who the user is, pinned facts, the digest, glossary.
- Before answering anything that may depend on the user's history, preferences or projects, call
  memory_recall with the user's request as the query (it returns ready-to-use context text).
- Save durable facts: memory_upsert when the fact has a natural key (home:city, pref:editor) so a
  later change replaces it; memory_remember for everything else (near-duplicates are merged).
- Correct a wrong or outdated memory with memory_supersede (keeps history) or memory_update (in place).
- Never store secrets (passwords, API keys, tokens).
- Skills: the user's playbooks (SKILL.md). skill_search or skill_list finds one, skill_get loads it
  when a task calls for it; skill_import saves a new or changed one.
"""

# -- argument types (module level: the SDK evaluates annotations against this module) ----------
MemoryId = Annotated[
    str, Field(min_length=1, max_length=200, description="A memory id (`mem_...`) from search, list or a write.")
]
Content = Annotated[
    str,
    Field(
        min_length=1,
        max_length=MAX_CONTENT_CHARS,
        description="One self-contained statement, written so it makes sense without the conversation "
        '("The user\'s cat is called Mochi", not "it is Mochi").',
    ),
]
FactKey = Annotated[
    str,
    Field(
        min_length=3,
        max_length=161,
        description="Stable key `category:slug`, lower case (e.g. `home:city`, `pref:editor`, `project:engram_stack`). "
        "At most one active memory holds a key; writing the key again updates that fact.",
    ),
]
Type = Annotated[MemoryType, Field(description="Kind of memory (default `fact`).")]
Layer = Annotated[MemoryLayer, Field(description="`fragment` (default), `event` or `core` (always relevant).")]
Importance = Annotated[float, Field(ge=0.0, le=1.0, description="How much this matters, 0-1 (default 0.5).")]
Confidence = Annotated[float, Field(ge=0.0, le=1.0, description="How sure you are, 0-1 (default 0.8).")]
Tags = Annotated[
    list[Annotated[str, Field(min_length=1, max_length=64)]],
    Field(max_length=MAX_TAGS, description="Short labels for filtering."),
]
Query = Annotated[str, Field(min_length=1, max_length=8000, description="What to look for, in natural language.")]
TopK = Annotated[int, Field(ge=1, le=50, description="How many memories to return (default: the server's top_k).")]
Types = Annotated[list[MemoryType], Field(max_length=20, description="Only these memory types (empty: all).")]
MinRelevance = Annotated[
    float,
    Field(
        ge=0,
        le=1,
        description="Leave out hits whose relevance (0-1, estimated probability that the memory helps) is "
        "below this. memory_search default 0 (everything); memory_recall default: the server's floor.",
    ),
]
Status = Literal["active", "superseded", "archived", "deleted", "expired", "all"]

RemindAt = Annotated[
    datetime,
    Field(description="When to remind, ISO 8601 with the user's UTC offset (e.g. `2026-05-01T09:00:00+02:00`)."),
]

_F = TypeVar("_F", bound=Callable[..., Any])


def _aware(when: datetime | None) -> datetime | None:
    """A reminder time needs its zone: a naive one is refused rather than guessed."""
    if when is not None and when.tzinfo is None:
        raise ToolError("remind_at/until needs a UTC offset, e.g. 2026-05-01T09:00:00+02:00")
    return when


# -- helpers -----------------------------------------------------------------------------------
def _principal(ctx: Context, scope: str) -> Principal:
    """The caller, who must hold ``scope``; a missing scope is a tool error that names it."""
    request = ctx.request_context.request
    principal = request.scope.get(PRINCIPAL_KEY) if isinstance(request, Request) else None
    if not isinstance(principal, Principal):
        raise ToolError("not authenticated: send 'Authorization: Bearer <key>'")
    try:
        principal.require(scope)
    except Forbidden as exc:
        raise ToolError(exc.message) from exc
    return principal


def _model_errors(fn: _F) -> _F:
    """Turn Engram errors and request-model validation errors into tool errors the model can act on."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except EngramError as exc:
            raise ToolError(exc.message) from exc
        except ValidationError as exc:
            first = exc.errors()[0] if exc.errors() else {"loc": (), "msg": str(exc)}
            where = ".".join(str(p) for p in first.get("loc", ()))
            raise ToolError(f"{where}: {first['msg']}" if where else str(first["msg"])) from exc

    return cast(_F, wrapper)  # functools.wraps keeps the signature the SDK reads


def _memory(memory: Memory) -> dict[str, Any]:
    return dict(memory.model_dump(mode="json", exclude={"namespace", "index_ref"}))


def _written(result: WriteResult) -> dict[str, Any]:
    return {
        "memory": _memory(result.memory),
        "action": result.action,
        "created": result.created,
        "reason": result.reason,
        "superseded": _memory(result.previous) if result.previous else None,
    }


def _jsonable(value: Any) -> Any:
    return to_jsonable_python(value, exclude_none=False)


def _drop_namespace(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _drop_namespace(v) for k, v in value.items() if k != "namespace"}
    if isinstance(value, list):
        return [_drop_namespace(v) for v in value]
    return value


# -- the server ----------------------------------------------------------------------------------
def build_server(container: Container) -> MCPServer:
    """An MCPServer whose tools call ``container``'s services."""
    # MCPServer() calls logging.basicConfig(); logging belongs to the entry point, so undo it.
    root = logging.getLogger()
    root_handlers, root_level = list(root.handlers), root.level
    server: MCPServer = MCPServer(
        "engram", title="Engram memory", version=__version__, instructions=INSTRUCTIONS, log_level="WARNING"
    )
    root.handlers[:] = root_handlers
    root.setLevel(root_level)
    c = container
    ro = ToolAnnotations(read_only_hint=True, destructive_hint=False, open_world_hint=False)
    write = ToolAnnotations(read_only_hint=False, destructive_hint=False, open_world_hint=False)
    destructive = ToolAnnotations(read_only_hint=False, destructive_hint=True, open_world_hint=False)

    def tool(annotations: ToolAnnotations) -> Callable[[_F], _F]:
        def register(fn: _F) -> _F:
            server.add_tool(_model_errors(fn), name=fn.__name__, annotations=annotations, structured_output=True)
            return fn

        return register

    # -- recall ---------------------------------------------------------------------------
    @tool(ro)
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
        who = _principal(ctx, READ)
        result = c.recall.recall(
            who.namespace, query, top_k=top_k, types=tuple(types or ()), min_relevance=min_relevance
        )
        return {
            "items": [
                {"memory": _memory(h.memory), "score": round(h.score, 6), "relevance": h.relevance} for h in result.hits
            ],
            "glossary_hits": [_drop_namespace(g.model_dump(mode="json")) for g in result.glossary_hits],
        }

    @tool(ro)
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
        from engram.services.recall import render_prompt

        who = _principal(ctx, READ)
        result = c.recall.recall(
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

    @tool(ro)
    def memory_list(
        ctx: Context,
        types: Types | None = None,
        status: Annotated[list[Status], Field(max_length=6, description="Statuses (default active; `all`).")]
        | None = None,
        layer: Layer | None = None,
        tag: Annotated[str, Field(min_length=1, max_length=64)] | None = None,
        pinned: bool | None = None,
        fact_key: FactKey | None = None,
        limit: Annotated[int, Field(ge=1, le=200, description="Page size (default 50).")] = 50,
        cursor: Annotated[str, Field(max_length=500, description="`next_cursor` of the previous page.")] | None = None,
    ) -> dict[str, Any]:
        """List memories by filter (newest first), one page at a time; pass `next_cursor` back for the
        next page. Use it to browse (e.g. all pinned memories, or archived ones); to find memories by
        meaning use memory_search."""
        who = _principal(ctx, READ)
        filters = MemoryFilter(
            types=tuple(types or ()),
            statuses=parse_statuses(status),
            layer=layer,
            tag=tag,
            pinned=pinned,
            fact_key=fact_key,
        )
        page = c.memories.list_memories(who.namespace, filters, limit=limit, cursor=cursor)
        return {"items": [_memory(m) for m in page.items], "next_cursor": page.next_cursor}

    @tool(ro)
    def memory_get(
        ctx: Context,
        id: MemoryId,
        include_versions: Annotated[bool, Field(description="Also return the whole version chain.")] = False,
    ) -> dict[str, Any]:
        """Read one memory by id (any status), optionally with its version chain (oldest first)."""
        who = _principal(ctx, READ)
        out: dict[str, Any] = {"memory": _memory(c.memories.get(who.namespace, id))}
        if include_versions:
            out["versions"] = [_memory(m) for m in c.memories.versions(who.namespace, id)]
        return out

    # -- writes ---------------------------------------------------------------------------
    @tool(write)
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
        who = _principal(ctx, WRITE)
        req = MemoryWrite(
            content=content,
            type=type,
            fact_key=fact_key,
            layer=layer,
            importance=importance,
            confidence=confidence,
            pinned=pinned,
            tags=tags or [],
            source="mcp",
            external_id=external_id,
        )
        return _written(c.memories.write(who.namespace, req))

    @tool(write)
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
        who = _principal(ctx, WRITE)
        req = MemoryWrite(
            content=content,
            type=type,
            layer=layer,
            importance=importance,
            confidence=confidence,
            pinned=pinned,
            tags=tags or [],
            source="mcp",
            remind_at=_aware(remind_at),
        )
        return _written(c.memories.write(who.namespace, req, dedup=True))

    @tool(write)
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
    ) -> dict[str, Any]:
        """Edit a memory in place (no new version): fix a typo, re-tag, pin/unpin, change importance.
        Only the fields you pass change. When a fact itself changed, use memory_supersede instead."""
        who = _principal(ctx, WRITE)
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
        return {"memory": _memory(c.memories.update(who.namespace, id, MemoryPatch(**given)))}

    @tool(write)
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
    ) -> dict[str, Any]:
        """Replace an outdated or wrong memory with a corrected version. The old one becomes
        `superseded` (restorable with memory_restore); the new one keeps its fact_key unless you pass one."""
        who = _principal(ctx, WRITE)
        req = MemoryWrite(
            content=content,
            type=type,
            fact_key=fact_key,
            layer=layer,
            importance=importance,
            confidence=confidence,
            pinned=pinned,
            tags=tags or [],
            source="mcp",
        )
        return _written(c.memories.supersede(who.namespace, id, req))

    @tool(write)
    def memory_archive(ctx: Context, id: MemoryId) -> dict[str, Any]:
        """Archive a memory that is no longer relevant but should not be forgotten: it leaves recall
        and default listings; memory_restore brings it back."""
        who = _principal(ctx, WRITE)
        return {"memory": _memory(c.memories.set_status(who.namespace, id, "archived"))}

    @tool(write)
    def memory_restore(ctx: Context, id: MemoryId) -> dict[str, Any]:
        """Make an archived, deleted or superseded memory active again (it replaces the current holder
        of its fact_key, if any)."""
        who = _principal(ctx, WRITE)
        return {"memory": _memory(c.memories.restore(who.namespace, id))}

    @tool(destructive)
    def memory_delete(ctx: Context, id: MemoryId) -> dict[str, Any]:
        """Delete a memory that is wrong or that the user asked you to forget. Soft delete: restorable
        with memory_restore for 30 days, then removed for good."""
        who = _principal(ctx, WRITE)
        return {"memory": _memory(c.memories.set_status(who.namespace, id, "deleted"))}

    @tool(write)
    def memory_pin(
        ctx: Context,
        content: Annotated[str, Field(min_length=1, max_length=20000, description="The exact words to keep.")],
        reason: Annotated[str, Field(max_length=1000, description="Why this is worth keeping verbatim.")] | None = None,
        tags: Tags | None = None,
    ) -> dict[str, Any]:
        """Keep a precious note verbatim, forever (append-only; it joins the boot block): words the user
        wants preserved exactly, a promise, a milestone. For ordinary facts use memory_upsert/remember."""
        who = _principal(ctx, WRITE)
        note = c.library.add_precious(who.namespace, content, reason=reason, tags=tags or [], source="mcp")
        return {"precious": _drop_namespace(note.model_dump(mode="json"))}

    @tool(write)
    def glossary_set(
        ctx: Context,
        term: Annotated[str, Field(min_length=1, max_length=200, description="The word or name.")],
        definition: Annotated[str, Field(min_length=1, max_length=2000, description="What it means for this user.")],
        aliases: Annotated[list[Annotated[str, Field(min_length=1, max_length=200)]], Field(max_length=50)]
        | None = None,
    ) -> dict[str, Any]:
        """Define a term the user uses (a nickname, project name, private abbreviation) so recall can
        explain it. Setting an existing term (same name, any case) replaces its definition."""
        who = _principal(ctx, WRITE)
        saved = c.library.set_term(who.namespace, GlossaryIn(term=term, definition=definition, aliases=aliases or []))
        return {"term": _drop_namespace(saved.model_dump(mode="json"))}

    @tool(write)
    def digest_set(
        ctx: Context,
        content: Annotated[
            str,
            Field(max_length=DIGEST_MAX_CHARS, description=f"The summary, at most {DIGEST_MAX_CHARS} characters."),
        ],
    ) -> dict[str, Any]:
        """Rewrite the digest: a short summary of who the user is and what is going on in their life
        now (at most 500 characters). It starts every boot block, so keep it current and dense."""
        who = _principal(ctx, WRITE)
        digest = c.library.set_digest(who.namespace, content)
        return {"content": digest.content, "updated_at": digest.updated_at.isoformat()}

    @tool(write)
    def memory_ingest(
        ctx: Context,
        messages: Annotated[list[MessageIn], Field(min_length=1, max_length=1000)],
    ) -> dict[str, Any]:
        """Store raw conversation messages; the extraction job later turns them into memories. Each
        message is stored once (give `id` to keep identical repeats apart)."""
        who = _principal(ctx, WRITE)
        return dict(c.library.ingest(who.namespace, messages))

    @tool(ro)
    def conversation_search(
        ctx: Context,
        query: Query,
        exclude_thread: Annotated[
            str | None,
            Field(min_length=1, max_length=200, description="The thread you are in: left out of the search."),
        ] = None,
        threads: Annotated[int | None, Field(ge=1, le=10, description="At most this many threads.")] = None,
        fragments: Annotated[
            int | None, Field(ge=1, le=10, description="At most this many fragments per thread.")
        ] = None,
        neighbours: Annotated[
            int | None, Field(ge=0, le=5, description="Messages kept either side of each matched message.")
        ] = None,
        min_relevance: MinRelevance = 0.0,
    ) -> dict[str, Any]:
        """Search what was said in the user's past conversations (threads): each fragment is a matched
        message with its neighbouring messages, its thread's id and title and its date, best thread
        first. Use it when the user asks what you talked about before ("what did we say about the trip?");
        for facts about the user prefer memory_recall."""
        who = _principal(ctx, READ)
        result = c.conversations.search(
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
    @tool(ro)
    def thread_list(
        ctx: Context,
        limit: Annotated[int, Field(ge=1, le=200, description="Page size (default 50).")] = 50,
        cursor: Annotated[str, Field(max_length=500, description="`next_cursor` of the previous page.")] | None = None,
    ) -> dict[str, Any]:
        """The user's conversations (threads), most recently active first: id, title, message count and
        last message time. Read one with thread_messages."""
        who = _principal(ctx, READ)
        page = c.threads.list(who.namespace, limit=limit, cursor=cursor)
        return {
            "items": [_drop_namespace(t.model_dump(mode="json")) for t in page.items],
            "next_cursor": page.next_cursor,
        }

    @tool(ro)
    def thread_messages(
        ctx: Context,
        thread_id: Annotated[str, Field(min_length=1, max_length=200, description="A thread id from thread_list.")],
        limit: Annotated[int, Field(ge=1, le=200, description="Page size (default 50).")] = 50,
        cursor: Annotated[str, Field(max_length=500, description="`next_cursor` of the previous page.")] | None = None,
    ) -> dict[str, Any]:
        """The messages of one conversation, oldest first, one page at a time (what was actually said)."""
        who = _principal(ctx, READ)
        page = c.threads.messages(who.namespace, thread_id, limit=limit, cursor=cursor)
        items = [
            {"id": m.id, "role": m.role, "content": m.content, "created_at": m.created_at.isoformat()}
            for m in page.items
        ]
        return {"items": items, "next_cursor": page.next_cursor}

    # -- reminders ------------------------------------------------------------------------
    @tool(ro)
    def reminder_list(
        ctx: Context,
        status: Annotated[
            Literal["upcoming", "delivered", "missed"],
            Field(description="`upcoming` (not delivered yet), `delivered`, or `missed` (long past due, never shown)."),
        ] = "upcoming",
    ) -> dict[str, Any]:
        """The user's reminders (memories with a `remind_at`), soonest first, with their memory ids."""
        who = _principal(ctx, READ)
        return {"items": c.reminders.list(who.namespace, status)}

    @tool(write)
    def reminder_snooze(ctx: Context, memory_id: MemoryId, until: RemindAt) -> dict[str, Any]:
        """Move a reminder to a later time (a delivered or missed one fires again then)."""
        who = _principal(ctx, WRITE)
        row = c.reminders.snooze(who.namespace, memory_id, until)
        return {"memory_id": row.memory_id, "remind_at": row.remind_at.isoformat(), "status": row.status}

    @tool(write)
    def reminder_cancel(ctx: Context, memory_id: MemoryId) -> dict[str, Any]:
        """Stop a reminder so it is never shown; the memory itself stays (its remind_at is cleared)."""
        who = _principal(ctx, WRITE)
        row = c.reminders.cancel(who.namespace, memory_id)
        return {"memory_id": row.memory_id, "status": row.status}

    # -- overview -------------------------------------------------------------------------
    @tool(ro)
    def memory_boot(ctx: Context) -> dict[str, Any]:
        """The cold-boot package for a new session: digest, yesterday's log, pinned/identity/persona
        memories, precious notes, glossary and stats. Call once at the start of a session."""
        who = _principal(ctx, READ)
        return dict(_drop_namespace(_jsonable(c.boot.package(who.namespace))))

    @tool(ro)
    def digest_get(ctx: Context) -> dict[str, Any]:
        """Read the digest (the user's ≤500-character summary); empty when none was written yet."""
        who = _principal(ctx, READ)
        digest = c.library.get_digest(who.namespace)
        return {
            "content": digest.content if digest else "",
            "updated_at": digest.updated_at.isoformat() if digest else None,
        }

    @tool(ro)
    def memory_stats(ctx: Context) -> dict[str, Any]:
        """Counts: memories by status and type, pending review candidates, messages, precious notes, glossary."""
        who = _principal(ctx, READ)
        return dict(_jsonable(c.library.stats(who.namespace)))

    @tool(ro)
    def memory_export(ctx: Context) -> dict[str, Any]:
        """Export every row of the user's memory as one JSON document (memories, messages, precious,
        glossary, digest, logs). Large; use only when the user asks for a backup or export."""
        who = _principal(ctx, EXPORT)
        return dict(c.transfer.export(who.namespace))

    from engram.entrypoints.http import mcp_skills

    mcp_skills.register(tool, c, ro, write, destructive)
    return server


# -- transport: host allowlist + authentication gate ----------------------------------------------
def host_allowed(host: str | None, rules: Sequence[str]) -> bool:
    """``name`` exact, ``name:*`` any port, ``*.suffix`` any subdomain (any port), ``*`` anything."""
    if not host:
        return False
    host = host.lower()
    bare = host if host.startswith("[") and host.endswith("]") else host.rsplit(":", 1)[0]
    for rule in (r.lower() for r in rules):
        if rule == "*" or host == rule:
            return True
        if rule.endswith(":*") and host.startswith(rule[:-1]):
            return True
        if rule.startswith("*.") and bare.endswith(rule[1:]):
            return True
    return False


def security_settings(rules: Sequence[str]) -> TransportSecuritySettings:
    """The SDK's own DNS-rebinding check, mirroring the gate where its syntax can say the same."""
    if any(r == "*" or r.startswith("*.") for r in rules):
        # Suffix wildcards are beyond the SDK's syntax; the gate enforces them before the SDK runs.
        return TransportSecuritySettings(enable_dns_rebinding_protection=False)
    origins = [f"{scheme}://{r}" for r in rules for scheme in ("http", "https")]
    return TransportSecuritySettings(allowed_hosts=list(rules), allowed_origins=origins)


def strip_query_token(scope: Scope) -> str | None:
    """Remove ``token`` from the query string in place (so access logs never see it); return it."""
    raw = scope.get("query_string", b"")
    if b"token" not in raw:
        return None
    pairs = parse_qsl(raw.decode("latin-1"), keep_blank_values=True)
    token = next((v for k, v in pairs if k == "token"), None)
    scope["query_string"] = urlencode([(k, v) for k, v in pairs if k != "token"]).encode("latin-1")
    return token or None


class McpGate:
    """In front of the SDK: strip a query token, check Host/Origin, authenticate, then hand over."""

    def __init__(
        self,
        app: ASGIApp,
        keys: KeyRing,
        *,
        hosts: Sequence[str],
        allow_query_token: bool,
        limits: RequestLimits | None = None,
    ) -> None:
        self.app = app
        self.keys = keys
        self.limits = limits  # None: no limit
        self.hosts = tuple(hosts)
        self.allow_query_token = allow_query_token

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        query_token = strip_query_token(scope)
        request = Request(scope)
        if not host_allowed(request.headers.get("host"), self.hosts):
            log.warning("mcp: rejected Host header %r (see ENGRAM_MCP_ALLOWED_HOSTS)", request.headers.get("host"))
            response = error_response(421, "host not allowed for /mcp", "invalid_request_error", "host_not_allowed")
            await response(scope, receive, send)
            return
        origin = request.headers.get("origin")
        if origin and not host_allowed(urlsplit(origin).netloc, self.hosts):
            response = error_response(403, "origin not allowed for /mcp", "permission_error", "origin_not_allowed")
            await response(scope, receive, send)
            return
        token = token_from(request)
        if token is None and query_token is not None:
            if not self.allow_query_token:
                response = error_response(
                    401,
                    "query tokens are off: send 'Authorization: Bearer <key>' (or set ENGRAM_MCP_ALLOW_QUERY_TOKEN)",
                    "authentication_error",
                    "query_token_disabled",
                )
                await response(scope, receive, send)
                return
            token = query_token
        try:
            principal: Principal = self.keys.authenticate(token)
            if self.limits is not None:
                self.limits.check(principal, "requests")
        except (Unauthorized, RateLimited) as exc:
            await engram_error_response(exc)(scope, receive, send)
            return
        if scope["method"] == "GET":
            # Stateless with JSON responses: no server-initiated stream to offer. The spec's answer is
            # 405; the SDK would instead hold an idle SSE stream open (on Lambda, until the timeout).
            message = "GET /mcp opens no stream on this server: POST JSON-RPC"
            response = error_response(405, message, "invalid_request_error", "method_not_allowed")
            response.headers["allow"] = "POST, DELETE"
            await response(scope, receive, send)
            return
        scope[PRINCIPAL_KEY] = principal
        await self.app(scope, receive, send)


def install(app: FastAPI, container: Container) -> None:
    """Serve the MCP server at ``/mcp`` and run its session manager inside the host app's lifespan."""
    settings = container.settings
    server = build_server(container)
    hosts = list(settings.mcp_allowed_hosts)
    server.streamable_http_app(
        streamable_http_path=PATH, stateless_http=True, json_response=True, transport_security=security_settings(hosts)
    )
    manager = server.session_manager
    gate = McpGate(
        manager.handle_request,
        container.keys,
        hosts=hosts,
        allow_query_token=settings.mcp_allow_query_token,
        limits=container.limits,
    )
    # Routes (not a Mount) so `/mcp` itself answers without a redirect to `/mcp/`.
    # The gate is an ASGI app, which a Route serves as such (Starlette's stubs only name request handlers).
    app.add_route(PATH, gate, include_in_schema=False)  # type: ignore[arg-type]
    app.add_route(PATH + "/", gate, include_in_schema=False)  # type: ignore[arg-type]
    app.state.startup_hooks.append(lambda _app: manager.run())
    app.state.mcp_server = server
