"""cf-agent-memory's documented MCP calls, replayed against Engram (README, "Coming from cf-agent-memory").

Each call is written as its README documents it (tool names and arguments: `memory_remember(content,
key?, kind?, layer?, tags?, importance?)`, `memory_recall(query, limit?)`, `memory_list(limit?, offset?,
layer?, kind?, tag?)`, `memory_update`, `memory_forget(id)`, `memory_stats`, the six `skill_*` tools),
over real HTTP with the official client. (cf's `X-User-Id` header has no part here: an Engram key
names its namespace.)
"""

from __future__ import annotations

from typing import Any

from tests.conftest import EngramServer
from tests.integration.test_mcp import call, call_error, mcp_client


async def test_same_key_supersedes_and_kind_layer_are_kept(server: EngramServer) -> None:
    async with mcp_client(server) as mcp:
        # Given cf's "same key overrides": two writes of key='project.database'
        first = await call(
            mcp, "memory_remember", content="The project database is MySQL", key="project.database",
            kind="fact", layer="l2", tags=["project"], importance=0.7,
        )  # fmt: skip
        second = await call(
            mcp, "memory_remember", content="The project database is PostgreSQL 16", key="project.database",
            kind="fact", layer="l2",
        )  # fmt: skip

        # Then the dotted key is Engram's category:slug, the layer l2 an event, and the second replaces the first
        assert first["memory"]["fact_key"] == "project:database"
        assert first["memory"]["layer"] == "event" and first["memory"]["importance"] == 0.7
        assert second["action"] == "superseded" and second["superseded"]["id"] == first["memory"]["id"]
        listed = await call(mcp, "memory_list", kind="fact", layer="l2")
        assert [m["content"] for m in listed["items"]] == ["The project database is PostgreSQL 16"]

        # And a keyless remember with a kind is stored under that type (instruction), layer l3 -> core
        rule = await call(mcp, "memory_remember", content="Always answer in English", kind="instruction", layer="l3")
        assert (rule["memory"]["type"], rule["memory"]["layer"]) == ("instruction", "core")


async def test_recall_limit_list_offset_paging_and_kind_filter(server: EngramServer) -> None:
    async with mcp_client(server) as mcp:
        # Given five facts and one task
        for n in range(5):
            text = f"Deploy step {n} of the blue release is documented"
            await call(mcp, "memory_remember", content=text, kind="fact")
        await call(mcp, "memory_remember", content="Ship the blue release on Friday", kind="task")

        # When cf's memory_recall(query, limit) asks for two
        recalled = await call(mcp, "memory_recall", query="blue release deploy step", limit=2)
        # Then two come back (limit is top_k)
        assert len(recalled["hits"]) == 2

        # When memory_list pages by offset, filtered by kind
        page1 = await call(mcp, "memory_list", limit=2, offset=0, kind="fact")
        page2 = await call(mcp, "memory_list", limit=2, offset=2, kind="fact")
        page3 = await call(mcp, "memory_list", limit=2, offset=4, kind="fact")
        # Then the pages do not repeat, hold only facts and end
        ids = [m["id"] for p in (page1, page2, page3) for m in p["items"]]
        assert len(ids) == 5 == len(set(ids))
        assert {m["type"] for p in (page1, page2, page3) for m in p["items"]} == {"fact"}
        assert page1["next_offset"] == 2 and page3["next_cursor"] is None
        tasks = await call(mcp, "memory_list", kind="task")
        assert [m["content"] for m in tasks["items"]] == ["Ship the blue release on Friday"]


async def test_update_forget_stats_and_unknown_arguments(server: EngramServer) -> None:
    async with mcp_client(server) as mcp:
        written = await call(mcp, "memory_remember", content="The user's favourite editor is Vim", kind="fact")
        mid = written["memory"]["id"]

        # memory_update(id, content?, tags?, importance?) edits in place
        updated = await call(mcp, "memory_update", id=mid, content="The user's favourite editor is Helix",
                             tags=["editor"], importance=0.8)  # fmt: skip
        assert updated["memory"]["content"].endswith("Helix") and updated["memory"]["tags"] == ["editor"]

        # memory_forget(id) deletes it (Engram's memory_delete: soft, restorable)
        forgotten = await call(mcp, "memory_forget", id=mid)
        assert forgotten["memory"]["status"] == "deleted"

        # memory_stats counts by status and type
        stats = await call(mcp, "memory_stats")
        assert stats["memories"]["status"]["deleted"] == 1 and stats["memories"]["status"]["active"] == 0

        # An argument no tool takes is refused with the accepted names, never silently dropped
        message = await call_error(mcp, "memory_recall", query="editor", limt=3)
        assert "'limt'" in message and "top_k" in message and "limit (= top_k)" in message
        # And giving the same argument under both names is refused
        message = await call_error(mcp, "memory_recall", query="editor", limit=3, top_k=4)
        assert "either limit or top_k" in message


async def skill(mcp: Any, tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
    """A skill tool call (their argument `name` would clash with ``call``'s own)."""
    result = await mcp.call_tool(tool, arguments)
    assert not result.is_error, result.content
    assert isinstance(result.structured_content, dict)
    return result.structured_content


async def test_skill_tools_as_documented(server: EngramServer) -> None:
    text = "---\nname: release-notes\ndescription: Write release notes from merged PRs\n---\n# Steps\n1. List PRs\n"
    async with mcp_client(server) as mcp:
        # skill_import(name, content, description?, tags?): the same name again is a new version
        first = await skill(mcp, "skill_import", {"name": "release-notes", "content": text,
                            "description": "Write release notes from merged PRs", "tags": ["writing"]})  # fmt: skip
        # skill_list(limit?, offset?, tag?, agent_id?)
        listed = await skill(mcp, "skill_list", {"limit": 10, "offset": 0, "tag": "writing"})
        assert [s["name"] for s in listed["items"]] == ["release-notes"]
        again = await skill(mcp, "skill_import", {"name": "release-notes", "content": text + "2. Group by area\n"})
        assert first["created"] is True and again["version"]["version"] == first["version"]["version"] + 1
        # skill_get(name, version?) pins a version
        pinned = await skill(mcp, "skill_get", {"name": "release-notes", "version": 1})
        assert "Group by area" not in pinned["version"]["content"]
        # skill_search(query, limit?)
        found = await skill(mcp, "skill_search", {"query": "release notes", "limit": 5})
        assert found["items"][0]["name"] == "release-notes"
        # skill_allocate(name, agent_id)
        await skill(mcp, "skill_allocate", {"name": "release-notes", "agent_id": "coder"})
        mine = await skill(mcp, "skill_list", {"agent_id": "coder"})
        assert [s["name"] for s in mine["items"]] == ["release-notes"]
        # skill_delete(name)
        await skill(mcp, "skill_delete", {"name": "release-notes"})
        assert (await skill(mcp, "skill_list", {}))["items"] == []
