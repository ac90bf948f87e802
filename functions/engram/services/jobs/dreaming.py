"""Dreaming: the nightly consolidation of one day (docs/ARCHITECTURE.md, "Background jobs").

For a date (default: yesterday in the configured time zone) and each namespace: that local day's
messages plus the active memories most relevant to them go to the dream model. Its answer updates
memories (a changed text becomes a new version, so the chain can be restored), archives memories
(never pinned ones), keeps verbatim excerpts as precious notes (only quotes really found in the
day's messages), and rewrites the digest (at most 500 characters) and the day's log. The model may
only touch memories it was shown. The answer is validated whole before anything is applied: an
invalid item is dropped and reported, an over-long digest is cut at a sentence boundary, and the
rest is applied once. A date is dreamt once per namespace unless forced; a run whose model call
failed leaves no mark, so the next run tries again.

A namespace's run fails on its own (``status: failed``; the run's ``errors`` count and ``failed``
list): the other namespaces' dreams are kept, the run returns its report (the Lambda invocation
succeeds: its automatic retries never repeat what succeeded), and the job's error metric raises the
owner's alarm (docs/aws.md, "Alarms"). The failed day is noted for that namespace (``RETRY``) and every
later run dreams it again, for that namespace only, before giving up after ``MAX_DAY_ATTEMPTS`` nights:
attempts are counted per night the run is for, so a retry the same night (the local scheduler's early
retry) costs no attempt.

Over 400 lines on purpose: gathering the day, validating the model's plan and applying it are one
contract with the dream prompt (``services/models/prompts.py``); shared job plumbing lives in
``services/jobs/runs.py`` and ``services/models/reply.py``.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import unicodedata
from collections import deque
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from datetime import date as Date
from datetime import datetime, time, timedelta
from typing import Any, Protocol
from zoneinfo import ZoneInfo

from engram.domain.errors import MESSAGE_CHARS, EngramError, InvalidInput, NotConfigured
from engram.domain.models import MEMORY_TYPES, DailyLog, Memory, MemoryFilter, Message
from engram.domain.policies import (
    LOG_SECTION_CHARS,
    LOG_SECTIONS,
    LOG_SUMMARY_CHARS,
    LOG_TITLE_CHARS,
    MAX_TAG_CHARS,
    MAX_TAGS,
    clean_content,
    in_range,
    same_meaning_text,
    truncate_digest,
)
from engram.domain.ports import (
    AuditRows,
    ChatModel,
    Clock,
    Embedder,
    KeyValueRows,
    MemoryRows,
    MessageRows,
    NoteRows,
    SearchIndex,
    StoreAdmin,
)
from engram.services.jobs.runs import NamespaceLocks, failure_of, record_run
from engram.services.library.journal import Journal
from engram.services.library.memories import MemoryPatch, MemoryService, MemoryWrite, is_protected
from engram.services.library.notes import NoteService
from engram.services.models import prompts
from engram.services.models.reply import as_list, as_str, as_str_list, as_unit, parse_json_object
from engram.services.runtime_settings import Live

log = logging.getLogger(__name__)

_PAGE = 500
RETRY = "dream:retry"  # cursor: {day: {"attempts": n, "night": the day the last counted run was for}}
MAX_DAY_ATTEMPTS = 3


@dataclass(frozen=True)
class DreamConfig:
    """The dreaming job's limits.

    ``settings.py`` holds the defaults (written once); ``bootstrap/configs.py`` maps them.
    """

    timezone: str
    max_messages: int
    max_tokens: int
    memory_context_limit: int
    excerpt_limit: int
    max_message_chars: int


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
    protected: int = 0  # pinned or core memories left as they are (docs/ARCHITECTURE.md, "Write rules")
    proposed: int = 0  # changes to pinned or core memories filed in the review queue instead
    ignored: int = 0
    excerpts: int = 0
    excerpts_rejected: int = 0
    dropped: int = 0  # invalid items of the model's answer, each reported in errors
    digest: bool = False
    daily_log: bool = False
    errors: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class DreamReport:
    date: str
    namespaces: list[NamespaceDream] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        keys = ("messages", "updated", "superseded", "archived", "protected", "proposed", "excerpts", "dropped")
        failed = [ns.namespace for ns in self.namespaces if ns.status == "failed" or _failures(ns)]
        return {
            "job": "dream",
            "date": self.date,
            **{k: sum(int(getattr(ns, k)) for ns in self.namespaces) for k in keys},
            "errors": sum(_failures(ns) for ns in self.namespaces),
            "failed": list(dict.fromkeys(failed)),
            "namespaces": [asdict(ns) for ns in self.namespaces],
        }


def _failures(ns: NamespaceDream) -> int:
    """The failures of a namespace's run (a dropped or failing item of the plan is no failure of it)."""
    return sum(1 for e in ns.errors if "item" not in e)


