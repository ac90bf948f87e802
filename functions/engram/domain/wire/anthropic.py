"""OpenAI chat completions <-> Anthropic Messages: requests both ways and whole responses both ways
(pure, no I/O; streamed responses: ``anthropic_stream``). Covered: text, images, tool definitions /
calls / results, thinking <-> ``reasoning_content``, stop reasons and usage (including cache read/write
tokens). ``messages_request``: Engram's own model calls as a Messages request, for
``adapters/llm/anthropic.py``'s ``ChatModel``.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from typing import Any

from engram.domain.wire.content import push_turn, text_of, tool_arguments
from engram.domain.wire.usage import anthropic_usage, openai_usage, usage_from_anthropic, usage_from_openai

STOP_A2O = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "max_tokens": "length",
    "tool_use": "tool_calls",
    "pause_turn": "stop",
    "refusal": "content_filter",
}
STOP_O2A = {
    "stop": "end_turn",
    "length": "max_tokens",
    "tool_calls": "tool_use",
    "function_call": "tool_use",
    "content_filter": "refusal",
}


# -- content ----------------------------------------------------------------------------------------
def _image_o2a(part: dict[str, Any]) -> dict[str, Any]:
    url = (
        (part.get("image_url") or {}).get("url", "")
        if isinstance(part.get("image_url"), dict)
        else part.get("image_url", "")
    )
    if isinstance(url, str) and url.startswith("data:") and ";base64," in url:
        head, data = url.split(",", 1)
        return {"type": "image", "source": {"type": "base64", "media_type": head[5:].split(";")[0], "data": data}}
    return {"type": "image", "source": {"type": "url", "url": url}}


def _image_a2o(block: dict[str, Any]) -> dict[str, Any]:
    src = block.get("source") or {}
    if src.get("type") == "base64":
        url = f"data:{src.get('media_type', 'image/png')};base64,{src.get('data', '')}"
    else:
        url = src.get("url", "")
    return {"type": "image_url", "image_url": {"url": url}}


def answer_text(blocks: list[dict[str, Any]]) -> str:
    """The text of an Anthropic answer's content blocks (its ``text`` blocks, concatenated)."""
    return "".join(b.get("text", "") for b in blocks if b.get("type") == "text")


# -- Engram's own model calls --------------------------------------------------------------------------
JSON_INSTRUCTION = "Reply with exactly one JSON object and nothing else."


def messages_request(
    messages: Sequence[dict[str, Any]], model: str, max_tokens: int, *, json_mode: bool = False
) -> dict[str, Any]:
    """Engram's own chat messages (extraction, dreaming, compression) as a Messages request: system
    messages joined into ``system``; Claude has no JSON mode, so ``json_mode`` asks for one object there."""
    system = "\n\n".join(str(m.get("content") or "") for m in messages if m.get("role") == "system")
    rest = [{"role": m["role"], "content": m.get("content") or ""} for m in messages if m.get("role") != "system"]
    if json_mode:
        system = (system + "\n\n" if system else "") + JSON_INSTRUCTION
    body: dict[str, Any] = {"model": model, "messages": rest, "max_tokens": max_tokens}
    if system:
        body["system"] = system
    return body


