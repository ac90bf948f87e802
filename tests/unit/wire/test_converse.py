"""OpenAI chat wire <-> Bedrock Converse conversions (pure functions, no boto3 calls)."""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest
from engram.domain.errors import InvalidInput
from engram.domain.wire.converse import (
    ConverseToOpenAIStream,
    converse_to_openai,
    openai_to_converse,
    stream_error,
    to_converse,
)
from engram.domain.wire.sse import SseParser
from engram.domain.wire.usage import openai_usage, usage_from_converse

PNG = b"\x89PNG\r\n\x1a\nfake"


def _validate(request: dict[str, Any]) -> None:
    """The request must pass botocore's own check for Converse (what boto3 runs before sending)."""
    botocore_session = pytest.importorskip("botocore.session")
    from botocore.validate import validate_parameters

    model = botocore_session.get_session().get_service_model("bedrock-runtime")
    validate_parameters(request, model.operation_model("Converse").input_shape)


def test_a_full_openai_request_becomes_a_valid_converse_request() -> None:
    # Given an OpenAI body with system and developer prompts, an image, tools, a tool round trip and options
    body = {
        "model": "bedrock/anthropic.claude-3-5-haiku-20241022-v1:0",
        "messages": [
            {"role": "system", "content": "You are kind."},
            {"role": "developer", "content": [{"type": "text", "text": "Be brief."}]},
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "What is in this picture?"},
                    {
                        "type": "image_url",
                        "image_url": {"url": "data:image/png;base64," + base64.b64encode(PNG).decode()},
                    },
                ],
            },
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {"id": "t1", "type": "function", "function": {"name": "look", "arguments": '{"zoom": 2}'}}
                ],
            },
            {"role": "tool", "tool_call_id": "t1", "content": "a cat"},
            {"role": "user", "content": "and the colour?"},
        ],
        "tools": [
            {
                "type": "function",
                "function": {
                    "name": "look",
                    "description": "Look closer",
                    "parameters": {"type": "object", "properties": {"zoom": {"type": "integer"}}},
                },
            }
        ],
        "tool_choice": "required",
        "max_tokens": 300,
        "temperature": 0.2,
        "top_p": 0.9,
        "stop": "END",
    }
    # When converted
    request = openai_to_converse(body)
    # Then the model id loses its prefix, prompts go to system, the image is raw bytes
    assert request["modelId"] == "anthropic.claude-3-5-haiku-20241022-v1:0"
    assert request["system"] == [{"text": "You are kind."}, {"text": "Be brief."}]
    first = request["messages"][0]
    assert first["role"] == "user" and first["content"][1] == {"image": {"format": "png", "source": {"bytes": PNG}}}
    # And the tool call and its result keep their id; the result and the next user text share one turn
    assert request["messages"][1] == {
        "role": "assistant",
        "content": [{"toolUse": {"toolUseId": "t1", "name": "look", "input": {"zoom": 2}}}],
    }
    assert request["messages"][2]["content"] == [
        {"toolResult": {"toolUseId": "t1", "content": [{"text": "a cat"}]}},
        {"text": "and the colour?"},
    ]
    assert [m["role"] for m in request["messages"]] == ["user", "assistant", "user"]
    # And options and tools map to inferenceConfig and toolConfig
    assert request["inferenceConfig"] == {"maxTokens": 300, "temperature": 0.2, "topP": 0.9, "stopSequences": ["END"]}
    spec = request["toolConfig"]["tools"][0]["toolSpec"]
    assert spec["name"] == "look" and spec["inputSchema"]["json"]["properties"]["zoom"]["type"] == "integer"
    assert request["toolConfig"]["toolChoice"] == {"any": {}}
    _validate(request)


def test_turns_alternate_start_with_the_user_and_carry_no_blank_text() -> None:
    # Given an assistant greeting first, two user messages in a row and an empty one
    body = {
        "model": "bedrock/m",
        "messages": [
            {"role": "assistant", "content": "Hi, how can I help?"},
            {"role": "user", "content": "one"},
            {"role": "user", "content": ""},
            {"role": "user", "content": [{"type": "text", "text": "two"}]},
        ],
        "tool_choice": {"type": "function", "function": {"name": "x"}},
    }
    # When converted
    request = openai_to_converse(body)
    # Then a user turn leads, same-role turns merge, blank text is dropped, and no tool config is invented
    assert [m["role"] for m in request["messages"]] == ["user", "assistant", "user"]
    assert request["messages"][2]["content"] == [{"text": "one"}, {"text": "two"}]
    assert "toolConfig" not in request and "inferenceConfig" not in request
    _validate(request)


