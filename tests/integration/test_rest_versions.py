"""People and programs editing at once (README, "Editing at the same time"): a memory read over REST or
MCP carries its version (a field, and an ETag on REST); edits, archive, delete, restore and supersede
given that version are refused with 409 `version_conflict` once the memory changed, never overwritten.

Real parts: uvicorn on loopback, SQLite store and index, the local embedder; MCP through the `mcp` SDK.
"""

from __future__ import annotations

import httpx
import pytest
from mcp.types import CallToolResult

from tests.conftest import EngramServer
from tests.integration.test_mcp import call, mcp_client


def _memory(owner: httpx.Client, content: str = "Alice lives in Berlin") -> dict[str, object]:
    created = owner.post("/v1/memories", json={"content": content, "fact_key": "profile:city"})
    assert created.status_code == 201, created.text
    return dict(created.json()["memory"])


def _conflict(resp: httpx.Response) -> None:
    assert resp.status_code == 409, resp.text
    error = resp.json()["error"]
    assert (error["type"], error["code"]) == ("conflict_error", "version_conflict")


def test_a_read_carries_its_version_as_a_field_and_an_etag(owner: httpx.Client) -> None:
    # Given a new memory
    memory = _memory(owner)
    # When it is read, then edited
    read = owner.get(f"/v1/memories/{memory['id']}")
    edited = owner.patch(f"/v1/memories/{memory['id']}", json={"tags": ["home"]})
    # Then each answer carries the version, in the body and as the ETag
    assert read.json()["version"] == 1 and read.headers["etag"] == '"1"'
    assert edited.json()["version"] == 2 and edited.headers["etag"] == '"2"'
    listed = owner.get("/v1/memories").json()["items"]
    assert [m["version"] for m in listed] == [2]


def test_an_edit_at_the_version_read_lands_and_a_stale_one_is_refused(owner: httpx.Client) -> None:
    # Given a memory two clients read at version 1
    memory = _memory(owner)
    etag = owner.get(f"/v1/memories/{memory['id']}").headers["etag"]
    # When the first saves with If-Match, and the second saves on the same read (header, then field)
    first = owner.patch(f"/v1/memories/{memory['id']}", json={"importance": 0.9}, headers={"if-match": etag})
    second = owner.patch(
        f"/v1/memories/{memory['id']}", json={"content": "Alice lives in Rome"}, headers={"if-match": etag}
    )
    third = owner.patch(f"/v1/memories/{memory['id']}", json={"content": "Alice lives in Rome", "version": 1})
    # Then the first landed, the others got 409 version_conflict, and the memory is the first one's
    assert first.status_code == 200 and first.json()["version"] == 2
    _conflict(second)
    _conflict(third)
    current = owner.get(f"/v1/memories/{memory['id']}").json()
    assert (current["content"], current["importance"], current["version"]) == ("Alice lives in Berlin", 0.9, 2)


def test_without_a_version_the_last_writer_wins_on_a_fresh_read(owner: httpx.Client) -> None:
    # Given a memory changed by someone else
    memory = _memory(owner)
    owner.patch(f"/v1/memories/{memory['id']}", json={"tags": ["a"]})
    # When an edit comes without a version / Then it applies to the current row
    resp = owner.patch(f"/v1/memories/{memory['id']}", json={"importance": 0.2})
    assert resp.status_code == 200 and resp.json()["tags"] == ["a"] and resp.json()["version"] == 3


