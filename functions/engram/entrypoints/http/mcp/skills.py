"""The skill tools of the MCP server (twins of `/v1/skills...`; README, "Skills")."""

from __future__ import annotations

import base64
from typing import Annotated, Any

from mcp.server.mcpserver import Context
from pydantic import Field

from engram.domain.skills import MAX_DESCRIPTION_CHARS, MAX_SKILL_CHARS, MAX_SKILL_FILES
from engram.entrypoints.http.mcp.toolkit import DESTROYS, READ, READ_ONLY, WRITE, WRITES, ToolList, caller, container_of
from engram.services.library.skills import ImportResult, skill_json, version_json

SkillName = Annotated[str, Field(min_length=1, max_length=64, description="The skill's name, e.g. `pdf-tools`.")]
Version = Annotated[int, Field(ge=1, le=1_000_000, description="A version number (default: the latest).")]
AgentId = Annotated[
    str, Field(min_length=1, max_length=64, description="The agent: `claude-code`, `codex`, `cursor` or any id.")
]


def _imported(result: ImportResult) -> dict[str, Any]:
    return {
        "skill": skill_json(result.skill),
        "version": version_json(result.version, content=False),
        "created": result.created,
    }


TOOLS = ToolList()


@TOOLS.tool(WRITES)
def skill_import(
    ctx: Context,
    content: Annotated[str, Field(min_length=1, max_length=MAX_SKILL_CHARS, description="The SKILL.md text.")],
    name: SkillName | None = None,
    description: Annotated[str, Field(max_length=MAX_DESCRIPTION_CHARS)] | None = None,
    tags: Annotated[list[Annotated[str, Field(max_length=64)]], Field(max_length=20)] | None = None,
    files: Annotated[
        dict[str, str],
        Field(
            max_length=MAX_SKILL_FILES,
            description="Resource files as text by relative path (replace the current ones).",
        ),
    ]
    | None = None,
) -> dict[str, Any]:
    """Import or update a skill (a SKILL.md; name, description and tags default to its front
    matter). Importing a name again makes a new version when anything changed; unchanged content
    returns the current version and writes nothing."""
    who = caller(ctx, WRITE)
    encoded = {p: t.encode() for p, t in files.items()} if files is not None else None
    result = container_of(ctx).skills.import_(
        who.namespace, content, name=name, description=description, tags=tags, files=encoded
    )
    return _imported(result)


@TOOLS.tool(READ_ONLY)
def skill_list(
    ctx: Context,
    agent_id: AgentId | None = None,
    tag: Annotated[str, Field(max_length=64)] | None = None,
    limit: Annotated[int, Field(ge=1, le=200)] = 50,
    offset: Annotated[int, Field(ge=0)] = 0,
) -> dict[str, Any]:
    """List the skill library by name (name, one-line description, tags, latest version, agents);
    with `agent_id`, only the skills allocated to that agent."""
    who = caller(ctx, READ)
    skills = container_of(ctx).skills.list_skills(who.namespace, agent=agent_id, tag=tag)
    return {"items": [skill_json(s) for s in skills[offset : offset + limit]], "total": len(skills)}


@TOOLS.tool(READ_ONLY)
def skill_get(ctx: Context, name: SkillName, version: Version | None = None) -> dict[str, Any]:
    """The full SKILL.md of a skill (latest version, or the pinned `version`) and its file list."""
    who = caller(ctx, READ)
    skill, row = container_of(ctx).skills.get(who.namespace, name, version)
    return {"skill": skill_json(skill), "version": version_json(row)}


@TOOLS.tool(READ_ONLY)
def skill_search(
    ctx: Context,
    query: Annotated[str, Field(min_length=1, max_length=500, description="Words or a question, any language.")],
    limit: Annotated[int, Field(ge=1, le=50)] = 10,
) -> dict[str, Any]:
    """Find skills by what they are for: keywords in their name, description, tags and text, and (with an
    embedder) meaning, so a paraphrase or another language finds them too; best first, score 0-1."""
    who = caller(ctx, READ)
    return {
        "items": [
            {**skill_json(s), "score": score}
            for s, score in container_of(ctx).skills.search(who.namespace, query, limit=limit)
        ]
    }


@TOOLS.tool(WRITES)
def skill_allocate(ctx: Context, name: SkillName, agent_id: AgentId, allocated: bool = True) -> dict[str, Any]:
    """Allocate a skill to an agent, so its name and description are listed in that agent's chats
    (`allocated: false` removes it)."""
    who = caller(ctx, WRITE)
    return {"skill": skill_json(container_of(ctx).skills.allocate(who.namespace, name, agent_id, allocated=allocated))}


@TOOLS.tool(DESTROYS)
def skill_delete(ctx: Context, name: SkillName, restore: bool = False) -> dict[str, Any]:
    """Delete a skill (soft: restorable for 30 days with `restore: true`, then removed with every
    version and file)."""
    who = caller(ctx, WRITE)
    action = container_of(ctx).skills.restore if restore else container_of(ctx).skills.delete
    return {"skill": skill_json(action(who.namespace, name))}


@TOOLS.tool(READ_ONLY)
def skill_files(
    ctx: Context,
    name: SkillName,
    path: Annotated[str, Field(min_length=1, max_length=200, description="A file's relative path.")] | None = None,
    version: Version | None = None,
) -> dict[str, Any]:
    """A skill's resource files: without `path` the list (path, size, sha256); with `path` that
    file's content (text, or base64 for binary files)."""
    who = caller(ctx, READ)
    if path is None:
        _, row = container_of(ctx).skills.get(who.namespace, name, version)
        return {"version": row.version, "files": [f.model_dump() for f in row.files]}
    file, data = container_of(ctx).skills.get_file(who.namespace, name, path, version)
    try:
        return {**file.model_dump(), "encoding": "text", "content": data.decode("utf-8")}
    except UnicodeDecodeError:
        return {**file.model_dump(), "encoding": "base64", "content": base64.b64encode(data).decode()}
