"""Pawwake's documented flows, replayed against Engram (README, "Coming from Pawwake").

Pawwake documents no MCP tools; its users have a client that sends only its newest message under a fixed
session id (`PARTITION_SESSION_ID`, the "partition cache"), the thread operations of its dashboard and
REST (`/api/partition/summary` PUT/DELETE, `/api/partition/thread` with an inherited summary), and
`POST /api/memories` with an idempotent `external_id`. Each is replayed on Engram's equivalent: a key
with `"server_history": true` in the keys file, `x-engram-thread`, `/v1/threads/{id}/summary`, MCP
`thread_summary` / `thread_summary_set`, `POST /v1/memories`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from tests.fakes.upstream import Reply
from tests.integration.chat_support import OWNER_KEY, MakeGateway, make_gateway, upstream
from tests.integration.test_chat_openai import RecordingQueue

__all__ = ["make_gateway", "upstream"]

PARTITION_KEY = "ek-pawwake-client-key"  # a key whose chats keep their history on the server
SESSION = "my-thread"  # Pawwake's PARTITION_SESSION_ID


def keys_file(tmp_path: Path) -> Path:
    path = tmp_path / "keys.json"
    path.write_text(
        json.dumps(
            [{"name": "kelivo", "key": PARTITION_KEY, "namespace": "default", "scopes": ["*"], "server_history": True}]
        )
    )
    path.chmod(0o600)
    return path


def newest_only(gw: Any, text: str, key: str = PARTITION_KEY) -> httpx.Response:
    reply = httpx.post(
        gw.url + "/v1/chat/completions",
        json={"model": "companion", "messages": [{"role": "user", "content": text}], "user": SESSION},
        headers={"authorization": f"Bearer {key}"},
        timeout=10,
    )
    assert reply.status_code == 200, reply.text
    return reply


def test_partition_client_sends_only_the_newest_message(make_gateway: MakeGateway, tmp_path: Path) -> None:
    # Given a key set to keep history (the keys file), and a client that sends only its newest message
    # with a fixed session id (OpenAI `user`, as the thread id)
    gw = make_gateway(keys_file=keys_file(tmp_path), queue=RecordingQueue())
    gw.upstream.script(Reply(text="Nice to meet you, Lin."), Reply(text="You are Lin."))
    newest_only(gw, "Hi, I am Lin.")
    # When the next message comes alone
    reply = newest_only(gw, "What is my name?")
    # Then the upstream saw the earlier turn before it, with no header needed
    sent = gw.upstream.last("/v1/chat/completions").json["messages"]
    said = [(m["role"], str(m["content"]).split("\n\n<engram")[0]) for m in sent if m["role"] != "system"]
    assert said == [("user", "Hi, I am Lin."), ("assistant", "Nice to meet you, Lin."), ("user", "What is my name?")]
    assert reply.headers["x-engram-history"] == "1"
    # And `x-engram-history: off` turns it off for one request (a client that keeps its own history)
    off = httpx.post(
        gw.url + "/v1/chat/completions",
        json={"model": "companion", "messages": [{"role": "user", "content": "alone"}], "user": SESSION},
        headers={"authorization": f"Bearer {PARTITION_KEY}", "x-engram-history": "off"},
        timeout=10,
    )
    assert off.status_code == 200 and "x-engram-history" not in off.headers
    # And the owner key (no server_history) gets none
    newest_only(gw, "and you?", key=OWNER_KEY)
    assert [m["role"] for m in gw.upstream.last("/v1/chat/completions").json["messages"] if m["role"] != "system"] == [
        "user"
    ]


async def test_thread_summary_view_edit_clear_and_inherit(make_gateway: MakeGateway, tmp_path: Path) -> None:
    gw = make_gateway(keys_file=keys_file(tmp_path), queue=RecordingQueue())
    auth = {"authorization": f"Bearer {PARTITION_KEY}"}
    # PUT /api/partition/summary -> PUT /v1/threads/{id}/summary; status -> GET
    with httpx.Client(base_url=gw.url, headers=auth, timeout=10) as api:
        api.put(f"/v1/threads/{SESSION}/summary", json={"summary": "Lin is learning Norwegian."})
        assert api.get(f"/v1/threads/{SESSION}/summary").json()["summary"] == "Lin is learning Norwegian."
    # POST /api/partition/thread with an inherited summary -> MCP thread_summary_set(from_thread)
    async with (
        httpx2.AsyncClient(headers=auth, timeout=30) as http,
        Client(streamable_http_client(gw.url + "/mcp", http_client=http)) as mcp,
    ):
        made = await mcp.call_tool("thread_summary_set", {"thread_id": "second", "from_thread": SESSION})
        assert not made.is_error and made.structured_content["summary"] == "Lin is learning Norwegian."
        read = await mcp.call_tool("thread_summary", {"thread_id": "second"})
        assert read.structured_content["summary"] == "Lin is learning Norwegian."
        # DELETE /api/partition/summary -> thread_summary_set(summary="")
        cleared = await mcp.call_tool("thread_summary_set", {"thread_id": SESSION, "summary": ""})
        assert cleared.structured_content["summary"] == ""
        wrong = await mcp.call_tool("thread_summary_set", {"thread_id": SESSION})
        assert wrong.is_error


def test_explicit_memory_write_with_external_id_is_idempotent(make_gateway: MakeGateway, tmp_path: Path) -> None:
    # Pawwake's POST /api/memories {content, external_id}: a retry returns the original
    gw = make_gateway(keys_file=keys_file(tmp_path), queue=RecordingQueue())
    with httpx.Client(base_url=gw.url, headers={"authorization": f"Bearer {PARTITION_KEY}"}, timeout=10) as api:
        body = {"content": "Diary: walked by the fjord today", "type": "event", "external_id": "diary-2026-05-01"}
        first = api.post("/v1/memories", json=body)
        again = api.post("/v1/memories", json=body)
        assert (first.status_code, again.status_code) == (201, 200)
        assert again.json()["memory"]["id"] == first.json()["memory"]["id"]
        # /api/memories/search POST {"q": ...} -> /v1/search/memories {"query": ...}
        found = api.post("/v1/search/memories", json={"query": "fjord walk"}).json()
        assert found["items"][0]["memory"]["id"] == first.json()["memory"]["id"]
