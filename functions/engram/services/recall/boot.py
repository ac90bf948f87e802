"""The boot package: what a new session starts from (one definition for every surface).

One ``BootService`` gathers it — the digest, yesterday's log, the stable memories (pinned, identity,
persona), precious notes and the glossary; for REST and MCP also the long tail and today's messages — and
serves it two ways:

- ``block``: the chat gateway's boot block, injected into every chat request as a stable system block
  (docs/ARCHITECTURE.md, "A chat request"). It is kept small because every byte of it rides in the
  cached prefix of every request: ``CHAT_BLOCK`` (the 10 newest precious notes, the first 50 glossary
  terms) plus the one-line descriptions of the skills allocated to the agent (``x-engram-agent``),
  rendered within ``ENGRAM_CHAT_BOOT_MAX_CHARS``; rendered blocks are kept briefly per namespace and agent.
- ``package``: the whole package as data for REST ``GET /v1/memory_boot`` and the MCP ``memory_boot``
  tool (one call, so the two are the same), which may ask for more (``bootstrap/configs.boot_package``: the 20
  newest precious notes, every glossary term) and add what the chat block leaves out because a chat
  already has it or it changes every turn: the long tail (the next ``ENGRAM_BOOT_LONGTAIL`` active
  memories by importance beyond the stable ones, so an agent sees what else is known), the last
  ``ENGRAM_BOOT_TODAY_MESSAGES`` messages of today (the owner's day, ``ENGRAM_TIMEZONE``) with today's
  count, and the stats.

| part | chat block | REST / MCP package |
|---|---|---|
| digest, yesterday's log, stable memories | yes | yes |
| precious notes | 10 newest | 20 newest |
| glossary | first 50 terms | every term |
| long tail | no (recall brings what the turn needs) | next memories by importance |
| today's messages | no (the conversation is in the request) | last N of today, and the count |
| stats | no | yes |
"""

from __future__ import annotations

import heapq
import logging
import threading
import time
from collections import deque
from dataclasses import dataclass
from typing import Any, Protocol

from engram.domain.models import DailyLog, Digest, GlossaryTerm, Memory, MemoryFilter, Message, Precious
from engram.domain.ports import MemoryRows, MessageRows, NoteRows
from engram.services.chat.injection import BootData, render_boot_block
from engram.services.library.skills import SkillService
from engram.services.library.stats import NamespaceStats
from engram.services.local_day import LocalDay

log = logging.getLogger(__name__)

STABLE_MAX = 30  # pinned, identity and persona memories in either form
_PAGE = 200  # messages read per step when looking for the last of today


@dataclass(frozen=True)
class BootLimits:
    """How much of the package a surface takes: the newest ``precious`` notes, the first ``glossary``
    terms alphabetically (``None``: all), the ``longtail`` memories by importance after the stable ones
    and the last ``today`` messages of today (0: none)."""

    precious: int
    glossary: int | None
    longtail: int
    today: int


CHAT_BLOCK = BootLimits(precious=10, glossary=50, longtail=0, today=0)


@dataclass(frozen=True)
class BootParts:
    """The gathered package (each list in the store's order: precious newest first, glossary by term)."""

    digest: Digest | None
    yesterday: str
    daily_log: DailyLog | None
    stable: list[Memory]
    precious: list[Precious]
    glossary: list[GlossaryTerm]


@dataclass(frozen=True)
class BootBlock:
    """The rendered chat boot block and the ids of the memories in it (recall leaves them out)."""

    text: str
    memory_ids: tuple[str, ...]


class BootStore(MemoryRows, MessageRows, NoteRows, Protocol):
    """What the boot package reads: stable memories, today's messages, notes, digest, yesterday's log."""


