"""One thread id grammar where ids enter (docs/threads.md): an id with '/', or '.' / '..', could be
stored but never read, renamed, deleted or merged; the x-engram-thread header, ingest and MCP refuse it
with 400 invalid_thread_id, and a chat's user field is made to fit."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from engram.domain.errors import InvalidInput
from engram.services.library.threads import thread_id_of

from tests.conftest import EngramServer
from tests.fakes.upstream import Reply
from tests.integration.chat_support import OWNER_KEY, make_gateway, upstream

__all__ = ["make_gateway", "upstream"]  # fixtures

BAD = ["a/b", ".", "..", "../x", "tab\there"]


@pytest.mark.parametrize("thread", BAD)
def test_ingest_refuses_a_thread_id_that_cannot_be_read_back(server: EngramServer, thread: str) -> None:
    with server.client() as client:
        response = client.post(
            "/v1/ingest/messages", json={"messages": [{"role": "user", "content": "hi", "conversation_id": thread}]}
        )
    assert response.status_code == 400, response.text
    assert response.json()["error"]["code"] == "invalid_thread_id"
    assert "thread id" in response.json()["error"]["message"]


def test_an_id_with_dots_inside_is_a_thread_id_that_reads_back(server: EngramServer) -> None:
    with server.client() as client:
        ok = client.post(
            "/v1/ingest/messages", json={"messages": [{"role": "user", "content": "hi", "conversation_id": "v1.2-x"}]}
        )
        assert ok.status_code == 200, ok.text
        assert client.get("/v1/threads/v1.2-x").status_code == 200


def test_mcp_ingest_refuses_a_bad_thread_id(server: EngramServer) -> None:
    call: dict[str, Any] = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {
            "name": "memory_ingest",
            "arguments": {"messages": [{"role": "user", "content": "hi", "conversation_id": "a/b"}]},
        },
    }
    with server.client() as client:
        response = client.post("/mcp", json=call, headers={"accept": "application/json, text/event-stream"})
    assert response.status_code == 200, response.text
    assert "invalid thread id" in response.text
    assert server.container.store.list_thread_messages("alice", "a/b").items == []


@pytest.mark.parametrize("thread", ["a/b", ".."])
def test_the_thread_header_is_refused_with_400_in_the_doors_shape(make_gateway: Any, thread: str) -> None:
    gw = make_gateway(chat_model="claude-test")
    gw.upstream.script(Reply(text="never sent"))
    response = httpx.post(
        gw.url + "/v1/messages",
        json={"model": "claude-test", "max_tokens": 10, "messages": [{"role": "user", "content": "hi"}]},
        headers={"x-api-key": OWNER_KEY, "anthropic-version": "2023-06-01", "x-engram-thread": thread},
        timeout=10,
    )
    assert response.status_code == 400, response.text
    body = response.json()
    assert body["type"] == "error" and body["error"]["code"] == "invalid_thread_id"


def test_a_chats_user_field_is_made_to_fit() -> None:
    assert thread_id_of(None, "team/alice") == "team_alice"
    assert thread_id_of(None, "..") == "default"
    assert thread_id_of(" t1 ", "x") == "t1"
    with pytest.raises(InvalidInput):
        thread_id_of("a/b", None)
