"""Dreaming: the nightly consolidation of one day (DESIGN.md section 8).

For a date (default: yesterday in the configured time zone) and each namespace: that local day's
messages plus the active memories most relevant to them go to the dream model. Its answer updates
memories (a changed text becomes a new version, so the chain can be restored), archives memories
(never pinned ones), keeps verbatim excerpts as precious notes (only quotes really found in the
day's messages), and rewrites the digest (at most 500 characters) and the day's log. The model may
only touch memories it was shown. A date is dreamt once per namespace unless forced; a failed run
leaves no mark, so the next run tries again.
"""

from __future__ import annotations

import asyncio
import logging
import re
import unicodedata
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from datetime import date as Date
from datetime import datetime, time, timedelta
from typing import Any
from zoneinfo import ZoneInfo

from engram.domain.errors import EngramError, InvalidInput, NotConfigured
from engram.domain.models import MEMORY_TYPES, DailyLog, Memory, MemoryFilter, Message
from engram.domain.policies import same_meaning_text
from engram.domain.ports import ChatModel, Clock, Embedder, MemoryStore, SearchIndex
from engram.services import prompts
from engram.services.jobs import NamespaceLocks, as_list, as_str, as_str_list, as_unit, parse_json_object, record_run
from engram.services.library import LibraryService
from engram.services.memories import MemoryPatch, MemoryService, MemoryWrite

log = logging.getLogger(__name__)

_PAGE = 500
_MAX_SECTIONS = 12


@dataclass(frozen=True)
class DreamConfig:
    timezone: str = "UTC"
    max_messages: int = 400
    max_tokens: int = 8000
    memory_context_limit: int = 40
    excerpt_limit: int = 8
    max_message_chars: int = 2000

    @classmethod
    def from_settings(cls, settings: Any) -> DreamConfig:
        return cls(
            timezone=settings.timezone,
            max_messages=settings.dream_max_messages,
            max_tokens=settings.dream_max_tokens,
            memory_context_limit=settings.dream_memory_context_limit,
            excerpt_limit=settings.dream_excerpt_limit,
            max_message_chars=settings.extract_max_message_chars,
        )


@dataclass
class NamespaceDream:
    namespace: str
    date: str
    status: str = "pending"  # done | already_done | no_messages | failed
    messages: int = 0
    memories_in_context: int = 0
    updated: int = 0
    superseded: int = 0
    archived: int = 0
    protected: int = 0
    ignored: int = 0
    excerpts: int = 0
    excerpts_rejected: int = 0
    digest: bool = False
    daily_log: bool = False
    errors: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class DreamReport:
    date: str
    namespaces: list[NamespaceDream] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        keys = ("messages", "updated", "superseded", "archived", "protected", "excerpts")
        return {
            "job": "dream",
            "date": self.date,
            **{k: sum(int(getattr(ns, k)) for ns in self.namespaces) for k in keys},
            "errors": sum(len(ns.errors) for ns in self.namespaces),
            "namespaces": [asdict(ns) for ns in self.namespaces],
        }


def day_bounds(day: str, timezone: str) -> tuple[datetime, datetime]:
    """Start (inclusive) and end (exclusive) of a local calendar day, as aware datetimes."""
    try:
        parsed = Date.fromisoformat(day)
    except ValueError as exc:
        raise InvalidInput(f"date {day!r} is not YYYY-MM-DD", code="invalid_date") from exc
    tz = ZoneInfo(timezone)
    start = datetime.combine(parsed, time(0), tz)
    end = datetime.combine(parsed + timedelta(days=1), time(0), tz)
    return start, end


def _squash(text: str) -> str:
    return re.sub(r"\s+", " ", unicodedata.normalize("NFKC", text)).strip().casefold()