class BootService:
    def __init__(
        self,
        store: BootStore,
        day: LocalDay,
        stats: NamespaceStats,
        skills: SkillService | None = None,
        *,
        package_limits: BootLimits,
    ) -> None:
        self._package_limits = package_limits
        self._store = store
        self._day = day
        self._stats = stats
        self._skills = skills  # services.skills.SkillService: the skills an agent is told about
        self._cache: dict[str, tuple[float, BootBlock]] = {}
        self._lock = threading.Lock()

    def stable_memories(self, namespace: str, limit: int = STABLE_MAX) -> list[Memory]:
        """Pinned, identity and persona memories: the stable part of every boot block (oldest first)."""
        out: dict[str, Memory] = {}
        for filters in (
            MemoryFilter(pinned=True),
            MemoryFilter(types=("identity", "persona")),
        ):
            for memory in self._store.list_memories(namespace, filters, limit=limit).items:
                out.setdefault(memory.id, memory)
        return sorted(out.values(), key=lambda m: (m.created_at, m.id))[:limit]

    def gather(self, namespace: str, limits: BootLimits) -> BootParts:
        yesterday = self._day.yesterday()
        glossary = self._store.list_glossary(namespace)
        return BootParts(
            digest=self._store.get_digest(namespace),
            yesterday=yesterday,
            daily_log=self._store.get_daily_log(namespace, yesterday),
            stable=self.stable_memories(namespace),
            precious=self._store.list_precious(namespace, limit=limits.precious),
            glossary=glossary if limits.glossary is None else glossary[: limits.glossary],
        )

    def longtail(self, namespace: str, stable: list[Memory], limit: int) -> list[Memory]:
        """The next ``limit`` active memories by importance (then the most recently seen) beyond the
        stable ones: what else is known. Reads every active memory (once per new session)."""
        if limit <= 0:
            return []
        skip = {m.id for m in stable}
        rest = (m for m in self._store.iter_memories(namespace, ("active",)) if m.id not in skip)
        return heapq.nlargest(limit, rest, key=lambda m: (m.importance, m.last_seen_at or m.created_at, m.id))

    def today_messages(self, namespace: str, limit: int) -> list[Message]:
        """The last ``limit`` messages of the owner's today, oldest first."""
        if limit <= 0:
            return []
        since = self._day.start_of_today()
        last: deque[Message] = deque(maxlen=limit)
        after: str | None = None
        while True:
            page = self._store.list_messages(namespace, since=since, limit=_PAGE, after_id=after)
            last.extend(page)
            if len(page) < _PAGE:
                return list(last)
            after = page[-1].id

    # -- REST and MCP -------------------------------------------------------------------------------
    def package(self, namespace: str, limits: BootLimits | None = None) -> dict[str, Any]:
        """The cold-boot package a new window starts from (the table in the module docstring)."""
        limits = limits or self._package_limits
        parts = self.gather(namespace, limits)
        today = self.today_messages(namespace, limits.today)
        return {
            "digest": parts.digest,
            "yesterday": parts.daily_log,
            "stable_memories": parts.stable,
            "longtail": self.longtail(namespace, parts.stable, limits.longtail),
            "precious": parts.precious,
            "glossary": parts.glossary,
            "today_messages": [_message_json(m) for m in today],
            "today_count": self._store.count_messages(namespace, since=self._day.start_of_today()),
            "stats": self._stats.counts(namespace),
        }

    # -- the chat boot block ------------------------------------------------------------------------
    def cached_block(self, namespace: str, agent: str | None, max_age: float) -> BootBlock | None:
        """The block rendered less than ``max_age`` seconds ago for this namespace and agent, if any
        (no store read: the chat path asks this first, on its event loop)."""
        hit = self._cache.get(_cache_key(namespace, agent))
        if hit is not None and time.monotonic() - hit[0] < max_age:
            return hit[1]
        return None

    def block(self, namespace: str, agent: str | None = None, *, max_chars: int) -> BootBlock:
        """Render the chat boot block now (and keep it for ``cached_block``)."""
        started = time.monotonic()
        parts = self.gather(namespace, CHAT_BLOCK)
        data = BootData(
            persona=[m.content for m in parts.stable if m.type == "persona"],
            about=[m.content for m in parts.stable if m.type != "persona"],
            glossary=[(g.term, g.aliases, g.definition) for g in parts.glossary],
            precious=[p.content for p in sorted(parts.precious, key=lambda p: (p.created_at, p.id))],
            digest=parts.digest.content if parts.digest else "",
            yesterday=(parts.yesterday, parts.daily_log.summary or parts.daily_log.title) if parts.daily_log else None,
            skills=self._agent_skills(namespace, agent),
        )
        block = BootBlock(render_boot_block(data, max_chars=max_chars), tuple(m.id for m in parts.stable))
        with self._lock:
            self._cache[_cache_key(namespace, agent)] = (started, block)
        return block

    def _agent_skills(self, namespace: str, agent: str | None) -> list[tuple[str, str]]:
        """(name, one-line description) of the skills allocated to ``agent``; a failure lists none."""
        if not agent or self._skills is None:
            return []
        try:
            return [(s.name, s.description) for s in self._skills.for_agent(namespace, agent)]
        except Exception:
            log.warning("skills unavailable; the boot block goes on without them", exc_info=True)
            return []


def _message_json(message: Message) -> dict[str, Any]:
    return {
        "id": message.id,
        "thread": message.conversation_id,
        "role": message.role,
        "content": message.content,
        "created_at": message.created_at,
    }


def _cache_key(namespace: str, agent: str | None) -> str:
    return f"{namespace}\x00{agent or ''}"
