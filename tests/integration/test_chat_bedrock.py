"""The chat gateway with a ``bedrock/<model-id>`` model, driven by the official `openai` and `anthropic` SDKs.

The real Engram app runs on loopback; Bedrock is a scripted fake boto3 ``bedrock-runtime`` client
(``tests/fakes/bedrock_runtime.py``) injected through the bootstrap override ``bedrock_runtime``: it
checks every request against botocore's Converse/ConverseStream input shapes and answers with the
documented response and stream-event shapes. Only the model and the network are faked.
"""

from __future__ import annotations

import base64
import json
import time
from pathlib import Path
from typing import Any

import anthropic
import httpx
import openai
import pytest
from anthropic.types import MessageParam, TextBlockParam, ToolParam
from botocore.exceptions import NoCredentialsError
from engram.domain.models import Digest
from engram.services.library.memories import MemoryWrite
from openai.types.chat import (
    ChatCompletionContentPartParam,
    ChatCompletionMessageFunctionToolCall,
    ChatCompletionMessageParam,
    ChatCompletionToolUnionParam,
)

from tests.fakes.bedrock_runtime import BedrockReply, BedrockTool, FakeBedrockRuntime, wait_until
from tests.integration.chat_support import OWNER_KEY, Gateway, MakeGateway, block_text, make_gateway, upstream

__all__ = ["make_gateway", "upstream"]

MODEL = "bedrock/anthropic.claude-3-5-haiku-20241022-v1:0"
MODEL_ID = "anthropic.claude-3-5-haiku-20241022-v1:0"
AUTH = {"authorization": f"Bearer {OWNER_KEY}"}
TOOLS: list[ChatCompletionToolUnionParam] = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Weather for a city",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
        },
    }
]


@pytest.fixture
def bedrock() -> FakeBedrockRuntime:
    return FakeBedrockRuntime()


@pytest.fixture
def gw(make_gateway: MakeGateway, bedrock: FakeBedrockRuntime) -> Gateway:
    gateway: Gateway = make_gateway(chat_model=MODEL, aws_region="us-east-1", bedrock_runtime=bedrock)
    return gateway


def oai(gw: Gateway) -> openai.OpenAI:
    return openai.OpenAI(base_url=gw.url + "/v1", api_key=OWNER_KEY, max_retries=0, timeout=10)


def claude(gw: Gateway) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=gw.url, api_key=OWNER_KEY, max_retries=0, timeout=10)


def seed(gw: Gateway) -> None:
    gw.container.memories.write("default", MemoryWrite(content="The user's name is Lin.", type="identity", pinned=True))
    gw.container.memories.write("default", MemoryWrite(content="Lin's test code is apple-star-0428."))
    gw.store.put_digest(
        Digest(namespace="default", content="Lin likes green tea.", updated_at=gw.container.clock.now())
    )


def texts(blocks: list[dict[str, Any]]) -> str:
    return "\n".join(b["text"] for b in blocks if "text" in b)


def stored(gw: Gateway) -> list[tuple[str, str]]:
    """The stored exchange: complete by the time the client has the whole answer."""
    return [(m.role, m.content) for m in gw.store.list_messages("default")]