class DreamingService:
    def __init__(
        self,
        store: MemoryStore,
        memories: MemoryService,
        library: LibraryService,
        index: SearchIndex,
        embedder: Embedder | None,
        model: ChatModel | None,
        clock: Clock,
        config: DreamConfig | Callable[[], DreamConfig] | None = None,
        locks: NamespaceLocks | None = None,
    ) -> None:
        self._store = store
        self._memories = memories
        self._library = library
        self._index = index
        self._embedder = embedder
        self._model = model
        self._clock = clock
        # A callable is read per use: runtime settings (admin panel) change it without a restart.
        fixed = config if isinstance(config, DreamConfig) else DreamConfig()
        self._config_of: Callable[[], DreamConfig] = config if callable(config) else (lambda: fixed)
        self._locks = locks or NamespaceLocks()

    @property
    def _config(self) -> DreamConfig:
        return self._config_of()

    @property
    def configured(self) -> bool:
        """Whether a model is set (the scheduler skips the job otherwise)."""
        return self._model is not None

    def yesterday(self) -> str:
        local = self._clock.now().astimezone(ZoneInfo(self._config.timezone))
        return (local.date() - timedelta(days=1)).isoformat()

    async def run(self, date: str | None = None, force: bool = False, namespace: str | None = None) -> DreamReport:
        if self._model is None:
            raise NotConfigured(
                "dreaming needs a model: set ENGRAM_DREAM_MODEL (or ENGRAM_CHAT_MODEL) and ENGRAM_UPSTREAM_BASE_URL"
            )
        day = date or self.yesterday()
        day_bounds(day, self._config.timezone)  # validate before touching anything
        namespaces = [namespace] if namespace else await asyncio.to_thread(self._store.list_namespaces)
        report = DreamReport(date=day)
        for ns in namespaces:
            report.namespaces.append(await self._run_namespace(ns, day, force))
        return report

    async def _run_namespace(self, namespace: str, day: str, force: bool) -> NamespaceDream:
        result = NamespaceDream(namespace=namespace, date=day)
        try:
            with self._locks.hold("dream", namespace):
                await self._dream(namespace, day, force, result)
        except EngramError as exc:
            result.status = "failed"
            result.errors.append({"error": exc.code, "message": exc.message[:300]})
        detail = asdict(result)
        detail.pop("namespace")
        await asyncio.to_thread(record_run, self._store, self._clock, "dream", namespace, detail)
        return result

    async def _dream(self, namespace: str, day: str, force: bool, result: NamespaceDream) -> None:
        assert self._model is not None
        done = await asyncio.to_thread(self._store.get_cursor, namespace, _marker(day))
        if done and not force:
            result.status = "already_done"
            return
        messages = await asyncio.to_thread(self._day_messages, namespace, day)
        result.messages = len(messages)
        if not messages:
            result.status = "no_messages"
            return
        context = await asyncio.to_thread(self._relevant_memories, namespace, messages)
        result.memories_in_context = len(context)
        digest = await asyncio.to_thread(self._store.get_digest, namespace)
        tz = ZoneInfo(self._config.timezone)
        try:
            reply = await self._model.complete(
                prompts.dream_messages(
                    day,
                    messages,
                    context,
                    digest.content if digest else "",
                    max_chars=self._config.max_message_chars,
                    excerpt_limit=self._config.excerpt_limit,
                    tz=tz,
                ),
                json_mode=True,
                max_tokens=self._config.max_tokens,
                temperature=0.2,
            )
            plan = parse_json_object(reply)
        except Exception as exc:  # any model failure: no mark, the next run tries again
            code = exc.code if isinstance(exc, EngramError) else "model_error"
            log.warning("dream model call failed for %s on %s: %s", namespace, day, code)
            result.status = "failed"
            result.errors.append({"error": code, "message": str(exc)[:300]})
            return
        await asyncio.to_thread(self._apply, namespace, day, plan, messages, context, result)

    # -- sync steps (run in a worker thread) -------------------------------------------------
    def _day_messages(self, namespace: str, day: str) -> list[Message]:
        """The day's messages, oldest first; the latest ``max_messages`` when there are more."""
        start, end = day_bounds(day, self._config.timezone)
        kept: deque[Message] = deque(maxlen=self._config.max_messages)
        after: str | None = None
        while True:
            page = self._store.list_messages(namespace, since=start, until=end, limit=_PAGE, after_id=after)
            kept.extend(page)
            if len(page) < _PAGE:
                return list(kept)
            after = page[-1].id

    def _relevant_memories(self, namespace: str, messages: Sequence[Message]) -> list[Memory]:
        limit = self._config.memory_context_limit
        if limit == 0:
            return []
        query = prompts.clip(" ".join(m.content for m in messages if m.role == "user"), 2000)
        ranks: dict[str, float] = {}
        try:
            lists = [self._index.keyword_search(namespace, query, k=limit)] if query else []
            if self._embedder is not None and query:
                lists.append(self._index.vector_search(namespace, self._embedder.embed_query(query), k=limit))
        except EngramError as exc:  # the index is a mirror: fall back to the newest memories
            log.warning("dream context search failed for %s: %s", namespace, exc.code)
            lists = []
        for hits in lists:
            for rank, hit in enumerate(hits):
                ranks[hit.memory_id] = ranks.get(hit.memory_id, 0.0) + 1.0 / (60 + rank + 1)
        ordered = sorted(ranks, key=lambda i: -ranks[i])
        chosen = [m for m in self._store.get_memories(namespace, ordered) if m.status == "active"][:limit]
        if len(chosen) < limit:  # the newest memories: what the day's extractions just wrote
            have = {m.id for m in chosen}
            newest = self._store.list_memories(namespace, MemoryFilter(), limit=limit).items
            chosen.extend(m for m in newest if m.id not in have)
        return chosen[:limit]

    def _apply(
        self,
        namespace: str,
        day: str,
        plan: dict[str, Any],
        messages: list[Message],
        context: list[Memory],
        result: NamespaceDream,
    ) -> None:
        shown = {m.id for m in context}
        touched: set[str] = set()
        for raw in as_list(plan.get("memories_to_update")):
            self._guarded(result, self._update, namespace, raw, shown, touched, result)
        for raw in as_list(plan.get("memories_to_delete")):
            self._guarded(result, self._archive, namespace, raw, shown, touched, result)
        self._guarded(result, self._excerpts, namespace, plan, messages, result)

        digest = as_str(plan.get("digest")) or as_str(plan.get("summary"))
        if digest:
            self._library.set_digest(namespace, digest)
            result.digest = True
        sections = tuple(
            {"heading": as_str(s.get("heading")), "content": as_str(s.get("content"))}
            for s in as_list(plan.get("sections"))[:_MAX_SECTIONS]
            if isinstance(s, dict) and as_str(s.get("content"))
        )
        self._store.put_daily_log(
            DailyLog(
                namespace=namespace,
                date=day,
                title=prompts.clip(as_str(plan.get("title")), 200),
                summary=prompts.clip(as_str(plan.get("summary")), 4000),
                sections=sections,
                created_at=self._clock.now(),
            )
        )
        result.daily_log = True
        self._store.set_cursor(namespace, _marker(day), self._clock.now().isoformat())
        result.status = "done"

    @staticmethod
    def _guarded(result: NamespaceDream, step: Any, *args: Any) -> None:
        """One bad item never stops the rest of the plan."""
        try:
            step(*args)
        except EngramError as exc:
            result.errors.append({"error": exc.code, "message": exc.message[:300]})

    def _target(self, namespace: str, raw: Any, shown: set[str], result: NamespaceDream) -> Memory | None:
        target_id = as_str(raw.get("target_id")) if isinstance(raw, dict) else ""
        if target_id not in shown:
            result.ignored += 1  # the model may only touch memories it was shown
            return None
        memory = self._store.get_memory(namespace, target_id)
        if memory.status != "active":
            result.ignored += 1
            return None
        if memory.pinned:
            result.protected += 1
            return None
        return memory

    def _update(self, namespace: str, raw: Any, shown: set[str], touched: set[str], result: NamespaceDream) -> None:
        target = self._target(namespace, raw, shown, result)
        if target is None:
            return
        type_ = as_str(raw.get("type")).lower()
        new_type = type_ if type_ in MEMORY_TYPES else target.type
        tags = as_str_list(raw.get("tags")) or list(target.tags)
        importance = as_unit(raw.get("importance"), target.importance)
        confidence = as_unit(raw.get("confidence"), target.confidence)
        content = as_str(raw.get("content"))
        touched.add(target.id)
        if not content or same_meaning_text(content, target.content):
            self._memories.update(
                namespace,
                target.id,
                MemoryPatch(type=new_type, importance=importance, confidence=confidence, tags=tags),
            )
            result.updated += 1
            return
        self._memories.supersede(
            namespace,
            target.id,
            MemoryWrite(
                content=content,
                type=new_type,
                layer=target.layer,
                importance=importance,
                confidence=confidence,
                tags=tags,
                source="dreaming",
                source_message_ids=list(target.source_message_ids),
            ),
        )
        result.superseded += 1

    def _archive(self, namespace: str, raw: Any, shown: set[str], touched: set[str], result: NamespaceDream) -> None:
        target = self._target(namespace, raw, shown, result)
        if target is None:
            return
        if target.id in touched:  # updated in the same plan: the update wins
            result.ignored += 1
            return
        reason = prompts.clip(as_str(raw.get("reason")) or "dreaming", 300)
        self._memories.set_status(namespace, target.id, "archived", reason=f"dream: {reason}")
        result.archived += 1

    def _excerpts(self, namespace: str, plan: dict[str, Any], messages: list[Message], result: NamespaceDream) -> None:
        squashed = [(m.id, _squash(m.content)) for m in messages]
        kept = {_squash(p.content) for p in self._store.list_precious(namespace, limit=1000)}
        for raw in as_list(plan.get("important_excerpts"))[: self._config.excerpt_limit]:
            quote = as_str(raw.get("quote")) if isinstance(raw, dict) else ""
            needle = _squash(quote)
            sources = [mid for mid, text in squashed if needle and needle in text]
            if not sources:  # not verbatim from the day: a paraphrase is not an excerpt
                result.excerpts_rejected += 1
                continue
            if needle in kept:
                continue
            named = [i for i in as_str_list(raw.get("source_message_ids"), 50) if i in sources]
            self._library.add_precious(
                namespace,
                quote,
                reason=prompts.clip(as_str(raw.get("reason")), 1000) or None,
                tags=as_str_list(raw.get("tags")),
                source="dreaming",
                source_message_ids=named or sources,
            )
            kept.add(needle)
            result.excerpts += 1


def _marker(day: str) -> str:
    return f"dream:{day}"
