"""Conversion between the OpenAI chat-completions wire and Bedrock Converse / ConverseStream (pure, no I/O).

The gateway speaks the OpenAI wire to every non-Anthropic upstream; for ``bedrock/<model-id>`` the
Bedrock adapter converts that body to a Converse request and Converse's answers back to OpenAI JSON or
OpenAI SSE chunks, so injection, persistence and the Anthropic door's conversion stay the same code.

Covered: system/developer prompts, user/assistant turns (merged so roles alternate, user first), images
given as data URLs (raw bytes; boto3 encodes them), tool definitions -> ``toolConfig``, tool calls and
results, reasoning, ``max_tokens``/``temperature``/``top_p``/``stop``, stop reasons and usage including
cache read/write tokens.

Prompt caching: a body with a top-level ``cache_control`` (``{"type": "ephemeral", "ttl": "5m"|"1h"}``, set
by the chat service from ``ENGRAM_ANTHROPIC_CACHE_*``) gets Converse ``cachePoint`` blocks when the model
is an Anthropic Claude model, at the positions ``cache_markers.plan_markers`` picks (last tool, system
anchor, tail of the previous turn, bridge; at most four, never in the current user turn). Other models
get none (the field is dropped).

``to_converse``: Engram's own model calls (extraction, dreaming, compression: plain chat messages) as a
Converse request, for ``adapters/llm/bedrock.py``'s ``ChatModel``.
"""

from __future__ import annotations

import base64
import binascii
import json
import time
from collections.abc import Sequence
from typing import Any

from engram.domain.errors import InvalidInput
from engram.domain.wire.cache_markers import place_cache_points, supports_prompt_cache
from engram.domain.wire.content import push_turn, text_of, tool_arguments
from engram.domain.wire.sse import SSE_DONE, openai_chunk, openai_usage_chunk
from engram.domain.wire.usage import openai_usage, usage_from_converse

BEDROCK_PREFIX = "bedrock/"
JSON_INSTRUCTION = "Answer with exactly one JSON object and nothing else: no prose, no code fence."
_IMAGE_FORMATS = {"png": "png", "jpeg": "jpeg", "jpg": "jpeg", "gif": "gif", "webp": "webp"}
_STOP = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "max_tokens": "length",
    "tool_use": "tool_calls",
    "guardrail_intervened": "content_filter",
    "content_filtered": "content_filter",
}


def model_id_of(model: str) -> str:
    """The Bedrock model id (or inference profile) of ``bedrock/<id>``."""
    return model.removeprefix(BEDROCK_PREFIX)


# -- request ---------------------------------------------------------------------------------------
def image_block(part: dict[str, Any]) -> dict[str, Any]:
    """An OpenAI ``image_url`` part as a Converse image block (data URLs only; Converse takes bytes)."""
    ref = part.get("image_url")
    url = ref.get("url", "") if isinstance(ref, dict) else str(ref or "")
    if not url.startswith("data:") or ";base64," not in url:
        raise InvalidInput(
            "Bedrock models take images as base64 data URLs (data:image/png;base64,...), not links",
            code="unsupported_image",
        )
    head, data = url.split(",", 1)
    subtype = head[5:].split(";")[0].split("/")[-1].lower()
    fmt = _IMAGE_FORMATS.get(subtype)
    if fmt is None:
        raise InvalidInput(f"Bedrock takes png, jpeg, gif or webp images, not {subtype or 'unknown'}")
    try:
        raw = base64.b64decode(data, validate=False)
    except (binascii.Error, ValueError) as exc:
        raise InvalidInput("an image data URL is not valid base64") from exc
    return {"image": {"format": fmt, "source": {"bytes": raw}}}


def _user_blocks(content: Any) -> list[dict[str, Any]]:
    if isinstance(content, str):
        return [{"text": content}] if content.strip() else []
    blocks: list[dict[str, Any]] = []
    for part in content or []:
        if not isinstance(part, dict):
            continue
        if part.get("type") == "text" and str(part.get("text") or "").strip():
            blocks.append({"text": part["text"]})
        elif part.get("type") == "image_url":
            blocks.append(image_block(part))
    return blocks