@pytest.mark.parametrize(
    ("method", "path"),
    [("POST", "/archive"), ("DELETE", ""), ("POST", "/supersede")],
    ids=["archive", "delete", "supersede"],
)
def test_archive_delete_and_supersede_at_a_stale_version_are_refused(
    owner: httpx.Client, method: str, path: str
) -> None:
    # Given a memory read at version 1, then edited by another client
    memory = _memory(owner)
    owner.patch(f"/v1/memories/{memory['id']}", json={"content": "Alice lives in Lisbon"})
    body = {"content": "Alice lives in Porto"} if path == "/supersede" else None
    # When the first client acts on what it read, by If-Match and by the version field / query
    by_header = owner.request(method, f"/v1/memories/{memory['id']}{path}", json=body, headers={"if-match": '"1"'})
    if body is not None:
        by_field = owner.request(method, f"/v1/memories/{memory['id']}{path}", json={**body, "version": 1})
    else:
        by_field = owner.request(method, f"/v1/memories/{memory['id']}{path}", params={"version": 1})
    # Then both are refused and the edit stands, still the one active memory of its key
    _conflict(by_header)
    _conflict(by_field)
    current = owner.get(f"/v1/memories/{memory['id']}").json()
    assert (current["status"], current["content"]) == ("active", "Alice lives in Lisbon")
    # And at the current version the same call goes through
    now = owner.request(method, f"/v1/memories/{memory['id']}{path}", json=body, headers={"if-match": '"2"'})
    assert now.status_code in (200, 201), now.text


def test_restore_at_a_stale_version_is_refused(owner: httpx.Client) -> None:
    # Given an archived memory (version 2), restored and archived again by someone else (version 4)
    memory = _memory(owner)
    owner.post(f"/v1/memories/{memory['id']}/archive")
    owner.post(f"/v1/memories/{memory['id']}/restore")
    owner.post(f"/v1/memories/{memory['id']}/archive")
    # When a restore comes for version 2 / Then 409; at version 4 it restores
    _conflict(owner.post(f"/v1/memories/{memory['id']}/restore", headers={"if-match": '"2"'}))
    restored = owner.post(f"/v1/memories/{memory['id']}/restore", headers={"if-match": 'W/"4"'})
    assert restored.status_code == 200 and restored.json()["status"] == "active"


@pytest.mark.parametrize("if_match", ['"abc"', '"1", "2"', '"0"'])
def test_a_malformed_if_match_is_400_and_changes_nothing(owner: httpx.Client, if_match: str) -> None:
    memory = _memory(owner)
    resp = owner.patch(f"/v1/memories/{memory['id']}", json={"tags": ["x"]}, headers={"if-match": if_match})
    assert resp.status_code == 400 and resp.json()["error"]["code"] == "invalid_if_match"
    assert owner.get(f"/v1/memories/{memory['id']}").json()["version"] == 1


def test_if_match_and_version_must_agree(owner: httpx.Client) -> None:
    memory = _memory(owner)
    resp = owner.patch(f"/v1/memories/{memory['id']}", json={"tags": ["x"], "version": 1}, headers={"if-match": '"2"'})
    assert resp.status_code == 400 and resp.json()["error"]["code"] == "invalid_if_match"


def _error(result: CallToolResult) -> str:
    assert result.is_error
    return " ".join(getattr(block, "text", "") for block in result.content)


async def test_mcp_reads_carry_the_version_and_stale_writes_are_tool_errors(server: EngramServer) -> None:
    async with mcp_client(server) as client:
        # Given a memory read by the model (version 1), then edited elsewhere
        written = await call(client, "memory_upsert", fact_key="profile:city", content="Alice lives in Berlin")
        memory_id = written["memory"]["id"]
        read = await call(client, "memory_get", id=memory_id)
        assert read["memory"]["version"] == 1
        await call(client, "memory_update", id=memory_id, tags=["home"])
        # When the model acts on what it read
        for tool, extra in [
            ("memory_update", {"content": "Alice lives in Rome"}),
            ("memory_archive", {}),
            ("memory_delete", {}),
            ("memory_supersede", {"content": "Alice lives in Rome"}),
        ]:
            result = await client.call_tool(tool, {"id": memory_id, "version": 1, **extra})
            # Then each is a tool error that says what happened and what to do
            message = _error(result)
            assert "changed since version 1" in message and "memory_get" in message, (tool, message)
        # And the memory is as the other edit left it; at its current version the archive goes through
        current = await call(client, "memory_get", id=memory_id)
        assert (current["memory"]["status"], current["memory"]["tags"], current["memory"]["version"]) == (
            "active",
            ["home"],
            2,
        )
        archived = await call(client, "memory_archive", id=memory_id, version=2)
        assert archived["memory"]["status"] == "archived" and archived["memory"]["version"] == 3
