"""OpenAI Responses <-> chat completions (pure): requests, whole answers, the stream of events."""

from __future__ import annotations

import json
from typing import Any

import pytest
from engram.domain.errors import InvalidInput
from engram.domain.wire.responses import ChatToResponsesStream, chat_to_response, custom_tools, responses_to_chat
from engram.domain.wire.sse import SseParser


def _events(raw: list[bytes]) -> list[dict[str, Any]]:
    out = []
    for event in SseParser().feed(b"".join(raw)):
        data = event.json()
        assert event.event == data["type"]  # the SSE event name is the type, as OpenAI sends it
        out.append(data)
    return out


def test_items_become_chat_messages_in_order() -> None:
    body = {
        "model": "m",
        "instructions": "Be brief.",
        "input": [
            {"type": "message", "role": "developer", "content": [{"type": "input_text", "text": "dev"}]},
            {
                "role": "user",
                "content": [{"type": "input_text", "text": "look"}, {"type": "input_image", "image_url": "data:x"}],
            },
            {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "opaque"},
            {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Let me run it."}]},
            {"type": "function_call", "call_id": "c1", "name": "sh", "arguments": '{"cmd":"ls"}'},
            {"type": "custom_tool_call", "call_id": "c2", "name": "apply_patch", "input": "*** Begin Patch"},
            {"type": "function_call_output", "call_id": "c1", "output": "a.py"},
            {"type": "custom_tool_call_output", "call_id": "c2", "output": [{"type": "input_text", "text": "done"}]},
        ],
        "tools": [
            {"type": "function", "name": "sh", "parameters": {"type": "object"}, "strict": False},
            {"type": "custom", "name": "apply_patch", "description": "patch", "format": {"type": "grammar"}},
            {"type": "web_search"},
            {"type": "namespace", "name": "agents", "tools": []},
        ],
        "tool_choice": "auto",
        "parallel_tool_calls": True,
        "max_output_tokens": 100,
        "text": {"format": {"type": "json_schema", "name": "out", "schema": {"type": "object"}, "strict": True}},
        "store": False,
        "include": ["reasoning.encrypted_content"],
        "stream": True,
    }
    chat = responses_to_chat(body)
    roles = [m["role"] for m in chat["messages"]]
    assert roles == ["system", "developer", "user", "assistant", "tool", "tool"]
    assert chat["messages"][2]["content"][1] == {"type": "image_url", "image_url": {"url": "data:x"}}
    assistant = chat["messages"][3]
    assert assistant["content"] == "Let me run it."
    assert [c["id"] for c in assistant["tool_calls"]] == ["c1", "c2"]
    assert json.loads(assistant["tool_calls"][1]["function"]["arguments"]) == {"input": "*** Begin Patch"}
    assert chat["messages"][5]["content"] == "done"
    assert [t["function"]["name"] for t in chat["tools"]] == ["sh", "apply_patch"]
    assert chat["tool_choice"] == "auto" and chat["parallel_tool_calls"] is True and chat["max_tokens"] == 100
    assert chat["response_format"]["json_schema"]["name"] == "out" and chat["stream"] is True
    assert "opaque" not in json.dumps(chat) and "store" not in chat and "include" not in chat
    assert custom_tools(body) == frozenset({"apply_patch"})
    with pytest.raises(InvalidInput):
        responses_to_chat({"input": "hi", "previous_response_id": "resp_1"})


def test_whole_answer_with_reasoning_text_and_a_custom_tool_call() -> None:
    resp = {
        "id": "chatcmpl-42",
        "created": 7,
        "choices": [
            {
                "message": {
                    "content": "Patching.",
                    "reasoning_content": "hmm",
                    "tool_calls": [{"id": "c2", "function": {"name": "apply_patch", "arguments": '{"input": "P"}'}}],
                },
                "finish_reason": "tool_calls",
            }
        ],
        "usage": {"prompt_tokens": 9, "completion_tokens": 2, "prompt_tokens_details": {"cached_tokens": 4}},
    }
    out = chat_to_response(resp, "companion", frozenset({"apply_patch"}))
    assert out["id"] == "resp_42" and out["model"] == "companion" and out["status"] == "completed"
    assert [i["type"] for i in out["output"]] == ["reasoning", "message", "custom_tool_call"]
    assert out["output"][2]["input"] == "P" and out["output"][2]["call_id"] == "c2"
    assert out["usage"]["input_tokens"] == 9 and out["usage"]["input_tokens_details"]["cached_tokens"] == 4
    cut = chat_to_response({"choices": [{"message": {"content": "x"}, "finish_reason": "length"}]}, "m")
    assert cut["status"] == "incomplete" and cut["incomplete_details"] == {"reason": "max_output_tokens"}


def test_stream_items_get_their_own_indices_and_ids() -> None:
    conv = ChatToResponsesStream("companion")

    def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        return {"id": "chatcmpl-7", "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}

    raw = conv.feed(chunk({"reasoning_content": "think"}))
    raw += conv.feed(chunk({"content": "Hel"})) + conv.feed(chunk({"content": "lo"}))
    raw += conv.feed(chunk({"tool_calls": [{"index": 0, "id": "a", "function": {"name": "f", "arguments": ""}}]}))
    raw += conv.feed(chunk({"tool_calls": [{"index": 1, "id": "b", "function": {"name": "g", "arguments": "{}"}}]}))
    raw += conv.feed(chunk({"tool_calls": [{"index": 0, "function": {"arguments": '{"x":1}'}}]}))
    raw += conv.feed(chunk({}, "tool_calls"))
    raw += conv.feed({"id": "chatcmpl-7", "choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": 6}})
    raw += conv.finish()
    events = _events(raw)
    added = [
        (e["output_index"], e["item"]["type"], e["item"]["id"]) for e in events if e["type"].endswith("item.added")
    ]
    done = [(e["output_index"], e["item"]["type"], e["item"]["id"]) for e in events if e["type"].endswith("item.done")]
    assert [a[:2] for a in added] == [(0, "reasoning"), (1, "message"), (2, "function_call"), (3, "function_call")]
    assert sorted(done) == sorted(added) and len({a[2] for a in added}) == 4
    final = events[-1]
    assert final["type"] == "response.completed" and final["response"]["id"] == "resp_7"
    output = final["response"]["output"]
    assert output[0]["summary"][0]["text"] == "think" and output[1]["content"][0]["text"] == "Hello"
    assert json.loads(output[2]["arguments"]) == {"x": 1} and output[3]["call_id"] == "b"
    assert final["response"]["usage"]["total_tokens"] == 11
    assert [e["sequence_number"] for e in events] == list(range(1, len(events) + 1))


def test_a_stream_that_hit_its_limit_ends_incomplete_and_an_empty_one_still_completes() -> None:
    conv = ChatToResponsesStream("m")
    conv.feed({"id": "x", "choices": [{"delta": {"content": "abc"}, "finish_reason": "length"}]})
    assert _events(conv.finish())[-1]["type"] == "response.incomplete"
    empty = _events(ChatToResponsesStream("m").finish())
    assert [e["type"] for e in empty] == ["response.created", "response.in_progress", "response.completed"]
