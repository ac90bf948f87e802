"""Claude routing, wire conversion both ways and cache markers, driven by the `anthropic` and `openai` SDKs."""

from __future__ import annotations

import json
from typing import Any

import anthropic
import httpx
import openai
from anthropic.types import MessageParam, ToolParam
from engram.domain.models import Digest
from engram.domain.wire.cache_markers import count_cache_control
from engram.services.library.memories import MemoryWrite
from openai.types.chat import ChatCompletionMessageFunctionToolCall, ChatCompletionToolUnionParam

from tests.fakes.upstream import Reply, ToolCall, Usage
from tests.integration.chat_support import (
    ANTHROPIC_KEY,
    OWNER_KEY,
    UPSTREAM_KEY,
    Gateway,
    MakeGateway,
    block_input,
    block_text,
    make_gateway,
    upstream,
)

__all__ = ["make_gateway", "upstream"]

SYSTEM = "You are Mira, a coding companion.\nToday's date: 2026-11-30\nAnswer briefly."
TOOLS: list[ToolParam] = [
    {"name": "read_file", "description": "read", "input_schema": {"type": "object", "properties": {}}},
    {"name": "grep", "description": "search", "input_schema": {"type": "object", "properties": {}}},
]


def claude(gw: Gateway) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=gw.url, api_key=OWNER_KEY, max_retries=0, timeout=10)


def _seed(gw: Gateway) -> None:
    gw.container.memories.write("default", MemoryWrite(content="The user is Lin, a Rust developer.", pinned=True))
    gw.container.memories.write("default", MemoryWrite(content="Lin's deploy script lives in tools/ship.sh."))
    gw.store.put_digest(
        Digest(namespace="default", content="Lin ships on Fridays.", updated_at=gw.container.clock.now())
    )


def _strip(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _strip(v) for k, v in value.items() if k != "cache_control"}
    if isinstance(value, list):
        return [_strip(v) for v in value]
    return value


def test_native_claude_gets_boot_anchor_tail_tool_markers_and_an_unmarked_patch(make_gateway: MakeGateway) -> None:
    # Given Claude as the chat model and some memories
    gw = make_gateway(chat_model="claude-test", anthropic_cache_ttl="1h")
    _seed(gw)
    gw.upstream.script(
        Reply(text="Use tools/ship.sh.", usage=Usage(input=20, output=5, cache_read=900, cache_write=80))
    )
    # When Claude Code-like traffic asks through the Anthropic SDK
    raw = claude(gw).messages.with_raw_response.create(
        model="companion",
        max_tokens=200,
        system=[{"type": "text", "text": SYSTEM, "cache_control": {"type": "ephemeral"}}],
        tools=TOOLS,
        messages=[
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": "hello"},
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "where is my deploy script?", "cache_control": {"type": "ephemeral"}}
                ],
            },
        ],
        extra_headers={"anthropic-beta": "some-beta-2025"},
    )
    msg = raw.parse()
    assert block_text(msg.content[0]) == "Use tools/ship.sh."
    assert raw.headers["x-engram-reason"] == "injected"
    req = gw.upstream.last("/v1/messages")
    body = req.json
    # Then the provider saw the gateway's key, not the client's, plus the client's beta header
    assert req.headers["x-api-key"] == ANTHROPIC_KEY and req.headers["anthropic-beta"] == "some-beta-2025"
    assert OWNER_KEY not in json.dumps(req.headers)
    assert body["model"] == "claude-test"
    # And exactly: last tool, system anchor on the boot block, tail on the previous reply (1h TTL)
    marker = {"type": "ephemeral", "ttl": "1h"}
    assert count_cache_control(body) == 3
    assert body["tools"][-1]["cache_control"] == marker
    assert body["system"][0]["text"] == "You are Mira, a coding companion.\nAnswer briefly."
    assert body["system"][-1]["text"].startswith("<engram-memory>") and body["system"][-1]["cache_control"] == marker
    assert "Rust developer" in body["system"][-1]["text"] and "Fridays" in body["system"][-1]["text"]
    assert body["messages"][1]["content"][-1]["cache_control"] == marker
    # And the patch is the last block of the current turn, with the date line and the memory, unmarked
    current = body["messages"][-1]["content"]
    assert current[0]["text"] == "where is my deploy script?" and "cache_control" not in current[0]
    assert "tools/ship.sh" in current[-1]["text"] and "2026-11-30" in current[-1]["text"]
    assert "cache_control" not in current[-1]
    # And usage with cache tokens is logged per model
    usage = httpx.get(gw.url + "/v1/usage", headers={"x-api-key": OWNER_KEY}).json()["models"]
    assert usage[0]["model"] == "claude-test" and usage[0]["cache_read_tokens"] == 900
    assert usage[0]["cache_write_tokens"] == 80 and usage[0]["input_tokens"] == 1000


