"""Coding clients' requests as they really arrive (Claude Code 2.1's trailing system message and
<system-reminder> blocks, OpenAI trailing developer messages) through the real gateway: the turn is
stored, "remember" works, recall is injected into the user's turn. The real CLIs: tests/clients/."""

from __future__ import annotations

import json
from typing import Any

import httpx
from engram.domain.models import MemoryFilter
from engram.services.library.memories import MemoryWrite

from tests.fakes.upstream import Reply
from tests.integration.chat_support import OWNER_KEY, Gateway, MakeGateway, make_gateway, upstream

__all__ = ["make_gateway", "upstream"]

REMINDER = "<system-reminder>\nContext from CLAUDE.md: use pnpm.\n</system-reminder>"


def _claude_code_body(words: str) -> dict[str, Any]:
    """Claude Code 2.1's ``claude -p`` request, trimmed (the issue's shape)."""
    return {
        "model": "claude-test",
        "stream": True,
        "max_tokens": 64000,
        "thinking": {"type": "adaptive"},
        "output_config": {"effort": "high"},
        "metadata": {"user_id": json.dumps({"device_id": "d1", "session_id": "s1"})},
        "system": [
            {"type": "text", "text": "You are Claude Code."},
            {"type": "text", "text": "Help with software tasks.", "cache_control": {"type": "ephemeral"}},
        ],
        "tools": [{"name": "Bash", "description": "run", "input_schema": {"type": "object", "properties": {}}}],
        "messages": [
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": REMINDER},
                    {"type": "text", "text": words, "cache_control": {"type": "ephemeral"}},
                ],
            },
            {"role": "system", "content": "Available agent types for the Agent tool: general-purpose"},
        ],
    }


def _post(gw: Gateway, path: str, body: dict[str, Any], thread: str) -> httpx.Response:
    headers = {"x-api-key": OWNER_KEY, "anthropic-version": "2023-06-01", "x-engram-thread": thread}
    return httpx.post(gw.url + path, json=body, headers=headers, timeout=10)


def test_claude_code_turn_is_stored_remembered_and_recalled(make_gateway: MakeGateway) -> None:
    gw = make_gateway(chat_model="claude-test")
    gw.container.memories.write("default", MemoryWrite(content="Lin's favourite city is Lisbon in October light."))
    # When Claude Code says "remember: ..." with its scaffolding and trailing system message
    gw.upstream.script(Reply(text="Noted."), Reply(text="Take a jacket."))
    first = _post(gw, "/v1/messages", _claude_code_body("remember: my passport number ends in 4471"), "cc-1")
    assert first.status_code == 200 and "message_stop" in first.text
    # Then the fact is a memory, and the turn (the user's words only) is stored in the thread
    facts = [m.content for m in gw.store.list_memories("default", MemoryFilter(), limit=50).items]
    assert "my passport number ends in 4471" in facts
    stored = gw.store.list_thread_messages("default", "cc-1").items
    assert [(m.role, m.content) for m in stored] == [
        ("user", "remember: my passport number ends in 4471"),
        ("assistant", "Noted."),
    ]
    # When the next question needs an unpinned memory
    second = _post(gw, "/v1/messages", _claude_code_body("what should I pack for Lisbon in October?"), "cc-1")
    assert second.status_code == 200 and second.headers["x-engram-reason"] == "injected"
    # Then the memory rides at the end of the user's turn, before the client's system message
    sent = gw.upstream.last("/v1/messages").json
    user, trailing = sent["messages"][-2], sent["messages"][-1]
    assert trailing["role"] == "system" and user["role"] == "user"
    assert user["content"][0]["text"] == REMINDER
    assert "Lisbon in October light" in user["content"][-1]["text"]
    assert all("cache_control" not in block for block in user["content"])  # the patch turn is never marked
    assert "cache_control" in sent["tools"][-1] and "cache_control" in sent["system"][-1]


def test_openai_turn_with_a_trailing_developer_message_is_stored(make_gateway: MakeGateway) -> None:
    gw = make_gateway()
    gw.upstream.script(Reply(text="Blue it is."))
    body = {
        "model": "companion",
        "messages": [
            {"role": "user", "content": "remember: my bike is blue"},
            {"role": "developer", "content": "Answer in one line."},
        ],
    }
    reply = httpx.post(
        gw.url + "/v1/chat/completions",
        json=body,
        headers={"authorization": f"Bearer {OWNER_KEY}", "x-engram-thread": "oa-1"},
        timeout=10,
    )
    assert reply.status_code == 200
    stored = gw.store.list_thread_messages("default", "oa-1").items
    assert [m.content for m in stored] == ["remember: my bike is blue", "Blue it is."]
    facts = [m.content for m in gw.store.list_memories("default", MemoryFilter(), limit=50).items]
    assert "my bike is blue" in facts
    sent = gw.upstream.last("/v1/chat/completions").json
    assert sent["messages"][-1] == {"role": "developer", "content": "Answer in one line."}


def test_head_and_get_root_answer(make_gateway: MakeGateway) -> None:
    gw = make_gateway()
    head = httpx.head(gw.url + "/", timeout=5)
    assert head.status_code == 200 and head.content == b""
    got = httpx.get(gw.url + "/", timeout=5).json()
    assert got["name"] == "engram" and got["health"] == "/health"
