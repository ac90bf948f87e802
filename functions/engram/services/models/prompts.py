"""Every prompt Engram sends to a model itself, and the rendering of their inputs: extraction and
dreaming (the jobs), scoring a text file on moving in (``services/transfer/other_systems.py``), recall
compression (``services/recall/pipeline.py``), and curation's drafts (a merge: ``services/library/curation.py``;
a consolidation: ``services/jobs/consolidation.py``). Every reply is read by
``services/models/reply.parse_json_object``
(bare JSON, a ```json fence, or JSON inside prose).

The prompts name every output field the parsers read (``services/jobs/extraction.py``,
``services/jobs/dreaming.py``), ask for one JSON object, and work for Chinese and English conversations:
memories are written in the language the user used.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from engram.domain.models import MEMORY_TYPES, Memory, Message

_TYPES = ", ".join(MEMORY_TYPES)

EXTRACTION_SYSTEM = f"""You maintain the long-term memory of one user of an AI chat assistant.
Read the new conversation messages and extract the durable facts worth remembering in future
conversations: who the user is, their preferences, relationships, projects, plans, boundaries,
standing instructions to the assistant, and significant events.

Do NOT extract:
- small talk, greetings, thanks, jokes, filler, or anything only meaningful in this moment;
- secrets or credentials of any kind (passwords, API keys, tokens, bank or card numbers, ID numbers);
- one-off tasks and requests that are finished within the conversation (e.g. "translate this",
  "fix this bug", "写一首诗") unless they reveal a lasting preference or fact;
- what the assistant said, unless the user confirmed it;
- hypotheticals, role-play or fiction presented as such.

Write each memory as one short, self-contained sentence in the third person ("The user ..."),
in the language the user mostly wrote in (Chinese stays Chinese, English stays English).
Return an empty list when nothing is worth keeping: most small windows contain nothing.

Answer with exactly one JSON object and nothing else, of this shape:
{{"memories": [{{"content": "...", "type": "...", "fact_key": "category:slug" or null,
  "importance": 0.0-1.0, "confidence": 0.0-1.0, "tags": ["..."], "source_message_ids": ["..."]}}]}}

Fields:
- content: the memory itself.
- type: one of {_TYPES}.
- fact_key: a stable key for facts that can change over time and must have one current value,
  as "category:slug" with a lower-case ASCII category (e.g. "profile:city", "pet:cat_name",
  "work:employer", "preference:coffee"); the slug may be English or pinyin/Chinese. Use the same key
  whenever the same fact comes up again, so a new value replaces the old one. null for facts that do
  not replace each other (events, one-time notes).
- importance: how much this matters for future conversations (0.9 identity or strong boundaries,
  0.5 ordinary preferences, 0.2 trivia).
