"""Extraction: new chat messages -> memories or review candidates (docs/ARCHITECTURE.md, "Background jobs").

Per namespace, messages after the cursor and before the moment the run starts are read in batches
of ``max_messages`` (at most ``max_batches`` per run). The first run of a namespace reads only the
last ``window_hours``, not all history. Each batch is one model call; its answer is applied, then
the cursor moves to the batch's last message. A model error or an unreadable answer leaves the
cursor where it was (the batch is retried next run, up to ``max_attempts`` times before it is
skipped). A batch is claimed by its last message id before it is applied, so the same window is
never applied twice, even when two processes race or a crash hits between apply and cursor write.

The order is the order messages were *stored* in (``Message.stored_at``), not their ``created_at``:
history imported or ingested with old timestamps comes after the cursor and is read once. A cursor
written before this order existed (``{"ts", "id"}`` on ``created_at``) is read as the same position.

A namespace's run fails on its own (``status: failed``, the error in its report and in the run's
``errors`` count): the other namespaces' runs are kept, the run as a whole returns its report (the
Lambda invocation succeeds, so Lambda's automatic retries never repeat the namespaces that succeeded
nor count a batch's attempt again), the job's error metric raises the owner's alarm (docs/aws.md,
"Alarms"), and the next run retries just that namespace: its cursor did not move. An item the model
proposed that cannot be stored is no failure of the run: it is counted in ``rejected`` and listed with
its ``item``.

``backfill`` reads a namespace's whole history (everything stored before the regular cursor) in the
same batches, with its own cursor, so it can stop and resume without applying a batch twice.

Over 400 lines on purpose: the cursor, the batch claim and applying a batch are one exactly-once
protocol, kept in one place; shared job plumbing lives in ``services/jobs/runs.py`` and
``services/models/reply.py``.
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from datetime import datetime, timedelta
from typing import Any, Protocol, cast

from engram.domain.errors import MESSAGE_CHARS, EngramError, InvalidInput, NotConfigured
from engram.domain.models import MEMORY_TYPES, IdempotencyRecord, Memory, MemoryType, Message
from engram.domain.policies import normalize_fact_key
from engram.domain.ports import (
    AuditRows,
    CandidateRows,
    ChatModel,
    Clock,
    KeyValueRows,
    MemoryRows,
    MessageRows,
    SearchIndex,
    StoreAdmin,
)
from engram.domain.wording import same_wording
from engram.services.jobs.runs import NamespaceLocks, failure_of, record_run
from engram.services.library.candidates import CandidateService
from engram.services.library.memories import MemoryService, MemoryWrite
from engram.services.models import prompts
from engram.services.models.reply import as_list, as_str, as_str_list, as_unit, parse_json_object
from engram.services.recall.conversations import ConversationService
from engram.services.runtime_settings import Live

log = logging.getLogger(__name__)

CURSOR = "extract"
BACKFILL = "extract:backfill"
BACKFILL_END = "extract:backfill:end"
FAILURES = "extract:failures"
MAX_ITEMS_PER_BATCH = 50
KNOWN_KEYS = 30


@dataclass(frozen=True)
class ExtractionConfig:
    """The extraction job's limits.

    ``settings.py`` holds the defaults (written once); ``bootstrap/configs.py`` maps them.
    """

    window_hours: float
    max_messages: int
    max_batches: int
    max_tokens: int
    max_message_chars: int
    review_confidence: float
    min_importance: float  # below it an extracted memory is dropped (README, "Coming from Aelios")
    interval_hours: int  # how often the job runs: a batch's attempts are counted once per interval
    max_attempts: int = 5  # not a setting


@dataclass(frozen=True)
class Extracted:
    """One memory as the model proposed it, validated."""

    content: str
    type: MemoryType
    fact_key: str | None
    importance: float
    confidence: float
    tags: list[str]
    source_message_ids: list[str]


@dataclass
class NamespaceExtraction:
    namespace: str
    status: str = "ok"  # ok | failed (a failure below; the next run retries this namespace)
    messages: int = 0
    batches: int = 0
    created: int = 0
    seen: int = 0
    superseded: int = 0
    candidates: int = 0
    rejected: int = 0
    unimportant: int = 0  # rated below ENGRAM_MEMORY_MIN_IMPORTANCE: not written
    skipped_batches: int = 0
    conversation_messages: int = 0  # messages indexed for conversation recall
    more: bool = False
    errors: list[dict[str, Any]] = field(default_factory=list)

    def fail(self, error: dict[str, Any]) -> None:
        """A failure of this namespace's run (not of one proposed item): reported, retried next run."""
        self.status = "failed"
        self.errors.append(error)

    @property
    def failures(self) -> int:
        return sum(1 for e in self.errors if "item" not in e)


