"""One chat exchange and every write it owes (the chat gateway's bookkeeping, apart from its pipeline).

``Exchange`` is one request on its way through the gateway; ``ExchangeRecorder`` does the writes the
exchange owes before the reply's last byte (docs/ARCHITECTURE.md, "Lambda rules"): the user's and the
assistant's messages, the token usage, an explicit "remember ..." started beside the upstream call,
the reminders the turn claimed, and the once-a-day cleanup enqueue. Each write logs its own failure
and the reply goes out regardless: memory never fails a chat.

A retry of the same turn is not stored twice, and a repeat that is not a retry is a new turn
(``ExchangeRecorder.turn_of``). The request is named by the conversation so far (``exchange_key``:
namespace, conversation id and every message of the request); its first sighting opens a turn (a fresh
id that names the stored messages and the "remember ..." memory) and notes it under the key for the
retry window (``ENGRAM_CHAT_RETRY_WINDOW_MINUTES``). The same request within that window whose first
attempt is still reflected in the store (its "remember ..." memory not deleted or archived since, its
reminder not cancelled) is a retry: it reuses the turn, so its user turn is the one already stored and
only its answer is added. Anything else — later than the window (the next day's "remind me tomorrow at
9 ..."), after the memory was deleted or the reminder cancelled, a new conversation in thread
``default`` that opens with the same words — is a new turn with its own messages.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Literal, Protocol

from engram.domain.errors import EngramError
from engram.domain.models import UsageRecord, new_id
from engram.domain.ports import AuditRows, Clock, JobQueue, KeyValueRows, MemoryRows
from engram.domain.wire.usage import TokenUsage
from engram.services.chat.routing import Route
from engram.services.library.memories import MemoryService
from engram.services.library.messages import MAX_ERROR_CHARS, MessageIn, MessageService
from engram.services.library.reminders import ReminderService
from engram.services.recall.conversations import ConversationService

log = logging.getLogger(__name__)

Wire = Literal["openai", "anthropic", "responses"]  # the client's door
Reason = Literal[
    "injected", "no_content", "disabled", "body_too_large", "not_injectable", "recall_failed", "index_unavailable"
]

_MAX_STORED_CHARS = 100_000
_REMEMBER = re.compile(
    r"^\s*(?:(?:please|pls|kindly|can you|could you)[\s,]+)?remember(?:\s+that)?\s*[:：,，\-]?\s*(?P<x>.+)$",
    re.IGNORECASE | re.DOTALL,
)
_REMEMBER_ZH = re.compile(
    r"^\s*(?:请|請)?(?:帮我|幫我)?(?:记住|記住|记一下|記一下)\s*[:：,，]?\s*(?P<x>.+)$", re.DOTALL
)
_NOT_A_REQUEST = re.compile(r"^(when|what|how|who|where|why|if|whether|me\b|the time)", re.IGNORECASE)


def explicit_remember(text: str) -> str | None:
    """The fact in "remember ...", "please remember: ...", "记住 ..." (not questions like "remember when...?")."""
    match = _REMEMBER.match(text) or _REMEMBER_ZH.match(text)
    if not match:
        return None
    fact = match.group("x").strip()
    if len(fact) < 3 or fact.endswith(("?", "？")) or _NOT_A_REQUEST.match(fact):
        return None
    return fact[:4000]


@dataclass
class Exchange:
    """One request on its way through the gateway."""

    namespace: str
    wire: Wire
    body: dict[str, Any]
    route: Route | None = None
    user_text: str | None = None
    conversation: str = "default"
    agent: str | None = None  # x-engram-agent: its allocated skills join the boot block
    custom_tools: frozenset[str] = frozenset()  # Responses door: free-form tools, answered as custom_tool_call
    # Responses door: the request as the client sent it, and whether it goes to the upstream as it is
    # (an upstream that speaks the Responses API) rather than as the chat request in ``body``.
    responses: dict[str, Any] | None = None
    native: bool = False
    persist: bool = True
    reason: Reason = "disabled"
    injected: bool = False
    recall_ms: float = 0.0
    upstream_ms: float = 0.0
    started: float = field(default_factory=time.perf_counter)
    client_wants_usage: bool = True
    # Writes started during the request (an explicit "remember ..."), awaited before its last byte.
    pending: list[asyncio.Future[None]] = field(default_factory=list)
    settled: bool = False
    forwarded: bool = False  # the request went to the upstream: from here on the user's turn is kept
    key: str = ""  # the request's retry key, computed once (``exchange_key``)
    turn: str = ""  # the turn this request belongs to (``ExchangeRecorder.turn_of``): names its stored rows
    turn_note: dict[str, Any] = field(default_factory=dict)  # what a repeat reads to tell a retry (``turn_of``)
    # Reminders this turn claimed and injected: delivered once the upstream answered, else released.
    reminders: list[str] = field(default_factory=list)
    reminder_owner: str = ""
    # Past-conversation messages this turn injected: marked seen in this thread once the upstream answered.
    fragments: list[str] = field(default_factory=list)

    def headers(self) -> dict[str, str]:
        return {
            "x-engram-injected": "1" if self.injected else "0",
            "x-engram-reason": self.reason,
            "x-engram-recall-ms": f"{self.recall_ms:.1f}",
            "x-engram-upstream-ms": f"{self.upstream_ms:.1f}",
        }


def exchange_key(ex: Exchange) -> str:
    """Same namespace, conversation, earlier turns and last user message -> same key (a retry candidate)."""
    if not ex.key:
        messages = ex.body.get("messages") or []
        material = json.dumps(
            [ex.namespace, ex.conversation, messages],
            ensure_ascii=False,
            sort_keys=True,
            separators=(",", ":"),
            default=str,
        )
        ex.key = hashlib.sha256(material.encode()).hexdigest()[:32]
    return ex.key


class ExchangeStore(AuditRows, KeyValueRows, MemoryRows, Protocol):
    """What an exchange writes besides messages: usage, the turn marks, the once-a-day cleanup mark; and
    the memory a "remember ..." wrote (whether a repeat is still a retry)."""


class ExchangeRecorder:
    """The writes of an exchange. ``cleanup_interval()`` is read per use (runtime settings)."""

    def __init__(
        self,
        *,
        store: ExchangeStore,
        messages: MessageService,
        memories: MemoryService,
        clock: Clock,
        cleanup_interval: Callable[[], timedelta],
        retry_window: Callable[[], timedelta],
        queue: JobQueue | None = None,
        reminders: ReminderService | None = None,
        conversations: ConversationService | None = None,
    ) -> None:
        self._store = store
        self._messages = messages  # services.messages.MessageService
        self._memories = memories  # services.memories.MemoryService: an explicit "remember ..."
        self._clock = clock
        self._cleanup_interval = cleanup_interval
        self._retry_window = retry_window
        self._queue = queue
        self._reminders = reminders  # services.reminders.ReminderService
        self._conversations = conversations  # services.conversations.ConversationService

    # -- the turn ------------------------------------------------------------------------------------
    def turn_of(self, ex: Exchange) -> str:
        """The turn of this request, decided once: the earlier attempt's turn when this is a retry of it
        (same request within the retry window, its first attempt still reflected in the store), else a
        new turn, noted under the request's key for the window."""
        if ex.turn:
            return ex.turn
        key = exchange_key(ex)
        now = self._clock.now()
        window = self._retry_window()
        mark = f"gateway:turn:{key}"
        prior = self._store.get_cache(ex.namespace, mark)
        if isinstance(prior, dict) and self._is_retry_of(ex, prior, now, window):
            ex.turn = str(prior["turn"])
            return ex.turn
        ex.turn = f"{key[:16]}{new_id('t')[2:]}"
        if window > timedelta(0):
            ex.turn_note = {"turn": ex.turn, "at": now.isoformat()}
            self._store.put_cache(ex.namespace, mark, ex.turn_note, expires_at=now + window)
        return ex.turn

    def _note_remembered(self, ex: Exchange, memory_id: str) -> None:
        """Note on the turn which memory its "remember ..." wrote or found (a look-alike it merged into has
        another external id), so a repeat is a retry only while that memory is still there."""
        if not ex.turn_note:
            return
        at = datetime.fromisoformat(str(ex.turn_note["at"]))
        ex.turn_note = {**ex.turn_note, "memory": memory_id}
        mark = f"gateway:turn:{exchange_key(ex)}"
        self._store.put_cache(ex.namespace, mark, ex.turn_note, expires_at=at + self._retry_window())

    def _is_retry_of(self, ex: Exchange, prior: dict[str, Any], now: datetime, window: timedelta) -> bool:
        """Whether ``prior`` (the first attempt's note) makes this request its retry: within the window
        by the service's clock (the store's expiry is only housekeeping), and nothing the first attempt
        wrote has been undone since (its "remember ..." memory deleted, archived or superseded, its
        reminder cancelled)."""
        try:
            turn, at = str(prior["turn"]), datetime.fromisoformat(str(prior["at"]))
        except (KeyError, ValueError):
            return False
        if not timedelta(0) <= now - at <= window:
            return False
        if not self._asks_to_remember(ex):
            return True
        if noted := prior.get("memory"):  # the memory the first attempt wrote, or the look-alike it found
            found = self._store.get_memories(ex.namespace, [str(noted)])
            if not found:  # gone for good
                return False
            kept = found[0]
        else:
            kept_or_none = self._store.find_by_external_id(ex.namespace, "gw-rem-" + turn)
            if kept_or_none is None:  # the first attempt has not written it yet (still running)
                return True
            kept = kept_or_none
        if kept.status != "active":
            return False
        return kept.type != "task" or kept.remind_at is not None  # a cancelled reminder clears remind_at

    def _asks_to_remember(self, ex: Exchange) -> bool:
        text = ex.user_text or ""
        if explicit_remember(text) is not None:
            return True
        return self._reminders is not None and self._reminders.request_in(text) is not None

    # -- during the request -------------------------------------------------------------------------
    async def claim_reminders(self, ex: Exchange) -> str:
        """Claim the namespace's due reminders for this turn; their lines for the patch ('' if none)."""
        if self._reminders is None:
            return ""
        ex.reminder_owner = new_id("turn")
        try:
            due = await asyncio.to_thread(self._reminders.claim_due, ex.namespace, ex.reminder_owner)
        except Exception:
            log.warning("reminders unavailable; the chat goes on without them", exc_info=True)
            return ""
        ex.reminders = [d.memory.id for d in due]
        return str(self._reminders.render(due))

    async def settle_reminders(self, ex: Exchange, *, delivered: bool) -> None:
        """Delivered (the upstream answered) or released (it did not); once per exchange."""
        if not ex.reminders or self._reminders is None:
            return
        held, ex.reminders = ex.reminders, []
        try:
            await asyncio.to_thread(self._reminders.settle, ex.namespace, ex.reminder_owner, held, delivered=delivered)
        except Exception:
            log.warning("settling reminders failed (their lease runs out and a later turn retries)", exc_info=True)

    async def settle_fragments(self, ex: Exchange, *, seen: bool) -> None:
        """Mark the injected fragments seen in this thread (the upstream answered), else forget them."""
        if not ex.fragments or self._conversations is None:
            return
        held, ex.fragments = ex.fragments, []
        if not seen:
            return
        try:
            await asyncio.to_thread(self._conversations.mark_seen, ex.namespace, ex.conversation, held)
        except Exception:
            log.warning("marking conversation fragments seen failed (they may be injected again)", exc_info=True)

    def remember(self, ex: Exchange) -> None:
        """Start storing an explicit "remember ..." now, beside the upstream call; the reply's last
        byte waits for it (``settle``)."""
        text = ex.user_text or ""
        fact = explicit_remember(text)
        when: datetime | None = None
        if self._reminders is not None:  # "remind me tomorrow at 9 to ...", "remember: dentist tomorrow at 3pm"
            asked = self._reminders.request_in(text)
            if asked is not None:
                fact, when = asked.what, asked.when
            elif fact is not None:
                when = self._reminders.time_in(fact)
        if fact is None:
            return
        from engram.services.library.memories import MemoryWrite

        request = MemoryWrite(
            content=fact,
            type="task" if when is not None else "fact",
            source="chat",
            importance=0.8,
            confidence=0.95,
            remind_at=when,
        )

        def write() -> None:
            try:
                named = request.model_copy(update={"external_id": "gw-rem-" + self.turn_of(ex)})
                # A reminder is its own memory: merged into a look-alike it would not fire again.
                written = self._memories.write(ex.namespace, named, dedup=when is None)
                self._note_remembered(ex, written.memory.id)
            except Exception:
                log.warning("storing an explicit remember request failed", exc_info=True)

        ex.pending.append(asyncio.ensure_future(asyncio.to_thread(write)))

    # -- before the last byte ------------------------------------------------------------------------
    async def settle(
        self, ex: Exchange, assistant_text: str, usage: TokenUsage, error: EngramError | None = None
    ) -> None:
        """Every write the exchange owes, done before the reply's last byte. The writes are independent,
        so they run side by side (one store round trip of wait on DynamoDB, not four); each failure is
        logged and the reply goes out regardless. ``error``: the turn failed after it was sent (no
        answer is stored, the user's turn carries the error; usage only if the upstream reported any)."""
        await self._settle_pending(ex)
        if ex.persist and not ex.settled and ex.user_text:
            try:
                await asyncio.to_thread(self.turn_of, ex)
            except Exception:  # the store is away: name the turn by the request, as a retry would
                log.warning("deciding the turn of an exchange failed", exc_info=True)
                ex.turn = ex.turn or exchange_key(ex)
        reminders = self.settle_reminders(ex, delivered=error is None)
        fragments = self.settle_fragments(ex, seen=error is None)
        if not ex.persist or ex.settled:
            await asyncio.gather(reminders, fragments)
            return
        ex.settled = True
        assert ex.route is not None
        now = self._clock.now()
        writes = [reminders, fragments]
        if error is None or usage.input or usage.output:
            writes.append(self._write(self._store_usage, "storing usage failed", ex, usage, now))
        if ex.user_text:
            note = f"{error.code}: {error.message}"[:MAX_ERROR_CHARS] if error is not None else None
            writes.append(
                self._write(self._store_message, "storing the exchange failed", ex, "user", ex.user_text, now, note)
            )
            if assistant_text.strip():
                later = now + timedelta(microseconds=1)
                writes.append(
                    self._write(
                        self._store_message, "storing the exchange failed", ex, "assistant", assistant_text, later
                    )
                )
        writes.append(self._write(self._maybe_cleanup, "enqueueing cleanup failed", ex.namespace, now))
        await asyncio.gather(*writes)

    async def settle_failed(self, ex: Exchange, error: EngramError, usage: TokenUsage | None = None) -> None:
        """The writes of a turn that got no answer: the user's turn (with ``error``) once it was sent
        upstream; before that (a request refused by Engram itself) only what was already started."""
        if ex.forwarded:
            await self.settle(ex, "", usage or TokenUsage(), error)
        else:
            await self._settle_pending(ex)
            await self.settle_reminders(ex, delivered=False)
            await self.settle_fragments(ex, seen=False)

    async def _settle_pending(self, ex: Exchange) -> None:
        """Wait for the writes started during the request (each logs its own failure)."""
        while ex.pending:
            await ex.pending.pop()

    @staticmethod
    async def _write(fn: Callable[..., object], failure: str, *args: Any) -> None:
        try:
            await asyncio.to_thread(fn, *args)
        except Exception:
            log.warning(failure, exc_info=True)

    def _store_usage(self, ex: Exchange, usage: TokenUsage, now: datetime) -> None:
        assert ex.route is not None
        self._store.append_usage(
            UsageRecord(
                id=new_id("use"),
                namespace=ex.namespace,
                model=ex.route.model,
                thread=ex.conversation,
                input_tokens=usage.input,
                output_tokens=usage.output,
                cache_read_tokens=usage.cache_read,
                cache_write_tokens=usage.cache_write,
                created_at=now,
            )
        )

    def _store_message(
        self,
        ex: Exchange,
        role: Literal["user", "assistant"],
        content: str,
        at: datetime,
        error: str | None = None,
    ) -> None:
        """One side of the exchange under its turn's id, which a retry of the same turn repeats (``turn_of``)."""
        assert ex.route is not None
        model = ex.route.requested if role == "user" else ex.route.model
        message = MessageIn(
            role=role,
            content=content[:_MAX_STORED_CHARS],
            conversation_id=ex.conversation,
            id=f"gw-{self.turn_of(ex)}-{role[0]}",
            created_at=at,
            model=model[:200],
            error=error,
        )
        self._messages.ingest(ex.namespace, [message])

    def _maybe_cleanup(self, namespace: str, now: datetime) -> None:
        if self._queue is None:
            return
        if self._store.get_cache(namespace, "gateway:cleanup-enqueued") is not None:
            return
        self._store.put_cache(
            namespace, "gateway:cleanup-enqueued", now.isoformat(), expires_at=now + self._cleanup_interval()
        )
        self._queue.enqueue("cleanup", {"namespace": namespace})