def test_two_consecutive_turns_produce_byte_identical_prefixes_up_to_the_previous_tail(
    make_gateway: MakeGateway,
) -> None:
    # Given a conversation in which each turn recalls something different
    gw = make_gateway(chat_model="claude-test")
    _seed(gw)
    gw.container.memories.write("default", MemoryWrite(content="Lin's favourite crate is serde."))
    c = claude(gw)
    turn2: list[MessageParam] = [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "hello"},
        {"role": "user", "content": "where is my deploy script?"},
    ]
    turn3: list[MessageParam] = [
        *turn2,
        {"role": "assistant", "content": "tools/ship.sh"},
        {"role": "user", "content": "and my favourite crate?"},
    ]
    # When both go through the gateway
    for messages in (turn2, turn3):
        c.messages.create(model="companion", max_tokens=100, system=SYSTEM, tools=TOOLS, messages=messages)
    first, second = (r.json for r in gw.upstream.requests[-2:])
    # Then tools and system are byte-identical including markers
    assert json.dumps([first["tools"], first["system"]]) == json.dumps([second["tools"], second["system"]])
    # And the messages up to the first request's tail are byte-identical (markers aside)
    tail = len(first["messages"]) - 2
    assert "cache_control" in first["messages"][tail]["content"][-1]
    a = json.dumps(_strip(first["messages"][: tail + 1]), sort_keys=True).encode()
    b = json.dumps(_strip(second["messages"][: tail + 1]), sort_keys=True).encode()
    assert a == b
    # And each request's patch is different and last
    assert "ship.sh" in first["messages"][-1]["content"][-1]["text"]
    assert "serde" in second["messages"][-1]["content"][-1]["text"]
    assert count_cache_control(first) <= 4 and count_cache_control(second) <= 4


def test_native_streaming_passes_thinking_text_and_tool_use(make_gateway: MakeGateway) -> None:
    gw = make_gateway(chat_model="claude-test")
    gw.upstream.script(
        Reply(text="Let me look.", reasoning="need the file", tool_calls=(ToolCall("read_file", '{"path": "a.rs"}'),))
    )
    with claude(gw).messages.stream(
        model="companion", max_tokens=100, tools=TOOLS, messages=[{"role": "user", "content": "open a.rs"}]
    ) as stream:
        final = stream.get_final_message()
    kinds = [b.type for b in final.content]
    assert kinds == ["thinking", "text", "tool_use"]
    assert block_input(final.content[2]) == {"path": "a.rs"} and final.stop_reason == "tool_use"


