"""Injection placement, volatile lines and Claude cache markers (pure)."""

from __future__ import annotations

import copy
import json
from typing import Any

from engram.domain.wire.cache_markers import CachePolicy, count_cache_control
from engram.domain.wire.content import text_of
from engram.services.chat.injection import (
    BootData,
    inject_anthropic,
    inject_openai,
    is_volatile_line,
    last_user_text,
    render_boot_block,
    split_volatile,
)

BOOT = render_boot_block(BootData(persona=["Warm, brief."], about=["Name is Lin."], digest="Likes tea."))
SYSTEM = "You are a helpful assistant.\nCurrent date and time: 2026-11-30 10:32\nBe kind."


def _strip_markers(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _strip_markers(v) for k, v in value.items() if k != "cache_control"}
    if isinstance(value, list):
        return [_strip_markers(v) for v in value]
    return value


def _canon(value: Any) -> bytes:
    return json.dumps(_strip_markers(value), ensure_ascii=False, sort_keys=True, separators=(",", ":")).encode()


def test_volatile_lines_are_detected_conservatively() -> None:
    # Given lines that state the current time, and lines that only mention dates
    assert is_volatile_line("Current date: 2026-11-30")
    assert is_volatile_line("当前时间：2026年11月30日 10:32")
    assert is_volatile_line("Today is Monday, November 30")
    assert is_volatile_line("now: 2026-11-30T10:32:00Z")
    assert not is_volatile_line("Knowledge cutoff: 2024-06")
    assert not is_volatile_line("You are a helpful assistant.")
    assert not is_volatile_line("Remember the user's birthday is in May")
    # When splitting a prompt, Then only the volatile line moves
    text, moved = split_volatile(SYSTEM)
    assert moved == ["Current date and time: 2026-11-30 10:32"]
    assert text == "You are a helpful assistant.\nBe kind."


def test_openai_boot_after_client_system_and_patch_in_last_user_turn() -> None:
    # Given a client request with a time line in its system prompt
    body: dict[str, Any] = {
        "model": "companion",
        "messages": [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "hi"}],
    }
    # When injecting a boot block and recalled memories
    out, info = inject_openai(body, BOOT, "- Lin's test code is apple-star-0428")
    sys_text = out["messages"][0]["content"]
    user_text = out["messages"][-1]["content"]
    # Then the system prompt is stable (no time line) with the boot block after the client's text
    assert sys_text.startswith("You are a helpful assistant.\nBe kind.\n\n<engram-memory>")
    assert "10:32" not in sys_text
    # And the time line plus the memories follow the user's own text in the current turn
    assert user_text.startswith("hi\n\n<engram-context>")
    assert "2026-11-30 10:32" in user_text and "apple-star-0428" in user_text
    assert info.boot and info.patch and info.volatile
    # And the client's body was not modified
    assert body["messages"][0]["content"] == SYSTEM


def test_openai_without_system_and_with_list_content() -> None:
    body = {"messages": [{"role": "user", "content": [{"type": "text", "text": "look"}]}]}
    out, _ = inject_openai(body, BOOT, "- m")
    assert out["messages"][0] == {"role": "system", "content": BOOT}
    assert out["messages"][1]["content"][0] == {"type": "text", "text": "look"}
    assert out["messages"][1]["content"][1]["text"].startswith("<engram-context>")


def _turn(history: list[dict[str, Any]], user: str) -> dict[str, Any]:
    return {
        "model": "claude-x",
        "max_tokens": 100,
        "system": [{"type": "text", "text": SYSTEM, "cache_control": {"type": "ephemeral"}}],
        "tools": [{"name": "a", "input_schema": {}}, {"name": "b", "input_schema": {}}],
        "messages": [*copy.deepcopy(history), {"role": "user", "content": user}],
    }