# -- requests: OpenAI -> Anthropic --------------------------------------------------------------------
def openai_request_to_anthropic(  # noqa: C901 - one branch per wire field, read top to bottom
    body: dict[str, Any], model: str, *, default_max_tokens: int
) -> dict[str, Any]:
    """An OpenAI request for an Anthropic model; ``default_max_tokens`` when the client set no limit
    (Anthropic requires one; ``ENGRAM_CHAT_DEFAULT_MAX_TOKENS``)."""
    system: list[dict[str, Any]] = []
    messages: list[dict[str, Any]] = []

    for msg in body.get("messages") or []:
        role = msg.get("role")
        content = msg.get("content")
        if role in ("system", "developer"):
            text = text_of(content)
            if text:
                system.append({"type": "text", "text": text})
        elif role == "user":
            push_turn(messages, "user", _user_blocks_o2a(content))
        elif role == "assistant":
            blocks: list[dict[str, Any]] = []
            text = text_of(content)
            if text:
                blocks.append({"type": "text", "text": text})
            for call in msg.get("tool_calls") or []:
                fn = call.get("function") or {}
                blocks.append(
                    {
                        "type": "tool_use",
                        "id": call.get("id", ""),
                        "name": fn.get("name", ""),
                        "input": tool_arguments(fn.get("arguments")),
                    }
                )
            push_turn(messages, "assistant", blocks)
        elif role in ("tool", "function"):
            result = {"type": "tool_result", "tool_use_id": msg.get("tool_call_id", ""), "content": text_of(content)}
            push_turn(messages, "user", [result])
    out: dict[str, Any] = {
        "model": model,
        "messages": messages,
        "max_tokens": body.get("max_completion_tokens") or body.get("max_tokens") or default_max_tokens,
    }
    if system:
        out["system"] = system
    for key in ("temperature", "top_p", "top_k", "thinking", "metadata"):
        if body.get(key) is not None:
            out[key] = body[key]
    stop = body.get("stop")
    if stop:
        out["stop_sequences"] = [stop] if isinstance(stop, str) else list(stop)
    if body.get("user") and "metadata" not in out:
        out["metadata"] = {"user_id": str(body["user"])}
    tools = [t for t in body.get("tools") or [] if t.get("type", "function") == "function"]
    if tools:
        out["tools"] = [
            {
                "name": (t.get("function") or {}).get("name", ""),
                "description": (t.get("function") or {}).get("description", ""),
                "input_schema": (t.get("function") or {}).get("parameters") or {"type": "object", "properties": {}},
            }
            for t in tools
        ]
    choice = body.get("tool_choice")
    if choice is not None and tools:
        if choice == "required":
            out["tool_choice"] = {"type": "any"}
        elif choice in ("auto", "none"):
            out["tool_choice"] = {"type": choice}
        elif isinstance(choice, dict) and choice.get("function"):
            out["tool_choice"] = {"type": "tool", "name": choice["function"].get("name", "")}
    if body.get("stream"):
        out["stream"] = True
    return out


def _user_blocks_o2a(content: Any) -> list[dict[str, Any]]:
    if isinstance(content, str):
        return [{"type": "text", "text": content}] if content else []
    blocks: list[dict[str, Any]] = []
    for part in content or []:
        kind = part.get("type")
        if kind == "text" and part.get("text"):
            blocks.append({"type": "text", "text": part["text"]})
        elif kind == "image_url":
            blocks.append(_image_o2a(part))
    return blocks


