"""One reading of message content and tool-call arguments for every wire (domain/wire/content.py)."""

from __future__ import annotations

import pytest
from engram.domain.wire.anthropic import openai_request_to_anthropic
from engram.domain.wire.content import text_of, tool_arguments
from engram.domain.wire.converse import openai_to_converse, to_converse


@pytest.mark.parametrize(
    ("content", "text"),
    [
        ("plain", "plain"),
        ([{"type": "text", "text": "a"}, {"type": "image_url", "image_url": {"url": "x"}}, {"type": "text"}], "a\n"),
        ([{"type": "text", "text": "a"}, {"type": "text", "text": "b"}], "a\nb"),
        ([{"type": "tool_result", "text": "not a text part"}, "bare string"], ""),
        (None, ""),
        (42, ""),
    ],
)
def test_text_of_reads_strings_and_text_parts_only(content: object, text: str) -> None:
    assert text_of(content) == text


@pytest.mark.parametrize(
    ("raw", "parsed"),
    [
        ('{"city": "Lyon"}', {"city": "Lyon"}),
        ({"city": "Lyon"}, {"city": "Lyon"}),
        ("", {}),
        (None, {}),
        ("[1, 2]", {"value": [1, 2]}),
        ("{not json", {"_raw": "{not json"}),
    ],
)
def test_tool_arguments_always_give_an_object_and_keep_what_the_model_wrote(raw: object, parsed: object) -> None:
    assert tool_arguments(raw) == parsed


def test_every_converter_reads_content_and_arguments_the_same_way() -> None:
    # Given an OpenAI request with parts content and a malformed tool call
    content = [{"type": "text", "text": "see"}, {"type": "image_url", "image_url": {"url": "https://x/y.png"}}]
    call = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{oops"}}
    body = {
        "model": "bedrock/amazon.nova-lite-v1:0",
        "messages": [
            {"role": "system", "content": [{"type": "text", "text": "sys"}]},
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": "c1", "content": content[:1]},
        ],
    }
    # When converted to Anthropic and to Converse
    anthropic = openai_request_to_anthropic(body, "claude-x", default_max_tokens=4096)
    converse = openai_to_converse(body)
    # Then both read the same system text, arguments and tool-result text
    assert anthropic["system"] == [{"type": "text", "text": "sys"}]
    assert converse["system"] == [{"text": "sys"}]
    assert anthropic["messages"][1]["content"][0]["input"] == {"_raw": "{oops"}
    assert converse["messages"][1]["content"][0]["toolUse"]["input"] == {"_raw": "{oops"}
    assert anthropic["messages"][2]["content"][0]["content"] == "see"
    assert converse["messages"][2]["content"][0]["toolResult"]["content"] == [{"text": "see"}]
    # And Engram's own calls read content with the same rule
    assert to_converse([{"role": "user", "content": content}])["messages"] == [
        {"role": "user", "content": [{"text": "see"}]}
    ]
