"""The MCP server over real HTTP, driven by the official `mcp` client SDK.

Real parts: uvicorn on loopback, SQLite store and index, the local embedder, the `mcp` client's
streamable HTTP transport. Nothing faked.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import httpx
import httpx2
import pytest
from engram.domain.models import MemoryFilter
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.types import CallToolResult

from tests.conftest import CHAT_ONLY_KEY, OTHER_KEY, OWNER_KEY, READONLY_KEY, EngramServer
from tests.servers import access_log_lines

ALL_TOOLS = {
    "memory_search", "memory_recall", "memory_list", "memory_get", "memory_upsert", "memory_remember",
    "memory_update", "memory_supersede", "memory_archive", "memory_restore", "memory_delete", "memory_stats",
    "memory_check", "memory_merge", "memory_unmerge",
    "memory_export", "memory_ingest", "memory_boot", "memory_pin", "glossary_set", "digest_get", "digest_set",
    "reminder_list", "reminder_snooze", "reminder_cancel", "run_list", "run_undo", "thread_list", "thread_messages",
    "thread_summary", "thread_summary_set", "conversation_search",
    "skill_import", "skill_list", "skill_get", "skill_search", "skill_allocate",
    "skill_delete", "skill_files",
}  # fmt: skip
READ_TOOLS = {"memory_search", "memory_recall", "memory_list", "memory_get", "memory_stats", "memory_export",
              "memory_check",
              "memory_boot", "digest_get", "reminder_list", "run_list", "thread_list", "thread_messages",
              "thread_summary", "conversation_search", "skill_list", "skill_get", "skill_search",
              "skill_files"}  # fmt: skip
INIT = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "raw", "version": "0"}},
}
ACCEPT = {"accept": "application/json, text/event-stream", "content-type": "application/json"}


@asynccontextmanager
async def mcp_client(
    server: EngramServer, key: str | None = OWNER_KEY, *, mode: str = "auto", header: str = "authorization"
) -> AsyncIterator[Client]:
    headers = {}
    if key is not None:
        headers = {"authorization": f"Bearer {key}"} if header == "authorization" else {header: key}
    async with (
        httpx2.AsyncClient(headers=headers, timeout=30) as http,
        Client(streamable_http_client(server.url + "/mcp", http_client=http), mode=mode) as client,
    ):
        yield client


async def call(client: Client, name: str, **arguments: Any) -> dict[str, Any]:
    """Call a tool that must succeed; return its structured result."""
    result = await client.call_tool(name, arguments)
    assert not result.is_error, f"{name} failed: {_text(result)}"
    assert isinstance(result.structured_content, dict)
    return result.structured_content


def _text(result: CallToolResult) -> str:
    return " ".join(getattr(block, "text", "") for block in result.content)


async def call_error(client: Client, name: str, **arguments: Any) -> str:
    """Call a tool that must fail with a tool error; return the message the model sees."""
    result = await client.call_tool(name, arguments)
    assert result.is_error, f"{name} unexpectedly succeeded: {result.structured_content}"
    return _text(result)


# -- handshake and listing -------------------------------------------------------------------------
@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_initialize_and_list_every_tool_with_schemas(server: EngramServer, mode: str) -> None:
    # Given a running server, When a client connects (initialize handshake or the modern discover)
    async with mcp_client(server, mode=mode) as client:
        tools = {t.name: t for t in (await client.list_tools()).tools}
        info = client.server_info

    # Then the server names itself and lists exactly the memory tools
    assert info is not None and info.name == "engram"
    assert set(tools) == ALL_TOOLS
    # And every schema states required fields, types and bounds
    upsert = tools["memory_upsert"].input_schema
    assert set(upsert["required"]) == {"fact_key", "content"}
    assert upsert["properties"]["content"]["maxLength"] == 4000
    assert upsert["properties"]["importance"]["maximum"] == 1.0
    remember = tools["memory_remember"].input_schema
    assert remember["required"] == ["content"] and "fact_key" not in remember["properties"]
    assert "500 characters are kept" in tools["digest_set"].input_schema["properties"]["content"]["description"]
    top_k = tools["memory_search"].input_schema["properties"]["top_k"]["anyOf"][0]
    assert (top_k["type"], top_k["minimum"], top_k["maximum"]) == ("integer", 1, 50)
    assert "ctx" not in tools["memory_get"].input_schema["properties"]
    assert tools["memory_ingest"].input_schema["properties"]["messages"]["minItems"] == 1
    # And descriptions tell a model when to use which; annotations mark reads and deletes
    assert "memory_upsert" in (tools["memory_remember"].description or "")
    for name, tool in tools.items():
        assert tool.description and len(tool.description) > 40, name
        assert tool.annotations is not None and tool.annotations.read_only_hint is (name in READ_TOOLS), name
    delete_annotations = tools["memory_delete"].annotations
    assert delete_annotations is not None and delete_annotations.destructive_hint is True


# -- every tool ---------------------------------------------------------------------------------
async def test_every_tool_end_to_end(server: EngramServer) -> None:
    async with mcp_client(server) as mcp:
        # Given a fact saved under a key, and a keyless memory
        first = await call(
            mcp, "memory_upsert", fact_key="home:city", content="The user lives in Berlin", type="identity"
        )
        assert first["action"] == "created" and first["memory"]["source"] == "mcp"
        old_id = first["memory"]["id"]
        tea = await call(mcp, "memory_remember", content="The user drinks green tea every morning", tags=["drinks"])
        assert tea["action"] == "created"
        # When the same keyless fact is remembered again, Then it is marked seen, not duplicated
        again = await call(mcp, "memory_remember", content="the user drinks green tea every morning!")
        assert again["action"] == "seen" and again["memory"]["id"] == tea["memory"]["id"]

        # When the keyed fact changes, Then the old version is superseded
        moved = await call(
            mcp, "memory_upsert", fact_key="home:city", content="The user moved to Singapore in 2026", type="identity"
        )
        assert moved["action"] == "superseded" and moved["superseded"]["id"] == old_id
        city_id = moved["memory"]["id"]

        # Search and recall find it, recall with injectable text
        found = await call(mcp, "memory_search", query="Where does the user live?", top_k=3)
        assert city_id in [item["memory"]["id"] for item in found["items"]]
        assert all(isinstance(item["score"], float) for item in found["items"])
        recalled = await call(mcp, "memory_recall", query="Which city does the user live in?")
        assert "Singapore" in recalled["text"]
        assert any(hit["id"] == city_id and hit["score"] > 0 for hit in recalled["hits"])

        # get with versions, list with filters
        got = await call(mcp, "memory_get", id=city_id, include_versions=True)
        assert [v["id"] for v in got["versions"]] == [old_id, city_id]
        listed = await call(mcp, "memory_list", tag="drinks")
        assert [m["id"] for m in listed["items"]] == [tea["memory"]["id"]]
        superseded = await call(mcp, "memory_list", status=["superseded"])
        assert [m["id"] for m in superseded["items"]] == [old_id]

        # update in place, explicit supersede
        updated = await call(mcp, "memory_update", id=tea["memory"]["id"], pinned=True, importance=0.9)
        assert updated["memory"]["pinned"] is True and updated["memory"]["importance"] == 0.9
        corrected = await call(mcp, "memory_supersede", id=tea["memory"]["id"], content="The user drinks oolong tea")
        assert corrected["superseded"]["status"] == "superseded"
        oolong = corrected["memory"]["id"]

        # archive, restore, delete
        assert (await call(mcp, "memory_archive", id=oolong))["memory"]["status"] == "archived"
        assert (await call(mcp, "memory_restore", id=oolong))["memory"]["status"] == "active"
        assert (await call(mcp, "memory_delete", id=oolong))["memory"]["status"] == "deleted"
        assert oolong not in [m["id"] for m in (await call(mcp, "memory_list"))["items"]]
        every = await call(mcp, "memory_list", status=["all"])
        assert {m["id"]: m["status"] for m in every["items"]} == {
            oolong: "deleted",
            tea["memory"]["id"]: "superseded",
            city_id: "active",
            old_id: "superseded",
        }

        # precious note, glossary, digest, ingest
        pinned = await call(mcp, "memory_pin", content="“We'll climb Mount Kinabalu together.”", reason="a promise")
        assert pinned["precious"]["content"].startswith("“We'll climb")
        term = await call(mcp, "glossary_set", term="Mochi", definition="The user's cat", aliases=["the cat"])
        assert term["term"]["aliases"] == ["the cat"]
        assert (await call(mcp, "digest_get"))["content"] == ""
        digest = await call(mcp, "digest_set", content="Lives in Singapore; drinks tea; cat called Mochi.")
        assert digest["content"] == "Lives in Singapore; drinks tea; cat called Mochi."
        assert (await call(mcp, "digest_get"))["content"] == digest["content"]
        ingested = await call(mcp, "memory_ingest", messages=[
            {"role": "user", "content": "I adopted a second cat", "id": "m1"},
            {"role": "assistant", "content": "Congratulations!", "id": "m2"},
        ])  # fmt: skip
        assert ingested["created"] == 2
        assert (await call(mcp, "memory_ingest", messages=[{"role": "user", "content": "x", "id": "m1"}]))[
            "duplicates"
        ] == 1

        # boot, stats, export see all of it
        boot = await call(mcp, "memory_boot")
        assert boot["digest"]["content"] == digest["content"]
        assert [p["content"] for p in boot["precious"]] == [pinned["precious"]["content"]]
        assert city_id in [m["id"] for m in boot["stable_memories"]]  # identity type joins the boot block
        assert "namespace" not in boot["digest"]
        stats = await call(mcp, "memory_stats")
        assert stats["messages_total"] == 2 and stats["precious"] == 1 and stats["glossary"] == 1
        export = await call(mcp, "memory_export")
        assert export["namespace"] == "alice" and len(export["memories"]) == 4 and len(export["messages"]) == 2


# -- auth ---------------------------------------------------------------------------------------
def test_unauthenticated_requests_get_401_json_before_mcp(server: EngramServer) -> None:
    with httpx.Client(base_url=server.url, timeout=10) as http:
        # Given no key, a wrong key, and a key in the query string while query tokens are off
        none = http.post("/mcp", json=INIT, headers=ACCEPT)
        wrong = http.post("/mcp", json=INIT, headers={**ACCEPT, "authorization": "Bearer ek_not_a_real_key_123"})
        query = http.post("/mcp", params={"token": OWNER_KEY}, json=INIT, headers=ACCEPT)
        # And a correct key sent as x-api-key
        ok = http.post("/mcp", json=INIT, headers={**ACCEPT, "x-api-key": OWNER_KEY})

    # Then the first three are 401 with a JSON error body, and the last one initializes
    assert none.status_code == 401 and none.json()["error"]["code"] == "missing_key"
    assert none.headers["www-authenticate"] == "Bearer"
    assert wrong.status_code == 401 and wrong.json()["error"]["code"] == "invalid_key"
    assert query.status_code == 401 and query.json()["error"]["code"] == "query_token_disabled"
    assert ok.status_code == 200 and ok.json()["result"]["serverInfo"]["name"] == "engram"


async def test_x_api_key_header_works_with_the_sdk_client(server: EngramServer) -> None:
    async with mcp_client(server, OWNER_KEY, header="x-api-key") as mcp:
        assert (await call(mcp, "digest_get"))["content"] == ""


async def test_query_token_when_enabled_and_never_in_the_access_log(make_server: Callable[..., EngramServer]) -> None:
    # Given a server that allows ?token= and an access log at INFO
    server = make_server(mcp_allow_query_token=True, embedder="none")
    # When a client authenticates with the query token (plus another query parameter)
    with access_log_lines() as lines:
        async with (
            httpx2.AsyncClient(timeout=30) as http,
            Client(streamable_http_client(f"{server.url}/mcp?token={OWNER_KEY}&x=1", http_client=http)) as mcp,
        ):
            written = await call(mcp, "memory_remember", content="Query-token clients work")
    # Then the call succeeded in the key's namespace
    assert written["action"] == "created"
    assert server.container.memories.get("alice", written["memory"]["id"]).content == "Query-token clients work"
    # And the access log has the request line without the token
    assert any("/mcp?x=1" in line for line in lines), lines
    assert not any(OWNER_KEY in line for line in lines)


async def test_missing_scopes_are_tool_errors_naming_the_scope(server: EngramServer) -> None:
    # Given a read-only key and a chat-only key of the same namespace
    async with mcp_client(server, READONLY_KEY) as reader:
        # Then reads work, writes and export name the missing scope
        assert (await call(reader, "memory_search", query="anything"))["items"] == []
        assert "'memory:write'" in await call_error(reader, "memory_remember", content="should not be stored")
        assert "'memory:write'" in await call_error(reader, "digest_set", content="nope")
        assert "'export:read'" in await call_error(reader, "memory_export")
    async with mcp_client(server, CHAT_ONLY_KEY) as chat:
        assert "'memory:read'" in await call_error(chat, "memory_recall", query="anything")
    # And nothing was written
    assert server.container.memories.list_memories("alice", MemoryFilter()).items == []


# -- errors -------------------------------------------------------------------------------------
async def test_bad_arguments_unknown_ids_and_tools_are_tool_errors(server: EngramServer) -> None:
    async with mcp_client(server) as mcp:
        # Missing required field (schema), too long, out of bounds: the model sees which field
        assert "fact_key" in await call_error(mcp, "memory_upsert", content="no key given")
        assert "far over the 500-character limit" in await call_error(mcp, "digest_set", content="x" * 2001)
        assert "importance" in await call_error(mcp, "memory_remember", content="x", importance=2)
        assert "content" in await call_error(mcp, "memory_remember", content="x" * 4001)
        # Values only the service can judge
        assert "invalid fact_key" in await call_error(mcp, "memory_upsert", fact_key="no colon", content="x")
        assert "content must not be empty" in await call_error(mcp, "memory_remember", content="   ")
        assert "nothing to change" in await call_error(mcp, "memory_update", id="mem_x")
        # Unknown ids and conflicts
        assert "not found" in await call_error(mcp, "memory_get", id="mem_does_not_exist")
        assert "not found" in await call_error(mcp, "memory_delete", id="mem_does_not_exist")
        archived = (await call(mcp, "memory_remember", content="An old habit"))["memory"]["id"]
        await call(mcp, "memory_archive", id=archived)
        assert "only an active memory" in await call_error(mcp, "memory_supersede", id=archived, content="new")
        # Unknown tool
        assert "Unknown tool" in await call_error(mcp, "memory_teleport")
        # And the server still answers
        assert (await call(mcp, "memory_stats"))["memories"]


def test_protocol_errors_are_jsonrpc_errors_and_the_server_survives(server: EngramServer) -> None:
    auth = {**ACCEPT, "authorization": f"Bearer {OWNER_KEY}"}
    with httpx.Client(base_url=server.url, timeout=10) as http:
        # Given an unknown method and a body that is not JSON
        unknown = http.post("/mcp", json={"jsonrpc": "2.0", "id": 7, "method": "memory/teleport"}, headers=auth)
        garbage = http.post("/mcp", content=b"{not json", headers=auth)
        # Then both are JSON-RPC errors (method not found, parse error)
        assert unknown.json()["error"]["code"] == -32601
        assert garbage.json()["error"]["code"] == -32700
        # And the server keeps serving
        assert http.post("/mcp", json=INIT, headers=auth).status_code == 200


def test_get_opens_no_idle_stream_it_answers_405(server: EngramServer) -> None:
    # Given a stateless JSON-response server and an authenticated GET (a client probing for an SSE stream)
    with httpx.Client(base_url=server.url, timeout=5) as http:
        probe = http.get("/mcp", headers={"accept": "text/event-stream", "authorization": f"Bearer {OWNER_KEY}"})
        anonymous = http.get("/mcp", headers={"accept": "text/event-stream"})
    # Then it gets 405 at once (the spec's "no stream here"), not a stream held open; no key is still 401
    assert probe.status_code == 405 and probe.json()["error"]["code"] == "method_not_allowed"
    assert "POST" in probe.headers["allow"]
    assert anonymous.status_code == 401


def test_host_allowlist(make_server: Callable[..., EngramServer]) -> None:
    auth = {**ACCEPT, "authorization": f"Bearer {OWNER_KEY}"}
    # Given the default allowlist (localhost and 127.0.0.1, any port)
    default = make_server(embedder="none")
    with httpx.Client(base_url=default.url, timeout=10) as http:
        evil = http.post("/mcp", json=INIT, headers={**auth, "host": "evil.example"})
        bad_origin = http.post("/mcp", json=INIT, headers={**auth, "origin": "https://evil.example"})
        local = http.post("/mcp", json=INIT, headers={**auth, "host": "localhost:8787"})
    # Then a foreign Host or Origin is refused before authentication, localhost works
    assert evil.status_code == 421 and evil.json()["error"]["code"] == "host_not_allowed"
    assert bad_origin.status_code == 403
    assert local.status_code == 200
    # Given a suffix wildcard (a Function URL's domain)
    aws = make_server(embedder="none", mcp_allowed_hosts="*.lambda-url.eu-west-1.on.aws")
    with httpx.Client(base_url=aws.url, timeout=10) as http:
        fn_url = http.post("/mcp", json=INIT, headers={**auth, "host": "abc123.lambda-url.eu-west-1.on.aws"})
        other = http.post("/mcp", json=INIT, headers={**auth, "host": "abc123.lambda-url.us-east-1.on.aws"})
    assert fn_url.status_code == 200
    assert other.status_code == 421


# -- namespaces and the other doors ------------------------------------------------------------------
async def test_memory_written_through_mcp_is_found_through_rest_in_the_same_namespace_only(
    server: EngramServer,
) -> None:
    # Given a memory written by alice through MCP
    async with mcp_client(server) as alice:
        written = await call(alice, "memory_upsert", fact_key="pet:cat_name", content="The user's cat is called Mochi")
    memory_id = written["memory"]["id"]

    # When alice and bob search through REST, and bob through MCP
    with server.client(OWNER_KEY) as rest_alice, server.client(OTHER_KEY) as rest_bob:
        alice_hits = rest_alice.post("/v1/search/memories", json={"query": "cat name Mochi"}).json()["items"]
        bob_hits = rest_bob.post("/v1/search/memories", json={"query": "cat name Mochi"}).json()["items"]
        bob_get = rest_bob.get(f"/v1/memories/{memory_id}")
    async with mcp_client(server, OTHER_KEY) as bob:
        bob_mcp = await call(bob, "memory_search", query="cat name Mochi")
        bob_mcp_get = await call_error(bob, "memory_get", id=memory_id)
        bob_delete = await call_error(bob, "memory_delete", id=memory_id)

    # Then only alice finds it; bob cannot read or delete it by id
    assert [h["memory"]["id"] for h in alice_hits] == [memory_id]
    assert bob_hits == [] and bob_mcp["items"] == []
    assert bob_get.status_code == 404 and "not found" in bob_mcp_get and "not found" in bob_delete
    assert server.container.memories.get("alice", memory_id).status == "active"


async def test_mcp_surface_serves_only_mcp_and_health(make_server: Callable[..., EngramServer]) -> None:
    # Given the MCP function's app (ENGRAM_SURFACE=mcp)
    server = make_server(surface="mcp", embedder="none")
    with server.client() as http:
        # Then REST is absent and health answers
        assert http.get("/v1/memories").status_code == 404
        assert http.get("/health").status_code == 200
    # And MCP works
    async with mcp_client(server) as mcp:
        assert (await call(mcp, "memory_remember", content="Served by the MCP-only app"))["action"] == "created"


async def test_memory_written_through_mcp_reaches_the_chat_gateway_of_the_same_namespace_only(
    make_server: Callable[..., EngramServer],
) -> None:
    """Faked: the LLM provider (tests/fakes/upstream.py, loopback). Real: everything of Engram's."""
    import openai

    from tests.conftest import OTHER_KEY
    from tests.fakes.upstream import FakeUpstream

    with FakeUpstream() as upstream:
        server = make_server(upstream_base_url=upstream.openai_base_url, chat_model="fake-chat")
        # Given a memory remembered by alice's agent through MCP
        async with mcp_client(server) as alice:
            await call(alice, "memory_remember", content="My test code is apple-star-0428", type="fact")

        # When alice and then bob ask the chat gateway about it
        for key in (OWNER_KEY, OTHER_KEY):
            chat = openai.OpenAI(base_url=server.url + "/v1", api_key=key, max_retries=0)
            chat.chat.completions.create(
                model="companion", messages=[{"role": "user", "content": "What is my test code apple-star?"}]
            )
            sent = upstream.last("/v1/chat/completions").json
            # Then only alice's request to the model carries the memory
            carries = "apple-star-0428" in json.dumps(sent, ensure_ascii=False)
            assert carries is (key == OWNER_KEY), sent


