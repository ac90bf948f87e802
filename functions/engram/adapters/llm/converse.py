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
is an Anthropic Claude model, at the positions ``engram.domain.prompt_cache.plan_markers`` picks (last
tool, system anchor, tail of the previous turn, bridge; at most four, never in the current user turn).
Other models get none (the field is dropped).
"""

from __future__ import annotations

import base64
import binascii
import json
import time
from typing import Any

from engram.domain.errors import InvalidInput
from engram.domain.prompt_cache import LOOKBACK_BLOCKS, plan_markers
from engram.domain.sse import SSE_DONE, openai_chunk, sse_bytes

BEDROCK_PREFIX = "bedrock/"
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
def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(p.get("text", "") for p in content if isinstance(p, dict) and p.get("type") == "text")
    return ""


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


def _arguments(raw: Any) -> dict[str, Any]:
    if isinstance(raw, dict):
        return raw
    try:
        value = json.loads(raw or "{}")
    except ValueError:
        return {"_raw": raw}
    return value if isinstance(value, dict) else {"value": value}


def openai_to_converse(body: dict[str, Any]) -> dict[str, Any]:
    """An OpenAI chat-completions body -> the keyword arguments of ``converse`` / ``converse_stream``."""
    system: list[dict[str, Any]] = []
    turns: list[dict[str, Any]] = []

    def push(role: str, blocks: list[dict[str, Any]]) -> None:
        if not blocks:
            return
        if turns and turns[-1]["role"] == role:  # Converse needs alternating roles
            turns[-1]["content"].extend(blocks)
        else:
            turns.append({"role": role, "content": blocks})

    for msg in body.get("messages") or []:
        role = msg.get("role")
        content = msg.get("content")
        if role in ("system", "developer"):
            text = _text(content)
            if text.strip():
                system.append({"text": text})
        elif role == "user":
            push("user", _user_blocks(content))
        elif role == "assistant":
            blocks: list[dict[str, Any]] = []
            text = _text(content)
            if text.strip():
                blocks.append({"text": text})
            for call in msg.get("tool_calls") or []:
                fn = call.get("function") or {}
                blocks.append(
                    {
                        "toolUse": {
                            "toolUseId": str(call.get("id") or ""),
                            "name": str(fn.get("name") or ""),
                            "input": _arguments(fn.get("arguments")),
                        }
                    }
                )
            push("assistant", blocks)
        elif role in ("tool", "function"):
            result = _text(content) or " "  # Converse rejects blank text
            push(
                "user",
                [{"toolResult": {"toolUseId": str(msg.get("tool_call_id") or ""), "content": [{"text": result}]}}],
            )
    if not turns or turns[0]["role"] != "user":
        turns.insert(0, {"role": "user", "content": [{"text": "(conversation follows)"}]})
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


# -- prompt caching ----------------------------------------------------------------------------------
def supports_prompt_cache(model_id: str) -> bool:
    """Anthropic Claude on Bedrock (``anthropic.claude-*``, also behind ``us.``/``eu.``/``global.`` inference
    profiles and their ARNs). An application inference profile ARN does not name its model: no cache points."""
    return "anthropic.claude" in model_id.lower()


def _converse_cacheable(block: Any) -> bool:
    """A content block a ``cachePoint`` may follow (not reasoning, not a cache point, not an empty text)."""
    if not isinstance(block, dict) or "reasoningContent" in block or "cachePoint" in block:
        return False
    return not ("text" in block and not block["text"])


def cache_point(ttl: str) -> dict[str, Any]:
    """A Converse ``cachePoint`` block. ``5m`` is Bedrock's default and is not sent (older Claude models
    take no ``ttl`` field); ``1h`` is sent as ``ttl`` (Claude 4.5 models and later)."""
    point: dict[str, Any] = {"type": "default"}
    if ttl == "1h":
        point["ttl"] = "1h"
    return {"cachePoint": point}


def place_cache_points(request: dict[str, Any], *, ttl: str = "5m", lookback: int = LOOKBACK_BLOCKS) -> int:
    """Add ``cachePoint`` blocks to a Converse request where ``plan_markers`` says; returns how many."""
    tools: list[dict[str, Any]] = (request.get("toolConfig") or {}).get("tools") or []
    system: list[dict[str, Any]] = request.get("system") or []
    messages: list[dict[str, Any]] = request.get("messages") or []
    plan = plan_markers(
        tools=len(tools), system=len(system), messages=messages, cacheable=_converse_cacheable, lookback=lookback
    )
    if plan.last_tool:
        tools.append(cache_point(ttl))
    if plan.system:
        system.append(cache_point(ttl))
    for message, block in plan.in_messages:  # last first: an insertion leaves earlier positions valid
        messages[message]["content"].insert(block + 1, cache_point(ttl))
    return plan.count


def count_cache_points(request: dict[str, Any]) -> int:
    """Every ``cachePoint`` in a Converse request (tests and sanity checks)."""
    tools = (request.get("toolConfig") or {}).get("tools") or []
    blocks = [*tools, *(request.get("system") or [])]
    for message in request.get("messages") or []:
        blocks += message.get("content") or []
    return sum(1 for block in blocks if isinstance(block, dict) and "cachePoint" in block)


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


# -- usage -----------------------------------------------------------------------------------------
def openai_usage(usage: dict[str, Any] | None) -> dict[str, Any]:
    """Converse usage -> OpenAI usage. Bedrock's ``inputTokens`` leaves out cache reads and writes;
    OpenAI's ``prompt_tokens`` counts every prompt token, so they are added back."""
    u = usage or {}
    read = int(u.get("cacheReadInputTokens") or 0)
    write = int(u.get("cacheWriteInputTokens") or 0)
    prompt = int(u.get("inputTokens") or 0) + read + write
    output = int(u.get("outputTokens") or 0)
    return {
        "prompt_tokens": prompt,
        "completion_tokens": output,
        "total_tokens": prompt + output,
        "prompt_tokens_details": {"cached_tokens": read},
        "cache_write_tokens": write,
    }


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
        "usage": openai_usage(response.get("usage")),
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
            out.append(
                sse_bytes(
                    {
                        "id": self._id,
                        "object": "chat.completion.chunk",
                        "created": self._created,
                        "model": self.model,
                        "choices": [],
                        "usage": openai_usage(event["metadata"].get("usage")),
                    }
                )
            )
        return out

    def finish(self) -> list[bytes]:
        return [SSE_DONE] if self.stopped else []


def stream_error(event: dict[str, Any]) -> tuple[str, str] | None:
    """``(ErrorCode, message)`` of an exception event in a ConverseStream, else None."""
    for name in STREAM_ERRORS:
        if name in event:
            return name[0].upper() + name[1:], str((event[name] or {}).get("message", ""))
    return None