def test_max_completion_tokens_wins_and_named_tool_choice_maps() -> None:
    body = {
        "model": "bedrock/m",
        "messages": [{"role": "user", "content": "hi"}],
        "max_completion_tokens": 50,
        "max_tokens": 10,
        "stop": ["a", "b"],
        "tools": [{"type": "function", "function": {"name": "x"}}],
        "tool_choice": {"type": "function", "function": {"name": "x"}},
    }
    request = openai_to_converse(body)
    assert request["inferenceConfig"] == {"maxTokens": 50, "stopSequences": ["a", "b"]}
    assert request["toolConfig"]["toolChoice"] == {"tool": {"name": "x"}}
    assert request["toolConfig"]["tools"][0]["toolSpec"]["inputSchema"] == {
        "json": {"type": "object", "properties": {}}
    }


@pytest.mark.parametrize(
    "url",
    ["https://example.com/cat.png", "data:image/tiff;base64,AAAA"],
)
def test_images_bedrock_cannot_take_are_rejected_with_a_clear_message(url: str) -> None:
    body = {
        "model": "bedrock/m",
        "messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": url}}]}],
    }
    with pytest.raises(InvalidInput) as info:
        openai_to_converse(body)
    assert "Bedrock" in info.value.message


def test_a_whole_converse_answer_becomes_a_chat_completion() -> None:
    # Given a Converse response with reasoning, text, a tool call and cache usage
    response = {
        "ResponseMetadata": {"RequestId": "abc"},
        "output": {
            "message": {
                "role": "assistant",
                "content": [
                    {"reasoningContent": {"reasoningText": {"text": "thinking", "signature": "s"}}},
                    {"text": "Let me look."},
                    {"toolUse": {"toolUseId": "t9", "name": "look", "input": {"zoom": 3}}},
                ],
            }
        },
        "stopReason": "tool_use",
        "usage": {
            "inputTokens": 10,
            "outputTokens": 4,
            "totalTokens": 114,
            "cacheReadInputTokens": 80,
            "cacheWriteInputTokens": 20,
        },
    }
    # When converted
    out = converse_to_openai(response, "bedrock/m")
    # Then text, reasoning, the tool call and the finish reason are on the OpenAI wire
    message = out["choices"][0]["message"]
    assert out["id"] == "chatcmpl-abc" and out["model"] == "bedrock/m"
    assert message["content"] == "Let me look." and message["reasoning_content"] == "thinking"
    assert message["tool_calls"][0]["id"] == "t9"
    assert json.loads(message["tool_calls"][0]["function"]["arguments"]) == {"zoom": 3}
    assert out["choices"][0]["finish_reason"] == "tool_calls"
    # And prompt tokens count cached ones too, with reads and writes reported
    assert out["usage"] == {
        "prompt_tokens": 110,
        "completion_tokens": 4,
        "total_tokens": 114,
        "prompt_tokens_details": {"cached_tokens": 80},
        "cache_write_tokens": 20,
    }


@pytest.mark.parametrize(
    ("reason", "finish"),
    [
        ("end_turn", "stop"),
        ("max_tokens", "length"),
        ("stop_sequence", "stop"),
        ("guardrail_intervened", "content_filter"),
    ],
)
def test_stop_reasons_map(reason: str, finish: str) -> None:
    response = {"output": {"message": {"content": [{"text": "x"}]}}, "stopReason": reason}
    assert converse_to_openai(response, "m")["choices"][0]["finish_reason"] == finish


def _chunks(raw: list[bytes]) -> list[Any]:  # JSON chunks, then "[DONE]"
    parser = SseParser()
    events = [e for piece in raw for e in parser.feed(piece)]
    return [e.data if e.data == "[DONE]" else e.json() for e in events]