def test_claude_markers_at_most_four_none_on_patch_and_ttl() -> None:
    # Given a conversation in its third turn
    history: list[dict[str, Any]] = [
        {"role": "user", "content": "one"},
        {"role": "assistant", "content": "r1"},
        {"role": "user", "content": "two"},
        {
            "role": "assistant",
            "content": [{"type": "thinking", "thinking": "t", "signature": "s"}, {"type": "text", "text": "r2"}],
        },
    ]
    # When injecting with a 1h cache policy
    out, info = inject_anthropic(_turn(history, "three"), BOOT, "- memory", CachePolicy(ttl="1h"))
    # Then: last tool, system anchor (the boot block) and tail (previous assistant reply) are marked
    assert count_cache_control(out) == info.markers == 3
    assert out["tools"][-1]["cache_control"] == {"type": "ephemeral", "ttl": "1h"}
    assert "cache_control" not in out["tools"][0]
    assert out["system"][-1]["text"] == BOOT and "cache_control" in out["system"][-1]
    assert "cache_control" not in out["system"][0]  # the client's own marker was replaced by ours
    assert "cache_control" in out["messages"][-2]["content"][-1]
    assert "cache_control" not in out["messages"][-2]["content"][0]  # never on thinking
    # And the patch is the last block of the current turn, unmarked, after the user's text
    current = out["messages"][-1]["content"]
    assert current[0] == {"type": "text", "text": "three"}
    assert current[-1]["text"].startswith("<engram-context>") and "cache_control" not in current[-1]
    assert "10:32" in current[-1]["text"] and "10:32" not in json.dumps(out["system"])
    assert last_user_text(_turn(history, "three")) == "three"


def test_bridge_marker_for_long_turns_and_never_more_than_four() -> None:
    # Given a turn in which the assistant made 12 tool calls (24+ blocks since the previous tail)
    calls = [{"type": "tool_use", "id": f"t{i}", "name": "a", "input": {}} for i in range(12)]
    results = [{"type": "tool_result", "tool_use_id": f"t{i}", "content": "ok"} for i in range(12)]
    history: list[dict[str, Any]] = [
        {"role": "user", "content": "start"},
        {"role": "assistant", "content": "ok, working"},
        {"role": "user", "content": [*results[:1], {"type": "text", "text": "go"}]},
        {"role": "assistant", "content": calls},
        {"role": "user", "content": results},
        {"role": "assistant", "content": [{"type": "text", "text": "done"}, *calls[:8]]},
    ]
    out, info = inject_anthropic(_turn(history, "next"), BOOT, "", CachePolicy())
    # Then four markers: tool, system, tail and a bridge on the previous request's tail
    assert count_cache_control(out) == info.markers == 4
    assert "cache_control" in out["messages"][3]["content"][-1]
    assert "cache_control" in out["messages"][5]["content"][-1]


def test_two_consecutive_turns_share_a_byte_identical_prefix_up_to_the_previous_tail() -> None:
    # Given turn 2 and turn 3 of one conversation (the client resends history without our patch)
    t2_history = [{"role": "user", "content": "one"}, {"role": "assistant", "content": "r1"}]
    t3_history = [*t2_history, {"role": "user", "content": "two"}, {"role": "assistant", "content": "r2"}]
    policy = CachePolicy()
    # When each is injected with a different per-turn recall
    t2, _ = inject_anthropic(_turn(t2_history, "two"), BOOT, "- memory A", policy)
    t3, _ = inject_anthropic(_turn(t3_history, "three"), BOOT, "- memory B", policy)
    # Then tools, system and every message up to turn 2's tail are byte-identical (markers aside)
    tail = len(t2["messages"]) - 2
    prefix2 = [t2["tools"], t2["system"], t2["messages"][: tail + 1]]
    prefix3 = [t3["tools"], t3["system"], t3["messages"][: tail + 1]]
    assert _canon(prefix2) == _canon(prefix3)
    # And tools and system are identical including their markers
    assert json.dumps([t2["tools"], t2["system"]]) == json.dumps([t3["tools"], t3["system"]])
    # And the patches differ (they are the per-turn part)
    assert t2["messages"][-1]["content"][-1] != t3["messages"][-1]["content"][-1]


def test_consecutive_openai_turns_share_the_system_prefix() -> None:
    t1, _ = inject_openai(
        {"messages": [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "a"}]}, BOOT, "- x"
    )
    sys2 = SYSTEM.replace("10:32", "10:47")
    t2, _ = inject_openai(
        {
            "messages": [
                {"role": "system", "content": sys2},
                {"role": "user", "content": "a"},
                {"role": "assistant", "content": "b"},
                {"role": "user", "content": "c"},
            ]
        },
        BOOT,
        "- y",
    )
    assert t1["messages"][0] == t2["messages"][0]
    assert "10:47" in t2["messages"][-1]["content"]


def test_boot_block_is_deterministic_and_empty_when_nothing() -> None:
    data = BootData(
        glossary=[("PR", ("pull request",), "a change")], precious=["keep"], yesterday=("2026-11-29", "walked")
    )
    assert render_boot_block(data) == render_boot_block(data)
    text = render_boot_block(data)
    assert text.index("Glossary") < text.index("Precious") < text.index("Yesterday (2026-11-29)")
    assert render_boot_block(BootData()) == ""


