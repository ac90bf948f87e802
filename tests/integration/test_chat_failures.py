"""Every chat failure mode: upstream errors, unreachable, timeouts, mid-stream breaks, recall down,
nothing configured, missing scope, client disconnect. Driven by the `openai`/`anthropic` SDKs and httpx."""

from __future__ import annotations

import json
from pathlib import Path

import anthropic
import httpx
import openai
import pytest
from anthropic.types import MessageParam
from engram.domain.models import MemoryFilter
from engram.services.library.memories import MemoryWrite

from tests.fakes.upstream import Reply
from tests.integration.chat_support import OWNER_KEY, Gateway, MakeGateway, make_gateway, upstream
from tests.servers import free_port

__all__ = ["make_gateway", "upstream"]

AUTH = {"authorization": f"Bearer {OWNER_KEY}"}
HEADERS = ("x-engram-injected", "x-engram-reason", "x-engram-recall-ms", "x-engram-upstream-ms")


def client(gw: Gateway) -> openai.OpenAI:
    return openai.OpenAI(base_url=gw.url + "/v1", api_key=OWNER_KEY, max_retries=0, timeout=10)


def _chat(gw: Gateway, *, stream: bool = False, content: str = "hi") -> httpx.Response:
    body = {"model": "companion", "stream": stream, "messages": [{"role": "user", "content": content}]}
    return httpx.post(gw.url + "/v1/chat/completions", json=body, headers=AUTH, timeout=10)


def test_upstream_error_status_and_body_are_passed_through(make_gateway: MakeGateway) -> None:
    # Given an upstream that answers 429 with its own body
    gw = make_gateway()
    body = {"error": {"message": "slow down, provider quota", "type": "rate_limit", "code": "quota"}}
    gw.upstream.script(Reply(status=429, error_body=body), Reply(status=400, error_body=body))
    # When the SDK calls the gateway
    with pytest.raises(openai.RateLimitError) as info:
        client(gw).chat.completions.create(model="companion", messages=[{"role": "user", "content": "x"}])
    # Then the client sees the provider's status and body unchanged, with the x-engram headers
    assert info.value.status_code == 429
    assert info.value.response.json() == body
    assert all(h in info.value.response.headers for h in HEADERS)
    # And the same for a streamed request (the status is known before the stream starts)
    resp = _chat(gw, stream=True)
    assert resp.status_code == 400 and resp.json() == body


def test_unreachable_upstream_is_502_and_timeout_is_504(make_gateway: MakeGateway) -> None:
    # Given nothing listening at the upstream URL
    gw = make_gateway(upstream_base_url=f"http://127.0.0.1:{free_port()}/v1")
    with pytest.raises(openai.APIStatusError) as info:
        client(gw).chat.completions.create(model="companion", messages=[{"role": "user", "content": "x"}])
    assert info.value.status_code == 502
    assert all(h in info.value.response.headers for h in HEADERS)
    # Given an upstream that hangs past the read timeout
    slow = make_gateway(upstream_timeout=0.3)
    slow.upstream.script(Reply(hang=5))
    resp = _chat(slow)
    assert resp.status_code == 504
    assert resp.json()["error"]["type"] == "upstream_timeout"
    # And a streamed request that times out before the keep-alive interval gets a real 504 too
    slow.upstream.script(Reply(hang=5))
    assert _chat(slow, stream=True).status_code == 504


def test_slow_stream_sends_keepalives_then_an_sse_error_on_timeout(make_gateway: MakeGateway) -> None:
    # Given an upstream that hangs longer than the keep-alive interval and then times out
    gw = make_gateway(chat_keepalive_seconds=0.1, upstream_timeout=0.6)
    gw.upstream.script(Reply(hang=5))
    # When streaming
    resp = _chat(gw, stream=True)
    # Then the response started (200) with ": ping" comments, then an SSE error event and [DONE]
    assert resp.status_code == 200
    text = resp.text
    assert text.startswith(": ping\n\n")
    assert text.count(": ping") >= 3
    error = json.loads(text.split("data: ", 1)[1].split("\n", 1)[0])
    assert error["error"]["type"] == "upstream_timeout"
    assert text.rstrip().endswith("data: [DONE]")


def test_slow_upstream_gets_keepalives_then_streams_normally(make_gateway: MakeGateway) -> None:
    gw = make_gateway(chat_keepalive_seconds=0.1)
    gw.upstream.script(Reply(text="late but fine", first_byte_delay=0.35))
    pieces = [
        c.choices[0].delta.content or ""
        for c in client(gw).chat.completions.create(
            model="companion", messages=[{"role": "user", "content": "x"}], stream=True
        )
        if c.choices
    ]
    assert "".join(pieces) == "late but fine"


