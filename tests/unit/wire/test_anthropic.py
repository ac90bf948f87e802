"""OpenAI <-> Anthropic conversion: requests, whole responses, streams (pure)."""

from __future__ import annotations

import json
from typing import Any

from engram.domain.wire.anthropic import (
    anthropic_request_to_openai,
    anthropic_response_to_openai,
    messages_request,
    openai_request_to_anthropic,
    openai_response_to_anthropic,
)
from engram.domain.wire.anthropic_stream import AnthropicToOpenAIStream, OpenAIToAnthropicStream
from engram.domain.wire.sse import SseParser

OPENAI_REQ = {
    "model": "companion",
    "stream": True,
    "max_tokens": 99,
    "stop": "END",
    "messages": [
        {"role": "system", "content": "sys"},
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "see"},
                {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}},
            ],
        },
        {
            "role": "assistant",
            "content": None,
            "reasoning_content": "hmm",
            "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": '{"a": 1}'}}],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "42"},
        {"role": "tool", "tool_call_id": "c2", "content": "43"},
        {"role": "user", "content": "thanks"},
    ],
    "tools": [{"type": "function", "function": {"name": "f", "description": "d", "parameters": {"type": "object"}}}],
    "tool_choice": "required",
}


def test_openai_request_to_anthropic() -> None:
    out = openai_request_to_anthropic(OPENAI_REQ, "claude-x", default_max_tokens=4096)
    assert out["system"] == [{"type": "text", "text": "sys"}]
    assert out["max_tokens"] == 99 and out["stop_sequences"] == ["END"] and out["stream"] is True
    user, assistant, results = out["messages"][:3]
    assert user["content"][1] == {
        "type": "image",
        "source": {"type": "base64", "media_type": "image/png", "data": "AAAA"},
    }
    assert assistant["content"] == [{"type": "tool_use", "id": "c1", "name": "f", "input": {"a": 1}}]
    # consecutive tool results and the next user text merge into one user turn (roles alternate)
    assert [b["type"] for b in results["content"]] == ["tool_result", "tool_result", "text"]
    assert out["tools"] == [{"name": "f", "description": "d", "input_schema": {"type": "object"}}]
    assert out["tool_choice"] == {"type": "any"}


def test_anthropic_request_to_openai() -> None:
    body = {
        "model": "companion",
        "max_tokens": 50,
        "system": [{"type": "text", "text": "sys"}],
        "stream": True,
        "messages": [
            {"role": "user", "content": "hi"},
            {
                "role": "assistant",
                "content": [
                    {"type": "thinking", "thinking": "x", "signature": "s"},
                    {"type": "tool_use", "id": "t1", "name": "f", "input": {"q": 1}},
                ],
            },
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": "t1", "content": [{"type": "text", "text": "r"}]},
                    {"type": "image", "source": {"type": "url", "url": "http://x/i.png"}},
                ],
            },
        ],
        "tools": [{"name": "f", "input_schema": {"type": "object"}}],
        "tool_choice": {"type": "tool", "name": "f"},
    }
    out = anthropic_request_to_openai(body, "deepseek")
    assert out["messages"][0] == {"role": "system", "content": "sys"}
    assert out["messages"][2]["tool_calls"][0]["function"] == {"name": "f", "arguments": '{"q": 1}'}
    assert out["messages"][3] == {"role": "tool", "tool_call_id": "t1", "content": "r"}
    assert out["messages"][4]["content"] == [{"type": "image_url", "image_url": {"url": "http://x/i.png"}}]
    assert out["stream_options"] == {"include_usage": True}
    assert out["tool_choice"] == {"type": "function", "function": {"name": "f"}}


def test_whole_responses_both_ways_with_usage() -> None:
    msg = {
        "id": "msg_1",
        "content": [
            {"type": "thinking", "thinking": "t"},
            {"type": "text", "text": "hi"},
            {"type": "tool_use", "id": "u", "name": "f", "input": {"a": 1}},
        ],
        "stop_reason": "tool_use",
        "usage": {
            "input_tokens": 10,
            "output_tokens": 5,
            "cache_read_input_tokens": 100,
            "cache_creation_input_tokens": 7,
        },
    }
    o = anthropic_response_to_openai(msg, "companion")
    m = o["choices"][0]["message"]
    assert (m["content"], m["reasoning_content"], o["choices"][0]["finish_reason"]) == ("hi", "t", "tool_calls")
    assert o["usage"]["prompt_tokens"] == 117 and o["usage"]["prompt_tokens_details"]["cached_tokens"] == 100
    back = openai_response_to_anthropic(o, "companion")
    assert [b["type"] for b in back["content"]] == ["thinking", "text", "tool_use"]
    assert back["usage"] == {
        "input_tokens": 10,
        "output_tokens": 5,
        "cache_read_input_tokens": 100,
        "cache_creation_input_tokens": 7,
    }
    assert back["stop_reason"] == "tool_use"