# -- OpenAI door --------------------------------------------------------------------------------------
def test_openai_sdk_chat_goes_to_converse_with_memories_injected_and_is_stored_once(
    gw: Gateway, bedrock: FakeBedrockRuntime
) -> None:
    # Given memories and a Bedrock reply with cache usage
    seed(gw)
    usage = {"inputTokens": 20, "outputTokens": 6, "cacheReadInputTokens": 900, "cacheWriteInputTokens": 100}
    bedrock.script(BedrockReply(text="Your code is apple-star-0428.", usage=usage))
    # When the openai SDK asks the alias with a system prompt holding a clock line
    system = "You are Mira.\nCurrent time: 2026-11-30 10:32"
    messages: list[ChatCompletionMessageParam] = [
        {"role": "system", "content": system},
        {"role": "user", "content": "what is my test code?"},
    ]
    raw = oai(gw).chat.completions.with_raw_response.create(model="companion", messages=messages, max_tokens=200)
    completion = raw.parse()
    # Then Converse got the model id without the prefix, the boot block in system, the patch in the user turn
    operation, request = bedrock.requests[-1]
    assert operation == "Converse" and request["modelId"] == MODEL_ID
    assert texts(request["system"]).startswith("You are Mira.\n\n<engram-memory>")
    assert "The user's name is Lin." in texts(request["system"]) and "10:32" not in texts(request["system"])
    turn = texts(request["messages"][-1]["content"])
    assert turn.startswith("what is my test code?\n\n<engram-context>") and "apple-star-0428" in turn
    assert request["inferenceConfig"] == {"maxTokens": 200}
    assert raw.headers["x-engram-injected"] == "1" and raw.headers["x-engram-reason"] == "injected"
    # And the answer and usage (cached tokens included) come back on the OpenAI wire
    assert completion.choices[0].message.content == "Your code is apple-star-0428."
    assert completion.choices[0].finish_reason == "stop"
    reported = completion.usage
    assert reported is not None and reported.prompt_tokens_details is not None
    assert reported.prompt_tokens == 1020 and reported.prompt_tokens_details.cached_tokens == 900
    # And the exchange is stored once, a retry is not stored again, and usage is logged per model
    oai(gw).chat.completions.create(model="companion", messages=messages, max_tokens=200)
    assert stored(gw) == [("user", "what is my test code?"), ("assistant", "Your code is apple-star-0428.")]
    rows = httpx.get(gw.url + "/v1/usage", headers=AUTH).json()["models"]
    assert rows[0]["model"] == MODEL and rows[0]["cache_read_tokens"] >= 900 and rows[0]["cache_write_tokens"] >= 100