async def test_reminder_tools(server: EngramServer) -> None:
    async with mcp_client(server) as mcp:
        # Given a memory remembered with a reminder for tomorrow
        when = "2099-05-01T09:00:00+02:00"
        made = await call(mcp, "memory_remember", content="Call the plumber about the leak", remind_at=when)
        memory_id = made["memory"]["id"]
        # Then it is an upcoming reminder
        listed = await call(mcp, "reminder_list")
        assert [(r["memory_id"], r["status"]) for r in listed["items"]] == [(memory_id, "pending")]
        # When snoozed, then cancelled
        snoozed = await call(mcp, "reminder_snooze", memory_id=memory_id, until="2099-05-02T09:00:00+02:00")
        assert snoozed["remind_at"].startswith("2099-05-02T07:00:00")
        assert "future" in await call_error(mcp, "reminder_snooze", memory_id=memory_id, until="2001-01-01T00:00:00Z")
        assert (await call(mcp, "reminder_cancel", memory_id=memory_id))["status"] == "cancelled"
        assert (await call(mcp, "reminder_list"))["items"] == []
        # And mistakes come back as tool errors a model can fix
        assert "UTC offset" in await call_error(mcp, "memory_remember", content="x y z", remind_at="2099-05-01T09:00")
        assert "no reminder" in await call_error(mcp, "reminder_cancel", memory_id=memory_id)