def test_stream_events_become_openai_chunks_with_usage_and_done() -> None:
    # Given a ConverseStream with text, a streamed tool call, the stop and the usage metadata
    events: list[dict[str, Any]] = [
        {"messageStart": {"role": "assistant"}},
        {"contentBlockDelta": {"delta": {"reasoningContent": {"text": "hmm"}}, "contentBlockIndex": 0}},
        {"contentBlockDelta": {"delta": {"text": "Hel"}, "contentBlockIndex": 1}},
        {"contentBlockDelta": {"delta": {"text": "lo"}, "contentBlockIndex": 1}},
        {"contentBlockStart": {"start": {"toolUse": {"toolUseId": "t1", "name": "look"}}, "contentBlockIndex": 2}},
        {"contentBlockDelta": {"delta": {"toolUse": {"input": '{"zo'}}, "contentBlockIndex": 2}},
        {"contentBlockDelta": {"delta": {"toolUse": {"input": 'om": 1}'}}, "contentBlockIndex": 2}},
        {"contentBlockStop": {"contentBlockIndex": 2}},
        {"messageStop": {"stopReason": "tool_use"}},
        {"metadata": {"usage": {"inputTokens": 5, "outputTokens": 3, "cacheReadInputTokens": 7}}},
    ]
    # When fed through the converter (usage asked for)
    conv = ConverseToOpenAIStream("bedrock/m", include_usage=True, response_id="chatcmpl-x")
    out = _chunks([b for e in events for b in conv.feed(e)] + conv.finish())
    # Then the role comes first, then reasoning, text, the tool call head and its argument pieces
    deltas = [c["choices"][0]["delta"] for c in out[:-2]]
    assert deltas[0] == {"role": "assistant", "content": ""}
    assert deltas[1] == {"reasoning_content": "hmm"}
    assert "".join(d.get("content", "") for d in deltas) == "Hello"
    head = next(d["tool_calls"][0] for d in deltas if "tool_calls" in d)
    assert head == {"index": 0, "id": "t1", "type": "function", "function": {"name": "look", "arguments": ""}}
    args = "".join(d["tool_calls"][0]["function"]["arguments"] for d in deltas if "tool_calls" in d)
    assert json.loads(args) == {"zoom": 1}
    assert out[-3]["choices"][0]["finish_reason"] == "tool_calls"
    # And the usage chunk (cache reads counted) precedes [DONE]
    assert out[-2]["choices"] == [] and out[-2]["usage"]["prompt_tokens"] == 12
    assert out[-2]["usage"]["prompt_tokens_details"] == {"cached_tokens": 7}
    assert out[-1] == "[DONE]"


def test_a_stream_without_message_stop_gets_no_done_and_usage_only_when_asked() -> None:
    conv = ConverseToOpenAIStream("m", include_usage=False)
    out = conv.feed({"contentBlockDelta": {"delta": {"text": "a"}, "contentBlockIndex": 0}})
    out += conv.feed({"metadata": {"usage": {"inputTokens": 1, "outputTokens": 1}}})
    assert conv.finish() == []
    assert all('"usage"' not in piece.decode() for piece in out)


def test_stream_exception_events_are_recognised() -> None:
    assert stream_error({"throttlingException": {"message": "slow down"}}) == ("ThrottlingException", "slow down")
    assert stream_error({"messageStop": {}}) is None


def test_usage_without_cache_fields() -> None:
    assert openai_usage(usage_from_converse({"inputTokens": 3, "outputTokens": 2}))["prompt_tokens"] == 3
    assert openai_usage(usage_from_converse(None))["total_tokens"] == 0


def test_messages_become_alternating_converse_turns() -> None:
    # Given OpenAI-style messages with a system prompt, parts and two user turns in a row
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "You extract facts."},
        {"role": "user", "content": [{"type": "text", "text": "hello"}]},
        {"role": "user", "content": "I moved to Lyon"},
        {"role": "assistant", "content": "noted"},
    ]
    # When converted for Converse with JSON mode
    request = to_converse(messages, json_mode=True)
    # Then system is separate, same-role turns merge, and the JSON instruction is added
    assert request["system"][0] == {"text": "You extract facts."}
    assert "JSON" in request["system"][-1]["text"]
    assert request["messages"] == [
        {"role": "user", "content": [{"text": "hello"}, {"text": "I moved to Lyon"}]},
        {"role": "assistant", "content": [{"text": "noted"}]},
    ]
