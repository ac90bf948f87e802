"""Streamed responses between OpenAI chat completions and Anthropic Messages (pure, no I/O): stateful
converters fed one upstream SSE event at a time, returning the client's wire bytes."""

from __future__ import annotations

import time
from typing import Any

from engram.domain.wire.anthropic import STOP_A2O, STOP_O2A
from engram.domain.wire.sse import SSE_DONE, openai_chunk, openai_usage_chunk, sse_bytes
from engram.domain.wire.usage import TokenUsage, anthropic_usage, openai_usage, usage_from_anthropic, usage_from_openai


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
            return [self._chunk({}, STOP_A2O.get(stop or "", "stop"))]
        if kind == "message_stop":
            self.done = True
            out: list[bytes] = []
            if self.include_usage:
                usage = openai_usage(usage_from_anthropic(self._usage))
                out.append(openai_usage_chunk(self._id, self._created, self.model, usage))
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
                self._stop = STOP_O2A.get(choice["finish_reason"], "end_turn")
        return out

    def finish(self) -> list[bytes]:
        out: list[bytes] = [] if self._started else self._start("engram")
        out += self._close()
        out.append(
            sse_bytes(
                {
                    "type": "message_delta",
                    "delta": {"stop_reason": self._stop, "stop_sequence": None},
                    "usage": anthropic_usage(self._usage),
                },
                "message_delta",
            )
        )
        out.append(sse_bytes({"type": "message_stop"}, "message_stop"))
        self.done = True
        return out