# -- requests: Anthropic -> OpenAI --------------------------------------------------------------------
def anthropic_request_to_openai(body: dict[str, Any], model: str) -> dict[str, Any]:  # noqa: C901, PLR0915 - one branch per wire field
    messages: list[dict[str, Any]] = []
    system = body.get("system")
    system_text = text_of(system)
    if system_text:
        messages.append({"role": "system", "content": system_text})
    for msg in body.get("messages") or []:
        role = msg.get("role")
        content = msg.get("content")
        if role == "system":  # Claude Code 2.1 puts system messages after the user's turn
            messages.append({"role": "system", "content": text_of(content)})
            continue
        if isinstance(content, str):
            messages.append({"role": role, "content": content})
            continue
        if role == "assistant":
            text = answer_text(content)
            calls = [
                {
                    "id": b.get("id", ""),
                    "type": "function",
                    "function": {"name": b.get("name", ""), "arguments": json.dumps(b.get("input") or {})},
                }
                for b in content
                if b.get("type") == "tool_use"
            ]
            out_msg: dict[str, Any] = {"role": "assistant", "content": text or None}
            if calls:
                out_msg["tool_calls"] = calls
            messages.append(out_msg)
            continue
        parts: list[dict[str, Any]] = []
        for block in content:
            kind = block.get("type")
            if kind == "tool_result":
                messages.append(
                    {
                        "role": "tool",
                        "tool_call_id": block.get("tool_use_id", ""),
                        "content": text_of(block.get("content")),
                    }
                )
            elif kind == "text":
                parts.append({"type": "text", "text": block.get("text", "")})
            elif kind == "image":
                parts.append(_image_a2o(block))
        if parts:
            if all(p["type"] == "text" for p in parts):
                messages.append({"role": "user", "content": "\n".join(p["text"] for p in parts)})
            else:
                messages.append({"role": "user", "content": parts})
    out: dict[str, Any] = {"model": model, "messages": messages}
    if body.get("max_tokens"):
        out["max_tokens"] = body["max_tokens"]
    for key in ("temperature", "top_p"):
        if body.get(key) is not None:
            out[key] = body[key]
    if body.get("stop_sequences"):
        out["stop"] = list(body["stop_sequences"])
    user_id = (body.get("metadata") or {}).get("user_id")
    if user_id:
        out["user"] = str(user_id)
    if body.get("tools"):
        out["tools"] = [
            {
                "type": "function",
                "function": {
                    "name": t.get("name", ""),
                    "description": t.get("description", ""),
                    "parameters": t.get("input_schema") or {"type": "object", "properties": {}},
                },
            }
            for t in body["tools"]
            if t.get("name")
        ]
    choice = body.get("tool_choice")
    if isinstance(choice, dict) and out.get("tools"):
        kind = choice.get("type")
        if kind == "any":
            out["tool_choice"] = "required"
        elif kind in ("auto", "none"):
            out["tool_choice"] = kind
        elif kind == "tool":
            out["tool_choice"] = {"type": "function", "function": {"name": choice.get("name", "")}}
    if body.get("stream"):
        out["stream"] = True
        out["stream_options"] = {"include_usage": True}
    return out


# -- whole responses ----------------------------------------------------------------------------------
def anthropic_response_to_openai(msg: dict[str, Any], model: str) -> dict[str, Any]:
    text: list[str] = []
    reasoning: list[str] = []
    calls: list[dict[str, Any]] = []
    for block in msg.get("content") or []:
        kind = block.get("type")
        if kind == "text":
            text.append(block.get("text", ""))
        elif kind == "thinking":
            reasoning.append(block.get("thinking", ""))
        elif kind == "tool_use":
            calls.append(
                {
                    "id": block.get("id", ""),
                    "type": "function",
                    "function": {"name": block.get("name", ""), "arguments": json.dumps(block.get("input") or {})},
                }
            )
    message: dict[str, Any] = {"role": "assistant", "content": "".join(text) if text or not calls else None}
    if reasoning:
        message["reasoning_content"] = "".join(reasoning)
    if calls:
        message["tool_calls"] = calls
    return {
        "id": "chatcmpl-" + str(msg.get("id", "engram")).removeprefix("msg_"),
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [
            {"index": 0, "message": message, "finish_reason": STOP_A2O.get(msg.get("stop_reason") or "", "stop")}
        ],
        "usage": openai_usage(usage_from_anthropic(msg.get("usage"))),
    }


def openai_response_to_anthropic(resp: dict[str, Any], model: str) -> dict[str, Any]:
    choice = (resp.get("choices") or [{}])[0]
    message = choice.get("message") or {}
    content: list[dict[str, Any]] = []
    if message.get("reasoning_content"):
        content.append({"type": "thinking", "thinking": message["reasoning_content"], "signature": ""})
    text = text_of(message.get("content"))
    if text:
        content.append({"type": "text", "text": text})
    for call in message.get("tool_calls") or []:
        fn = call.get("function") or {}
        content.append(
            {
                "type": "tool_use",
                "id": call.get("id", ""),
                "name": fn.get("name", ""),
                "input": tool_arguments(fn.get("arguments")),
            }
        )
    return {
        "id": "msg_" + str(resp.get("id", "engram")).removeprefix("chatcmpl-"),
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": content,
        "stop_reason": STOP_O2A.get(choice.get("finish_reason") or "", "end_turn"),
        "stop_sequence": None,
        "usage": anthropic_usage(usage_from_openai(resp.get("usage"))),
    }
