"""Claude prompt-cache points on Bedrock Converse requests: the same positions as the Anthropic route."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
from engram.domain.wire.cache_markers import (
    CachePolicy,
    count_cache_control,
    count_cache_points,
    place_cache_points,
    plan_markers,
)
from engram.domain.wire.converse import openai_to_converse
from engram.services.chat.injection import inject_anthropic, inject_openai

CLAUDE = "bedrock/us.anthropic.claude-sonnet-4-5-20250929-v1:0"
BOOT = "<engram-memory>\n## About the user\n- Lin\n</engram-memory>"
SYSTEM = "You are Mira.\nCurrent time: 2026-11-30 10:32"
TOOLS = [
    {"type": "function", "function": {"name": n, "parameters": {"type": "object", "properties": {}}}}
    for n in ("a", "b")
]
POINT = {"cachePoint": {"type": "default"}}


def _validate(request: dict[str, Any]) -> None:
    """botocore's own check of a Converse request (what boto3 runs before sending)."""
    botocore_session = pytest.importorskip("botocore.session")
    from botocore.validate import validate_parameters

    model = botocore_session.get_session().get_service_model("bedrock-runtime")
    validate_parameters(request, model.operation_model("Converse").input_shape)


def _converse(
    history: list[dict[str, Any]], user: str, recall: str, *, model: str = CLAUDE, ttl: str | None = "5m"
) -> dict[str, Any]:
    """What the gateway sends Bedrock for one turn: inject_openai, then the adapter's conversion."""
    body: dict[str, Any] = {
        "model": model,
        "tools": copy.deepcopy(TOOLS),
        "messages": [{"role": "system", "content": SYSTEM}, *copy.deepcopy(history), {"role": "user", "content": user}],
    }
    if ttl is not None:
        body["cache_control"] = CachePolicy(ttl=ttl).marker()  # type: ignore[arg-type]
    injected, _ = inject_openai(body, BOOT, recall)
    request = openai_to_converse(injected)
    _validate(request)
    return request


def _without_points(value: Any) -> Any:
    return json.dumps(
        [[b for b in m["content"] if "cachePoint" not in b] for m in value], sort_keys=True, ensure_ascii=False
    )


def test_claude_gets_tool_system_and_tail_points_none_in_the_current_turn() -> None:
    # Given the third turn of a conversation with tools, a client system prompt and a recalled memory
    history = [
        {"role": "user", "content": "one"},
        {"role": "assistant", "content": "r1"},
        {"role": "user", "content": "two"},
        {"role": "assistant", "content": "r2"},
    ]
    # When the gateway converts it for Claude on Bedrock
    request = _converse(history, "three", "- Lin's code is apple-star-0428")
    # Then three cache points: after the last tool, after the boot block, after the previous reply
    assert count_cache_points(request) == 3
    assert request["toolConfig"]["tools"][-1] == POINT and "toolSpec" in request["toolConfig"]["tools"][-2]
    assert request["system"][-1] == POINT and request["system"][-2]["text"].endswith(BOOT)
    assert request["messages"][-2]["content"] == [{"text": "r2"}, POINT]
    # And none elsewhere: the earlier reply has none, and the current turn (with the patch) has none
    assert request["messages"][-4]["content"] == [{"text": "r1"}]
    current = request["messages"][-1]["content"]
    assert all("cachePoint" not in b for b in current)
    assert current[-1]["text"].startswith("three\n\n<engram-context>") and "apple-star-0428" in current[-1]["text"]
    # And the date line left the cached system prompt for the patch
    assert "10:32" not in json.dumps(request["system"]) and "10:32" in current[-1]["text"]


def test_ttl_1h_is_sent_and_5m_is_left_to_bedrocks_default() -> None:
    history = [{"role": "user", "content": "one"}, {"role": "assistant", "content": "r1"}]
    # Given / When the same turn with the 1h and the 5m policy
    hour = _converse(history, "two", "", ttl="1h")
    five = _converse(history, "two", "", ttl="5m")
    # Then every point carries ttl 1h in the first, and no ttl field in the second
    assert hour["system"][-1] == {"cachePoint": {"type": "default", "ttl": "1h"}}
    assert hour["messages"][-2]["content"][-1] == {"cachePoint": {"type": "default", "ttl": "1h"}}
    assert five["system"][-1] == POINT and count_cache_points(hour) == count_cache_points(five) == 3


def test_a_long_tool_loop_adds_a_bridge_and_never_more_than_four_points() -> None:
    # Given a turn in which the assistant made 12 tool calls since the previous request's tail
    calls = [{"id": f"t{i}", "type": "function", "function": {"name": "a", "arguments": "{}"}} for i in range(12)]
    history: list[dict[str, Any]] = [
        {"role": "user", "content": "start"},
        {"role": "assistant", "content": "ok, working"},
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": None, "tool_calls": calls},
        *[{"role": "tool", "tool_call_id": f"t{i}", "content": "ok"} for i in range(12)],
        {"role": "assistant", "content": "done", "tool_calls": calls[:8]},
    ]
    # When converted
    request = _converse(history, "next", "- memory")
    # Then four points: tool, system, tail, and a bridge on the previous request's tail
    assert count_cache_points(request) == 4
    messages = request["messages"]
    assert messages[-2]["content"][-1] == POINT and "toolUse" in messages[-2]["content"][-2]
    assert messages[-4]["content"][-1] == POINT and "toolUse" in messages[-4]["content"][-2]
    assert all("cachePoint" not in b for b in messages[-1]["content"] + messages[-3]["content"])