def test_error_after_streaming_began_is_an_sse_error_event(make_gateway: MakeGateway) -> None:
    # Given an upstream that drops the connection after a few chunks
    gw = make_gateway()
    gw.upstream.script(Reply(text="abcdefgh", chunks=8, drop_after=4))
    # When the SDK streams, Then it gets the first pieces and then an APIError from the error event
    got: list[str] = []
    with pytest.raises(openai.APIError) as info:
        for chunk in client(gw).chat.completions.create(
            model="companion", messages=[{"role": "user", "content": "x"}], stream=True
        ):
            if chunk.choices and chunk.choices[0].delta.content:
                got.append(chunk.choices[0].delta.content)
    assert got == ["a", "b", "c"]
    assert "connection" in str(info.value).lower() or "early" in str(info.value).lower()
    # And the user's turn was stored with the error noted, the broken answer not at all
    (turn,) = gw.store.list_messages("default")
    assert (turn.role, turn.content) == ("user", "x")
    assert turn.error is not None and turn.error.startswith("upstream_unavailable: ")


def test_anthropic_client_sees_an_error_event_after_streaming_began(make_gateway: MakeGateway) -> None:
    gw = make_gateway(chat_model="claude-test")
    gw.upstream.script(Reply(text="abcdefgh", chunks=8, drop_after=6))
    c = anthropic.Anthropic(base_url=gw.url, api_key=OWNER_KEY, max_retries=0)
    msgs: list[MessageParam] = [{"role": "user", "content": "x"}]
    with pytest.raises(anthropic.APIError), c.messages.stream(model="companion", max_tokens=50, messages=msgs) as s:
        for _ in s.text_stream:
            pass


def test_recall_failure_never_fails_the_chat(make_gateway: MakeGateway) -> None:
    # Given recall that raises
    gw = make_gateway(recall_fails=True)
    gw.container.memories.write("default", MemoryWrite(content="Pinned fact.", pinned=True))
    # When chatting
    resp = _chat(gw, content="hello there")
    # Then the chat succeeds, says why nothing per-turn was injected, and the boot block still went out
    assert resp.status_code == 200
    assert resp.headers["x-engram-reason"] == "recall_failed"
    assert "Pinned fact." in gw.upstream.last().json["messages"][0]["content"]


def test_injection_reasons(make_gateway: MakeGateway) -> None:
    gw = make_gateway()
    # no memories at all -> no_content, nothing injected
    r = _chat(gw, content="hello")
    assert (r.headers["x-engram-injected"], r.headers["x-engram-reason"]) == ("0", "no_content")
    # the client turns memory off for a request -> disabled
    body = {"model": "companion", "messages": [{"role": "user", "content": "hi"}]}
    r = httpx.post(gw.url + "/v1/chat/completions", json=body, headers={**AUTH, "x-engram-memory": "off"})
    assert r.headers["x-engram-reason"] == "disabled"
    # the last message is a tool result -> not_injectable (no user text to recall for)
    body = {
        "model": "companion",
        "messages": [
            {"role": "user", "content": "weather?"},
            {
                "role": "assistant",
                "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "w", "arguments": "{}"}}],
            },
            {"role": "tool", "tool_call_id": "c1", "content": "sunny"},
        ],
    }
    r = httpx.post(gw.url + "/v1/chat/completions", json=body, headers=AUTH)
    assert r.headers["x-engram-reason"] == "not_injectable"
    # a body over the injection limit is forwarded untouched -> body_too_large
    small = make_gateway(chat_inject_max_body_bytes=2048)
    small.container.memories.write("default", MemoryWrite(content="Pinned fact.", pinned=True))
    r = _chat(small, content="x" * 3000)
    assert (r.headers["x-engram-injected"], r.headers["x-engram-reason"]) == ("0", "body_too_large")
    assert "Pinned" not in json.dumps(small.upstream.last().json)
    # injection switched off by setting -> disabled
    off = make_gateway(chat_inject_enabled=False)
    assert _chat(off).headers["x-engram-reason"] == "disabled"


def test_no_upstream_configured_is_503_naming_the_setting_and_the_rest_works(make_gateway: MakeGateway) -> None:
    # Given no upstream at all
    gw = make_gateway(upstream_base_url="", anthropic_base_url="")
    # When chatting, Then 503 says which setting to set
    with pytest.raises(openai.APIStatusError) as info:
        client(gw).chat.completions.create(model="companion", messages=[{"role": "user", "content": "x"}])
    assert info.value.status_code == 503
    assert "ENGRAM_UPSTREAM_BASE_URL" in str(info.value)
    # And the Anthropic door says the same in its own error shape
    c = anthropic.Anthropic(base_url=gw.url, api_key=OWNER_KEY, max_retries=0)
    with pytest.raises(anthropic.APIStatusError) as ainfo:
        c.messages.create(model="companion", max_tokens=10, messages=[{"role": "user", "content": "x"}])
    assert ainfo.value.status_code == 503 and "ENGRAM_UPSTREAM_BASE_URL" in str(ainfo.value)
    # And the rest of Engram keeps working
    resp = httpx.post(gw.url + "/v1/memories", json={"content": "still works"}, headers=AUTH)
    assert resp.status_code in (200, 201)
    assert gw.store.list_memories("default", MemoryFilter()).items