def day_bounds(day: str, timezone: str) -> tuple[datetime, datetime]:
    """Start (inclusive) and end (exclusive) of a local calendar day, as aware datetimes."""
    try:
        parsed = Date.fromisoformat(day)
        tz = ZoneInfo(timezone)
        start = datetime.combine(parsed, time(0), tz)
        end = datetime.combine(parsed + timedelta(days=1), time(0), tz)
        in_range(start), in_range(end)
    except (ValueError, OverflowError) as exc:
        raise InvalidInput(f"date {day!r} is not a YYYY-MM-DD day Engram can hold", code="invalid_date") from exc
    return start, end


def _squash(text: str) -> str:
    return re.sub(r"\s+", " ", unicodedata.normalize("NFKC", text)).strip().casefold()


class DreamStore(MemoryRows, MessageRows, NoteRows, AuditRows, KeyValueRows, StoreAdmin, Protocol):
    """What dreaming reads (a day of messages, memories, notes) and writes (daily log, run records)."""


class DreamingService:
    def __init__(
        self,
        store: DreamStore,
        memories: MemoryService,
        notes: NoteService,
        index: SearchIndex,
        embedder: Embedder | None,
        model: ChatModel | None,
        clock: Clock,
        config: DreamConfig | Live[DreamConfig],
        locks: NamespaceLocks | None = None,
    ) -> None:
        self._store = store
        self._memories = memories
        self._notes = notes
        self._index = index
        self._embedder = embedder
        self._model = model
        self._clock = clock
        self._config = Live.of(config)
        self._locks = locks or NamespaceLocks()

    @property
    def configured(self) -> bool:
        """Whether a model is set (the scheduler skips the job otherwise)."""
        return self._model is not None

    def yesterday(self) -> str:
        local = self._clock.now().astimezone(ZoneInfo(self._config().timezone))
        return (local.date() - timedelta(days=1)).isoformat()

    async def run(self, date: str | None = None, force: bool = False, namespace: str | None = None) -> DreamReport:
        if self._model is None:
            raise NotConfigured(
                "dreaming needs a model: set ENGRAM_DREAM_MODEL (or ENGRAM_CHAT_MODEL) and ENGRAM_UPSTREAM_BASE_URL"
            )
        day = date or self.yesterday()
        day_bounds(day, self._config().timezone)  # validate before touching anything
        namespaces = [namespace] if namespace else await asyncio.to_thread(self._store.list_namespaces)
        report = DreamReport(date=day)
        for ns in namespaces:
            report.namespaces.append(await self._run_namespace(ns, day, force, night=day))
            for earlier in await asyncio.to_thread(self._days_to_retry, ns, day):
                report.namespaces.append(await self._run_namespace(ns, earlier, False, night=day))
        return report

    async def _run_namespace(self, namespace: str, day: str, force: bool, *, night: str) -> NamespaceDream:
        result = NamespaceDream(namespace=namespace, date=day)
        try:
            with self._locks.hold("dream", namespace):
                await self._dream(namespace, day, force, result)
        except Exception as exc:  # this namespace failed; the others dream, and a later run retries it
            result.status = "failed"
            result.errors.append(failure_of(exc, f"dreaming {day} failed", namespace))
        try:
            await asyncio.to_thread(self._note_outcome, namespace, day, night, result)
        except Exception as exc:
            result.errors.append(failure_of(exc, "noting the dream's retry state failed", namespace))
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
        tz = ZoneInfo(self._config().timezone)
        try:
            reply = await self._model.complete(
                prompts.dream_messages(
                    day,
                    messages,
                    context,
                    digest.content if digest else "",
                    max_chars=self._config().max_message_chars,
                    excerpt_limit=self._config().excerpt_limit,
                    tz=tz,
                ),
                json_mode=True,
                max_tokens=self._config().max_tokens,
                temperature=0.2,
            )
            plan = parse_json_object(reply)
        except Exception as exc:  # any model failure: no mark, the next run tries again
            code = exc.code if isinstance(exc, EngramError) else "model_error"
            log.warning("dream model call failed for %s on %s: %s", namespace, day, code)
            result.status = "failed"
            result.errors.append({"error": code, "message": str(exc)[:MESSAGE_CHARS]})
            return
        await asyncio.to_thread(self._apply, namespace, day, plan, messages, context, result)

    # -- sync steps (run in a worker thread) -------------------------------------------------
    def _retry_state(self, namespace: str) -> dict[str, dict[str, Any]]:
        raw = self._store.get_cursor(namespace, RETRY)
        state = json.loads(raw) if raw else {}
        return state if isinstance(state, dict) else {}

    def _days_to_retry(self, namespace: str, day: str) -> list[str]:
        """The namespace's earlier failed days still to dream again (oldest first), ``day`` apart."""
        return sorted(d for d in self._retry_state(namespace) if d != day)

    def _note_outcome(self, namespace: str, day: str, night: str, result: NamespaceDream) -> None:
        """Keep a failed day for the next runs (one attempt per ``night``), forget a day dreamt since."""
        state = self._retry_state(namespace)
        before = dict(state)
        if result.status != "failed":
            state.pop(day, None)
        else:
            entry = state.get(day) or {"attempts": 0, "night": None}
            if entry.get("night") != night:
                entry = {"attempts": int(entry.get("attempts", 0)) + 1, "night": night}
            if entry["attempts"] >= MAX_DAY_ATTEMPTS:
                log.warning("dreaming gives up on %s of %s after %d nights", day, namespace, entry["attempts"])
                result.errors.append(
                    {"error": "day_skipped", "message": f"gave up on {day} after {entry['attempts']} nights"}
                )
                state.pop(day, None)
            else:
                state[day] = entry
        if state != before:
            self._store.set_cursor(namespace, RETRY, json.dumps(state, sort_keys=True))

    def _day_messages(self, namespace: str, day: str) -> list[Message]:
        """The day's messages, oldest first; the latest ``max_messages`` when there are more."""
        start, end = day_bounds(day, self._config().timezone)
        kept: deque[Message] = deque(maxlen=self._config().max_messages)
        after: str | None = None
        while True:
            page = self._store.list_messages(namespace, since=start, until=end, limit=_PAGE, after_id=after)
            kept.extend(page)
            if len(page) < _PAGE:
                return list(kept)
            after = page[-1].id

    def _relevant_memories(self, namespace: str, messages: Sequence[Message]) -> list[Memory]:
        limit = self._config().memory_context_limit
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
        raw_plan: dict[str, Any],
        messages: list[Message],
        context: list[Memory],
        result: NamespaceDream,
    ) -> None:
        """Validate the whole plan, then apply what is valid once and mark the date dreamt.

        Nothing in a model answer can stop the dream halfway: invalid items are dropped (reported
        in ``errors`` with the item's place), what can be clamped is clamped, and each step that
        still fails (a store error on one row) is reported while the others go on."""
        plan = _validate_plan(raw_plan, messages, self._config().excerpt_limit, result)
        shown = {m.id for m in context}
        touched: set[str] = set()
        for update in plan.updates:
            self._guarded(result, self._update, namespace, update, shown, touched, result)
        for archive in plan.archives:
            self._guarded(result, self._archive, namespace, archive, shown, touched, result)
        self._guarded(result, self._excerpts, namespace, plan.excerpts, result)
        if plan.digest:
            self._guarded(result, self._digest, namespace, plan.digest, result)
        self._store.put_daily_log(
            DailyLog(
                namespace=namespace,
                date=day,
                title=plan.title,
                summary=plan.summary,
                sections=plan.sections,
                created_at=self._clock.now(),
            )
        )
        result.daily_log = True
        self._store.set_cursor(namespace, _marker(day), self._clock.now().isoformat())
        result.status = "done"

    @staticmethod
    def _guarded(result: NamespaceDream, step: Any, *args: Any) -> None:
        """One failing step never stops the rest of the plan."""
        try:
            step(*args)
        except EngramError as exc:  # this step only: reported, the plan goes on (no failure of the run)
            result.errors.append(
                {"error": exc.code, "message": exc.message[:MESSAGE_CHARS], "item": step.__name__.strip("_")}
            )

    def _target(self, namespace: str, target_id: str, shown: set[str], result: NamespaceDream) -> Memory | None:
        if target_id not in shown:
            result.ignored += 1  # the model may only touch memories it was shown
            return None
        memory = self._store.get_memory(namespace, target_id)
        if memory.status != "active":
            result.ignored += 1
            return None
        return memory

    def _update(
        self, namespace: str, update: _Update, shown: set[str], touched: set[str], result: NamespaceDream
    ) -> None:
        target = self._target(namespace, update.target_id, shown, result)
        if target is None:
            return
        new_type = update.type or target.type
        tags = list(update.tags) or list(target.tags)
        importance = target.importance if update.importance is None else update.importance
        confidence = target.confidence if update.confidence is None else update.confidence
        touched.add(target.id)
        rewrite = bool(update.content) and not same_meaning_text(update.content, target.content)
        if is_protected(target):
            # A pinned or core memory is never changed by the dream: a new wording goes to the owner's
            # review queue (accepting it keeps the pin and layer), anything else is left as it is.
            if rewrite:
                self._memories.propose_change(target, self._rewrite(update, target, new_type, tags))
                result.proposed += 1
            else:
                result.protected += 1
            return
        # At the version the dream read: a memory its owner changed since is left alone (reported).
        if not rewrite:
            self._memories.update(
                namespace,
                target.id,
                MemoryPatch(type=new_type, importance=importance, confidence=confidence, tags=tags),
                version=target.version,
            )
            result.updated += 1
            return
        self._memories.supersede(
            namespace, target.id, self._rewrite(update, target, new_type, tags), version=target.version
        )
        result.superseded += 1

    @staticmethod
    def _rewrite(update: _Update, target: Memory, new_type: str, tags: list[str]) -> MemoryWrite:
        """The new version of ``target`` the dream proposes."""
        return MemoryWrite(
            content=update.content or target.content,
            type=new_type,
            layer=target.layer,
            importance=target.importance if update.importance is None else update.importance,
            confidence=target.confidence if update.confidence is None else update.confidence,
            tags=tags,
            source="dreaming",
            source_message_ids=list(target.source_message_ids),
        )

    def _archive(
        self, namespace: str, archive: _Archive, shown: set[str], touched: set[str], result: NamespaceDream
    ) -> None:
        target = self._target(namespace, archive.target_id, shown, result)
        if target is None:
            return
        if is_protected(target):  # never archived by a dream
            result.protected += 1
            return
        if target.id in touched:  # updated in the same plan: the update wins
            result.ignored += 1
            return
        with Journal.because(archive.reason):  # the model's reason, kept with the change (docs/journal.md)
            self._memories.set_status(
                namespace, target.id, "archived", reason=f"dream: {archive.reason}", version=target.version
            )
        result.archived += 1

    def _excerpts(self, namespace: str, excerpts: list[_Excerpt], result: NamespaceDream) -> None:
        kept = {_squash(p.content) for p in self._store.list_precious(namespace, limit=1000)}
        for excerpt in excerpts:
            if excerpt.needle in kept:
                continue
            self._guarded(result, self._add_excerpt, namespace, excerpt, result)
            kept.add(excerpt.needle)

    def _add_excerpt(self, namespace: str, excerpt: _Excerpt, result: NamespaceDream) -> None:
        with Journal.because(excerpt.reason):
            self._notes.add_precious(
                namespace,
                excerpt.quote,
                reason=excerpt.reason,
                tags=excerpt.tags,
                source="dreaming",
                source_message_ids=excerpt.source_message_ids,
            )
        result.excerpts += 1

    def _digest(self, namespace: str, digest: str, result: NamespaceDream) -> None:
        self._notes.set_digest(namespace, digest)
        result.digest = True