def _events(raw: bytes) -> list[tuple[str | None, dict[str, Any]]]:
    return [(e.event, json.loads(e.data)) for e in SseParser().feed(raw) if e.data and e.data != "[DONE]"]


def test_streams_both_ways_round_trip() -> None:
    # Given an OpenAI stream with reasoning, text and a tool call
    chunks: list[dict[str, Any]] = [
        {"id": "c", "choices": [{"delta": {"role": "assistant", "content": ""}}]},
        {"id": "c", "choices": [{"delta": {"reasoning_content": "th"}}]},
        {"id": "c", "choices": [{"delta": {"content": "he"}}]},
        {"id": "c", "choices": [{"delta": {"content": "llo"}}]},
        {
            "id": "c",
            "choices": [
                {"delta": {"tool_calls": [{"index": 0, "id": "t", "function": {"name": "f", "arguments": '{"a"'}}]}}
            ],
        },
        {"id": "c", "choices": [{"delta": {"tool_calls": [{"index": 0, "function": {"arguments": ":1}"}}]}}]},
        {"id": "c", "choices": [{"delta": {}, "finish_reason": "tool_calls"}]},
        {
            "id": "c",
            "choices": [],
            "usage": {"prompt_tokens": 9, "completion_tokens": 3, "prompt_tokens_details": {"cached_tokens": 4}},
        },
    ]
    # When converted to Anthropic events
    o2a = OpenAIToAnthropicStream("companion")
    raw = b"".join(b for c in chunks for b in o2a.feed(c)) + b"".join(o2a.finish())
    events = _events(raw)
    kinds = [e for e, _ in events]
    assert kinds[0] == "message_start" and kinds[-2:] == ["message_delta", "message_stop"]
    starts = [d["content_block"]["type"] for e, d in events if e == "content_block_start"]
    assert starts == ["thinking", "text", "tool_use"]
    assert events[-2][1]["delta"]["stop_reason"] == "tool_use"
    assert events[-2][1]["usage"]["cache_read_input_tokens"] == 4
    # And back to OpenAI chunks
    a2o = AnthropicToOpenAIStream("companion", include_usage=True)
    out = b"".join(b for e, d in events for b in a2o.feed(e, d))
    assert out.endswith(b"data: [DONE]\n\n")
    back = _events(out)
    text = "".join(d["choices"][0]["delta"].get("content") or "" for _, d in back if d["choices"])
    reasoning = "".join(d["choices"][0]["delta"].get("reasoning_content") or "" for _, d in back if d["choices"])
    args = "".join(
        tc["function"].get("arguments", "")
        for _, d in back
        if d["choices"]
        for tc in d["choices"][0]["delta"].get("tool_calls") or []
    )
    assert (text, reasoning, args) == ("hello", "th", '{"a":1}')
    assert back[-1][1]["usage"]["prompt_tokens_details"]["cached_tokens"] == 4


def test_engram_model_calls_become_a_messages_request_with_the_system_prompts_joined() -> None:
    # Given Engram's own job messages with two system prompts
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "You extract facts."},
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "I moved to Lyon"},
        {"role": "assistant", "content": None},
    ]
    # When converted with and without JSON mode
    plain = messages_request(messages, "claude-x", 300)
    json_mode = messages_request(messages, "claude-x", 300, json_mode=True)
    # Then system prompts are joined, the turns kept (no content -> ""), JSON asked for in system
    assert plain == {
        "model": "claude-x",
        "messages": [{"role": "user", "content": "I moved to Lyon"}, {"role": "assistant", "content": ""}],
        "max_tokens": 300,
        "system": "You extract facts.\n\nBe brief.",
    }
    assert json_mode["system"].endswith("\n\nReply with exactly one JSON object and nothing else.")
    assert "system" not in messages_request(messages[2:], "claude-x", 300)
