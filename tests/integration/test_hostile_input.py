"""Malformed client input never becomes a 500: the chat doors answer 400 in their own error shape with
the x-engram headers, and a lone UTF-16 surrogate escape in any text field (REST, MCP, chat) is stored
with U+FFFD in its place instead of failing at the database or upstream encoder."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import ExitStack
from typing import Any

import httpx
import pytest
from engram.domain.models import MemoryFilter

from tests.conftest import OWNER_KEY as SERVER_KEY
from tests.conftest import EngramServer
from tests.integration.chat_support import OWNER_KEY, Gateway, make_gateway, start_gateway, upstream

__all__ = ["make_gateway", "upstream"]


@pytest.fixture(scope="module")
def gateway(upstream: Any) -> Iterator[Gateway]:
    """One gateway for the read-only cases (nothing they send reaches the upstream or the store)."""
    with ExitStack() as stack:
        yield start_gateway(stack, upstream)


CHAT_HEADERS = ("x-engram-injected", "x-engram-reason", "x-engram-recall-ms", "x-engram-upstream-ms")
USER = [{"role": "user", "content": "hi"}]


def _deep(levels: int) -> bytes:
    return (
        '{"model": "companion", "messages": [{"role": "user", "content": "hi"}], "x": '
        + "[" * levels
        + "]" * levels
        + "}"
    ).encode()


def _body(**fields: Any) -> bytes:
    """A chat body with ``fields`` over a valid default (model and one user message)."""
    return json.dumps({"model": "companion", "max_tokens": 9, "messages": USER, **fields}).encode()


OAI, ANT, DOG = "/v1/chat/completions", "/v1/messages", "/v1/guide-dog/chat/completions"
# (door, raw body, expected error code, a word the message must contain)
BAD_CHAT_BODIES = [
    (OAI, _deep(1000), "invalid_request", "deeper"),
    (ANT, _deep(1000), "invalid_request", "deeper"),
    (OAI, _deep(150), "invalid_request", "deeper"),
    (OAI, _body(messages=["hi"]), "invalid_request", "messages[0]"),
    (ANT, _body(messages=["hi"]), "invalid_request", "messages[0]"),
    (ANT, _body(messages=[{"role": "user", "content": [None]}]), "invalid_request", "content[0]"),
    (OAI, _body(stream=True, stream_options="x"), "invalid_request", "stream_options"),
    (OAI, _body(messages=[{"role": "user", "content": [None]}]), "invalid_request", "content[0]"),
    (OAI, _body(messages=[{"role": "user", "content": 5}]), "invalid_request", "content"),
    (OAI, _body(messages=[{"content": "hi"}]), "invalid_request", "role"),
    (OAI, _body(model={"a": 1}), "invalid_request", "model"),
    (OAI, _body(stream="yes"), "invalid_request", "stream"),
    (OAI, _body(tools=["x"]), "invalid_request", "tools[0]"),
    (
        OAI,
        _body(messages=[{"role": "assistant", "tool_calls": [{"function": "f"}]}, *USER]),
        "invalid_request",
        "function",
    ),
    (ANT, _body(system=5), "invalid_request", "system"),
    (ANT, _body(messages=[{"role": "user", "content": [{"type": "text", "text": 5}]}]), "invalid_request", "text"),
    (ANT, _body(metadata="me"), "invalid_request", "metadata"),
    (ANT, json.dumps(USER).encode(), "invalid_request", "object"),
    (OAI, b'{"model": "companion"}', "invalid_request", "messages"),
    (OAI, b"\xff\xfe{}", "invalid_json", "JSON"),
    (DOG, _body(messages=[{"role": "user", "content": [None]}]), "invalid_request", "content[0]"),
]


@pytest.mark.parametrize(("door", "raw", "code", "word"), BAD_CHAT_BODIES)
def test_malformed_chat_bodies_are_400_in_the_doors_shape(
    gateway: Gateway, door: str, raw: bytes, code: str, word: str
) -> None:
    # Given a gateway with a working upstream
    gw = gateway
    gw.upstream.reset()
    # When a client sends a malformed body
    resp = httpx.post(gw.url + door, content=raw, headers={"x-api-key": OWNER_KEY}, timeout=10)
    # Then it is a 400 in the door's wire, naming what is wrong, with the x-engram headers
    assert resp.status_code == 400, resp.text
    payload = resp.json()
    if door == "/v1/messages":
        assert payload["type"] == "error" and payload["error"]["type"] == "invalid_request_error"
    assert payload["error"]["code"] == code and word in payload["error"]["message"], payload
    assert all(h in resp.headers for h in CHAT_HEADERS)
    assert not gw.upstream.requests  # nothing was forwarded


LONE = "a\\ud800b\\udfffc"  # JSON text: two lone surrogates
FIXED = "a\ufffdb\ufffdc"


def _raw(value: Any) -> bytes:
    """JSON for ``value`` where the marker ``@LONE@`` becomes lone surrogate escapes."""
    return json.dumps(value).replace("@LONE@", LONE).encode()


@pytest.mark.parametrize("door", ["/v1/chat/completions", "/v1/messages"])
def test_lone_surrogates_in_a_chat_are_replaced_and_stored(make_gateway: Any, door: str) -> None:
    # Given a gateway that stores exchanges
    gw = make_gateway(chat_store_messages=True)
    body = {"model": "companion", "max_tokens": 20, "messages": [{"role": "user", "content": "hi @LONE@"}]}
    # When the user's message carries lone surrogate escapes (a cut emoji)
    resp = httpx.post(gw.url + door, content=_raw(body), headers={"x-api-key": OWNER_KEY}, timeout=10)
    # Then the chat goes through, the upstream got U+FFFD, and the stored turn has it too
    assert resp.status_code == 200, resp.text
    assert gw.upstream.last().json["messages"][-1]["content"].startswith(f"hi {FIXED}")
    stored = gw.wait_for(lambda: [m for m in gw.store.list_messages("default", limit=10) if m.role == "user"])
    assert stored and stored[0].content == f"hi {FIXED}"


def test_lone_surrogates_in_rest_and_mcp_text_fields_are_replaced(make_server: Any) -> None:
    # Given a server on SQLite (whose UTF-8 encoder refuses surrogates)
    server: EngramServer = make_server(embedder="none")
    auth = {"authorization": f"Bearer {SERVER_KEY}", "content-type": "application/json"}
    writes = [
        ("POST", "/v1/memories", {"content": "memory @LONE@", "tags": ["t@LONE@"], "fact_key": "pref:x"}),
        ("POST", "/v1/precious", {"content": "note @LONE@", "reason": "r @LONE@"}),
        ("POST", "/v1/glossary", {"term": "term @LONE@", "definition": "def @LONE@", "aliases": ["@LONE@"]}),
        ("PUT", "/v1/digest", {"content": "digest @LONE@"}),
        ("POST", "/v1/ingest/messages", {"messages": [{"role": "user", "content": "msg @LONE@"}]}),
        ("PUT", "/v1/cache/k@LONE@", {"value": {"v@LONE@": "@LONE@"}}),
        ("POST", "/v1/search/memories", {"query": "memory @LONE@"}),
    ]
    with httpx.Client(base_url=server.url, timeout=30) as http:
        for method, path, body in writes:
            # When each text field carries lone surrogate escapes
            resp = http.request(method, path.replace("@LONE@", "%ED%A0%80"), content=_raw(body), headers=auth)
            # Then nothing fails
            assert resp.status_code < 300, f"{method} {path}: {resp.status_code} {resp.text}"
        call = {
            "jsonrpc": "2.0",
            "id": 2,
            "method": "tools/call",
            "params": {"name": "memory_remember", "arguments": {"content": "mcp @LONE@"}},
        }
        mcp = http.post("/mcp", content=_raw(call), headers={**auth, "accept": "application/json, text/event-stream"})
        assert mcp.status_code == 200 and not mcp.json()["result"].get("isError"), mcp.text
    # And the rows hold U+FFFD where the surrogates were
    store = server.container.store
    contents = {m.content for m in store.list_memories("alice", MemoryFilter(), limit=10).items}
    assert {f"memory {FIXED}", f"mcp {FIXED}"} <= contents
    assert store.list_precious("alice", limit=5)[0].content == f"note {FIXED}"
    assert store.get_digest("alice").content == f"digest {FIXED}"
    assert [m.content for m in store.list_messages("alice", limit=5)] == [f"msg {FIXED}"]


def test_an_escaped_backslash_before_u_is_text_not_an_escape(make_server: Any) -> None:
    # Given a server; When a memory's text is a literal backslash followed by "ud800" (JSON "\\ud800")
    server: EngramServer = make_server(embedder="none")
    with server.client() as http:
        resp = http.post(
            "/v1/memories",
            content=b'{"content": "path C:\\\\ud800 and \\ud83d\\ude00"}',
            headers={"content-type": "application/json"},
        )
    # Then it is kept exactly (and so is a valid surrogate pair: an emoji)
    assert resp.status_code == 201, resp.text
    assert resp.json()["memory"]["content"] == "path C:\\ud800 and \U0001f600"