def test_no_patch_when_last_message_is_assistant_prefill() -> None:
    body = {"system": SYSTEM, "messages": [{"role": "user", "content": "x"}, {"role": "assistant", "content": "Sure:"}]}
    out, info = inject_anthropic(body, "", "- m", CachePolicy())
    assert not info.patch and not info.volatile
    assert "10:32" in out["system"][0]["text"]  # nowhere to move it, so it stays


def test_only_the_date_sentence_leaves_a_mixed_line() -> None:
    from engram.services.chat.injection import split_volatile

    assert split_volatile("You are helpful. Today is 2026-11-30 10:00.") == (
        "You are helpful.",
        ["Today is 2026-11-30 10:00."],
    )
    assert split_volatile("你是助手。今天是2026年11月30日。请简洁。") == (
        "你是助手。请简洁。",
        ["今天是2026年11月30日。"],
    )


def test_a_system_prompt_that_was_only_a_date_is_dropped_not_sent_empty() -> None:
    from engram.services.chat.injection import inject_openai

    body = {
        "model": "m",
        "messages": [{"role": "system", "content": "Today is 2026-11-30 10:00."}, {"role": "user", "content": "hi"}],
    }
    out, _ = inject_openai(body, boot_text="", recall_text="- a memory")
    assert [m["role"] for m in out["messages"]] == ["user"]
    assert "2026-11-30" in out["messages"][0]["content"] and "a memory" in out["messages"][0]["content"]