async def test_thread_tools(server: EngramServer) -> None:
    async with mcp_client(server) as mcp:
        # Given a conversation stored in a thread
        said = [{"role": "user", "content": "we fly to Kyoto", "conversation_id": "trip"}]
        await call(mcp, "memory_ingest", messages=said)
        # Then it is listed and readable
        threads = await call(mcp, "thread_list")
        assert [(t["id"], t["message_count"]) for t in threads["items"]] == [("trip", 1)]
        read = await call(mcp, "thread_messages", thread_id="trip")
        assert [m["content"] for m in read["items"]] == ["we fly to Kyoto"]
        assert "not found" in await call_error(mcp, "thread_messages", thread_id="nope")


async def test_check_merge_and_unmerge_tools(server: EngramServer) -> None:
    async with mcp_client(server) as mcp:
        # Given two overlapping memories
        a = (await call(mcp, "memory_remember", content="The user runs on Sundays"))["memory"]
        b = (await call(mcp, "memory_remember", content="The user runs 10 km", tags=["sport"]))["memory"]
        # When a new text is checked, Then it says what a save would do and writes nothing
        checked = await call(mcp, "memory_check", content="The user runs on Sundays!")
        assert (checked["action"], checked["memory"]["id"]) == ("seen", a["id"])
        assert "namespace" not in checked["memory"]
        # When they are merged
        merged = await call(mcp, "memory_merge", ids=[a["id"], b["id"]], content="The user runs 10 km on Sundays")
        # Then both are superseded by the merged memory, which keeps their tags
        assert {s["superseded_by_id"] for s in merged["sources"]} == {merged["memory"]["id"]}
        assert merged["memory"]["tags"] == ["sport"]
        # When it is unmerged, Then both are back as they were
        undone = await call(mcp, "memory_unmerge", id=merged["memory"]["id"])
        assert [(m["id"], m["status"], m["content"]) for m in undone["restored"]] == [
            (a["id"], "active", a["content"]),
            (b["id"], "active", b["content"]),
        ]
        # And a merge of one memory, or an unmerge of a memory no merge made, is a tool error
        assert "ids" in await call_error(mcp, "memory_merge", ids=[a["id"]], content="x")
        assert "not made by a merge" in await call_error(mcp, "memory_unmerge", id=a["id"])
