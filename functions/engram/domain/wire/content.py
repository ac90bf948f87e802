"""Reading message content and tool-call arguments, and merging turns, the same way on every wire (pure)."""

from __future__ import annotations

import json
import re
from typing import Any

# Wrappers coding clients put around what they add to the user's turn (README, "Recall and injection"):
# Claude Code's <system-reminder> blocks (context, CLAUDE.md, todo state) and local-command echoes,
# Codex's <environment_context> and <user_instructions>. Whole blocks only: a tag the user typed
# without its closing tag stays text.
SCAFFOLDING_TAGS = (
    "system-reminder",
    "local-command-caveat",
    "local-command-stdout",
    "local-command-stderr",
    "environment_context",
    "user_instructions",
)
_SCAFFOLDING = re.compile(r"<(" + "|".join(SCAFFOLDING_TAGS) + r")(?:\s[^>]*)?>.*?</\1>", re.DOTALL)


def text_of(content: Any) -> str:
    """The text of an OpenAI or Anthropic message content: a string as is; a list of parts/blocks ->
    its ``text`` parts joined by newlines (images, tool blocks and the like are left out)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(p.get("text", "") for p in content if isinstance(p, dict) and p.get("type") == "text")
    return ""


def without_scaffolding(text: str) -> str:
    """``text`` without the client's scaffolding blocks (``SCAFFOLDING_TAGS``), trimmed: the words the
    user wrote, which recall, "remember" detection and storage read. The request itself is forwarded
    with the blocks untouched."""
    if "<" not in text:
        return text.strip()
    return _SCAFFOLDING.sub("", text).strip()


def tool_arguments(raw: Any) -> dict[str, Any]:
    """An OpenAI tool call's ``arguments`` (a JSON string, or already an object) as the object the
    Anthropic and Converse wires take. Text that is not JSON is kept as ``{"_raw": text}``, JSON that
    is not an object as ``{"value": ...}``: a model's malformed call is passed on, never dropped."""
    if isinstance(raw, dict):
        return raw
    try:
        value = json.loads(raw or "{}")
    except ValueError:
        return {"_raw": raw}
    return value if isinstance(value, dict) else {"value": value}


def push_turn(turns: list[dict[str, Any]], role: str, blocks: list[dict[str, Any]]) -> None:
    """Append ``blocks`` as a ``role`` turn, merged into the last turn when it has that role (Anthropic
    and Converse both need alternating roles); nothing for no blocks."""
    if not blocks:
        return
    if turns and turns[-1]["role"] == role:
        turns[-1]["content"].extend(blocks)
    else:
        turns.append({"role": role, "content": blocks})
