"""A provider's error body read as one of the two error wires (pure; docs/ARCHITECTURE.md, "Layers").

OpenAI's wire: ``{"error": {"message": ..., "type": ...}}`` (chat completions, Responses, most
OpenAI-compatible servers). Anthropic's: ``{"type": "error", "error": {"type": ..., "message": ...}}``.
The chat doors pass a provider's error through unchanged when it already speaks the door's wire, and
otherwise give its message the door's shape (README, "Connect a chat client", Failures).
"""

from __future__ import annotations

import json
from typing import Literal

ErrorWire = Literal["openai", "anthropic"]

_MESSAGE_CHARS = 500  # of a body that is not JSON: enough to name the cause


def error_wire(body: bytes) -> ErrorWire | None:
    """Which wire's error shape a provider's body has, or None (not JSON, another shape)."""
    parsed = _parsed(body)
    if not isinstance(parsed, dict) or not isinstance(parsed.get("error"), dict):
        return None
    return "anthropic" if parsed.get("type") == "error" else "openai"


def error_message(body: bytes) -> str:
    """The provider's own message (either wire), else the start of the body's text."""
    parsed = _parsed(body)
    error = parsed.get("error") if isinstance(parsed, dict) else None
    message = error.get("message") if isinstance(error, dict) else error
    if isinstance(message, str) and message.strip():
        return message
    return body.decode("utf-8", "replace")[:_MESSAGE_CHARS] or "(empty body)"


def _parsed(body: bytes) -> object:
    try:
        return json.loads(body)
    except ValueError:
        return None
