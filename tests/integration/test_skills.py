"""The skills library: versions, files, allocation, search, soft delete (service with a manual clock),
REST over real HTTP, the MCP tools, and injection into an agent's chats through the gateway."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from engram.adapters.storage.blobs import InMemoryBlobStore, LocalBlobStore
from engram.adapters.storage.skills import InMemorySkillStore
from engram.domain.errors import InvalidInput, NotFound
from engram.domain.skills import MAX_FILE_BYTES
from engram.services.library.skills import SkillService

from tests.conftest import OTHER_KEY, EngramServer
from tests.fakes.clock import ManualClock
from tests.fakes.upstream import Reply
from tests.integration.chat_support import OWNER_KEY as GATEWAY_KEY
from tests.integration.chat_support import make_gateway, upstream
from tests.integration.test_mcp import _text, mcp_client

__all__ = ["make_gateway", "upstream"]  # fixtures

SKILL_MD = """---
name: pdf-tools
description: Fill, merge and split PDF forms
tags: [pdf, documents]
---
# PDF tools

Use `scripts/fill.py` to fill a form; 合并 PDF with pdftk.
"""


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
def service(clock: ManualClock) -> SkillService:
    return SkillService(InMemorySkillStore(), InMemoryBlobStore(), clock)


def test_versions_change_only_with_content_and_each_stays_readable(service: SkillService) -> None:
    # Given a SKILL.md with front matter and a resource file
    first = service.import_("alice", SKILL_MD, files={"scripts/fill.py": b"print('fill')"})
    assert first.created and first.version.version == 1
    assert (first.skill.name, first.skill.description, first.skill.tags) == (
        "pdf-tools",
        "Fill, merge and split PDF forms",
        ("pdf", "documents"),
    )
    # When the same content is imported again / Then it is the same version and nothing is written
    again = service.import_("alice", SKILL_MD, files={"scripts/fill.py": b"print('fill')"})
    assert not again.created and again.version.version == 1
    assert len(service.versions("alice", "pdf-tools")) == 1
    # When the text changes (files omitted: kept) / Then version 2, with the file still there
    second = service.import_("alice", SKILL_MD + "\nAlso: rotate pages.\n")
    assert second.created and second.version.version == 2
    assert [f.path for f in second.version.files] == ["scripts/fill.py"]
    # And every version stays readable, pinned by number
    assert service.get("alice", "pdf-tools", 1)[1].content == SKILL_MD
    assert service.get("alice", "pdf-tools")[1].version == 2
    assert service.get_file("alice", "pdf-tools", "scripts/fill.py", 1)[1] == b"print('fill')"
    # A changed file makes a version too; the old version keeps its bytes
    third = service.put_file("alice", "pdf-tools", "scripts/fill.py", b"print('fill v2')")
    assert third.version.version == 3
    assert service.get_file("alice", "pdf-tools", "scripts/fill.py", 2)[1] == b"print('fill')"
    assert service.get_file("alice", "pdf-tools", "scripts/fill.py")[1] == b"print('fill v2')"
    # Restoring version 1 writes it again as the newest
    restored = service.restore_version("alice", "pdf-tools", 1)
    assert restored.version.version == 4 and restored.version.restored_from == 1
    assert restored.version.content == SKILL_MD
    assert service.get_file("alice", "pdf-tools", "scripts/fill.py")[1] == b"print('fill')"
    with pytest.raises(NotFound):
        service.get("alice", "pdf-tools", 9)


def test_names_paths_and_sizes_are_checked(service: SkillService) -> None:
    for bad in ("../etc", "a/b", "", "-x", "x" * 65):
        with pytest.raises(InvalidInput):
            service.import_("alice", "# body", name=bad)
    with pytest.raises(InvalidInput, match="needs a name"):
        service.import_("alice", "# no front matter, no name")
    service.import_("alice", SKILL_MD)
    for path in ("../secret", "/etc/passwd", "a/../../b", ".hidden", "a//b", "a/b/c/d/e", "SKILL.md", "x\\y"):
        with pytest.raises(InvalidInput, match=r"invalid file path|SKILL\.md is the skill itself"):
            service.put_file("alice", "pdf-tools", path, b"x")
    with pytest.raises(InvalidInput, match="limit is"):
        service.put_file("alice", "pdf-tools", "big.bin", b"x" * (MAX_FILE_BYTES + 1))
    with pytest.raises(InvalidInput, match="add up to"):
        service.import_("alice", SKILL_MD, files={f"f{n}.bin": b"x" * MAX_FILE_BYTES for n in range(9)})
    assert len(service.versions("alice", "pdf-tools")) == 1  # nothing refused was written


def test_allocation_search_namespaces_and_soft_delete(service: SkillService, clock: ManualClock) -> None:
    service.import_("alice", SKILL_MD)
    service.import_("alice", "# Git hygiene\nRebase before you push.", name="git-hygiene", tags=["git"])
    service.import_("bob", "# Bob's own", name="pdf-tools")
    service.allocate("alice", "pdf-tools", "claude-code")
    service.allocate("alice", "git-hygiene", "codex")
    assert [s.name for s in service.for_agent("alice", "claude-code")] == ["pdf-tools"]
    assert [s.name for s in service.list_skills("alice", tag="git")] == ["git-hygiene"]
    # Search uses the memories' tokenizer: stems, and CJK bigrams
    assert next(s.name for s, _ in service.search("alice", "merging pdfs")) == "pdf-tools"
    assert [s.name for s, _ in service.search("alice", "合并")] == ["pdf-tools"]
    assert [s.name for s, _ in service.search("alice", "rebase")] == ["git-hygiene"]
    assert service.search("bob", "rebase") == []  # bob never sees alice's skills
    assert service.get("bob", "pdf-tools")[1].content == "# Bob's own"
    # Deleting hides it everywhere; it can be restored within 30 days
    service.delete("alice", "pdf-tools")
    assert service.for_agent("alice", "claude-code") == [] and service.search("alice", "pdf") == []
    with pytest.raises(NotFound, match="deleted"):
        service.get("alice", "pdf-tools")
    assert [s.name for s in service.list_skills("alice", deleted=True)] == ["pdf-tools"]
    clock.advance(days=29)
    assert service.restore("alice", "pdf-tools").agents == ("claude-code",)
    assert service.get("alice", "pdf-tools")[1].version == 1
    # After 30 days a deleted skill is gone for good, with its versions
    service.delete("alice", "pdf-tools")
    clock.advance(days=30, seconds=1)
    with pytest.raises(NotFound):
        service.restore("alice", "pdf-tools")
    assert service.import_("alice", SKILL_MD).version.version == 1  # a fresh start


def test_local_files_stay_in_their_directory(tmp_path: Path) -> None:
    blobs = LocalBlobStore(tmp_path / "skills")
    blobs.put("skills/ab/cd", b"data")
    assert blobs.get("skills/ab/cd") == b"data" and blobs.get("skills/none") is None
    assert (tmp_path / "skills" / "skills" / "ab" / "cd").stat().st_mode & 0o077 == 0
    with pytest.raises(ValueError):
        blobs.get("../outside")


# -- REST ------------------------------------------------------------------------------------------
def test_rest_import_versions_files_allocate_delete(server: EngramServer) -> None:
    with server.client() as alice, server.client(OTHER_KEY) as bob:
        # Given a skill imported with a resource file (a real SQLite data dir: the store's file + files)
        resp = alice.post("/v1/skills", json={"content": SKILL_MD, "files": {"scripts/fill.py": "print(1)"}})
        assert resp.status_code == 201 and resp.json()["version"]["version"] == 1
        assert alice.post("/v1/skills", json={"content": SKILL_MD}).status_code == 200  # unchanged
        resp = alice.post("/v1/skills", json={"content": SKILL_MD + "\nv2\n"})
        assert resp.status_code == 201 and resp.json()["version"]["version"] == 2
        assert [v["version"] for v in alice.get("/v1/skills/pdf-tools/versions").json()["items"]] == [1, 2]
        assert alice.get("/v1/skills/pdf-tools?version=1").json()["version"]["content"] == SKILL_MD
        # Files: raw bytes in, raw bytes out; unsafe paths and oversize files refused
        file = alice.get("/v1/skills/pdf-tools/files/scripts/fill.py")
        assert file.content == b"print(1)" and file.headers["content-type"] == "application/octet-stream"
        put = alice.put("/v1/skills/pdf-tools/files/data/table.bin", content=bytes(range(256)))
        assert put.status_code == 201 and put.json()["version"]["version"] == 3
        assert alice.get("/v1/skills/pdf-tools/files/data/table.bin").content == bytes(range(256))
        assert alice.put("/v1/skills/pdf-tools/files/..%2F..%2Fetc", content=b"x").status_code == 400
        big = alice.put("/v1/skills/pdf-tools/files/big.bin", content=b"x" * (MAX_FILE_BYTES + 1))
        assert big.status_code == 400 and big.json()["error"]["code"] == "file_too_large"
        assert list((server.data_dir / "skills").rglob("*")), "files are kept in the data dir"
        # Allocation and listing by agent
        alice.post("/v1/skills/pdf-tools/allocate", json={"agent_id": "claude-code"}).raise_for_status()
        assert [s["name"] for s in alice.get("/v1/skills?agent=claude-code").json()["items"]] == ["pdf-tools"]
        assert alice.get("/v1/skills?query=merge").json()["items"][0]["name"] == "pdf-tools"
        # Another namespace sees none of it
        assert bob.get("/v1/skills").json()["items"] == []
        assert bob.get("/v1/skills/pdf-tools").status_code == 404
        assert bob.get("/v1/skills/pdf-tools/files/scripts/fill.py").status_code == 404
        assert bob.delete("/v1/skills/pdf-tools").status_code == 404
        # Soft delete and restore
        assert alice.delete("/v1/skills/pdf-tools").json()["skill"]["deleted_at"]
        assert alice.get("/v1/skills/pdf-tools").status_code == 404
        assert alice.post("/v1/skills/pdf-tools/restore").json()["skill"]["deleted_at"] is None
        restored = alice.post("/v1/skills/pdf-tools/restore", json={"version": 1})
        assert restored.status_code == 201 and restored.json()["version"]["restored_from"] == 1
        # Bad bodies are errors in the one shape
        assert alice.post("/v1/skills", json={"content": "# no name"}).json()["error"]["code"] == "missing_name"
        assert alice.post("/v1/skills/x/allocate", json={"agent_id": "bad id!"}).status_code in (400, 404)


async def call(client: Any, tool: str, **arguments: Any) -> dict[str, Any]:
    """A tool call that must succeed (the skill tools take `name`, so the tool is `tool` here)."""
    result = await client.call_tool(tool, arguments)
    assert not result.is_error, f"{tool} failed: {_text(result)}"
    return dict(result.structured_content)


async def call_error(client: Any, tool: str, **arguments: Any) -> str:
    result = await client.call_tool(tool, arguments)
    assert result.is_error, f"{tool} unexpectedly succeeded: {result.structured_content}"
    return _text(result)


def test_mcp_tools_import_version_allocate_search_files(server: EngramServer) -> None:
    async def scenario() -> None:
        async with mcp_client(server) as client:
            tools = {t.name for t in (await client.list_tools()).tools}
            assert {"skill_import", "skill_list", "skill_get", "skill_search", "skill_allocate"} <= tools
            assert {"skill_delete", "skill_files"} <= tools
            first = await call(client, "skill_import", content=SKILL_MD, files={"scripts/fill.py": "print(1)"})
            assert first["created"] and first["version"]["version"] == 1
            second = await call(client, "skill_import", content=SKILL_MD + "\nchanged\n")
            assert second["version"]["version"] == 2
            pinned = await call(client, "skill_get", name="pdf-tools", version=1)
            assert pinned["version"]["content"] == SKILL_MD
            await call(client, "skill_allocate", name="pdf-tools", agent_id="claude-code")
            listed = await call(client, "skill_list", agent_id="claude-code")
            assert [s["name"] for s in listed["items"]] == ["pdf-tools"]
            found = await call(client, "skill_search", query="fill forms")
            assert found["items"][0]["name"] == "pdf-tools"
            files = await call(client, "skill_files", name="pdf-tools")
            assert [f["path"] for f in files["files"]] == ["scripts/fill.py"]
            content = await call(client, "skill_files", name="pdf-tools", path="scripts/fill.py")
            assert content["content"] == "print(1)" and content["encoding"] == "text"
            assert "invalid file path" in await call_error(
                client, "skill_import", content=SKILL_MD, files={"../x": "y"}
            )
            await call(client, "skill_delete", name="pdf-tools")
            assert "deleted" in await call_error(client, "skill_get", name="pdf-tools")
            await call(client, "skill_delete", name="pdf-tools", restore=True)
        async with mcp_client(server, OTHER_KEY) as bob:
            assert (await call(bob, "skill_list"))["items"] == []
            assert "no skill" in await call_error(bob, "skill_get", name="pdf-tools")

    asyncio.run(scenario())


def _allocate_two(skills: SkillService) -> None:
    """pdf-tools for claude-code, deploy for codex."""
    skills.import_("default", SKILL_MD)
    skills.import_("default", "# Deploy\nShip with cdk deploy.", name="deploy", description="How to deploy")
    skills.allocate("default", "pdf-tools", "claude-code")
    skills.allocate("default", "deploy", "codex")


def test_an_agents_chats_list_its_skills_in_the_boot_block(make_gateway) -> None:  # type: ignore[no-untyped-def]
    import httpx

    gateway = make_gateway()
    _allocate_two(gateway.container.skills)
    headers = {"authorization": f"Bearer {GATEWAY_KEY}"}
    body = {"model": "companion", "messages": [{"role": "user", "content": "hello"}]}
    with httpx.Client(base_url=gateway.url, headers=headers, timeout=30) as http:
        gateway.upstream.script(Reply(text="hi"), Reply(text="hi"), Reply(text="hi"))
        # Given Claude Code identifies itself; When it chats / Then its skill is in the boot block
        http.post("/v1/chat/completions", json=body, headers={"x-engram-agent": "claude-code"}).raise_for_status()
        system = gateway.upstream.last().json["messages"][0]
        assert system["role"] == "system" and "## Skills" in system["content"]
        assert "- pdf-tools: Fill, merge and split PDF forms" in system["content"]
        assert "deploy" not in system["content"]
        # A chat without the header, or of another agent, lists only what is allocated to it
        http.post("/v1/chat/completions", json=body).raise_for_status()
        assert "## Skills" not in str(gateway.upstream.last().json["messages"])
        http.post("/v1/chat/completions", json=body, headers={"x-engram-agent": "codex"}).raise_for_status()
        assert "- deploy: How to deploy" in gateway.upstream.last().json["messages"][0]["content"]


def test_export_and_import_carry_skills_with_every_version_and_file(server: EngramServer) -> None:
    with server.client() as alice, server.client(OTHER_KEY) as bob:
        # Given a skill with two versions, a binary file, an allocation, and a deleted skill
        alice.post("/v1/skills", json={"content": SKILL_MD, "files": {"scripts/fill.py": "print(1)"}})
        alice.put("/v1/skills/pdf-tools/files/data/table.bin", content=bytes(range(256))).raise_for_status()
        alice.post("/v1/skills/pdf-tools/allocate", json={"agent_id": "claude-code"}).raise_for_status()
        alice.post("/v1/skills", json={"content": "# Old\nGone soon.", "name": "old-skill"}).raise_for_status()
        alice.delete("/v1/skills/old-skill").raise_for_status()
        exported = alice.get("/v1/export").json()
        assert [s["name"] for s in exported["skills"]] == ["old-skill", "pdf-tools"]
        # When bob imports it: a dry run first, then for real, then again
        dry = bob.post("/v1/import?dry_run=true", json=exported).json()
        assert dry["created"]["skills"] == 2 and bob.get("/v1/skills").json()["items"] == []
        real = bob.post("/v1/import", json=exported).json()
        again = bob.post("/v1/import", json=exported).json()
        # Then the same counts, and nothing added the second time
        assert real["created"]["skills"] == 2 and again["created"]["skills"] == 0 and again["skipped"]["skills"] == 2
        # And every version, file and setting came along
        versions = bob.get("/v1/skills/pdf-tools/versions").json()["items"]
        assert [v["version"] for v in versions] == [1, 2]
        assert bob.get("/v1/skills/pdf-tools/files/data/table.bin", params={"version": 2}).content == bytes(range(256))
        assert bob.get("/v1/skills/pdf-tools/files/scripts/fill.py", params={"version": 1}).content == b"print(1)"
        assert bob.get("/v1/skills?agent=claude-code").json()["items"][0]["name"] == "pdf-tools"
        assert bob.get("/v1/skills/old-skill").status_code == 404
        assert [s["name"] for s in bob.get("/v1/skills?deleted=true").json()["items"]] == ["old-skill"]
        # A broken skill row is refused with its reason, the rest still imports
        broken = {"skills": [{"name": "../x", "versions": [{"content": "x"}]}, {"name": "ok", "versions": []}]}
        report = bob.post("/v1/import", json=broken).json()
        assert report["refused"]["skills"] == 2
        assert {p["code"] for p in report["problems"]} == {"invalid_skill_name", "invalid_input"}


def test_a_keys_agent_setting_lists_its_skills_on_both_doors(make_gateway, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    import json

    import httpx

    # Given a key configured with `agent: claude-code` (its client sends no header), Claude as the model,
    # and skills allocated to claude-code and to codex
    keys = tmp_path / "keys.json"
    cc_key = "ek-claude-code-key-1"
    entry = {"name": "cc", "key": cc_key, "namespace": "default", "scopes": ["chat:proxy"], "agent": "claude-code"}
    keys.write_text(json.dumps([entry]))
    keys.chmod(0o600)
    gateway = make_gateway(chat_model="claude-test", keys_file=str(keys))
    _allocate_two(gateway.container.skills)
    turn1 = [{"role": "user", "content": "hello"}]
    turn2 = [*turn1, {"role": "assistant", "content": "hi"}, {"role": "user", "content": "fill my tax form"}]
    doors = {
        "openai": lambda msgs: {"model": "companion", "messages": msgs},
        "anthropic": lambda msgs: {"model": "companion", "max_tokens": 64, "messages": msgs},
    }

    def system_seen(key: str, door: str, messages: list[dict[str, str]], **headers: str) -> str:
        path = "/v1/chat/completions" if door == "openai" else "/v1/messages"
        auth = {"authorization": f"Bearer {key}", **headers}
        httpx.post(gateway.url + path, json=doors[door](messages), headers=auth, timeout=30).raise_for_status()
        sent = gateway.upstream.last()
        assert sent.path.endswith("/messages")  # Claude: the Anthropic upstream, `system` as blocks
        return json.dumps(sent.json.get("system", []))  # no boot block at all: no system

    for door in doors:
        # When the key chats on this door, two turns / Then the boot block lists claude-code's skill only
        first = system_seen(cc_key, door, turn1)
        second = system_seen(cc_key, door, turn2)
        assert "## Skills" in first and "pdf-tools: Fill, merge and split PDF forms" in first
        assert "deploy" not in first
        # And the cached prefix (system, markers included) is byte-identical between the turns
        assert first == second and "cache_control" in first
        # And a header wins over the key's setting
        codex = system_seen(cc_key, door, turn1, **{"x-engram-agent": "codex"})
        assert "- deploy: How to deploy" in codex and "pdf-tools" not in codex
        # And a key without the setting, sending no header, gets no skills
        assert "## Skills" not in system_seen(GATEWAY_KEY, door, turn1)


def test_a_base_url_naming_the_agent_lists_its_skills_on_both_doors(make_gateway) -> None:  # type: ignore[no-untyped-def]
    import json

    import httpx

    # Given skills allocated to codex and claude-code, and clients whose base URL names their agent
    gateway = make_gateway(chat_model="claude-test")
    _allocate_two(gateway.container.skills)
    auth = {"authorization": f"Bearer {GATEWAY_KEY}"}
    turn1 = [{"role": "user", "content": "hello"}]
    turn2 = [*turn1, {"role": "assistant", "content": "hi"}, {"role": "user", "content": "deploy it"}]

    def system_seen(url: str, messages: list[dict[str, str]], **headers: str) -> str:
        body: dict[str, object] = {"model": "companion", "messages": messages}
        if url.endswith("/messages"):
            body["max_tokens"] = 64
        httpx.post(gateway.url + url, json=body, headers={**auth, **headers}, timeout=30).raise_for_status()
        return json.dumps(gateway.upstream.last().json.get("system", []))

    for url in ("/agents/codex/v1/chat/completions", "/agents/codex/v1/messages"):
        # When codex's client chats through its base URL, two turns / Then its skill is listed, stably
        first, second = system_seen(url, turn1), system_seen(url, turn2)
        assert "- deploy: How to deploy" in first and "pdf-tools" not in first and first == second
        # And a header still wins
        assert "pdf-tools" in system_seen(url, turn1, **{"x-engram-agent": "claude-code"})
    # And the base URL's models list answers like /v1/models; a malformed agent id is a 400 in the door's shape
    with httpx.Client(base_url=gateway.url, headers=auth, timeout=30) as http:
        assert http.get("/agents/codex/v1/models").json() == http.get("/v1/models").json()
        bad = http.post("/agents/bad%20id/v1/messages", json={"model": "companion", "max_tokens": 8, "messages": turn1})
        assert bad.status_code == 400 and bad.json()["error"]["code"] == "invalid_agent_id"
        # And so is a malformed `x-engram-agent` header, on every door, before the upstream is called;
        # an empty one is as if not sent
        calls = len(gateway.upstream.requests)
        for door in ("/v1/chat/completions", "/v1/messages", "/agents/codex/v1/chat/completions"):
            body = {"model": "companion", "max_tokens": 8, "messages": turn1}
            refused = http.post(door, json=body, headers={"x-engram-agent": "../etc"})
            assert refused.status_code == 400 and refused.json()["error"]["code"] == "invalid_agent_id", door
        assert len(gateway.upstream.requests) == calls
        assert "- deploy: How to deploy" in system_seen("/agents/codex/v1/messages", turn1, **{"x-engram-agent": ""})
        assert bad.json()["type"] == "error"  # the Anthropic door's error shape
