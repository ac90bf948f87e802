"""Incremental server-sent-events parsing and framing (pure; used by the gateway and the LLM adapters)."""

from __future__ import annotations

import json
from typing import Any, NamedTuple


class SseEvent(NamedTuple):
    """One event. ``raw`` is its wire form (LF line endings, ending in a blank line) for pass-through.

    A named tuple: immutable, and built for every upstream event at a fifth of a frozen dataclass's cost
    (bench/README.md, "Gateway overhead")."""

    event: str | None
    data: str
    raw: bytes

    @property
    def is_comment(self) -> bool:
        return self.event is None and not self.data and self.raw.startswith(b":")

    def json(self) -> Any:
        return json.loads(self.data)


class SseParser:
    """Feed bytes as they arrive; get back the events completed so far. Handles CRLF and split chunks."""

    __slots__ = ("_buf",)

    def __init__(self) -> None:
        self._buf = b""

    def feed(self, chunk: bytes) -> list[SseEvent]:
        buf = self._buf + chunk
        if b"\r" in buf:
            buf = buf.replace(b"\r\n", b"\n")
        events: list[SseEvent] = []
        start = 0
        while True:
            end = buf.find(b"\n\n", start)
            if end < 0:
                break
            block = buf[start : end + 2]
            start = end + 2
            if block.strip():
                events.append(_parse_block(block))
        self._buf = buf[start:]
        return events

    def flush(self) -> list[SseEvent]:
        """Whatever is left when the stream ends (a last event without its blank line)."""
        rest, self._buf = self._buf, b""
        if not rest.strip():
            return []
        return [_parse_block(rest.rstrip(b"\n") + b"\n\n")]


def _parse_block(block: bytes) -> SseEvent:
    text = block.decode("utf-8", "replace")
    if text.startswith("data: ") and text.count("\n") == 2:
        # The common event: one `data: ` line (``block`` ends in its blank line), read as the loop would.
        return SseEvent(None, text[6:-2], block)
    event: str | None = None
    data: list[str] = []
    for line in text.split("\n"):
        if not line or line.startswith(":"):
            continue
        name, _, value = line.partition(":")
        if value.startswith(" "):
            value = value[1:]
        if name == "event":
            event = value
        elif name == "data":
            data.append(value)
    return SseEvent(event, "\n".join(data), block)


def sse_bytes(data: Any, event: str | None = None) -> bytes:
    """Format one event; ``data`` is sent as-is if it is a string, else as compact JSON."""
    payload = data if isinstance(data, str) else json.dumps(data, ensure_ascii=False, separators=(",", ":"))
    head = f"event: {event}\n" if event else ""
    return f"{head}data: {payload}\n\n".encode()


SSE_DONE = b"data: [DONE]\n\n"
SSE_PING = b": ping\n\n"


def openai_chunk(response_id: str, created: int, model: str, delta: dict[str, Any], finish: str | None = None) -> bytes:
    """One OpenAI ``chat.completion.chunk`` SSE event (every converter to the OpenAI wire emits these)."""
    return sse_bytes(
        {
            "id": response_id,
            "object": "chat.completion.chunk",
            "created": created,
            "model": model,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        }
    )


def openai_usage_chunk(response_id: str, created: int, model: str, usage: dict[str, Any]) -> bytes:
    """The OpenAI usage-only chunk (no choices) a stream ends with when the client asked for usage."""
    return sse_bytes(
        {
            "id": response_id,
            "object": "chat.completion.chunk",
            "created": created,
            "model": model,
            "choices": [],
            "usage": usage,
        }
    )