def test_openai_sdk_streaming_passes_pieces_as_they_arrive_and_ends_with_done(
    gw: Gateway, bedrock: FakeBedrockRuntime
) -> None:
    # Given a Bedrock stream of 4 pieces 0.25 s apart
    bedrock.script(BedrockReply(text="abcdefgh", chunks=4, chunk_delay=0.25))
    # When streaming through the SDK
    started = time.monotonic()
    arrivals: list[float] = []
    pieces: list[str] = []
    for chunk in oai(gw).chat.completions.create(
        model="companion", messages=[{"role": "user", "content": "hi"}], stream=True
    ):
        if chunk.choices and chunk.choices[0].delta.content:
            pieces.append(chunk.choices[0].delta.content)
            arrivals.append(time.monotonic() - started)
    # Then the text is whole and was not buffered
    assert "".join(pieces) == "abcdefgh"
    assert arrivals[-1] - arrivals[0] > 0.5
    assert bedrock.requests[-1][0] == "ConverseStream"
    # And on the wire: [DONE] last, the usage chunk only when the client asked for it
    bedrock.script(BedrockReply(text="xy", usage={"inputTokens": 3, "outputTokens": 1, "cacheReadInputTokens": 40}))
    body = {"model": "companion", "stream": True, "messages": [{"role": "user", "content": "hi again"}]}
    raw = httpx.post(gw.url + "/v1/chat/completions", json=body, headers=AUTH).text
    assert raw.rstrip().endswith("data: [DONE]") and '"usage"' not in raw
    chunks = list(
        oai(gw).chat.completions.create(
            model="companion",
            messages=[{"role": "user", "content": "third"}],
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    assert chunks[-1].usage is not None and chunks[-1].usage.prompt_tokens == 12 + 0
    # And the streamed exchanges are stored
    rows = stored(gw)
    assert ("assistant", "abcdefgh") in rows and ("user", "hi again") in rows


def test_tool_calls_round_trip_streaming_and_not(gw: Gateway, bedrock: FakeBedrockRuntime) -> None:
    # Given Bedrock asking for a tool, whole and streamed
    tool = BedrockTool("get_weather", '{"city": "Lyon"}', id="tooluse_abc")
    bedrock.script(BedrockReply(text="", tools=(tool,)), BedrockReply(text="Let me check.", tools=(tool,)))
    c = oai(gw)
    ask: list[ChatCompletionMessageParam] = [{"role": "user", "content": "weather in Lyon?"}]
    # When the client offers a tool
    whole = c.chat.completions.create(model="companion", messages=ask, tools=TOOLS, tool_choice="auto")
    # Then Converse got the tool config and the client gets an OpenAI tool call
    spec = bedrock.last["toolConfig"]
    assert spec["tools"][0]["toolSpec"]["name"] == "get_weather" and spec["toolChoice"] == {"auto": {}}
    tool_calls = whole.choices[0].message.tool_calls
    assert tool_calls is not None
    call = tool_calls[0]
    assert isinstance(call, ChatCompletionMessageFunctionToolCall)
    assert (call.id, call.function.name, json.loads(call.function.arguments)) == (
        "tooluse_abc",
        "get_weather",
        {"city": "Lyon"},
    )
    assert whole.choices[0].finish_reason == "tool_calls"
    # And streamed, the call arrives as a head plus argument pieces
    calls: dict[int, dict[str, Any]] = {}
    finish = None
    for chunk in c.chat.completions.create(model="companion", messages=ask, tools=TOOLS, stream=True):
        for choice in chunk.choices:
            finish = choice.finish_reason or finish
            for piece in choice.delta.tool_calls or []:
                entry = calls.setdefault(piece.index, {"id": piece.id, "name": "", "args": ""})
                entry["name"] += (piece.function.name or "") if piece.function else ""
                entry["args"] += (piece.function.arguments or "") if piece.function else ""
    assert calls[0]["id"] == "tooluse_abc" and json.loads(calls[0]["args"]) == {"city": "Lyon"}
    assert finish == "tool_calls"
    # When the client sends the tool result back
    bedrock.script(BedrockReply(text="It is sunny in Lyon."))
    follow: list[ChatCompletionMessageParam] = [
        *ask,
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": call.id,
                    "type": "function",
                    "function": {"name": call.function.name, "arguments": call.function.arguments},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "tooluse_abc", "content": '{"sky": "sunny"}'},
    ]
    answer = c.chat.completions.create(model="companion", messages=follow, tools=TOOLS)
    # Then Converse sees the toolUse and the toolResult under the same id
    request = bedrock.last
    assert request["messages"][1]["content"][0]["toolUse"]["toolUseId"] == "tooluse_abc"
    assert request["messages"][2]["content"][0]["toolResult"] == {
        "toolUseId": "tooluse_abc",
        "content": [{"text": '{"sky": "sunny"}'}],
    }
    assert answer.choices[0].message.content == "It is sunny in Lyon."


def test_an_image_goes_to_a_bedrock_vision_model_as_bytes(
    make_gateway: MakeGateway, bedrock: FakeBedrockRuntime
) -> None:
    # Given a Bedrock vision model
    gw = make_gateway(chat_model=MODEL, vision_model="bedrock/amazon.nova-lite-v1:0", bedrock_runtime=bedrock)
    png = b"\x89PNG\r\n\x1a\nnot-really"
    image: ChatCompletionContentPartParam = {
        "type": "image_url",
        "image_url": {"url": "data:image/png;base64," + base64.b64encode(png).decode()},
    }
    # When a picture is sent to the alias
    oai(gw).chat.completions.create(
        model="companion", messages=[{"role": "user", "content": [{"type": "text", "text": "what is this?"}, image]}]
    )
    # Then the vision model got the picture's bytes
    request = bedrock.last
    assert request["modelId"] == "amazon.nova-lite-v1:0"
    assert {"image": {"format": "png", "source": {"bytes": png}}} in request["messages"][0]["content"]


# -- Anthropic door -----------------------------------------------------------------------------------
def test_anthropic_sdk_chat_through_bedrock_with_memories(gw: Gateway, bedrock: FakeBedrockRuntime) -> None:
    # Given memories and a Bedrock reply
    seed(gw)
    bedrock.script(
        BedrockReply(text="apple-star-0428", usage={"inputTokens": 30, "outputTokens": 4, "cacheReadInputTokens": 50})
    )
    # When the anthropic SDK sends a Messages request
    message = claude(gw).messages.create(
        model="companion",
        max_tokens=100,
        system="You are Mira.",
        messages=[{"role": "user", "content": "what is my test code?"}],
    )
    # Then Converse got the system prompt plus boot block and the patch in the user turn
    request = bedrock.last
    assert texts(request["system"]).startswith("You are Mira.\n\n<engram-memory>")
    assert "apple-star-0428" in texts(request["messages"][-1]["content"])
    assert request["inferenceConfig"]["maxTokens"] == 100
    # And the reply comes back on the Anthropic wire with cache usage split out
    assert block_text(message.content[0]) == "apple-star-0428" and message.stop_reason == "end_turn"
    assert message.usage.input_tokens == 30 and message.usage.cache_read_input_tokens == 50
    assert stored(gw) == [("user", "what is my test code?"), ("assistant", "apple-star-0428")]


def test_anthropic_sdk_streaming_text_and_tool_use(gw: Gateway, bedrock: FakeBedrockRuntime) -> None:
    # Given a streamed Bedrock answer with text and a tool call
    tool = BedrockTool("get_weather", '{"city": "Oslo"}', id="tooluse_o")
    bedrock.script(BedrockReply(text="Checking the weather.", tools=(tool,), chunks=3))
    # When the anthropic SDK streams with a tool offered
    tools: list[ToolParam] = [
        {"name": "get_weather", "description": "w", "input_schema": {"type": "object", "properties": {}}}
    ]
    with claude(gw).messages.stream(
        model="companion", max_tokens=100, tools=tools, messages=[{"role": "user", "content": "weather in Oslo?"}]
    ) as stream:
        text = "".join(stream.text_stream)
        final = stream.get_final_message()
    # Then the text and the tool_use block arrive on the Anthropic wire
    assert text == "Checking the weather."
    use = next(b for b in final.content if b.type == "tool_use")
    assert (use.id, use.name, use.input) == ("tooluse_o", "get_weather", {"city": "Oslo"})
    assert final.stop_reason == "tool_use"
    assert bedrock.last["toolConfig"]["tools"][0]["toolSpec"]["name"] == "get_weather"
    assert stored(gw) == [("user", "weather in Oslo?"), ("assistant", "Checking the weather.")]


# -- prompt caching -----------------------------------------------------------------------------------
POINT = {"cachePoint": {"type": "default"}}


def points(request: dict[str, Any]) -> int:
    blocks = [*(request.get("toolConfig") or {}).get("tools", []), *request.get("system", [])]
    blocks += [b for m in request["messages"] for b in m["content"]]
    return sum(1 for b in blocks if "cachePoint" in b)


def unpointed(messages: list[dict[str, Any]]) -> str:
    return json.dumps([[b for b in m["content"] if "cachePoint" not in b] for m in messages], sort_keys=True)


def test_claude_on_bedrock_gets_cache_points_and_consecutive_turns_share_the_prefix(
    gw: Gateway, bedrock: FakeBedrockRuntime
) -> None:
    # Given memories, and Bedrock answering turn 2 with a cache write and turn 3 (streamed) with a cache read
    seed(gw)
    bedrock.script(
        BedrockReply(text="r2", usage={"inputTokens": 10, "outputTokens": 2, "cacheWriteInputTokens": 2000}),
        BedrockReply(text="r3", usage={"inputTokens": 12, "outputTokens": 2, "cacheReadInputTokens": 2000}),
    )
    system: ChatCompletionMessageParam = {"role": "system", "content": "You are Mira.\nCurrent time: 2026-11-30 10:32"}
    t2: list[ChatCompletionMessageParam] = [
        system,
        {"role": "user", "content": "one"},
        {"role": "assistant", "content": "r1"},
    ]
    t2.append({"role": "user", "content": "what is my test code?"})
    t3: list[ChatCompletionMessageParam] = [
        *t2,
        {"role": "assistant", "content": "r2"},
        {"role": "user", "content": "and my name?"},
    ]
    # When the openai SDK sends turn 2 whole and turn 3 streamed, with tools
    c = oai(gw)
    c.chat.completions.create(model="companion", messages=t2, tools=TOOLS)
    list(c.chat.completions.create(model="companion", messages=t3, tools=TOOLS, stream=True))
    (op2, r2), (op3, r3) = bedrock.requests[-2:]
    # Then both passed botocore's validation with cache points after the last tool, the boot block and the tail
    assert (op2, op3) == ("Converse", "ConverseStream") and points(r2) == points(r3) == 3
    for request in (r2, r3):
        assert request["toolConfig"]["tools"][-1] == POINT and request["system"][-1] == POINT
        assert "<engram-memory>" in request["system"][-2]["text"]
        assert request["messages"][-2]["content"][-1] == POINT
        # And none in the current turn, which carries the per-turn memory patch
        current = request["messages"][-1]["content"]
        assert all("cachePoint" not in b for b in current) and "<engram-context>" in texts(current)
    # And tools and system are byte-identical across the turns, cache points included
    assert json.dumps([r2["toolConfig"], r2["system"]]) == json.dumps([r3["toolConfig"], r3["system"]])
    # And the messages up to turn 2's tail are byte-identical (cache points aside)
    tail = len(r2["messages"]) - 2
    assert unpointed(r2["messages"][: tail + 1]) == unpointed(r3["messages"][: tail + 1])
    # And the cache write and read reach /v1/usage
    rows = [r for r in httpx.get(gw.url + "/v1/usage", headers=AUTH).json()["models"] if r["requests"] >= 2]
    assert rows[0]["cache_write_tokens"] == 2000 and rows[0]["cache_read_tokens"] == 2000


def test_anthropic_sdk_to_claude_on_bedrock_gets_our_cache_points_not_the_clients(
    gw: Gateway, bedrock: FakeBedrockRuntime
) -> None:
    # Given a client that marks its own system prompt (Claude Code does)
    system: list[TextBlockParam] = [{"type": "text", "text": "You are Mira.", "cache_control": {"type": "ephemeral"}}]
    messages: list[MessageParam] = [
        {"role": "user", "content": "one"},
        {"role": "assistant", "content": "r1"},
        {"role": "user", "content": "two"},
    ]
    # When it streams through the Anthropic door to a Bedrock Claude model
    with claude(gw).messages.stream(model="companion", max_tokens=50, system=system, messages=messages) as stream:
        "".join(stream.text_stream)
    # Then Converse got Engram's points: system anchor and tail, none in the current turn
    request = bedrock.last
    assert bedrock.requests[-1][0] == "ConverseStream" and points(request) == 2
    assert request["system"][-1] == POINT and request["messages"][-2]["content"] == [{"text": "r1"}, POINT]


@pytest.mark.parametrize(
    ("overrides", "expected"),
    [
        ({"anthropic_cache_ttl": "1h"}, {"cachePoint": {"type": "default", "ttl": "1h"}}),
        ({"anthropic_cache_enabled": False}, None),
        ({"chat_model": "bedrock/amazon.nova-pro-v1:0"}, None),
        ({"chat_model": "bedrock/meta.llama3-3-70b-instruct-v1:0"}, None),
    ],
)
def test_cache_points_follow_the_settings_and_only_claude_gets_them(
    make_gateway: MakeGateway, bedrock: FakeBedrockRuntime, overrides: dict[str, Any], expected: dict[str, Any] | None
) -> None:
    # Given a gateway with a TTL of 1h, caching off, or a model that is not Claude
    gw = make_gateway(**{"chat_model": MODEL, "aws_region": "us-east-1", **overrides}, bedrock_runtime=bedrock)
    # When a second turn is sent
    messages: list[ChatCompletionMessageParam] = [
        {"role": "system", "content": "You are Mira."},
        {"role": "user", "content": "one"},
        {"role": "assistant", "content": "r1"},
        {"role": "user", "content": "two"},
    ]
    oai(gw).chat.completions.create(model="companion", messages=messages)
    request = bedrock.last
    # Then the 1h TTL is on every point, and caching off or a non-Claude model gets none
    if expected is None:
        assert points(request) == 0
    else:
        assert points(request) == 2
        assert request["system"][-1] == expected and request["messages"][-2]["content"][-1] == expected


# -- failures -----------------------------------------------------------------------------------------
def test_bedrock_errors_map_to_statuses_on_both_wires(gw: Gateway, bedrock: FakeBedrockRuntime) -> None:
    msgs: list[ChatCompletionMessageParam] = [{"role": "user", "content": "hi"}]
    # Given Bedrock throttling, rejecting the request, and denying access
    bedrock.script(
        BedrockReply(error_code="ThrottlingException", error_status=429),
        BedrockReply(error_code="ValidationException", error_message="maxTokens exceeds the model limit"),
        BedrockReply(error_code="AccessDeniedException", error_status=403, error_message="no model access"),
        BedrockReply(error_code="ThrottlingException", error_status=429),
    )
    c = oai(gw)
    # Then the openai SDK sees 429, a 400 with Bedrock's reason in an OpenAI-style body, and 403
    with pytest.raises(openai.RateLimitError):
        c.chat.completions.create(model="companion", messages=msgs)
    with pytest.raises(openai.BadRequestError) as bad:
        c.chat.completions.create(model="companion", messages=msgs, stream=True)
    body = bad.value.body
    assert isinstance(body, dict)
    assert "maxTokens exceeds the model limit" in body["message"]
    assert body["type"] == "invalid_request_error"
    with pytest.raises(openai.PermissionDeniedError) as denied:
        c.chat.completions.create(model="companion", messages=msgs)
    assert "no model access" in str(denied.value)
    # And the anthropic SDK sees the throttle as a rate limit error
    with pytest.raises(anthropic.RateLimitError):
        claude(gw).messages.create(model="companion", max_tokens=10, messages=[{"role": "user", "content": "hi"}])
    # And the user's turn was kept once (the same turn each time), with the last error noted
    (turn,) = gw.store.list_messages("default")
    assert (turn.role, turn.content) == ("user", "hi") and turn.error and turn.error.startswith("upstream_")


def test_an_error_in_the_middle_of_the_stream_becomes_an_sse_error_event(
    gw: Gateway, bedrock: FakeBedrockRuntime
) -> None:
    # Given a stream that fails after three events
    bedrock.script(
        BedrockReply(text="abcdef", chunks=6, stream_error_after=3),
        BedrockReply(text="abcdef", chunks=6, stream_error_after=3),
    )
    body = {"model": "companion", "stream": True, "messages": [{"role": "user", "content": "hi"}]}
    # When streaming on the OpenAI wire
    raw = httpx.post(gw.url + "/v1/chat/completions", json=body, headers=AUTH).text
    # Then the pieces before the failure arrive, then an error event and [DONE]
    assert '"content":"a"' in raw and '"error"' in raw and "ModelStreamErrorException" in raw
    assert raw.rstrip().endswith("data: [DONE]")
    # And on the Anthropic wire an error event ends the stream
    raw = httpx.post(gw.url + "/v1/messages", json={**body, "max_tokens": 10}, headers={"x-api-key": OWNER_KEY}).text
    assert "event: error" in raw and "message_stop" not in raw
    # And the user's turn is kept (once: both doors sent the same turn) without the broken answer
    (turn,) = gw.store.list_messages("default")
    assert (turn.role, turn.content) == ("user", "hi") and "ModelStreamErrorException" in (turn.error or "")


def test_client_disconnect_closes_the_bedrock_stream(gw: Gateway, bedrock: FakeBedrockRuntime) -> None:
    # Given a slow stream of 20 pieces
    bedrock.script(BedrockReply(text="x" * 20, chunks=20, chunk_delay=0.2))
    body = {"model": "companion", "stream": True, "messages": [{"role": "user", "content": "long story"}]}
    # When the client reads the first piece and goes away
    with httpx.stream("POST", gw.url + "/v1/chat/completions", json=body, headers=AUTH, timeout=10) as resp:
        for line in resp.iter_lines():
            if '"content":"x"' in line:
                break
    # Then the gateway closes the Bedrock stream long before it would have ended
    (stream,) = bedrock.streams
    assert wait_until(stream.closed.is_set, timeout=3.0)
    time.sleep(0.3)
    assert stream.delivered < 10


def test_without_aws_region_or_credentials_the_error_names_the_setting(
    make_gateway: MakeGateway, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # Given no region anywhere (setting, environment, AWS config file)
    for name in ("AWS_REGION", "AWS_DEFAULT_REGION", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    gw = make_gateway(chat_model=MODEL, aws_region="")
    # When the alias is asked, the answer is 503 naming the setting
    with pytest.raises(openai.InternalServerError) as info:
        oai(gw).chat.completions.create(model="companion", messages=[{"role": "user", "content": "hi"}])
    assert info.value.status_code == 503 and "ENGRAM_AWS_REGION" in str(info.value)


def test_missing_credentials_answer_503_naming_what_to_set(
    gw: Gateway, bedrock: FakeBedrockRuntime, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a region but no credentials (boto3 raises NoCredentialsError at the call)
    def no_credentials(**_: object) -> None:
        raise NoCredentialsError()

    monkeypatch.setattr(bedrock, "converse", no_credentials)
    # When the alias is asked through the anthropic SDK
    with pytest.raises(anthropic.APIStatusError) as info:
        claude(gw).messages.create(model="companion", max_tokens=10, messages=[{"role": "user", "content": "hi"}])
    # Then 503 says which credentials to give
    assert info.value.status_code == 503 and "AWS_PROFILE" in str(info.value)
