"""Conversion between the OpenAI chat-completions wire and the Anthropic Messages wire (pure, no I/O).

Requests both ways, whole responses both ways, and streamed responses both ways (stateful converters
fed one upstream SSE event at a time, returning the client's wire bytes). Covered: text, images,
tool definitions / calls / results, thinking <-> ``reasoning_content``, stop reasons and usage
(including cache read/write tokens).
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any

from engram.domain.sse import SSE_DONE, openai_chunk, sse_bytes

DEFAULT_MAX_TOKENS = 4096

_STOP_A2O = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "max_tokens": "length",
    "tool_use": "tool_calls",
    "pause_turn": "stop",
    "refusal": "content_filter",
}
_STOP_O2A = {
    "stop": "end_turn",
    "length": "max_tokens",
    "tool_calls": "tool_use",
    "function_call": "tool_use",
    "content_filter": "refusal",
}


# -- usage ------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class TokenUsage:
    """Normalized usage: ``input`` counts every prompt token (cached ones included)."""

    input: int = 0
    output: int = 0
    cache_read: int = 0
    cache_write: int = 0


def _count(value: Any) -> int:
    """A token count from an upstream's usage field; anything that is not a number counts as 0
    (a provider's odd usage must not cost the user their answer)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value != value:
        return 0
    return max(0, int(min(value, 2**53)))


def usage_from_openai(u: Any) -> TokenUsage:
    if not isinstance(u, dict):
        return TokenUsage()
    details = u.get("prompt_tokens_details")
    details = details if isinstance(details, dict) else {}
    read = _count(details.get("cached_tokens")) or _count(u.get("prompt_cache_hit_tokens"))
    write = (
        _count(u.get("cache_write_tokens"))
        or _count(details.get("cache_write_tokens"))
        or _count(u.get("cache_creation_input_tokens"))
    )
    return TokenUsage(_count(u.get("prompt_tokens")), _count(u.get("completion_tokens")), read, write)


def usage_from_anthropic(u: Any) -> TokenUsage:
    if not isinstance(u, dict):
        return TokenUsage()
    read = _count(u.get("cache_read_input_tokens"))
    write = _count(u.get("cache_creation_input_tokens"))
    return TokenUsage(_count(u.get("input_tokens")) + read + write, _count(u.get("output_tokens")), read, write)


def _openai_usage(t: TokenUsage) -> dict[str, Any]:
    return {
        "prompt_tokens": t.input,
        "completion_tokens": t.output,
        "total_tokens": t.input + t.output,
        "prompt_tokens_details": {"cached_tokens": t.cache_read},
        "cache_write_tokens": t.cache_write,
    }


def _anthropic_usage(t: TokenUsage) -> dict[str, Any]:
    return {
        "input_tokens": max(0, t.input - t.cache_read - t.cache_write),
        "output_tokens": t.output,
        "cache_read_input_tokens": t.cache_read,
        "cache_creation_input_tokens": t.cache_write,
    }


# -- content helpers ----------------------------------------------------------------------------------
def text_of(content: Any) -> str:
    """The text of an OpenAI or Anthropic message content (string or list of parts/blocks)."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(p.get("text", "") for p in content if isinstance(p, dict) and p.get("type") == "text")
    return ""


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


def _parse_args(raw: Any) -> Any:
    if isinstance(raw, dict):
        return raw
    try:
        value = json.loads(raw or "{}")
    except ValueError:
        return {"_raw": raw}
    return value if isinstance(value, dict) else {"value": value}


# -- requests: OpenAI -> Anthropic --------------------------------------------------------------------
def openai_request_to_anthropic(body: dict[str, Any], model: str) -> dict[str, Any]:
    system: list[dict[str, Any]] = []
    messages: list[dict[str, Any]] = []

    def push(role: str, blocks: list[dict[str, Any]]) -> None:
        if not blocks:
            return
        if messages and messages[-1]["role"] == role:
            messages[-1]["content"].extend(blocks)
        else:
            messages.append({"role": role, "content": blocks})

    for msg in body.get("messages") or []:
        role = msg.get("role")
        content = msg.get("content")
        if role in ("system", "developer"):
            text = text_of(content)
            if text:
                system.append({"type": "text", "text": text})
        elif role == "user":
            push("user", _user_blocks_o2a(content))
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
                        "input": _parse_args(fn.get("arguments")),
                    }
                )
            push("assistant", blocks)
        elif role in ("tool", "function"):
            result = {"type": "tool_result", "tool_use_id": msg.get("tool_call_id", ""), "content": text_of(content)}
            push("user", [result])
    out: dict[str, Any] = {
        "model": model,
        "messages": messages,
        "max_tokens": body.get("max_completion_tokens") or body.get("max_tokens") or DEFAULT_MAX_TOKENS,
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
def anthropic_request_to_openai(body: dict[str, Any], model: str) -> dict[str, Any]:
    messages: list[dict[str, Any]] = []
    system = body.get("system")
    system_text = text_of(system)
    if system_text:
        messages.append({"role": "system", "content": system_text})
    for msg in body.get("messages") or []:
        role = msg.get("role")
        content = msg.get("content")
        if isinstance(content, str):
            messages.append({"role": role, "content": content})
            continue
        if role == "assistant":
            text = "".join(b.get("text", "") for b in content if b.get("type") == "text")
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
            {"index": 0, "message": message, "finish_reason": _STOP_A2O.get(msg.get("stop_reason") or "", "stop")}
        ],
        "usage": _openai_usage(usage_from_anthropic(msg.get("usage"))),
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
                "input": _parse_args(fn.get("arguments")),
            }
        )
    return {
        "id": "msg_" + str(resp.get("id", "engram")).removeprefix("chatcmpl-"),
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": content,
        "stop_reason": _STOP_O2A.get(choice.get("finish_reason") or "", "end_turn"),
        "stop_sequence": None,
        "usage": _anthropic_usage(usage_from_openai(resp.get("usage"))),
    }


# -- streamed responses -------------------------------------------------------------------------------
class AnthropicToOpenAIStream:
    """Feed Anthropic stream events (``event``, parsed ``data``); get OpenAI chunk bytes back."""

    def __init__(self, model: str, *, include_usage: bool) -> None:
        self.model = model
        self.include_usage = include_usage
        self._id = "chatcmpl-engram"
        self._created = int(time.time())
        self._tools: dict[int, int] = {}  # Anthropic block index -> OpenAI tool_call index
        self._usage: dict[str, Any] = {}
        self.done = False

    def _chunk(self, delta: dict[str, Any], finish: str | None = None) -> bytes:
        return openai_chunk(self._id, self._created, self.model, delta, finish)

    def feed(self, event: str | None, data: dict[str, Any]) -> list[bytes]:
        kind = data.get("type") or event
        if kind == "message_start":
            message = data.get("message") or {}
            self._id = "chatcmpl-" + str(message.get("id", "engram")).removeprefix("msg_")
            self._usage.update(message.get("usage") or {})
            return [self._chunk({"role": "assistant", "content": ""})]
        if kind == "content_block_start":
            block = data.get("content_block") or {}
            if block.get("type") == "tool_use":
                n = len(self._tools)
                self._tools[int(data.get("index", 0))] = n
                head = {
                    "index": n,
                    "id": block.get("id", ""),
                    "type": "function",
                    "function": {"name": block.get("name", ""), "arguments": ""},
                }
                return [self._chunk({"tool_calls": [head]})]
            return []
        if kind == "content_block_delta":
            delta = data.get("delta") or {}
            dkind = delta.get("type")
            if dkind == "text_delta":
                return [self._chunk({"content": delta.get("text", "")})]
            if dkind == "thinking_delta":
                return [self._chunk({"reasoning_content": delta.get("thinking", "")})]
            if dkind == "input_json_delta":
                n = self._tools.get(int(data.get("index", 0)), 0)
                return [
                    self._chunk(
                        {"tool_calls": [{"index": n, "function": {"arguments": delta.get("partial_json", "")}}]}
                    )
                ]
            return []
        if kind == "message_delta":
            self._usage.update({k: v for k, v in (data.get("usage") or {}).items() if v is not None})
            stop = (data.get("delta") or {}).get("stop_reason")
            return [self._chunk({}, _STOP_A2O.get(stop or "", "stop"))]
        if kind == "message_stop":
            self.done = True
            out: list[bytes] = []
            if self.include_usage:
                out.append(
                    sse_bytes(
                        {
                            "id": self._id,
                            "object": "chat.completion.chunk",
                            "created": self._created,
                            "model": self.model,
                            "choices": [],
                            "usage": _openai_usage(usage_from_anthropic(self._usage)),
                        }
                    )
                )
            out.append(SSE_DONE)
            return out
        return []


class OpenAIToAnthropicStream:
    """Feed OpenAI chunks (parsed), then ``finish()`` at ``[DONE]``; get Anthropic event bytes back."""

    def __init__(self, model: str) -> None:
        self.model = model
        self._started = False
        self._block = -1  # index of the open block, -1 none
        self._kind = ""  # "text" | "thinking" | "tool:<openai index>"
        self._stop = "end_turn"
        self._usage = TokenUsage()
        self.done = False

    def _start(self, resp_id: str) -> list[bytes]:
        self._started = True
        msg: dict[str, Any] = {
            "id": "msg_" + resp_id.removeprefix("chatcmpl-"),
            "type": "message",
            "role": "assistant",
            "model": self.model,
            "content": [],
            "stop_reason": None,
            "stop_sequence": None,
            "usage": {"input_tokens": 0, "output_tokens": 0},
        }
        return [sse_bytes({"type": "message_start", "message": msg}, "message_start")]

    def _open(self, kind: str, block: dict[str, Any]) -> list[bytes]:
        out = self._close()
        self._block += 1
        self._kind = kind
        out.append(
            sse_bytes(
                {"type": "content_block_start", "index": self._block, "content_block": block}, "content_block_start"
            )
        )
        return out

    def _close(self) -> list[bytes]:
        if not self._kind:
            return []
        out: list[bytes] = []
        if self._kind == "thinking":
            out.append(self._delta({"type": "signature_delta", "signature": ""}))
        self._kind = ""
        out.append(sse_bytes({"type": "content_block_stop", "index": self._block}, "content_block_stop"))
        return out

    def _delta(self, delta: dict[str, Any]) -> bytes:
        return sse_bytes({"type": "content_block_delta", "index": self._block, "delta": delta}, "content_block_delta")

    def feed(self, data: dict[str, Any]) -> list[bytes]:
        out: list[bytes] = []
        if not self._started:
            out += self._start(str(data.get("id", "engram")))
        if data.get("usage"):
            self._usage = usage_from_openai(data["usage"])
        for choice in data.get("choices") or []:
            delta = choice.get("delta") or {}
            if delta.get("reasoning_content"):
                if self._kind != "thinking":
                    out += self._open("thinking", {"type": "thinking", "thinking": "", "signature": ""})
                out.append(self._delta({"type": "thinking_delta", "thinking": delta["reasoning_content"]}))
            if delta.get("content"):
                if self._kind != "text":
                    out += self._open("text", {"type": "text", "text": ""})
                out.append(self._delta({"type": "text_delta", "text": delta["content"]}))
            for call in delta.get("tool_calls") or []:
                key = f"tool:{call.get('index', 0)}"
                fn = call.get("function") or {}
                if self._kind != key:
                    out += self._open(
                        key, {"type": "tool_use", "id": call.get("id", ""), "name": fn.get("name", ""), "input": {}}
                    )
                if fn.get("arguments"):
                    out.append(self._delta({"type": "input_json_delta", "partial_json": fn["arguments"]}))
            if choice.get("finish_reason"):
                self._stop = _STOP_O2A.get(choice["finish_reason"], "end_turn")
        return out

    def finish(self) -> list[bytes]:
        out: list[bytes] = [] if self._started else self._start("engram")
        out += self._close()
        out.append(
            sse_bytes(
                {
                    "type": "message_delta",
                    "delta": {"stop_reason": self._stop, "stop_sequence": None},
                    "usage": _anthropic_usage(self._usage),
                },
                "message_delta",
            )
        )
        out.append(sse_bytes({"type": "message_stop"}, "message_stop"))
        self.done = True
        return out