@dataclass(frozen=True)
class _Update:
    target_id: str
    content: str  # "" keeps the text (fields change in place)
    type: str | None
    tags: tuple[str, ...]
    importance: float | None
    confidence: float | None


@dataclass(frozen=True)
class _Archive:
    target_id: str
    reason: str


@dataclass(frozen=True)
class _Excerpt:
    quote: str
    needle: str  # the quote squashed, to find it in the day's messages and among kept notes
    reason: str | None
    tags: tuple[str, ...]
    source_message_ids: tuple[str, ...]


@dataclass
class _Plan:
    updates: list[_Update] = field(default_factory=list)
    archives: list[_Archive] = field(default_factory=list)
    excerpts: list[_Excerpt] = field(default_factory=list)
    digest: str = ""
    title: str = ""
    summary: str = ""
    sections: tuple[dict[str, str], ...] = ()


def _validate_plan(raw: dict[str, Any], messages: list[Message], excerpt_limit: int, result: NamespaceDream) -> _Plan:
    """The valid part of a dream answer, clamped where a field can be clamped (digest to 500
    characters at a sentence boundary, log fields, tags); each invalid item is dropped and reported."""
    plan = _Plan()

    def drop(item: str, code: str, message: str) -> None:
        result.dropped += 1
        result.errors.append({"error": code, "message": message[:MESSAGE_CHARS], "item": item})

    def items(name: str) -> list[tuple[str, dict[str, Any]]]:
        out = []
        for i, value in enumerate(as_list(raw.get(name))):
            if isinstance(value, dict):
                out.append((f"{name}[{i}]", value))
            else:
                drop(f"{name}[{i}]", "invalid_item", f"expected an object, got {type(value).__name__}")
        return out

    for where, item in items("memories_to_update"):
        try:
            content = clean_content(item["content"]) if as_str(item.get("content")) else ""
        except InvalidInput as exc:
            drop(where, exc.code, exc.message)
            continue
        type_ = as_str(item.get("type")).lower()
        plan.updates.append(
            _Update(
                target_id=as_str(item.get("target_id")),
                content=content,
                type=type_ if type_ in MEMORY_TYPES else None,
                tags=_tags(item.get("tags")),
                importance=_unit(item.get("importance")),
                confidence=_unit(item.get("confidence")),
            )
        )
    for _where, item in items("memories_to_delete"):
        reason = prompts.clip(as_str(item.get("reason")) or "dreaming", 300)
        plan.archives.append(_Archive(target_id=as_str(item.get("target_id")), reason=reason))

    squashed = [(m.id, _squash(m.content)) for m in messages]
    for where, item in items("important_excerpts")[:excerpt_limit]:
        try:
            quote = clean_content(as_str(item.get("quote")) or " ")
        except InvalidInput as exc:
            if exc.code == "empty_content":
                result.excerpts_rejected += 1
            else:
                drop(where, exc.code, exc.message)
            continue
        needle = _squash(quote)
        sources = [mid for mid, text in squashed if needle and needle in text]
        if not sources:  # not verbatim from the day: a paraphrase is not an excerpt
            result.excerpts_rejected += 1
            continue
        named = [i for i in as_str_list(item.get("source_message_ids"), 50) if i in sources]
        plan.excerpts.append(
            _Excerpt(
                quote=quote,
                needle=needle,
                reason=prompts.clip(as_str(item.get("reason")), 1000) or None,
                tags=_tags(item.get("tags")),
                source_message_ids=tuple(named or sources),
            )
        )

    plan.digest = truncate_digest(as_str(raw.get("digest")) or as_str(raw.get("summary")))
    plan.title = prompts.clip(as_str(raw.get("title")), LOG_TITLE_CHARS)
    plan.summary = prompts.clip(as_str(raw.get("summary")), LOG_SUMMARY_CHARS)
    plan.sections = tuple(
        {
            "heading": prompts.clip(as_str(s.get("heading")), LOG_TITLE_CHARS),
            "content": prompts.clip(as_str(s.get("content")), LOG_SECTION_CHARS),
        }
        for s in as_list(raw.get("sections"))[:LOG_SECTIONS]
        if isinstance(s, dict) and as_str(s.get("content"))
    )
    return plan


def _unit(value: Any) -> float | None:
    """A number clamped to [0, 1], or None (keep the memory's own) when it is not a number."""
    number = as_unit(value, -1.0)
    return None if number < 0 else number


def _tags(value: Any) -> tuple[str, ...]:
    """Tags a memory or note can hold: the first ``MAX_TAGS`` that are not too long."""
    return tuple(dict.fromkeys(t for t in as_str_list(value, 1000) if len(t) <= MAX_TAG_CHARS))[:MAX_TAGS]


def _marker(day: str) -> str:
    return f"dream:{day}"