- confidence: how sure you are the user really stated this as true for them (below 0.76 it goes
  to the owner's review queue instead of memory: be honest).
- tags: a few short topic words.
- source_message_ids: the ids (from the [id] prefixes) of the messages the memory comes from.

Examples:
[msg_1] user: 我家的猫叫年糕，今年三岁了。 ->
{{"content": "用户的猫叫年糕，三岁", "type": "fact", "fact_key": "pet:cat_name", "importance": 0.6,
  "confidence": 0.95, "tags": ["猫"], "source_message_ids": ["msg_1"]}}
[msg_2] user: Please don't use emojis when you answer me. ->
{{"content": "The user does not want emojis in answers", "type": "instruction",
  "fact_key": "style:emojis", "importance": 0.7, "confidence": 0.95, "tags": ["style"],
  "source_message_ids": ["msg_2"]}}
[msg_3] user: 哈哈谢谢，晚安～ -> nothing (small talk).
"""

DREAM_SYSTEM = f"""You are the nightly "dream" of a long-term memory system for one user of an AI assistant.
You receive one day of conversation messages, the user's current summary (digest) and the existing
memories most relevant to that day (each with its id). Consolidate:
- memories_to_update: fix outdated or conflicting memories, or merge duplicates into one better
  memory (update one, delete the others). Only use ids from the memory list.
- memories_to_delete: memories that are wrong, duplicated by another, or no longer useful, each with
  a short reason. Pinned memories are never deleted.
- important_excerpts: a few verbatim quotes from the messages worth keeping word for word
  (promises, milestones, things the user said that matter to them). Copy the quote exactly.
- a daily log of the day: title, summary and a few sections.
- digest: the updated overall summary of who the user is and what is going on in their life,
  at most 500 characters, built from the previous digest and this day.

Do not record small talk, secrets or credentials (passwords, keys, tokens, account numbers), or
one-off tasks. Write in the language the user mostly used (Chinese stays Chinese, English stays English).

Answer with exactly one JSON object and nothing else, of this shape:
{{"date": "YYYY-MM-DD", "title": "...", "summary": "...", "digest": "...",
  "sections": [{{"heading": "...", "content": "..."}}],
  "important_excerpts": [{{"quote": "...", "reason": "...", "tags": ["..."], "source_message_ids": ["..."]}}],
  "memories_to_update": [{{"target_id": "...", "content": "...", "type": "...", "importance": 0.0-1.0,
    "confidence": 0.0-1.0, "tags": ["..."]}}],
  "memories_to_delete": [{{"target_id": "...", "reason": "..."}}]}}

type is one of {_TYPES}. Use empty lists when there is nothing to change.
"""


SCORE_SYSTEM = (
    "You sort a user's notes about themselves into a memory system. For each numbered line, give its "
    f"type (one of: {_TYPES}) and importance from 0.0 (trivia) to 1.0 (essential, "
    'e.g. health, identity, firm rules). Answer with one JSON object: {"items": [{"i": <number>, '
    '"type": "...", "importance": 0.5}]}.'
)

COMPRESS_SYSTEM = (
    "You shorten memories about a user for injection into a chat prompt. For each numbered "
    "memory write one short line (at most 20 words) keeping every fact, name, number and date that "
    "could matter for the message. Same language as the memory. Reply with JSON: "
    '{"lines": ["...", ...]} with exactly one line per memory, in order.'
)


MERGE_SYSTEM = f"""You merge several memories about one user into one memory, for the user to review.
Keep every fact, name, number, date and preference the memories state; drop only what repeats. Where
they disagree, keep the most recent (the memories are listed oldest first). Write one short,
self-contained text in the third person, in the language the memories are written in.

Answer with exactly one JSON object and nothing else, of this shape:
{{"content": "...", "type": "...", "tags": ["..."]}}
type is one of {_TYPES}."""

CONSOLIDATE_SYSTEM = f"""You tidy the long-term memories of one user of an AI assistant. You receive a list
of memories (JSON lines, each with its id, oldest first). Propose a consolidated set: merge memories that
repeat or overlap into one, and rewrite one that is unclear, keeping every fact, name, number, date and
preference. Leave out of your answer every memory that is fine as it is. Never invent facts. Write in the
language the memories are written in.

Answer with exactly one JSON object and nothing else, of this shape:
{{"items": [{{"source_ids": ["..."], "content": "...", "type": "...", "importance": 0.0-1.0,
  "tags": ["..."], "reason": "..."}}]}}

Each item replaces the memories in its source_ids (ids from the list only; at most 10, each id in at
most one item) by its content. type is one of {_TYPES}. reason says in a few words why. An empty list
when nothing needs consolidating."""


def merge_messages(memories: Sequence[Memory]) -> list[dict[str, Any]]:
    """The merge draft call: the memories to merge, oldest first (services/library/curation.py)."""
    ordered = sorted(memories, key=lambda m: m.created_at)
    lines = "\n".join(json.dumps(render_memory(m), ensure_ascii=False) for m in ordered)
    return [{"role": "system", "content": MERGE_SYSTEM}, {"role": "user", "content": "Memories:\n" + lines}]


def consolidate_messages(memories: Sequence[Memory]) -> list[dict[str, Any]]:
    """One batch of a consolidation draft (services/jobs/consolidation.py): the memories, oldest first."""
    lines = "\n".join(json.dumps(render_memory(m), ensure_ascii=False) for m in memories)
    return [{"role": "system", "content": CONSOLIDATE_SYSTEM}, {"role": "user", "content": "Memories:\n" + lines}]


def score_messages(lines: Sequence[str]) -> list[dict[str, Any]]:
    """The scoring call of a text file's lines (moving in): numbered from 0."""
    numbered = "\n".join(f"{n}. {line[:500]}" for n, line in enumerate(lines))
    return [{"role": "system", "content": SCORE_SYSTEM}, {"role": "user", "content": numbered}]


def compress_messages(query: str, contents: Sequence[str]) -> list[dict[str, Any]]:
    """The recall compression call: the turn's message and the memories, numbered from 1."""
    numbered = "\n".join(f"{i + 1}. {c}" for i, c in enumerate(contents))
    return [
        {"role": "system", "content": COMPRESS_SYSTEM},
        {"role": "user", "content": f"Message: {query[:500]}\n\nMemories:\n{numbered}"},
    ]


def clip(text: str, limit: int) -> str:
    text = text.strip()
    return text if len(text) <= limit else text[: limit - 1] + "…"


def render_messages(messages: Sequence[Message], max_chars: int, tz: Any = None) -> str:
    lines = []
    for m in messages:
        stamp = (m.created_at.astimezone(tz) if tz is not None else m.created_at).strftime("%Y-%m-%d %H:%M")
        lines.append(f"[{m.id}] {stamp} {m.role}: {clip(m.content, max_chars)}")
    return "\n".join(lines)


def extraction_messages(
    messages: Sequence[Message], *, max_chars: int, known: Sequence[Memory] = ()
) -> list[dict[str, Any]]:
    parts = []
    if known:
        lines = "\n".join(f"- {m.fact_key}: {clip(m.content, 200)}" for m in known if m.fact_key)
        parts.append("Existing memories with keys (reuse a key when its fact comes up again):\n" + lines)
    parts.append("New conversation messages (oldest first):\n\n" + render_messages(messages, max_chars))
    return [{"role": "system", "content": EXTRACTION_SYSTEM}, {"role": "user", "content": "\n\n".join(parts)}]


def render_memory(memory: Memory) -> dict[str, Any]:
    return {
        "id": memory.id,
        "content": memory.content,
        "type": memory.type,
        "fact_key": memory.fact_key,
        "importance": memory.importance,
        "pinned": memory.pinned,
        "tags": list(memory.tags),
    }


def dream_messages(
    date: str,
    messages: Sequence[Message],
    memories: Sequence[Memory],
    digest: str,
    *,
    max_chars: int,
    excerpt_limit: int,
    tz: Any = None,
) -> list[dict[str, Any]]:
    parts = [
        f"Date: {date}",
        f"Current digest: {digest or '(none yet)'}",
        "Relevant existing memories (JSON lines):",
        "\n".join(json.dumps(render_memory(m), ensure_ascii=False) for m in memories) or "(none)",
        f"At most {excerpt_limit} important_excerpts.",
        "Messages of the day (oldest first):",
        render_messages(messages, max_chars, tz),
    ]
    return [{"role": "system", "content": DREAM_SYSTEM}, {"role": "user", "content": "\n\n".join(parts)}]