@dataclass
class ExtractionReport:
    namespaces: list[NamespaceExtraction] = field(default_factory=list)

    def total(self, name: str) -> int:
        return sum(int(getattr(ns, name)) for ns in self.namespaces)

    def to_dict(self) -> dict[str, Any]:
        keys = (
            "messages",
            "batches",
            "created",
            "seen",
            "superseded",
            "candidates",
            "rejected",
            "unimportant",
            "skipped_batches",
            "conversation_messages",
        )
        return {
            "job": "extract",
            **{k: self.total(k) for k in keys},
            "errors": sum(ns.failures for ns in self.namespaces),
            "failed": [ns.namespace for ns in self.namespaces if ns.status == "failed"],
            "namespaces": [asdict(ns) for ns in self.namespaces],
        }


@dataclass(frozen=True)
class _Cursor:
    ts: datetime
    id: str | None

    def dump(self) -> str:
        return json.dumps({"ts": self.ts.isoformat(), "id": self.id})

    @staticmethod
    def load(raw: str | None) -> _Cursor | None:
        if not raw:
            return None
        data = json.loads(raw)
        return _Cursor(datetime.fromisoformat(data["ts"]), data.get("id"))


def parse_extraction(reply: str, batch_ids: Sequence[str]) -> tuple[list[Extracted], int]:
    """The valid memories of a model reply and how many items were rejected.

    ``InvalidInput`` when the reply is not ``{"memories": [...]}`` at all (the batch is retried).
    """
    data = parse_json_object(reply)
    if not isinstance(data.get("memories"), list):
        raise InvalidInput("the model answer has no 'memories' list", code="invalid_model_output")
    known = set(batch_ids)
    out: list[Extracted] = []
    rejected = 0
    for raw in as_list(data["memories"])[:MAX_ITEMS_PER_BATCH]:
        content = as_str(raw.get("content")) if isinstance(raw, dict) else ""
        if not content:
            rejected += 1
            continue
        type_ = as_str(raw.get("type")).lower()
        fact_key: str | None = None
        if as_str(raw.get("fact_key")):
            try:
                fact_key = normalize_fact_key(raw["fact_key"])
            except InvalidInput:
                fact_key = None  # a malformed key still leaves a useful memory
        out.append(
            Extracted(
                content=content,
                type=cast(MemoryType, type_) if type_ in MEMORY_TYPES else "fact",
                fact_key=fact_key,
                importance=as_unit(raw.get("importance"), 0.5),
                confidence=as_unit(raw.get("confidence"), 0.5),
                tags=as_str_list(raw.get("tags")),
                source_message_ids=[i for i in as_str_list(raw.get("source_message_ids"), 100) if i in known],
            )
        )
    return out, rejected


class ExtractionStore(MemoryRows, CandidateRows, MessageRows, AuditRows, KeyValueRows, StoreAdmin, Protocol):
    """What extraction reads (new messages, memories, candidates) and writes (cursors, run records)."""


