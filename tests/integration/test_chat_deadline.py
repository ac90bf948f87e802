"""A chat turn's context has a deadline, memory never fails a chat, and no write outlives the response
(docs/recall.md, "A deadline per turn"; docs/ARCHITECTURE.md, "Lambda rules"; README, "Turning memory
off for a turn")."""

from __future__ import annotations

import json
import threading
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest
from engram.domain.models import MemoryFilter, Message
from engram.services.library.memories import MemoryWrite

from tests.fakes.upstream import Reply
from tests.integration.chat_support import OWNER_KEY, Gateway, MakeGateway, make_gateway, upstream

__all__ = ["make_gateway", "upstream"]

AUTH = {"authorization": f"Bearer {OWNER_KEY}"}


def _chat(gw: Gateway, content: str, *, stream: bool = False, headers: dict[str, str] | None = None) -> httpx.Response:
    gw.upstream.script(Reply(text="the answer", chunks=3))
    body = {"model": "companion", "stream": stream, "messages": [{"role": "user", "content": content}]}
    return httpx.post(gw.url + "/v1/chat/completions", json=body, headers={**AUTH, **(headers or {})}, timeout=20)


def _answer(resp: httpx.Response) -> str:
    """The assistant's text of a whole or streamed OpenAI-wire answer."""
    if not resp.headers["content-type"].startswith("text/event-stream"):
        return str(resp.json()["choices"][0]["message"]["content"])
    parts = []
    for line in resp.text.splitlines():
        if line.startswith("data: {"):
            for choice in json.loads(line[6:]).get("choices") or []:
                parts.append((choice.get("delta") or {}).get("content") or "")
    return "".join(parts)


def _sent(gw: Gateway) -> str:
    return json.dumps(gw.upstream.last().json, ensure_ascii=False)


@pytest.fixture(params=["one-hop", "side-by-side"])
def hops(request: pytest.FixtureRequest) -> str:
    """How the turn's reads reach their worker thread: in one hop (an in-process store, the gateway these
    tests build) or one hop per source (a store over the network)."""
    return str(request.param)


def _hops(gw: Gateway, hops: str) -> Gateway:
    gw.container.chat._context._in_process = hops == "one-hop"
    return gw


def _messages(gw: Gateway) -> list[Message]:
    return gw.store.list_messages("default", limit=100)


def _memories(gw: Gateway) -> list[str]:
    return [m.content for m in gw.store.list_memories("default", MemoryFilter(), limit=100).items]


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
def test_a_recall_past_the_deadline_leaves_the_turn_going_with_what_is_ready(
    make_gateway: MakeGateway, stream: bool, hops: str
) -> None:
    # Given a pinned memory (the boot block) and a recall that takes far longer than the turn's deadline
    gw = _hops(make_gateway(chat_context_deadline_seconds=0.3), hops)
    gw.container.memories.write("default", MemoryWrite(content="Pinned fact: Lin ships on Fridays.", pinned=True))
    gw.container.memories.write("default", MemoryWrite(content="The deploy script is deploy.sh"))
    gw.recall.hold = threading.Event()  # the recall does not return until the test says so
    try:
        # When chatting
        resp = _chat(gw, "which deploy script do I use?", stream=stream)
        # Then the turn is forwarded and answered while the recall is still running, and says why
        assert gw.recall.calls and gw.recall.returned == 0
    finally:
        gw.recall.hold.set()
    assert resp.status_code == 200
    assert _answer(resp) == "the answer"
    assert resp.headers["x-engram-reason"] == "recall_timeout"
    # And what was ready went out (the boot block), what was not did not, nor was it recorded as injected
    assert "Pinned fact" in _sent(gw)
    assert "deploy.sh" not in _sent(gw)
    assert gw.recall.recorded == []
    # And the exchange was stored as any other
    assert [m.role for m in _messages(gw)] == ["user", "assistant"]


def test_the_memories_a_turn_injects_are_recorded_before_its_last_byte(make_gateway: MakeGateway, hops: str) -> None:
    gw = _hops(make_gateway(), hops)
    gw.container.memories.write("default", MemoryWrite(content="The deploy script is deploy.sh"))
    resp = _chat(gw, "which deploy script do I use?")
    assert resp.headers["x-engram-reason"] == "injected"
    assert "deploy.sh" in _sent(gw)
    [memory] = gw.store.list_memories("default", MemoryFilter(), limit=10).items
    assert gw.recall.recorded == [(memory.id,)]
    assert memory.last_injected_at is not None  # written before the response ended: no wait here


