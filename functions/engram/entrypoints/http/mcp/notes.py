"""The note tools of the MCP server: keep a precious note, define a glossary term, rewrite the digest
(twins of `/v1/precious`, `/v1/glossary`, `/v1/digest`)."""

from __future__ import annotations

from typing import Annotated, Any

from mcp.server.mcpserver import Context
from pydantic import Field

from engram.domain.policies import DIGEST_RULE
from engram.entrypoints.http.mcp.toolkit import WRITE, WRITES, Tags, ToolList, caller, container_of, drop_namespace
from engram.services.library.notes import GlossaryIn

TOOLS = ToolList()


@TOOLS.tool(WRITES)
def memory_pin(
    ctx: Context,
    content: Annotated[str, Field(min_length=1, max_length=20000, description="The exact words to keep.")],
    reason: Annotated[str, Field(max_length=1000, description="Why this is worth keeping verbatim.")] | None = None,
    tags: Tags | None = None,
) -> dict[str, Any]:
    """Keep a precious note verbatim, forever (append-only; it joins the boot block): words the user
    wants preserved exactly, a promise, a milestone. For ordinary facts use memory_upsert/remember."""
    who = caller(ctx, WRITE)
    note = container_of(ctx).notes.add_precious(who.namespace, content, reason=reason, tags=tags or [], source="mcp")
    return {"precious": drop_namespace(note.model_dump(mode="json"))}


@TOOLS.tool(WRITES)
def glossary_set(
    ctx: Context,
    term: Annotated[str, Field(min_length=1, max_length=200, description="The word or name.")],
    definition: Annotated[str, Field(min_length=1, max_length=2000, description="What it means for this user.")],
    aliases: Annotated[list[Annotated[str, Field(min_length=1, max_length=200)]], Field(max_length=50)] | None = None,
) -> dict[str, Any]:
    """Define a term the user uses (a nickname, project name, private abbreviation) so recall can
    explain it. Setting an existing term (same name, any case) replaces its definition."""
    who = caller(ctx, WRITE)
    saved = container_of(ctx).notes.set_term(
        who.namespace, GlossaryIn(term=term, definition=definition, aliases=aliases or [])
    )
    return {"term": drop_namespace(saved.model_dump(mode="json"))}


@TOOLS.tool(WRITES)
def digest_set(
    ctx: Context,
    content: Annotated[
        str,
        Field(description=f"The summary. {DIGEST_RULE}"),
    ],
) -> dict[str, Any]:
    """Rewrite the digest: a short summary of who the user is and what is going on in their life
    now (at most 500 characters; a longer one is cut at a sentence end, the result shows what was
    kept). It starts every boot block, so keep it current and dense."""
    who = caller(ctx, WRITE)
    digest = container_of(ctx).notes.set_digest(who.namespace, content)
    return {"content": digest.content, "updated_at": digest.updated_at.isoformat()}