def test_two_consecutive_turns_share_a_byte_identical_prefix_up_to_the_previous_tail() -> None:
    # Given turns 2 and 3 of one conversation (the client resends history without our patch)
    t2_history = [{"role": "user", "content": "one"}, {"role": "assistant", "content": "r1"}]
    t3_history = [*t2_history, {"role": "user", "content": "two"}, {"role": "assistant", "content": "r2"}]
    # When each is converted with a different per-turn recall
    t2 = _converse(t2_history, "two", "- memory A")
    t3 = _converse(t3_history, "three", "- memory B")
    # Then tools and system are byte-identical, cache points included
    assert json.dumps([t2["toolConfig"], t2["system"]]) == json.dumps([t3["toolConfig"], t3["system"]])
    # And every message up to turn 2's tail is byte-identical (cache points aside)
    tail = len(t2["messages"]) - 2
    assert _without_points(t2["messages"][: tail + 1]) == _without_points(t3["messages"][: tail + 1])
    # And turn 2's tail point sits right after that shared prefix
    assert t2["messages"][tail]["content"][-1] == POINT
    # And the patches differ (they are the per-turn part)
    assert t2["messages"][-1]["content"][-1] != t3["messages"][-1]["content"][-1]


@pytest.mark.parametrize(
    "model", ["bedrock/amazon.nova-lite-v1:0", "bedrock/meta.llama3-1-70b-instruct-v1:0", "bedrock/mistral.large"]
)
def test_non_claude_models_get_no_cache_points(model: str) -> None:
    # Given / When a cache-asking body for a model that is not Claude
    request = _converse(
        [{"role": "user", "content": "one"}, {"role": "assistant", "content": "r1"}], "two", "", model=model
    )
    # Then no cache point and no stray field
    assert count_cache_points(request) == 0 and "cache_control" not in request


def test_without_cache_control_claude_gets_no_cache_points() -> None:
    request = _converse(
        [{"role": "user", "content": "one"}, {"role": "assistant", "content": "r1"}], "two", "", ttl=None
    )
    assert count_cache_points(request) == 0


def test_claude_inference_profile_ids_and_arns_get_cache_points() -> None:
    for model in (
        "bedrock/anthropic.claude-3-5-haiku-20241022-v1:0",
        "bedrock/global.anthropic.claude-opus-4-5-20251101-v1:0",
        "bedrock/arn:aws:bedrock:us-east-1:123456789012:inference-profile/us.anthropic.claude-3-7-sonnet-20250219-v1:0",
    ):
        assert count_cache_points(_converse([], "hi", "", model=model)) == 2  # tools and system; no tail yet


def test_an_assistant_prefill_last_gets_no_tail_point() -> None:
    # Given a request ending with an assistant prefill (no current user turn)
    request = {
        "messages": [
            {"role": "user", "content": [{"text": "one"}]},
            {"role": "assistant", "content": [{"text": "r1"}]},
            {"role": "user", "content": [{"text": "two"}]},
            {"role": "assistant", "content": [{"text": "{"}]},
        ]
    }
    # When placing
    placed = place_cache_points(request)
    # Then nothing in messages
    assert placed == count_cache_points(request) == 0


def test_both_wires_mark_the_same_positions() -> None:
    # Given the same long conversation on the Anthropic wire and as a Converse request
    calls = [{"type": "tool_use", "id": f"t{i}", "name": "a", "input": {}} for i in range(12)]
    results = [{"type": "tool_result", "tool_use_id": f"t{i}", "content": "ok"} for i in range(12)]
    anthropic_messages = [
        {"role": "user", "content": "start"},
        {"role": "assistant", "content": "ok"},
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": calls},
        {"role": "user", "content": results},
        {"role": "assistant", "content": [{"type": "text", "text": "done"}, *calls[:8]]},
        {"role": "user", "content": "next"},
    ]
    body = {"system": "s", "tools": [{"name": "a", "input_schema": {}}], "messages": anthropic_messages}
    out, info = inject_anthropic(body, BOOT, "- m", CachePolicy())
    converse: dict[str, Any] = {
        "system": [{"text": "s"}, {"text": BOOT}],
        "toolConfig": {"tools": [{"toolSpec": {"name": "a", "inputSchema": {"json": {}}}}]},
        "messages": [
            {"role": "user", "content": [{"text": "start"}]},
            {"role": "assistant", "content": [{"text": "ok"}]},
            {"role": "user", "content": [{"text": "go"}]},
            {
                "role": "assistant",
                "content": [{"toolUse": {"toolUseId": f"t{i}", "name": "a", "input": {}}} for i in range(12)],
            },
            {
                "role": "user",
                "content": [{"toolResult": {"toolUseId": f"t{i}", "content": [{"text": "ok"}]}} for i in range(12)],
            },
            {
                "role": "assistant",
                "content": [
                    {"text": "done"},
                    *[{"toolUse": {"toolUseId": f"t{i}", "name": "a", "input": {}}} for i in range(8)],
                ],
            },
            {"role": "user", "content": [{"text": "next"}, {"text": "<engram-context>- m</engram-context>"}]},
        ],
    }
    # When both are marked
    placed = place_cache_points(converse)
    _validate({"modelId": "anthropic.claude-3-5-haiku-20241022-v1:0", **converse})
    # Then the count and the marked messages agree (one decision, two writers)
    assert placed == info.markers == count_cache_control(out) == 4
    marked_anthropic = [i for i, m in enumerate(out["messages"]) if any("cache_control" in b for b in m["content"])]
    marked_converse = [i for i, m in enumerate(converse["messages"]) if any("cachePoint" in b for b in m["content"])]
    assert marked_anthropic == marked_converse == [3, 5]


def test_plan_markers_is_empty_for_an_empty_request() -> None:
    plan = plan_markers(tools=0, system=0, messages=[], cacheable=lambda _b: True)
    assert plan.count == 0 and plan.in_messages == []