def test_a_reminder_claim_that_lands_after_the_deadline_is_released_for_the_next_turn(
    make_gateway: MakeGateway, monkeypatch: pytest.MonkeyPatch, hops: str
) -> None:
    # Given a due reminder and a reminder claim that takes longer than the turn's deadline
    gw = _hops(make_gateway(chat_context_deadline_seconds=0.3), hops)
    when = (datetime.now(UTC) - timedelta(minutes=1)).isoformat()
    created = httpx.post(gw.url + "/v1/memories", json={"content": "feed the cat", "remind_at": when}, headers=AUTH)
    assert created.status_code == 201
    reminders = gw.container.reminders
    claim_due = reminders.claim_due

    def slow_claim(namespace: str, owner: str) -> Any:
        time.sleep(1.0)
        return claim_due(namespace, owner)

    monkeypatch.setattr(reminders, "claim_due", slow_claim)
    # When a turn misses it
    resp = _chat(gw, "hello")
    assert resp.headers["x-engram-reason"] == "recall_timeout"
    assert "feed the cat" not in _sent(gw)
    # Then the claim was released before the response ended: the next turn delivers the reminder
    monkeypatch.setattr(reminders, "claim_due", claim_due)
    _chat(gw, "hello again")
    assert "feed the cat" in _sent(gw)


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
def test_no_memory_failure_breaks_a_chat(
    make_gateway: MakeGateway, monkeypatch: pytest.MonkeyPatch, stream: bool, hops: str
) -> None:
    # Given every memory part of a turn failing: recall, boot block, reminders, past conversations,
    # the injection record, the explicit "remember ...", the stored exchange
    gw = _hops(make_gateway(recall_fails=True), hops)
    c = gw.container

    def broken(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("the store is on fire")

    monkeypatch.setattr(c.boot, "block", broken)
    monkeypatch.setattr(c.reminders, "claim_due", broken)
    monkeypatch.setattr(c.conversations, "search", broken)
    monkeypatch.setattr(c.memories, "write", broken)
    monkeypatch.setattr(c.messages, "ingest", broken)
    # When chatting (with a "remember ..." too)
    resp = _chat(gw, "remember that my cat is called Tom", stream=stream)
    # Then the chat answers all the same
    assert resp.status_code == 200
    assert _answer(resp) == "the answer"
    assert resp.headers["x-engram-reason"] == "recall_failed"


@pytest.mark.parametrize("failing", ["claim", "boot", "claim+boot"])
def test_a_source_failing_past_its_own_guard_does_not_hold_up_the_others(
    make_gateway: MakeGateway, monkeypatch: pytest.MonkeyPatch, hops: str, failing: str
) -> None:
    # Given a reminder claim and/or boot block that fail with a bug their own guards do not catch, and a
    # deadline long enough that a source left unanswered would show as a timeout
    gw = _hops(make_gateway(chat_context_deadline_seconds=10), hops)
    gw.container.memories.write("default", MemoryWrite(content="The deploy script is deploy.sh"))
    context = gw.container.chat._context

    def bug(*args: Any, **kwargs: Any) -> Any:
        raise KeyError("a bug outside the source's guard")

    for source in failing.split("+"):
        monkeypatch.setattr(context, {"claim": "_claim_now", "boot": "_boot_now"}[source], bug)
    # When chatting
    resp = _chat(gw, "which deploy script do I use?")
    # Then the recall still answers (in time, not as a timeout) and its memory is injected
    assert resp.status_code == 200
    assert resp.headers["x-engram-reason"] == "injected"
    assert "deploy.sh" in _sent(gw)


def test_a_bug_after_a_write_started_still_awaits_the_write_before_the_response(
    make_gateway: MakeGateway, monkeypatch: pytest.MonkeyPatch, hops: str
) -> None:
    # Given a slow "remember ..." write and an upstream adapter that fails with a bug (not an EngramError)
    gw = _hops(make_gateway(), hops)
    memories = gw.container.memories
    write = memories.write

    def slow_write(*args: Any, **kwargs: Any) -> Any:
        time.sleep(0.5)
        return write(*args, **kwargs)

    async def bug(*args: Any, **kwargs: Any) -> Any:
        raise KeyError("a bug in the adapter")

    monkeypatch.setattr(memories, "write", slow_write)
    monkeypatch.setattr(gw.container.chat._openai, "send", bug)
    # When chatting
    resp = _chat(gw, "remember that my cat is called Tom")
    # Then the client gets a clean internal error with the Engram headers
    assert resp.status_code == 500
    assert resp.json()["error"]["code"] == "internal_error"
    assert resp.headers["x-engram-reason"] == "no_content"
    # And the write had finished before the response: nothing is left running after it
    assert any("my cat is called Tom" in m for m in _memories(gw))
    # And the user's turn is kept with what went wrong
    [user] = _messages(gw)
    assert user.role == "user" and user.error is not None and user.error.startswith("internal_error")


def test_memory_off_makes_the_turn_a_plain_proxy(make_gateway: MakeGateway) -> None:
    # Given memories, and a due reminder
    gw = make_gateway()
    gw.container.memories.write("default", MemoryWrite(content="Pinned fact: Lin ships on Fridays.", pinned=True))
    # When a turn is sent with memory off, asking to remember something
    resp = _chat(gw, "remember that my cat is called Tom", headers={"x-engram-memory": "off"})
    # Then it is answered, told nothing, and nothing of it is kept
    assert resp.status_code == 200
    assert resp.headers["x-engram-reason"] == "disabled"
    assert resp.headers["x-engram-injected"] == "0"
    assert "Pinned fact" not in _sent(gw)
    assert not any("Tom" in m for m in _memories(gw))
    assert _messages(gw) == []
    assert gw.recall.calls == []
