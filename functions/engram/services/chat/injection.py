"""Where Engram puts memories in a chat request so prompt caches stay warm (pure, no I/O).

Layout of a request after injection (both wires)::

    [tools ............................................] <- Claude: marker "last tool"
    [client system prompt, volatile lines removed]
    [boot block]                                          <- Claude: marker "system anchor"
    [history ... previous-previous turn]                  <- Claude: marker "bridge" (long turns only)
    [history ... previous turn]                           <- Claude: marker "tail"
    [current user turn][per-turn patch: volatile lines + recalled memories]   (never marked)

Why this order: provider caches (Anthropic's explicit markers, OpenAI/DeepSeek automatic prefix
caching) reuse the longest unchanged *prefix*. So everything is ordered by how rarely it changes:
the client's own system prompt (changes almost never; volatile date/time lines are moved out of it
into the patch), then the boot block, whose sections are themselves ordered slowest-changing first
(persona/identity/pinned -> glossary -> precious notes -> digest -> yesterday's log; items oldest
first so additions land at the end), then the history, which only ever grows at the end. The only
per-turn content, the patch, sits in the current user turn after every cache breakpoint. The client
does not send our patch back in later turns, so the previous turn's tail (the assistant reply
before the current user turn) is the last point two consecutive requests share byte for byte; the
"tail" marker sits there, and the "bridge" marker repeats the previous request's tail when the new
turn added more blocks than Anthropic looks back (about 20) from a marker.

Where the markers go is decided and written once, in ``engram.domain.wire.cache_markers``: here as
Anthropic ``cache_control`` fields, for Bedrock as Converse ``cachePoint`` blocks.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from engram.domain.wire.cache_markers import CachePolicy, current_turn, place_cache_control
from engram.domain.wire.content import text_of, without_scaffolding

# -- volatile lines -------------------------------------------------------------------------------------
_STAMP = re.compile(r"\d{4}-\d{2}-\d{2}[T ]\d{1,2}:\d{2}")
_NOWISH = re.compile(r"(current|today|now\b|date|time|clock|当前|现在|今天|今日|日期|时间|時間|星期)", re.IGNORECASE)
_DATEISH = re.compile(
    r"(\d{4}\s*[-/.年]\s*\d{1,2}\s*[-/.月]\s*\d{1,2}|\b\d{1,2}:\d{2}\b|"
    r"\b(jan|feb|mar|apr|may|jun|jul|aug|sep|sept|oct|nov|dec)[a-z]*\.?\s+\d{1,2}\b|"
    r"\b\d{1,2}\s+(jan|feb|mar|apr|may|jun|jul|aug|sep|sept|oct|nov|dec)[a-z]*\b|"
    r"\b(monday|tuesday|wednesday|thursday|friday|saturday|sunday)\b)",
    re.IGNORECASE,
)
_NOT_VOLATILE = re.compile(r"(cutoff|cut-off|截止|training data)", re.IGNORECASE)


_SENTENCE_END = re.compile(r"(?<=[.!?。！？;；])\s*(?=\S)")


def is_volatile_line(line: str) -> bool:
    """A short line stating the current date or time (it would change the prompt every turn or day)."""
    text = line.strip()
    if not text or len(text) > 160 or _NOT_VOLATILE.search(text):
        return False
    if _STAMP.search(text):
        return True
    return bool(_NOWISH.search(text) and _DATEISH.search(text))


def split_volatile(text: str) -> tuple[str, list[str]]:
    """``text`` without its volatile lines, and those lines (stripped) in order."""
    if not _DATEISH.search(text) and not _STAMP.search(text):
        return text, []
    keep: list[str] = []
    moved: list[str] = []
    for line in text.split("\n"):
        if not is_volatile_line(line):
            keep.append(line)
            continue
        # Move only the sentences that state the date/time: "You are kind. Today is ..." keeps "You are kind."
        sentences = _SENTENCE_END.split(line.strip())
        stays = [x for x in sentences if not is_volatile_line(x)]
        goes = [x for x in sentences if is_volatile_line(x)]
        if not goes:  # the date only reads as "now" across sentences: move the whole line
            goes, stays = [line], []
        moved.extend(goes)
        if stays:
            keep.append(
                "".join(x if i == 0 or stays[i - 1][-1] in "。！？；" else " " + x for i, x in enumerate(stays))
            )
    if not moved:
        return text, []
    return "\n".join(keep).strip("\n"), [m.strip() for m in moved]


# -- what gets injected ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class BootData:
    """The stable memory context, already sorted by the caller (oldest first)."""

    persona: Sequence[str] = ()  # persona memories
    about: Sequence[str] = ()  # identity and pinned memories
    glossary: Sequence[tuple[str, Sequence[str], str]] = ()  # (term, aliases, definition)
    precious: Sequence[str] = ()
    digest: str = ""
    yesterday: tuple[str, str] | None = None  # (date, text)
    skills: Sequence[tuple[str, str]] = ()  # (name, description) of the skills allocated to the agent


def render_boot_block(data: BootData, *, max_chars: int = 8000) -> str:
    """Deterministic text of the boot block ('' when there is nothing to say)."""
    sections: list[str] = []

    def section(title: str, lines: Sequence[str]) -> None:
        items = [" ".join(line.split()) for line in lines if line and line.strip()]
        if items:
            sections.append(f"## {title}\n" + "\n".join(f"- {item}" for item in items))

    section("Persona", data.persona)
    section("About the user", data.about)
    section(
        "Glossary",
        [
            f"{term}{' (' + ', '.join(aliases) + ')' if aliases else ''}: {definition}"
            for term, aliases, definition in data.glossary
        ],
    )
    section("Precious notes (verbatim)", data.precious)
    skills = _skill_lines(data.skills)
    if skills:
        sections.append(
            "## Skills (load one with the skill_get tool when the task calls for it)\n"
            + "\n".join(f"- {line}" for line in skills)
        )
    if data.digest.strip():
        sections.append("## Summary\n" + data.digest.strip())
    if data.yesterday and data.yesterday[1].strip():
        sections.append(f"## Yesterday ({data.yesterday[0]})\n" + data.yesterday[1].strip())
    if not sections:
        return ""
    body = "\n\n".join(sections)
    if len(body) > max_chars:
        body = body[: max_chars - 1].rstrip() + "…"
    return (
        "<engram-memory>\nLong-term memory about the user, kept by Engram. Use it when it helps; "
        "do not mention it unless asked.\n\n" + body + "\n</engram-memory>"
    )


SKILLS_MAX = 30  # skills listed in the boot block
SKILLS_MAX_CHARS = 2000  # their lines together


def _skill_lines(skills: Sequence[tuple[str, str]]) -> list[str]:
    """``name: one-line description`` per skill, by name, within a small budget."""
    lines: list[str] = []
    used = 0
    for name, description in sorted(skills)[:SKILLS_MAX]:
        text = " ".join(description.split())
        line = f"{name}: {text[:159] + '…' if len(text) > 160 else text}" if text else name
        if used + len(line) > SKILLS_MAX_CHARS:
            break
        lines.append(line)
        used += len(line)
    return lines


def render_patch(
    volatile: Sequence[str], recall_text: str, reminder_text: str = "", conversation_text: str = ""
) -> str:
    """The per-turn text appended to the current user turn ('' when empty): the memories, then fragments
    of past conversations (docs/conversations.md), then reminders (docs/reminders.md)."""
    parts: list[str] = []
    if volatile:
        parts.append("\n".join(volatile))
    if recall_text.strip():
        parts.append("Memories that may be relevant to this message:\n" + recall_text.strip())
    if conversation_text.strip():
        parts.append(conversation_text.strip())
    if reminder_text.strip():
        parts.append(reminder_text.strip())
    if not parts:
        return ""
    return "<engram-context>\n" + "\n\n".join(parts) + "\n</engram-context>"


@dataclass
class Injected:
    """What ``inject_*`` did."""

    boot: bool = False
    patch: bool = False
    volatile: list[str] = field(default_factory=list)
    markers: int = 0
    reminders: bool = False  # the reminder lines are in the patch
    conversations: bool = False  # the past-conversation fragments are in the patch

    @property
    def any(self) -> bool:
        return self.boot or self.patch


# -- the current user turn -------------------------------------------------------------------------------
def last_user_text(body: dict[str, Any]) -> str | None:
    """The words of the current user turn, or None when the current turn is not a user's.

    Both wires keep text parts as ``{"type": "text", "text": ...}`` in a ``content`` list (or a plain
    string), so one reader serves OpenAI chat completions and Anthropic messages alike. The client's
    scaffolding (``<system-reminder>`` blocks and the like) is left out: it is not what the user said.
    """
    messages = body.get("messages") or []
    index = current_turn(messages)
    if index is None or messages[index].get("role") != "user":
        return None
    return without_scaffolding(text_of(messages[index].get("content"))) or None


# -- OpenAI wire -----------------------------------------------------------------------------------------
def inject_openai(
    body: dict[str, Any], boot_text: str, recall_text: str, reminder_text: str = "", conversation_text: str = ""
) -> tuple[dict[str, Any], Injected]:
    """A new body with the boot block after the client's system prompt and the patch in the current turn
    (the last user or tool message, before any system/developer messages the client sent after it)."""
    messages = [dict(m) for m in body.get("messages") or []]
    info = Injected()
    turn = current_turn(messages)
    turn_role = messages[turn].get("role") if turn is not None else None
    can_patch = turn_role in ("user", "tool")
    lead = 0
    while lead < len(messages) and messages[lead].get("role") in ("system", "developer"):
        lead += 1
    if turn is not None and lead > turn:  # nothing but system messages: none of them leads a conversation
        lead = 0
    if can_patch:
        for msg in messages[:lead]:
            msg["content"], moved = _strip_volatile_content(msg.get("content"))
            info.volatile += moved
        if not boot_text:  # a system prompt that was only a date line: drop it rather than send it empty
            kept = [m for m in messages[:lead] if m.get("content")]
            messages[:lead] = kept
            lead = len(kept)
            turn = current_turn(messages)
    if boot_text:
        info.boot = True
        if _boot_openai(messages, lead, boot_text) and turn is not None:
            turn += 1
    patch = render_patch(info.volatile, recall_text, reminder_text, conversation_text) if can_patch else ""
    if patch and turn is not None:
        info.patch = bool(recall_text.strip() or reminder_text.strip() or conversation_text.strip())
        info.reminders = bool(reminder_text.strip())
        info.conversations = bool(conversation_text.strip())
        current = messages[turn]
        if turn_role == "tool":
            messages.insert(turn + 1, {"role": "user", "content": patch})
        elif isinstance(current.get("content"), list):
            current["content"] = [*current["content"], {"type": "text", "text": patch}]
        else:
            current["content"] = f"{current.get('content') or ''}\n\n{patch}"
    return {**body, "messages": messages}, info


def _boot_openai(messages: list[dict[str, Any]], lead: int, boot_text: str) -> bool:
    """Append the boot block to the last of the ``lead`` system messages, or insert one; True if inserted."""
    if not lead:
        messages.insert(0, {"role": "system", "content": boot_text})
        return True
    target = messages[lead - 1]
    content = target.get("content")
    if isinstance(content, list):
        target["content"] = [*content, {"type": "text", "text": boot_text}]
    else:
        target["content"] = f"{content}\n\n{boot_text}" if content else boot_text
    return False


# -- OpenAI Responses wire (an upstream that speaks it: ENGRAM_UPSTREAM_RESPONSES_API) ------------------
_TOOL_OUTPUTS = ("function_call_output", "custom_tool_call_output")


def _responses_role(item: Any) -> str:
    """An input item's role for injection: a message's role, ``tool`` for a tool output, else ''."""
    if not isinstance(item, dict):
        return ""
    if item.get("type") in _TOOL_OUTPUTS:
        return "tool"
    if item.get("type", "message") == "message":
        return str(item.get("role") or "")
    return ""


def inject_responses(
    body: dict[str, Any], boot_text: str, recall_text: str, reminder_text: str = "", conversation_text: str = ""
) -> tuple[dict[str, Any], Injected]:
    """A new Responses request: the boot block after the ``instructions`` (volatile lines moved out of
    them), the patch in the current user item (past trailing system/developer items), or a user item of
    its own after tool outputs. Every other item (reasoning, hosted tools) goes as the client sent it."""
    info = Injected()
    raw = body.get("input")
    items: list[Any] = (
        [{"type": "message", "role": "user", "content": raw}] if isinstance(raw, str) else list(raw or [])
    )
    turn = len(items) - 1
    while turn >= 0 and _responses_role(items[turn]) in ("system", "developer"):
        turn -= 1
    role = _responses_role(items[turn]) if turn >= 0 else ""
    can_patch = role in ("user", "tool")
    instructions = body.get("instructions") if isinstance(body.get("instructions"), str) else ""
    if can_patch:
        instructions, info.volatile = split_volatile(instructions or "")
    if boot_text:
        info.boot = True
        instructions = f"{instructions}\n\n{boot_text}" if instructions else boot_text
    out = {**body}
    if instructions:
        out["instructions"] = instructions
    else:
        out.pop("instructions", None)
    patch = render_patch(info.volatile, recall_text, reminder_text, conversation_text) if can_patch else ""
    if patch:
        info.patch = bool(recall_text.strip() or reminder_text.strip() or conversation_text.strip())
        info.reminders = bool(reminder_text.strip())
        info.conversations = bool(conversation_text.strip())
        if role == "tool":
            items.insert(
                turn + 1, {"type": "message", "role": "user", "content": [{"type": "input_text", "text": patch}]}
            )
        else:
            item = dict(items[turn])
            content = item.get("content")
            if isinstance(content, list):
                item["content"] = [*content, {"type": "input_text", "text": patch}]
            else:
                item["content"] = f"{content or ''}\n\n{patch}"
            items[turn] = item
    out["input"] = items
    return out, info


def _strip_volatile_content(content: Any) -> tuple[Any, list[str]]:
    if isinstance(content, str):
        text, moved = split_volatile(content)
        return text, moved
    if isinstance(content, list):
        out: list[Any] = []
        moved_all: list[str] = []
        for part in content:
            if isinstance(part, dict) and part.get("type") == "text":
                text, moved = split_volatile(part.get("text", ""))
                moved_all += moved
                if moved and not text.strip():
                    continue
                out.append({**part, "text": text} if moved else part)
            else:
                out.append(part)
        return out, moved_all
    return content, []


# -- Anthropic wire --------------------------------------------------------------------------------------
def inject_anthropic(
    body: dict[str, Any],
    boot_text: str,
    recall_text: str,
    cache: CachePolicy | None,
    reminder_text: str = "",
    conversation_text: str = "",
) -> tuple[dict[str, Any], Injected]:
    """A new body: boot block as the last system block, patch as the last block of the current user
    turn, and (with ``cache``) at most four ``cache_control`` markers, none on the patch."""
    info = Injected()
    messages = [{**m, "content": _blocks(m.get("content"))} for m in body.get("messages") or []]
    turn = current_turn(messages)
    can_patch = turn is not None and messages[turn].get("role") == "user"
    system = _blocks(body.get("system"))
    if can_patch:
        system, info.volatile = _strip_volatile_blocks(system)
    if boot_text:
        system.append({"type": "text", "text": boot_text})
        info.boot = True
    out = {**body, "messages": messages}
    if system:
        out["system"] = system
    else:
        out.pop("system", None)
    tools = [dict(t) for t in body.get("tools") or []]
    if tools:
        out["tools"] = tools
    if cache is not None:
        info.markers = place_cache_control(out, cache)
    patch = render_patch(info.volatile, recall_text, reminder_text, conversation_text) if can_patch else ""
    if patch and turn is not None:
        info.patch = bool(recall_text.strip() or reminder_text.strip() or conversation_text.strip())
        info.reminders = bool(reminder_text.strip())
        info.conversations = bool(conversation_text.strip())
        _breakpoints_before(messages, turn)
        messages[turn]["content"] = [*messages[turn]["content"], {"type": "text", "text": patch}]
    return out, info


def _breakpoints_before(messages: list[dict[str, Any]], turn: int) -> None:
    """Move a client's cache breakpoint that sits after the current turn (Claude Code 2.1 marks the
    system message it sends after the user's turn) onto the turn's last block, where the patch will
    follow it: behind the patch, which changes every turn, it would only write entries no later request
    reads; in front of it, it caches the conversation up to the user's words, which the next request
    repeats. Engram's own markers never go there (``place_cache_control``): this is for the client's."""
    moved: dict[str, Any] | None = None
    for later in messages[turn + 1 :]:
        for block in later["content"]:
            if isinstance(block, dict) and "cache_control" in block:
                moved = block.pop("cache_control")
    if moved is None:
        return
    for block in reversed(messages[turn]["content"]):
        if (
            isinstance(block, dict)
            and block.get("type") not in ("thinking", "redacted_thinking")
            and (block.get("type") != "text" or block.get("text"))
        ):
            block.setdefault("cache_control", moved)
            return


def _blocks(content: Any) -> list[dict[str, Any]]:
    if isinstance(content, str):
        return [{"type": "text", "text": content}] if content else []
    return [dict(b) if isinstance(b, dict) else b for b in content or []]


def _strip_volatile_blocks(blocks: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[str]]:
    out: list[dict[str, Any]] = []
    moved_all: list[str] = []
    for block in blocks:
        if block.get("type") == "text":
            text, moved = split_volatile(block.get("text", ""))
            moved_all += moved
            if moved and not text.strip():
                continue
            out.append({**block, "text": text} if moved else block)
        else:
            out.append(block)
    return out, moved_all
