"""Nothing after the last byte (issue 11; docs/aws.md "How Lambda runs it"): a stream passes the
answer on as it arrives and holds back only its closing event until the exchange is stored; a write
that fails is logged and the answer is still delivered whole."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

import httpx
import pytest
from engram.domain.models import Message

from tests.fakes.upstream import Reply
from tests.integration.chat_support import OWNER_KEY, Gateway, MakeGateway, make_gateway, upstream

__all__ = ["make_gateway", "upstream"]

AUTH = {"authorization": f"Bearer {OWNER_KEY}"}
DOORS = {
    "openai": ("/v1/chat/completions", {}, b"data: [DONE]"),
    "anthropic": ("/v1/messages", {"max_tokens": 50}, b"event: message_stop"),
}


def body(door: str, text: str, *, stream: bool) -> dict[str, Any]:
    return {"model": "companion", "stream": stream, "messages": [{"role": "user", "content": text}], **DOORS[door][1]}


@pytest.mark.parametrize("door", list(DOORS))
def test_the_stream_flows_while_the_write_waits_and_only_the_end_is_held(
    make_gateway: MakeGateway, door: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a store whose message write blocks until released
    gw: Gateway = make_gateway()
    gw.upstream.script(Reply(text="aaabbbcccddd", chunks=4))
    release, writing = threading.Event(), threading.Event()
    real_insert = gw.store.insert_messages

    def slow_insert(messages: Sequence[Message]) -> list[tuple[Message, bool]]:
        writing.set()
        assert release.wait(10)
        return real_insert(messages)

    monkeypatch.setattr(gw.store, "insert_messages", slow_insert)
    received: list[bytes] = []

    def read() -> None:
        path, _, _ = DOORS[door]
        with httpx.stream("POST", gw.url + path, json=body(door, "hi", stream=True), headers=AUTH) as resp:
            for piece in resp.iter_raw():
                received.append(piece)

    reader = threading.Thread(target=read)
    reader.start()
    try:
        # When the upstream has answered and the exchange is being written
        assert writing.wait(10)
        # Then the client gets the whole answer, but not the stream's end
        assert gw.wait_for(lambda: b"ddd" in b"".join(received))
        assert DOORS[door][2] not in b"".join(received)
        assert gw.store.list_messages("default") == []
    finally:
        release.set()
        reader.join(10)
    # And once the write is done the stream ends, with the exchange stored
    assert b"".join(received).rstrip().endswith(b"data: [DONE]" if door == "openai" else b'{"type":"message_stop"}')
    assert [m.role for m in gw.store.list_messages("default")] == ["user", "assistant"]


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
@pytest.mark.parametrize("door", list(DOORS))
def test_a_failing_write_is_logged_and_the_answer_still_arrives(
    make_gateway: MakeGateway, caplog: pytest.LogCaptureFixture, door: str, stream: bool
) -> None:
    # Given a store that cannot write messages, usage or memories
    gw: Gateway = make_gateway()
    gw.upstream.script(Reply(text="still here", chunks=2))

    def broken(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("disk full")

    for name in ("insert_messages", "append_usage", "insert_memory"):
        setattr(gw.store, name, broken)
    # When a chat (with a remember request) goes through
    path, _, end = DOORS[door]
    resp = httpx.post(gw.url + path, json=body(door, "remember: I like figs", stream=stream), headers=AUTH)
    # Then the client gets the whole answer, normally ended
    assert resp.status_code == 200
    if stream:
        assert b"still" in resp.content and end in resp.content and b"error" not in resp.content
    else:
        assert "still here" in resp.text
    # And the failures were logged
    messages = [r.getMessage() for r in caplog.records]
    assert "storing the exchange failed" in messages
    assert "storing an explicit remember request failed" in messages