def openai_to_converse(body: dict[str, Any]) -> dict[str, Any]:  # noqa: C901 - one branch per wire field, read top to bottom
    """An OpenAI chat-completions body -> the keyword arguments of ``converse`` / ``converse_stream``."""
    system: list[dict[str, Any]] = []
    turns: list[dict[str, Any]] = []

    for msg in body.get("messages") or []:
        role = msg.get("role")
        content = msg.get("content")
        if role in ("system", "developer"):
            text = text_of(content)
            if text.strip():
                system.append({"text": text})
        elif role == "user":
            push_turn(turns, "user", _user_blocks(content))
        elif role == "assistant":
            blocks: list[dict[str, Any]] = []
            text = text_of(content)
            if text.strip():
                blocks.append({"text": text})
            for call in msg.get("tool_calls") or []:
                fn = call.get("function") or {}
                blocks.append(
                    {
                        "toolUse": {
                            "toolUseId": str(call.get("id") or ""),
                            "name": str(fn.get("name") or ""),
                            "input": tool_arguments(fn.get("arguments")),
                        }
                    }
                )
            push_turn(turns, "assistant", blocks)
        elif role in ("tool", "function"):
            result = text_of(content) or " "  # Converse rejects blank text
            push_turn(
                turns,
                "user",
                [{"toolResult": {"toolUseId": str(msg.get("tool_call_id") or ""), "content": [{"text": result}]}}],
            )
    _user_first(turns)
    request: dict[str, Any] = {"modelId": model_id_of(str(body.get("model") or "")), "messages": turns}
    if system:
        request["system"] = system
    inference: dict[str, Any] = {}
    max_tokens = body.get("max_completion_tokens") or body.get("max_tokens")
    if max_tokens:
        inference["maxTokens"] = int(max_tokens)
    if body.get("temperature") is not None:
        inference["temperature"] = float(body["temperature"])
    if body.get("top_p") is not None:
        inference["topP"] = float(body["top_p"])
    stop = body.get("stop")
    if stop:
        inference["stopSequences"] = [stop] if isinstance(stop, str) else [str(s) for s in stop]
    if inference:
        request["inferenceConfig"] = inference
    tool_config = _tool_config(body)
    if tool_config:
        request["toolConfig"] = tool_config
    cache = body.get("cache_control")
    if isinstance(cache, dict) and supports_prompt_cache(request["modelId"]):
        place_cache_points(request, ttl=str(cache.get("ttl") or "5m"))
    return request


def to_converse(messages: Sequence[dict[str, Any]], *, json_mode: bool = False) -> dict[str, Any]:
    """Engram's own chat messages -> Converse ``system`` and ``messages`` (roles alternate, user first;
    tool results and the like are read as user context)."""
    system: list[dict[str, Any]] = []
    turns: list[dict[str, Any]] = []
    for message in messages:
        role = message.get("role")
        text = text_of(message.get("content"))
        if role == "system":
            if text:
                system.append({"text": text})
            continue
        if role not in ("user", "assistant"):
            role = "user"
        if text:
            push_turn(turns, str(role), [{"text": text}])
    _user_first(turns)
    if json_mode:
        system.append({"text": JSON_INSTRUCTION})
    request: dict[str, Any] = {"messages": turns}
    if system:
        request["system"] = system
    return request


def _user_first(turns: list[dict[str, Any]]) -> None:
    """Converse needs the first turn to be the user's."""
    if not turns or turns[0]["role"] != "user":
        turns.insert(0, {"role": "user", "content": [{"text": "(conversation follows)"}]})


def _tool_config(body: dict[str, Any]) -> dict[str, Any] | None:
    tools = [t for t in body.get("tools") or [] if isinstance(t, dict) and t.get("type", "function") == "function"]
    if not tools:
        return None
    specs = []
    for tool in tools:
        fn = tool.get("function") or {}
        spec: dict[str, Any] = {
            "name": str(fn.get("name") or ""),
            "inputSchema": {"json": fn.get("parameters") or {"type": "object", "properties": {}}},
        }
        if fn.get("description"):
            spec["description"] = str(fn["description"])
        specs.append({"toolSpec": spec})
    config: dict[str, Any] = {"tools": specs}
    choice = body.get("tool_choice")
    if choice == "required":
        config["toolChoice"] = {"any": {}}
    elif choice == "auto":
        config["toolChoice"] = {"auto": {}}
    elif isinstance(choice, dict) and (choice.get("function") or {}).get("name"):
        config["toolChoice"] = {"tool": {"name": str(choice["function"]["name"])}}
    # "none" has no Converse equivalent: the tools stay declared (history may use them), no choice forced.
    return config


def _response_id(response: dict[str, Any]) -> str:
    request_id = (response.get("ResponseMetadata") or {}).get("RequestId") or ""
    return "chatcmpl-" + (str(request_id) or "bedrock")