def test_openai_client_talking_to_claude_is_converted_both_ways(make_gateway: MakeGateway) -> None:
    # Given Claude as the chat model and an OpenAI-wire client
    gw = make_gateway(chat_model="claude-test")
    gw.upstream.script(
        Reply(
            text="It is sunny.",
            reasoning="check weather",
            tool_calls=(ToolCall("weather", '{"city": "Oslo"}'),),
            usage=Usage(input=10, output=3, cache_read=100, cache_write=5),
        )
    )
    oc = openai.OpenAI(base_url=gw.url + "/v1", api_key=OWNER_KEY, max_retries=0)
    tools: list[ChatCompletionToolUnionParam] = [
        {"type": "function", "function": {"name": "weather", "parameters": {"type": "object"}}}
    ]
    # When asking without streaming
    out = oc.chat.completions.create(
        model="companion",
        messages=[{"role": "system", "content": "be brief"}, {"role": "user", "content": "weather in Oslo?"}],
        tools=tools,
    )
    # Then the Messages API got a converted request and the client a converted reply
    sent = gw.upstream.last("/v1/messages").json
    assert sent["model"] == "claude-test" and sent["max_tokens"] == 4096
    assert sent["system"][0]["text"] == "be brief"
    assert sent["tools"][0]["name"] == "weather" and "cache_control" in sent["tools"][0]
    message = out.choices[0].message
    assert message.content == "It is sunny."
    assert message.model_extra is not None and message.model_extra["reasoning_content"] == "check weather"
    assert message.tool_calls is not None
    call = message.tool_calls[0]
    assert isinstance(call, ChatCompletionMessageFunctionToolCall)
    assert json.loads(call.function.arguments) == {"city": "Oslo"}
    assert out.choices[0].finish_reason == "tool_calls"
    assert out.usage is not None and out.usage.prompt_tokens_details is not None
    assert out.usage.prompt_tokens == 115 and out.usage.prompt_tokens_details.cached_tokens == 100
    # And streamed the same way, ending with [DONE]
    gw.upstream.script(Reply(text="Sunny all day.", reasoning="hmm", chunks=3))
    chunks = list(
        oc.chat.completions.create(
            model="companion",
            messages=[{"role": "user", "content": "x"}],
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    reasoning = "".join(
        (c.choices[0].delta.model_extra or {}).get("reasoning_content") or "" for c in chunks if c.choices
    )
    assert (text, reasoning) == ("Sunny all day.", "hmm")
    assert chunks[-1].usage is not None
    body = {"model": "companion", "stream": True, "messages": [{"role": "user", "content": "x"}]}
    gw.upstream.script(Reply(text="ok"))
    raw = httpx.post(gw.url + "/v1/chat/completions", json=body, headers={"authorization": f"Bearer {OWNER_KEY}"})
    assert raw.text.rstrip().endswith("data: [DONE]")


def test_anthropic_client_talking_to_an_openai_compatible_model_is_converted(make_gateway: MakeGateway) -> None:
    # Given an OpenAI-compatible chat model and an Anthropic-wire client (Claude Code with ANTHROPIC_BASE_URL)
    gw = make_gateway()
    _seed(gw)
    gw.upstream.script(
        Reply(
            text="Reading it.",
            reasoning="plan",
            tool_calls=(ToolCall("read_file", '{"path": "x"}'),),
            usage=Usage(input=40, output=9, cache_read=30),
        )
    )
    msg = claude(gw).messages.create(
        model="companion",
        max_tokens=64,
        system=SYSTEM,
        tools=TOOLS,
        messages=[{"role": "user", "content": "where is my deploy script?"}],
    )
    sent = gw.upstream.last("/v1/chat/completions")
    # Then the OpenAI-compatible upstream got an OpenAI request (no cache markers) with the memories
    assert sent.headers["authorization"] == f"Bearer {UPSTREAM_KEY}"
    assert sent.json["model"] == "fake-chat" and sent.json["max_tokens"] == 64
    assert sent.json["messages"][0]["role"] == "system" and "<engram-memory>" in sent.json["messages"][0]["content"]
    assert "tools/ship.sh" in sent.json["messages"][-1]["content"]
    assert "cache_control" not in json.dumps(sent.json)
    # And the client got an Anthropic message
    assert [b.type for b in msg.content] == ["thinking", "text", "tool_use"]
    assert msg.usage.cache_read_input_tokens == 30 and msg.usage.input_tokens == 10
    # And streaming converts too
    gw.upstream.script(Reply(text="streamed reply", chunks=4, tool_calls=(ToolCall("grep", '{"q": "a"}'),)))
    with claude(gw).messages.stream(
        model="companion", max_tokens=64, tools=TOOLS, messages=[{"role": "user", "content": "go"}]
    ) as stream:
        final = stream.get_final_message()
    assert block_text(final.content[0]) == "streamed reply"
    assert block_input(final.content[1]) == {"q": "a"} and final.stop_reason == "tool_use"
    assert gw.upstream.last().json["stream_options"] == {"include_usage": True}


def test_native_claude_exchange_is_stored(make_gateway: MakeGateway) -> None:
    gw = make_gateway(chat_model="claude-test")
    gw.upstream.script(Reply(text="Noted.", chunks=2))
    with claude(gw).messages.stream(
        model="companion", max_tokens=10, messages=[{"role": "user", "content": "I moved to Bergen"}]
    ) as s:
        s.get_final_message()
    # Then the exchange was stored before the stream's message_stop reached the client
    rows = gw.store.list_messages("default")
    assert [(m.role, m.content) for m in rows] == [("user", "I moved to Bergen"), ("assistant", "Noted.")]