def test_missing_scope_and_missing_key(make_gateway: MakeGateway, tmp_path: Path) -> None:
    keys = tmp_path / "keys.json"
    keys.write_text(json.dumps([{"key": "ek-reader-only-1", "namespace": "default", "scopes": ["memory:read"]}]))
    gw = make_gateway(keys_file=keys)
    body = {"model": "companion", "messages": [{"role": "user", "content": "x"}]}
    r = httpx.post(gw.url + "/v1/chat/completions", json=body, headers={"authorization": "Bearer ek-reader-only-1"})
    assert r.status_code == 403 and all(h in r.headers for h in HEADERS)
    assert httpx.get(gw.url + "/v1/usage", headers={"authorization": "Bearer ek-reader-only-1"}).status_code == 200
    r = httpx.post(gw.url + "/v1/messages", json=body)
    assert r.status_code == 401 and r.json()["type"] == "error"
    assert gw.upstream.requests == []


def test_client_disconnect_cancels_the_upstream(make_gateway: MakeGateway) -> None:
    # Given a long, slow upstream stream
    gw = make_gateway()
    gw.upstream.script(Reply(text="x" * 40, chunks=40, chunk_delay=0.1))
    body = {"model": "companion", "stream": True, "messages": [{"role": "user", "content": "long story"}]}
    # When the client reads one chunk and goes away
    with httpx.stream("POST", gw.url + "/v1/chat/completions", json=body, headers=AUTH) as resp:
        for _ in resp.iter_raw():
            break
    # Then the upstream request is cancelled well before its 4 s would be over
    record = gw.upstream.last()
    assert gw.wait_for(lambda: record.disconnected, timeout=2.0)
    # And what the user wrote is kept, noting that the answer never finished
    turns = gw.wait_for(lambda: gw.store.list_messages("default"))
    assert [(m.role, m.content, m.error) for m in turns] == [
        ("user", "long story", "client_disconnected: the client went away before the answer ended")
    ]


def test_client_disconnect_while_the_upstream_has_not_answered_cancels_it(make_gateway: MakeGateway) -> None:
    # Given an upstream that takes longer than the keep-alive interval to answer at all
    gw = make_gateway(chat_keepalive_seconds=0.1)
    gw.upstream.script(Reply(text="too late", first_byte_delay=4.0))
    body = {"model": "companion", "stream": True, "messages": [{"role": "user", "content": "are you there?"}]}
    # When the answer begins (its head, with the Engram headers, then a keep-alive) and the client goes away
    with httpx.stream("POST", gw.url + "/v1/chat/completions", json=body, headers=AUTH) as resp:
        assert resp.status_code == 200 and all(h in resp.headers for h in HEADERS)
        assert resp.headers["content-type"] == "text/event-stream; charset=utf-8" and resp.headers["x-request-id"]
        for chunk in resp.iter_raw():
            assert chunk.startswith(b": ping")
            break
    # Then the turn ends there, not when the upstream answers after 4 s: what the user wrote is kept,
    # noting that the answer never finished
    turns = gw.wait_for(lambda: gw.store.list_messages("default"), timeout=2.0)
    assert [(m.role, m.content, m.error) for m in turns] == [
        ("user", "are you there?", "client_disconnected: the client went away before the answer ended")
    ]


def test_a_failed_turn_is_kept_and_its_retry_is_not_stored_twice(make_gateway: MakeGateway) -> None:
    # Given an upstream that fails twice, then answers
    gw = make_gateway()
    gw.upstream.script(
        Reply(status=503, error_body={"error": {"message": "overloaded"}}),
        Reply(text="abcdef", chunks=6, drop_after=3),
        Reply(text="Here you go."),
    )
    history = [{"role": "user", "content": "hello"}, {"role": "assistant", "content": "hi!"}]
    body = {"model": "companion", "messages": [*history, {"role": "user", "content": "my sister is called Ana"}]}
    # When the client sends the turn, retries it streaming, then retries it again
    assert httpx.post(gw.url + "/v1/chat/completions", json=body, headers=AUTH).status_code == 503
    streamed = httpx.post(gw.url + "/v1/chat/completions", json={**body, "stream": True}, headers=AUTH)
    assert '"error"' in streamed.text
    assert httpx.post(gw.url + "/v1/chat/completions", json=body, headers=AUTH).status_code == 200
    # Then the user's turn is stored once, as first stored (with the first failure noted), and the answer once
    rows = gw.store.list_messages("default")
    assert [(m.role, m.content) for m in rows] == [("user", "my sister is called Ana"), ("assistant", "Here you go.")]
    assert rows[0].error == "upstream_rejected: OpenAI-compatible upstream answered 503" and rows[1].error is None
    # And the same words later in the conversation are a new turn, stored again
    later = [
        *body["messages"],
        {"role": "assistant", "content": "Here you go."},
        {"role": "user", "content": "my sister is called Ana"},
    ]
    httpx.post(gw.url + "/v1/chat/completions", json={**body, "messages": later}, headers=AUTH)
    assert [m.role for m in gw.store.list_messages("default")] == ["user", "assistant", "user", "assistant"]