class ExtractionService:
    def __init__(
        self,
        store: ExtractionStore,
        memories: MemoryService,
        candidates: CandidateService,
        model: ChatModel | None,
        clock: Clock,
        config: ExtractionConfig | Live[ExtractionConfig],
        locks: NamespaceLocks | None = None,
        index: SearchIndex | None = None,
        conversations: ConversationService | None = None,
    ) -> None:
        self._index = index
        # The run indexes new messages for conversation recall first (its own cursor; a failure there
        # never stops the extraction).
        self._conversations = conversations
        self._store = store
        self._memories = memories
        self._candidates = candidates
        self._model = model
        self._clock = clock
        self._config = Live.of(config)
        self._locks = locks or NamespaceLocks()

    @property
    def configured(self) -> bool:
        """Whether a model is set (the scheduler skips the job otherwise)."""
        return self._model is not None

    async def run(self, namespace: str | None = None, now: datetime | None = None) -> ExtractionReport:
        """Extract every namespace (or one) up to ``now`` (default: the clock)."""
        if self._model is None:
            raise NotConfigured(
                "extraction needs a model: set ENGRAM_EXTRACT_MODEL (or ENGRAM_CHAT_MODEL) and ENGRAM_UPSTREAM_BASE_URL"
            )
        # Inclusive of the start instant: a run right after an ingest reads those messages.
        until = (now or self._clock.now()) + timedelta(microseconds=1)
        namespaces = [namespace] if namespace else await asyncio.to_thread(self._store.list_namespaces)
        report = ExtractionReport()
        for ns in namespaces:
            report.namespaces.append(await self._run_namespace(ns, until))
        return report

    async def _run_namespace(self, namespace: str, until: datetime) -> NamespaceExtraction:
        result = NamespaceExtraction(namespace=namespace)
        await self._index_conversations(namespace, result, until=until)
        try:
            with self._locks.hold("extract", namespace):
                await self._extract(namespace, until, result)
        except Exception as exc:  # this namespace failed; the others run, and the next run retries it
            result.fail(failure_of(exc, "extraction failed", namespace))
        await asyncio.to_thread(record_run, self._store, self._clock, "extract", namespace, _detail(result))
        return result

    async def _index_conversations(
        self, namespace: str, result: NamespaceExtraction, *, until: datetime | None = None, everything: bool = False
    ) -> None:
        """Index the namespace's new messages for conversation recall (docs/conversations.md)."""
        if self._conversations is None:
            return
        try:
            while True:
                report = await asyncio.to_thread(self._conversations.index_new, namespace, until=until)
                result.conversation_messages += report.indexed
                if not (everything and report.more):
                    return
        except Exception as exc:  # the next run resumes from the conversation cursor
            code = exc.code if isinstance(exc, EngramError) else "conversation_index_failed"
            log.warning("indexing messages for conversation recall failed for %s: %s", namespace, code)
            result.fail({"error": code, "message": str(exc)[:MESSAGE_CHARS], "stage": "conversation_index"})

    async def _extract(self, namespace: str, until: datetime, result: NamespaceExtraction) -> None:
        fetch = functools.partial(self._next_batch, namespace, until)
        if await self._batches(namespace, fetch, CURSOR, result, self._config().max_batches):
            result.more = bool(await asyncio.to_thread(self._next_batch, namespace, until, 1))

    async def backfill(
        self, namespace: str, progress: Callable[[int], None] | None = None, now: datetime | None = None
    ) -> NamespaceExtraction:
        """Extract everything stored before the regular cursor (the whole history), batch by batch.
        Resumable: its own cursor, and the end fixed when it first starts, so no batch is applied twice
        and nothing the regular job reads is read again. ``progress(n)`` after each batch of n messages."""
        if self._model is None:
            raise NotConfigured(
                "extraction needs a model: set ENGRAM_EXTRACT_MODEL (or ENGRAM_CHAT_MODEL) and ENGRAM_UPSTREAM_BASE_URL"
            )
        result = NamespaceExtraction(namespace=namespace)
        start = (now or self._clock.now()) + timedelta(microseconds=1)
        await self._index_conversations(namespace, result, everything=True)
        try:
            with self._locks.hold("extract", namespace):
                end = await asyncio.to_thread(self._backfill_end, namespace, start)
                fetch = functools.partial(self._backfill_batch, namespace, end)
                while await self._batches(namespace, fetch, BACKFILL, result, 1_000_000, progress):
                    pass
        except Exception as exc:  # resumable: the backfill cursor is where the last applied batch left it
            result.fail(failure_of(exc, "extraction backfill failed", namespace))
        await asyncio.to_thread(record_run, self._store, self._clock, "extract", namespace, _detail(result))
        return result

    def _backfill_end(self, namespace: str, start: datetime) -> _Cursor:
        """Where the backfill stops: the regular cursor when the backfill first started (kept with it)."""
        raw = self._store.get_cursor(namespace, BACKFILL_END)
        if raw:
            end = _Cursor.load(raw)
            assert end is not None
            return end
        end = _Cursor.load(self._store.get_cursor(namespace, CURSOR))
        if end is None:  # never extracted: the backfill takes everything, the regular job starts now
            end = _Cursor(start, None)
            self._store.set_cursor(namespace, CURSOR, end.dump())
        self._store.set_cursor(namespace, BACKFILL_END, end.dump())
        return end

    def _backfill_batch(self, namespace: str, end: _Cursor) -> list[Message]:
        cursor = _Cursor.load(self._store.get_cursor(namespace, BACKFILL))
        until = end.ts + timedelta(microseconds=1) if end.id is not None else end.ts
        limit = self._config().max_messages
        if cursor is None:
            rows = self._store.list_messages_stored(namespace, until=until, limit=limit)
        else:
            rows = self._after(namespace, cursor, until, limit)
        if end.id is not None:
            rows = [m for m in rows if (m.stored_at or m.created_at, m.id) <= (end.ts, end.id)]
        return rows

    def backfill_remaining(self, namespace: str) -> int:
        """Messages the backfill has yet to read (an estimate for progress: all messages before it starts)."""
        if self._store.get_cursor(namespace, BACKFILL) is None:
            return self._store.count_messages(namespace)
        return 0

    async def _batches(
        self,
        namespace: str,
        fetch: Callable[[], list[Message]],
        cursor_name: str,
        result: NamespaceExtraction,
        max_batches: int,
        progress: Callable[[int], None] | None = None,
    ) -> bool:
        """Up to ``max_batches`` batches; ``True`` if it stopped with batches possibly left."""
        assert self._model is not None
        for _ in range(max_batches):
            batch = await asyncio.to_thread(fetch)
            if not batch:
                return False
            readable = [m for m in batch if m.role in ("user", "assistant")]
            if not readable:  # only system/tool rows: nothing to learn, move on
                await asyncio.to_thread(self._apply, namespace, batch, [], result, cursor_name)
                if progress is not None:
                    progress(len(batch))
                continue
            known = await asyncio.to_thread(self._known_keys, namespace, readable)
            try:
                reply = await self._model.complete(
                    prompts.extraction_messages(readable, max_chars=self._config().max_message_chars, known=known),
                    json_mode=True,
                    max_tokens=self._config().max_tokens,
                    temperature=0.0,
                )
                items, rejected = parse_extraction(reply, [m.id for m in batch])
            except Exception as exc:  # any model failure: keep the cursor, try again next run
                code = exc.code if isinstance(exc, EngramError) else "model_error"
                log.warning("extraction model call failed for %s: %s", namespace, code)
                result.fail({"error": code, "message": str(exc)[:MESSAGE_CHARS], "first_message_id": batch[0].id})
                if cursor_name == CURSOR:
                    await asyncio.to_thread(self._note_failure, namespace, batch, result)
                return False  # the backfill stops here and resumes at this batch next time
            await asyncio.to_thread(self._apply, namespace, batch, items, result, cursor_name)
            result.rejected += rejected
            if progress is not None:
                progress(len(batch))
        return True

    # -- sync steps (run in a worker thread) -------------------------------------------------
    def _next_batch(self, namespace: str, until: datetime, limit: int | None = None) -> list[Message]:
        limit = limit or self._config().max_messages
        cursor = _Cursor.load(self._store.get_cursor(namespace, CURSOR))
        if cursor is None:
            # First run: only the current window. Anchor the cursor there so a quiet first window
            # does not make the next run look back a full window again.
            since = until - timedelta(hours=self._config().window_hours)
            self._store.set_cursor(namespace, CURSOR, _Cursor(since, None).dump())
            return self._store.list_messages_stored(namespace, since=since, until=until, limit=limit)
        return self._after(namespace, cursor, until, limit)

    def _after(self, namespace: str, cursor: _Cursor, until: datetime, limit: int) -> list[Message]:
        if cursor.id is None:
            return self._store.list_messages_stored(namespace, since=cursor.ts, until=until, limit=limit)
        return self._store.list_messages_stored(namespace, after=(cursor.ts, cursor.id), until=until, limit=limit)

    def _known_keys(self, namespace: str, batch: list[Message]) -> list[Memory]:
        """Active keyed memories related to the batch, so the model reuses their keys."""
        if self._index is None:
            return []
        text = prompts.clip(" ".join(m.content for m in batch if m.role == "user"), 2000)
        if not text:
            return []
        try:
            hits = self._index.keyword_search(namespace, text, k=KNOWN_KEYS)
        except EngramError:  # the index is a mirror; extraction works without the hint
            return []
        found = self._store.get_memories(namespace, [h.memory_id for h in hits])
        return [m for m in found if m.status == "active" and m.fact_key]

    def _apply(
        self,
        namespace: str,
        batch: list[Message],
        items: list[Extracted],
        result: NamespaceExtraction,
        cursor_name: str = CURSOR,
    ) -> None:
        claim = IdempotencyRecord(
            namespace=namespace,
            key=f"extract:{batch[-1].id}",
            value={"first": batch[0].id, "items": len(items)},
            created_at=self._clock.now(),
        )
        if self._store.put_idempotency(claim):
            for item in items:
                try:
                    self._route(namespace, item, batch, result)
                except EngramError as exc:  # this item only: reported, the run goes on
                    result.rejected += 1
                    result.errors.append(
                        {"error": exc.code, "message": exc.message[:MESSAGE_CHARS], "item": item.content[:80]}
                    )
        else:
            result.skipped_batches += 1  # applied before (another run, or a crash before the cursor moved)
        self._store.set_cursor(namespace, cursor_name, _position(batch[-1]).dump())
        if cursor_name == CURSOR:  # the failure count is the regular job's: a backfill batch leaves it
            self._store.set_cursor(namespace, FAILURES, "")
        result.batches += 1
        result.messages += len(batch)

    def _route(self, namespace: str, item: Extracted, batch: list[Message], result: NamespaceExtraction) -> None:
        sources = item.source_message_ids or [m.id for m in batch]
        if item.importance < self._config().min_importance:
            result.unimportant += 1
            return
        if item.confidence < self._config().review_confidence:
            if self._pending_twin(namespace, item.content):
                result.seen += 1
                return
            holder = self._store.find_active_by_fact_key(namespace, item.fact_key) if item.fact_key else None
            self._candidates.propose(
                namespace,
                item.content,
                type=item.type,
                fact_key=item.fact_key,
                importance=item.importance,
                confidence=item.confidence,
                tags=item.tags,
                source="extraction",
                source_message_ids=sources,
                target_memory_id=holder.id if holder else None,
            )
            result.candidates += 1
            return
        written = self._memories.write(
            namespace,
            MemoryWrite(
                content=item.content,
                type=item.type,
                fact_key=item.fact_key,
                importance=item.importance,
                confidence=item.confidence,
                tags=item.tags,
                source="extraction",
                source_message_ids=sources,
            ),
            dedup=True,
            automated=True,
        )
        if written.action == "superseded":
            result.superseded += 1
        elif written.action == "proposed":
            result.candidates += 1
        elif written.action == "created":
            result.created += 1
        else:
            result.seen += 1

    def _pending_twin(self, namespace: str, content: str) -> bool:
        pending = self._store.list_candidates(namespace, "pending", limit=200).items
        return any(same_wording(c.content, content) for c in pending)

    def _note_failure(self, namespace: str, batch: list[Message], result: NamespaceExtraction) -> None:
        """Count failures of the same batch; after ``max_attempts`` skip it so one bad window
        cannot stall a namespace forever. One attempt per scheduled interval (``interval_hours``,
        at whole UTC hours like the schedules): a retry within it (a manual run, the local
        scheduler's early retry) costs no attempt."""
        raw = self._store.get_cursor(namespace, FAILURES)
        state = json.loads(raw) if raw else {}
        slot = int(self._clock.now().timestamp() // (self._config().interval_hours * 3600))
        same = state.get("first") == batch[0].id
        if same and state.get("slot") == slot:
            return
        count = int(state.get("count", 0)) + 1 if same else 1
        if count < self._config().max_attempts:
            state = {"first": batch[0].id, "count": count, "slot": slot}
            self._store.set_cursor(namespace, FAILURES, json.dumps(state))
            return
        log.warning("extraction skips %d messages of %s after %d failed attempts", len(batch), namespace, count)
        self._store.set_cursor(namespace, CURSOR, _position(batch[-1]).dump())
        self._store.set_cursor(namespace, FAILURES, "")
        result.skipped_batches += 1
        result.fail({"error": "window_skipped", "message": f"gave up after {count} attempts"})


def _position(message: Message) -> _Cursor:
    """A cursor just at ``message`` in the order messages were stored."""
    return _Cursor(message.stored_at or message.created_at, message.id)


def _detail(result: NamespaceExtraction) -> dict[str, Any]:
    detail = asdict(result)
    detail.pop("namespace")
    return detail
