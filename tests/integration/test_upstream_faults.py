"""The upstream fault matrix: every way a provider can fail x both doors x both upstream kinds x
streaming or not, asserting exactly what the client gets.

- An error status the provider sent: the same status and the provider's body when it speaks the
  door's wire; otherwise the provider's message in the door's error shape (status known before any
  byte went out, so streams too).
- Unreachable or dropped before the answer, malformed JSON: 502; silent past the timeout: 504; both in
  the door's error shape.
- Anything going wrong after a stream began: the events so far, then ONE error event in the client's
  wire (OpenAI: ``data: {"error": ...}`` then ``[DONE]``; Anthropic: ``event: error``) and the end.
  Never a cut stream, never an upstream line passed on raw.
Every answer carries the ``x-engram-*`` headers. And whatever the upstream did, the user's turn is
stored (issue 12, item 2): answered, with its answer; failed, alone, with the error noted on it.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from typing import Any

import httpx
import pytest

from tests.fakes.upstream import FakeUpstream, Reply
from tests.integration.chat_support import OWNER_KEY, start_gateway
from tests.servers import free_port

CHAT_HEADERS = ("x-engram-injected", "x-engram-reason", "x-engram-recall-ms", "x-engram-upstream-ms")
DOORS = {"openai": "/v1/chat/completions", "anthropic": "/v1/messages"}
MODELS = {"openai": "fake-chat", "anthropic": "claude-fake"}  # which upstream kind answers
TIMEOUT = 0.4


@dataclass(frozen=True)
class Fault:
    name: str
    reply: Reply | None  # None: the upstream is not even reachable
    status: int  # what the client gets before any byte of a body (200 when a stream began)
    stream_error: bool = False  # a stream that began must end with one error event
    provider_body: dict[str, Any] | None = None  # the provider's own error body (kept or reshaped per door)


PROVIDER_ERROR = {"error": {"message": "provider says no", "type": "provider_error"}}  # OpenAI's wire
ANTHROPIC_ERROR = {"type": "error", "error": {"type": "overloaded_error", "message": "provider is busy"}}


def _faults(stream: bool) -> list[Fault]:
    """The faults and, for a streaming or a whole request, what the client must see."""
    began = 200 if stream else 502
    faults = [
        Fault(f"status_{s}", Reply(status=s, error_body=PROVIDER_ERROR), s, provider_body=PROVIDER_ERROR)
        for s in (400, 401, 429, 500, 503)
    ]
    faults.append(
        Fault("anthropic_529", Reply(status=529, error_body=ANTHROPIC_ERROR), 529, provider_body=ANTHROPIC_ERROR)
    )
    faults += [
        Fault("unreachable", None, 502),
        Fault("silent_past_timeout", Reply(hang=5), 504),
        Fault("dropped_mid_answer", Reply(text="abcdefgh", chunks=8, drop_after=4), began, stream_error=stream),
        Fault("ok", Reply(text="all good"), 200),
    ]
    if stream:
        faults += [
            Fault("silent_mid_stream", Reply(text="abcdefgh", chunks=8, chunk_delay=TIMEOUT * 2.5), 200, True),
            *(
                Fault(f"sse_{name}", Reply(text="abcdefgh", chunks=4, splice=(3, raw)), 200, stream_error=True)
                for name, raw in (
                    ("json_array", b"data: [1,2]\n\n"),
                    ("json_null", b"data: null\n\n"),
                    ("string_error", b'data: {"error": "boom"}\n\n'),
                    ("not_json", b"data: <html>oops</html>\n\n"),
                    ("wrong_types", b'data: {"type": "content_block_delta", "index": "0", "choices": "x"}\n\n'),
                )
            ),
            # A line that is no SSE field at all is dropped; the stream goes on to its normal end.
            Fault("sse_garbage_line", Reply(text="abcdefgh", chunks=4, splice=(3, b"garbage line\n\n")), 200),
        ]
    else:
        faults += [
            Fault(f"json_{name}", Reply(body=raw), 502)
            for name, raw in (
                ("array", b"[1,2,3]"),
                ("null_choice", b'{"choices": [null], "content": [null, {"type": "text", "text": "x"}]}'),
                ("not_json", b"<html>Bad gateway</html>"),
                ("wrong_types", b'{"choices": [{"message": "hi"}], "content": "hi"}'),
            )
        ]
    return faults


CASES = [
    pytest.param(
        door, kind, stream, fault, id=f"{door}-door/{kind}-upstream/{'stream' if stream else 'whole'}/{fault.name}"
    )
    for stream in (False, True)
    for fault in _faults(stream)
    for door in DOORS
    for kind in MODELS
]


@dataclass
class Rig:
    url: str
    dead_url: str
    upstream: FakeUpstream
    store: Any
    dead_store: Any
    http: httpx.Client


@pytest.fixture(scope="module")
def rig() -> Iterator[Rig]:
    """Two gateways on one fake upstream (one of them pointed at a dead port), shared by the matrix."""
    with ExitStack() as stack:
        up = stack.enter_context(FakeUpstream())
        common: dict[str, Any] = {
            "chat_allow_model_passthrough": True,
            "upstream_timeout": TIMEOUT,
            "chat_keepalive_seconds": 5.0,
        }
        live = start_gateway(stack, up, **common)
        dead = f"http://127.0.0.1:{free_port()}"
        unreachable = start_gateway(stack, up, upstream_base_url=dead + "/v1", anthropic_base_url=dead, **common)
        http = stack.enter_context(httpx.Client(headers={"x-api-key": OWNER_KEY}, timeout=10))
        yield Rig(live.url, unreachable.url, up, live.store, unreachable.store, http)


def _events(wire: str, text: str) -> list[tuple[str | None, Any]]:
    """The client's stream as (event name, decoded data); comments skipped. Fails on anything that is
    not a well-formed event of ``wire``."""
    assert text.endswith("\n\n"), f"stream cut mid-event: {text[-80:]!r}"
    out: list[tuple[str | None, Any]] = []
    for block in text.split("\n\n")[:-1]:
        lines = [line for line in block.split("\n") if not line.startswith(":")]
        if not lines:
            continue
        fields = dict(line.split(": ", 1) for line in lines)
        assert set(fields) <= {"event", "data"} and "data" in fields, f"not an SSE event: {block!r}"
        data = fields["data"]
        if wire == "openai" and data == "[DONE]":
            out.append((None, "[DONE]"))
            continue
        value = json.loads(data)  # never raw upstream text
        assert isinstance(value, dict), block
        if wire == "anthropic":
            assert fields.get("event") == value.get("type"), f"event name and type differ: {block!r}"
        out.append((fields.get("event"), value))
    return out


def _assert_error_shape(wire: str, payload: Any) -> dict[str, Any]:
    if wire == "anthropic":
        assert payload.get("type") == "error", payload
    error = payload["error"]
    assert isinstance(error, dict) and isinstance(error.get("message"), str) and error["message"], payload
    return dict(error)


@pytest.mark.parametrize(("door", "kind", "stream", "fault"), CASES)
def test_client_answer_for_every_upstream_fault(rig: Rig, door: str, kind: str, stream: bool, fault: Fault) -> None:
    # Given an upstream scripted to fail this way (or a gateway whose upstream is not there)
    rig.upstream.reset()
    if fault.reply is not None:
        rig.upstream.script(fault.reply)
    base = rig.url if fault.reply is not None else rig.dead_url
    said = f"fault matrix {fault.name} via {door} to {kind}, {'stream' if stream else 'whole'}"
    body = {"model": MODELS[kind], "stream": stream, "max_tokens": 50, "messages": [{"role": "user", "content": said}]}
    # When the client asks through this door
    resp = rig.http.post(base + DOORS[door], json=body, headers={"x-engram-conversation": said})
    # Then the status is known and right, with the x-engram headers
    assert resp.status_code == fault.status, resp.text[:300]
    assert all(h in resp.headers for h in CHAT_HEADERS), dict(resp.headers)
    # And the user's turn was stored before the answer ended: with its answer, or with the error noted
    store = rig.store if fault.reply is not None else rig.dead_store
    stored = [m for m in store.list_messages("default", limit=10_000) if m.conversation_id == said]
    answered = fault.status == 200 and not fault.stream_error
    assert [(m.role, m.content) for m in stored[:1]] == [("user", said)], stored
    if answered:
        assert stored[0].error is None and len(stored) == 2 and stored[1].role == "assistant", stored
    else:
        assert len(stored) == 1 and stored[0].error and stored[0].error.startswith("upstream_"), stored
    if fault.provider_body is not None:
        speaks_door = ("type" in fault.provider_body) == (door == "anthropic")
        if speaks_door:
            assert resp.json() == fault.provider_body  # the provider's body, unchanged
        else:
            # the other wire's error: the provider's message, in the door's shape
            error = _assert_error_shape(door, resp.json())
            assert error["message"] == "upstream error: " + fault.provider_body["error"]["message"], error
        return
    if resp.status_code != 200:
        error = _assert_error_shape(door, resp.json())
        assert (
            error["type"] == ("timeout_error" if door == "anthropic" else "upstream_timeout") or resp.status_code != 504
        )
        return
    if not stream:
        answer = resp.json()
        assert answer.get("choices" if door == "openai" else "content"), answer
        return
    events = _events(door, resp.text)
    errors = [i for i, (name, data) in enumerate(events) if data != "[DONE]" and (name == "error" or "error" in data)]
    if fault.stream_error:
        # ... the events so far, then exactly one error event, then the end
        assert len(errors) == 1, events
        tail = events[errors[0] + 1 :]
        assert tail == ([(None, "[DONE]")] if door == "openai" else []), tail
        _assert_error_shape(door, events[errors[0]][1])
    else:
        assert not errors, events
        assert events[-1] == ((None, "[DONE]") if door == "openai" else ("message_stop", {"type": "message_stop"}))


JOB_FAULTS = {
    "json_array": Reply(body=b"[1,2,3]"),
    "null_items": Reply(body=b'{"choices": [{"message": null}], "content": [null]}'),
    "not_json": Reply(body=b"<html>oops</html>"),
}


@pytest.mark.parametrize("kind", ["openai", "anthropic"])
@pytest.mark.parametrize("fault", sorted(JOB_FAULTS))
async def test_the_job_models_turn_malformed_answers_into_upstream_errors(rig: Rig, kind: str, fault: str) -> None:
    """Extraction, dreaming and compression call the same providers through the ChatModel adapters."""
    from engram.adapters.llm.anthropic import AnthropicChatModel, AnthropicUpstream
    from engram.adapters.llm.openai_compat import OpenAICompatChatModel, OpenAICompatUpstream
    from engram.domain.errors import UpstreamUnavailable

    # Given a job model whose provider answers malformed JSON or SSE
    rig.upstream.reset()
    rig.upstream.script(JOB_FAULTS[fault])
    model: Any
    upstream: Any
    if kind == "openai":
        upstream = OpenAICompatUpstream(rig.upstream.openai_base_url, "k")
        model = OpenAICompatChatModel(upstream, "fake-chat")
    else:
        upstream = AnthropicUpstream(rig.upstream.base_url, "k")
        model = AnthropicChatModel(upstream, "claude-fake")
    messages = [{"role": "user", "content": "summarise"}]
    # When it completes; Then an UpstreamUnavailable, never another exception
    try:
        with pytest.raises(UpstreamUnavailable):
            await model.complete(messages, max_tokens=20)
    finally:
        await upstream.aclose()