# -- whole response ----------------------------------------------------------------------------------
def converse_to_openai(response: dict[str, Any], model: str) -> dict[str, Any]:
    """A ``converse`` response -> an OpenAI ``chat.completion``."""
    text: list[str] = []
    reasoning: list[str] = []
    calls: list[dict[str, Any]] = []
    for block in ((response.get("output") or {}).get("message") or {}).get("content") or []:
        if "text" in block:
            text.append(str(block["text"]))
        elif "toolUse" in block:
            use = block["toolUse"]
            calls.append(
                {
                    "id": str(use.get("toolUseId") or ""),
                    "type": "function",
                    "function": {
                        "name": str(use.get("name") or ""),
                        "arguments": json.dumps(use.get("input") or {}, ensure_ascii=False),
                    },
                }
            )
        elif "reasoningContent" in block:
            reasoning.append(str(((block["reasoningContent"] or {}).get("reasoningText") or {}).get("text") or ""))
    message: dict[str, Any] = {"role": "assistant", "content": "".join(text) if text or not calls else None}
    if reasoning:
        message["reasoning_content"] = "".join(reasoning)
    if calls:
        message["tool_calls"] = calls
    return {
        "id": _response_id(response),
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [
            {"index": 0, "message": message, "finish_reason": _STOP.get(str(response.get("stopReason") or ""), "stop")}
        ],
        "usage": openai_usage(usage_from_converse(response.get("usage"))),
    }


# -- streamed response --------------------------------------------------------------------------------
STREAM_ERRORS = (
    "internalServerException",
    "modelStreamErrorException",
    "throttlingException",
    "validationException",
    "serviceUnavailableException",
)


class ConverseToOpenAIStream:
    """Feed ConverseStream events (dicts as boto3 yields them); get OpenAI SSE chunk bytes back.

    ``finish()`` at the end of the event stream adds ``[DONE]`` when the model finished its message
    (``messageStop`` seen); a stream that ends earlier gets no ``[DONE]``, so the gateway reports it.
    """

    def __init__(self, model: str, *, include_usage: bool, response_id: str = "chatcmpl-bedrock") -> None:
        self.model = model
        self.include_usage = include_usage
        self._id = response_id
        self._created = int(time.time())
        self._tools: dict[int, int] = {}  # Converse content block index -> OpenAI tool_call index
        self._started = False
        self.stopped = False

    def _chunk(self, delta: dict[str, Any], finish: str | None = None) -> bytes:
        return openai_chunk(self._id, self._created, self.model, delta, finish)

    def _start(self) -> list[bytes]:
        if self._started:
            return []
        self._started = True
        return [self._chunk({"role": "assistant", "content": ""})]

    def feed(self, event: dict[str, Any]) -> list[bytes]:
        if "messageStart" in event:
            return self._start()
        out = self._start()
        if "contentBlockStart" in event:
            start = event["contentBlockStart"]
            use = (start.get("start") or {}).get("toolUse")
            if use:
                n = len(self._tools)
                self._tools[int(start.get("contentBlockIndex") or 0)] = n
                head = {
                    "index": n,
                    "id": str(use.get("toolUseId") or ""),
                    "type": "function",
                    "function": {"name": str(use.get("name") or ""), "arguments": ""},
                }
                out.append(self._chunk({"tool_calls": [head]}))
        elif "contentBlockDelta" in event:
            block = event["contentBlockDelta"]
            delta = block.get("delta") or {}
            if delta.get("text"):
                out.append(self._chunk({"content": delta["text"]}))
            elif "toolUse" in delta:
                n = self._tools.get(int(block.get("contentBlockIndex") or 0), 0)
                piece = str((delta["toolUse"] or {}).get("input") or "")
                out.append(self._chunk({"tool_calls": [{"index": n, "function": {"arguments": piece}}]}))
            elif (delta.get("reasoningContent") or {}).get("text"):
                out.append(self._chunk({"reasoning_content": delta["reasoningContent"]["text"]}))
        elif "messageStop" in event:
            self.stopped = True
            reason = str(event["messageStop"].get("stopReason") or "")
            out.append(self._chunk({}, _STOP.get(reason, "stop")))
        elif "metadata" in event and self.include_usage:
            usage = openai_usage(usage_from_converse(event["metadata"].get("usage")))
            out.append(openai_usage_chunk(self._id, self._created, self.model, usage))
        return out

    def finish(self) -> list[bytes]:
        return [SSE_DONE] if self.stopped else []


def stream_error(event: dict[str, Any]) -> tuple[str, str] | None:
    """``(ErrorCode, message)`` of an exception event in a ConverseStream, else None."""
    for name in STREAM_ERRORS:
        if name in event:
            return name[0].upper() + name[1:], str((event[name] or {}).get("message", ""))
    return None