def test_last_user_text_reads_both_wires_and_only_a_user_turn() -> None:
    # Given OpenAI and Anthropic turns with text and image parts, and a turn ending with the assistant
    openai_turn = {
        "messages": [
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": " look "},
                    {"type": "image_url", "image_url": {"url": "data:x"}},
                    {"type": "text", "text": "here"},
                ],
            }
        ]
    }
    anthropic_turn = {"messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}]}
    ended = {"messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}]}
    # When reading the current user text, Then text parts are joined and other turns give None
    assert last_user_text(openai_turn) == "look \nhere"
    assert last_user_text(anthropic_turn) == "hi"
    assert last_user_text({"messages": [{"role": "user", "content": "   "}]}) is None
    assert last_user_text(ended) is None
    assert last_user_text({}) is None


def test_past_conversation_fragments_ride_in_the_patch_after_the_memories_and_leave_the_cache_alone() -> None:
    # Given the same third turn injected without and with conversation fragments (and a reminder)
    history = [
        {"role": "user", "content": "one"},
        {"role": "assistant", "content": "r1"},
        {"role": "user", "content": "two"},
        {"role": "assistant", "content": "r2"},
    ]
    fragments = "Earlier conversations (other threads) that may be relevant:\n[2026-10-02 · Kyoto]\nuser: trip"
    plain, plain_info = inject_anthropic(_turn(history, "three"), BOOT, "- memory", CachePolicy())
    out, info = inject_anthropic(
        _turn(history, "three"), BOOT, "- memory", CachePolicy(), "Reminders due now: - call mum", fragments
    )
    # Then everything before the patch is identical, markers included, and none is on the patch
    assert json.dumps([out["tools"], out["system"], out["messages"][:-1]]) == json.dumps(
        [plain["tools"], plain["system"], plain["messages"][:-1]]
    )
    assert info.markers == plain_info.markers and info.conversations and not plain_info.conversations
    patch = out["messages"][-1]["content"][-1]
    assert "cache_control" not in patch
    # And the fragments come after the memories and before the reminders
    text = patch["text"]
    assert text.index("- memory") < text.index("Earlier conversations") < text.index("Reminders due now")
    # And the OpenAI wire places them the same way
    body = {"messages": [{"role": "system", "content": "sys"}, {"role": "user", "content": "three"}]}
    openai, openai_info = inject_openai(body, BOOT, "- memory", "", fragments)
    assert openai_info.conversations and openai["messages"][-1]["content"].endswith("</engram-context>")
    assert "Earlier conversations" in openai["messages"][-1]["content"]


# -- the current user turn as coding clients send it (issue: Claude Code 2.1, Codex) -------------------
REMINDER = (
    "<system-reminder>\nAs you answer the user's questions, you can use the following context:\n"
    "# claudeMd\nCodebase and user instructions are shown below.\n</system-reminder>"
)


def _claude_code_request(history: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """A Claude Code 2.1 ``claude -p`` request, trimmed: three system blocks (the last one marked), tools,
    the user's turn led by a <system-reminder> block, and a system message *after* the user's turn."""
    return {
        "model": "claude-opus-4-8",
        "stream": True,
        "max_tokens": 64000,
        "thinking": {"type": "adaptive"},
        "context_management": {"edits": [{"type": "clear_thinking_20251015", "keep": "all"}]},
        "output_config": {"effort": "high"},
        "metadata": {"user_id": json.dumps({"device_id": "d1", "session_id": "s1"})},
        "system": [
            {"type": "text", "text": "x-anthropic-billing-header: cc_version=2.1.332;"},
            {"type": "text", "text": "You are Claude Code, Anthropic's official CLI for Claude."},
            {
                "type": "text",
                "text": "You are an interactive agent that helps users with software engineering tasks.",
                "cache_control": {"type": "ephemeral", "ttl": "5m"},
            },
        ],
        "tools": [
            {"name": name, "description": name, "input_schema": {"type": "object", "properties": {}}}
            for name in ("Agent", "Bash", "Edit", "Read", "Write")
        ],
        "messages": [
            *(history or []),
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": REMINDER},
                    {
                        "type": "text",
                        "text": "I am planning a trip to Lisbon in October",
                        "cache_control": {"type": "ephemeral"},
                    },
                ],
            },
            {"role": "system", "content": "Available agent types for the Agent tool: general-purpose, Explore"},
        ],
    }


def test_the_user_turn_before_a_trailing_system_message_is_the_current_turn_without_scaffolding() -> None:
    # Given Claude Code 2.1's request: [user (system-reminder + words), system]
    body = _claude_code_request()
    # When reading the current user turn, Then it is the user's own words, the reminder left out
    assert last_user_text(body) == "I am planning a trip to Lisbon in October"
    # And an OpenAI request with trailing developer/system messages reads the same way
    openai_body = {
        "messages": [
            {"role": "system", "content": "sys"},
            {"role": "user", "content": "<environment_context>\n  <cwd>/w</cwd>\n</environment_context>"},
            {"role": "user", "content": "remember: my bike is blue"},
            {"role": "developer", "content": "Be terse."},
            {"role": "system", "content": "Tools: none."},
        ]
    }
    assert last_user_text(openai_body) == "remember: my bike is blue"
    # And a turn that is only scaffolding, or ends with the assistant, has no user words
    only = {"messages": [{"role": "user", "content": REMINDER}, {"role": "system", "content": "s"}]}
    assert last_user_text(only) is None
    assert (
        last_user_text({"messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}]}) is None
    )
    assert last_user_text({"messages": [{"role": "system", "content": "s"}]}) is None


def test_scaffolding_is_left_out_of_the_words_only_as_whole_blocks() -> None:
    from engram.domain.wire.content import without_scaffolding

    assert without_scaffolding(f"{REMINDER}\nhello <system-reminder>x</system-reminder> there") == "hello  there"
    # A tag the user typed without its end stays (it is their text), and unknown tags stay
    assert without_scaffolding("what does <system-reminder> do?") == "what does <system-reminder> do?"
    assert without_scaffolding("<b>bold</b> claim") == "<b>bold</b> claim"


def test_claude_code_request_gets_the_patch_in_its_user_turn_after_every_breakpoint() -> None:
    # Given a Claude Code 2.1 request in its second turn
    history = [
        {"role": "user", "content": [{"type": "text", "text": REMINDER}, {"type": "text", "text": "hi"}]},
        {"role": "assistant", "content": [{"type": "text", "text": "Hello!"}]},
    ]
    body = _claude_code_request(history)
    original = copy.deepcopy(body)
    # When injecting with Engram's markers
    out, info = inject_anthropic(body, BOOT, "- Lin prefers window seats", CachePolicy())
    # Then the patch is the last block of the user's turn, not appended after the system message
    user, trailing = out["messages"][-2], out["messages"][-1]
    assert info.patch and user["role"] == "user"
    assert user["content"][-1]["text"].startswith("<engram-context>") and "window seats" in user["content"][-1]["text"]
    assert trailing["role"] == "system" and text_of(trailing["content"]) == original["messages"][-1]["content"]
    # And the scaffolding and the user's words are forwarded untouched (the client's marker replaced by ours)
    assert user["content"][0] == {"type": "text", "text": REMINDER}
    assert user["content"][1]["text"] == "I am planning a trip to Lisbon in October"
    # And the markers: last tool, system anchor, tail on the previous reply; nothing on or after the patch
    assert count_cache_control(out) == info.markers == 3
    assert "cache_control" in out["messages"][1]["content"][-1]
    assert all("cache_control" not in b for b in user["content"])
    # And without Engram's markers the client's own stay where they are, in front of the patch
    body = _claude_code_request(history)
    out, info = inject_anthropic(body, BOOT, "- Lin prefers window seats", None)
    user = out["messages"][-2]["content"]
    assert user[1]["cache_control"] == {"type": "ephemeral"} and user[-1]["text"].startswith("<engram-context>")
    assert out["system"][2]["cache_control"] == {"type": "ephemeral", "ttl": "5m"}
    # And a client's marker on the system message after the user's turn (Claude Code 2.1.332 puts one
    # there) moves onto the user's words, in front of the patch: the marker count stays
    body = _claude_code_request(history)
    del body["messages"][-2]["content"][1]["cache_control"]
    marker = {"type": "ephemeral", "ttl": "1h"}
    body["messages"][-1]["content"] = [{"type": "text", "text": "agents", "cache_control": marker}]
    out, info = inject_anthropic(body, BOOT, "- Lin prefers window seats", None)
    user = out["messages"][-2]["content"]
    assert user[1]["cache_control"] == marker and "cache_control" not in user[-1]
    assert "cache_control" not in out["messages"][-1]["content"][0]
    assert count_cache_control(out) == count_cache_control(body) == 2
    assert body["messages"][-1]["content"][0]["cache_control"] == marker  # the client's body as sent


def test_openai_patch_goes_into_the_user_turn_before_trailing_developer_messages() -> None:
    # Given an OpenAI request whose user turn is followed by developer and system messages
    body = {
        "messages": [
            {"role": "system", "content": SYSTEM},
            {"role": "user", "content": "where do I live?"},
            {"role": "developer", "content": "Answer in one line."},
        ]
    }
    # When injecting
    out, info = inject_openai(body, BOOT, "- Lin lives in Porto")
    # Then the boot block follows the leading system prompt, the patch sits in the user turn
    roles = [m["role"] for m in out["messages"]]
    assert roles == ["system", "user", "developer"] and info.patch and info.boot
    assert out["messages"][0]["content"].endswith("</engram-memory>")
    assert out["messages"][1]["content"].startswith("where do I live?\n\n<engram-context>")
    assert "Porto" in out["messages"][1]["content"] and out["messages"][2] == body["messages"][2]
    # And after tool results followed by a developer message, the patch is a user message before it
    tool_turn = {
        "messages": [
            {"role": "user", "content": "run it"},
            {"role": "assistant", "content": None, "tool_calls": [{"id": "c1", "function": {"name": "sh"}}]},
            {"role": "tool", "tool_call_id": "c1", "content": "ok"},
            {"role": "developer", "content": "Be brief."},
        ]
    }
    out, _ = inject_openai(tool_turn, "", "", "Reminders due now: - call mum")
    assert [m["role"] for m in out["messages"]] == ["user", "assistant", "tool", "user", "developer"]
    assert "call mum" in out["messages"][3]["content"]


def test_responses_injection_for_an_upstream_that_speaks_it() -> None:
    from engram.services.chat.injection import inject_responses

    # Given a string input: it becomes a user item carrying the patch; the boot block follows the instructions
    out, info = inject_responses({"instructions": SYSTEM, "input": "hi"}, BOOT, "- m")
    assert out["instructions"].startswith("You are a helpful assistant.\nBe kind.\n\n<engram-memory>")
    assert out["input"][0]["content"].startswith("hi\n\n<engram-context>") and "10:32" in out["input"][0]["content"]
    assert info.boot and info.patch and info.volatile
    # Given tool outputs followed by a developer item: the patch is a user item right after the outputs
    items = [
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "run"}]},
        {"type": "reasoning", "id": "rs", "summary": [], "encrypted_content": "x"},
        {"type": "function_call", "call_id": "c", "name": "sh", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c", "output": "ok"},
        {"type": "message", "role": "developer", "content": "be brief"},
    ]
    out, info = inject_responses({"input": items}, "", "", "Reminders due now: - call mum")
    kinds = [(i.get("type"), i.get("role")) for i in out["input"]]
    assert kinds[3:] == [("function_call_output", None), ("message", "user"), ("message", "developer")]
    assert "call mum" in out["input"][4]["content"][0]["text"] and out["input"][:4] == items[:4]
    assert "instructions" not in out and info.reminders
    # Given an answer prefill (the last item is the assistant's): nothing to patch
    ended = [{"role": "user", "content": "q"}, {"type": "message", "role": "assistant", "content": "a"}]
    out, info = inject_responses({"input": ended}, BOOT, "- m")
    assert out["input"] == ended and not info.patch and info.boot
