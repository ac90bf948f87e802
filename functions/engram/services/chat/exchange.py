"""One chat exchange and every write it owes (the chat gateway's bookkeeping, apart from its pipeline).

``ExchangeRecorder`` does the writes an exchange (a ``TurnRequest``, services/chat/turn.py) owes before
the reply's last byte (docs/ARCHITECTURE.md, "Lambda rules"), and keeps what is still owed in the
exchange's ``Owed``: the user's and the assistant's messages, the token usage, an explicit "remember
..." and the record of the injected memories started beside the upstream call, the reminders the turn
claimed (and one claimed after the turn's deadline: released), the fragments it was shown, and the
once-a-day cleanup enqueue. Each write logs its own failure and the reply goes out regardless: memory
never fails a chat.

A retry of the same turn is not stored twice, and a repeat that is not a retry is a new turn
(``ExchangeRecorder.turn_of``). The request is named by the conversation so far (``TurnRequest.key``:
namespace, conversation id and every message of the request); its first sighting opens a turn (a fresh
id that names the stored messages and the "remember ..." memory) and notes it under the key for the
retry window (``ENGRAM_CHAT_RETRY_WINDOW_MINUTES``). The same request within that window whose first
attempt is still reflected in the store (its "remember ..." memory not deleted or archived since, its
reminder not cancelled) is a retry: it reuses the turn, so its user turn is the one already stored and
only its answer is added. Anything else — later than the window (the next day's "remind me tomorrow at
9 ..."), after the memory was deleted or the reminder cancelled, a new conversation in thread
``default`` that opens with the same words — is a new turn with its own messages.

Over 450 lines on purpose: every write an exchange owes, in one class with the retry rule that names
them and the once-a-day cleanup mark; nothing else lives here.
"""

from __future__ import annotations

import asyncio
import logging
import re
import weakref
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Literal, Protocol

from engram.domain.errors import EngramError
from engram.domain.models import UsageRecord, new_id
from engram.domain.ports import AuditRows, Clock, JobQueue, KeyValueRows, MemoryRows
from engram.domain.wire.usage import TokenUsage
from engram.services.chat.turn import ReminderClaim, TurnContext, TurnRequest
from engram.services.library.memories import MemoryService
from engram.services.library.messages import MAX_ERROR_CHARS, MessageIn, MessageService
from engram.services.library.reminders import ReminderService
from engram.services.recall.conversations import ConversationService

log = logging.getLogger(__name__)


_MAX_STORED_CHARS = 100_000
# Namespaces whose cleanup mark a process keeps in mind (``ExchangeRecorder._cleanup_known``).
_CLEANUP_MARKS_KEPT = 10_000
_REMEMBER = re.compile(
    r"^\s*(?:(?:please|pls|kindly|can you|could you)[\s,]+)?remember(?:\s+that)?\s*[:：,，\-]?\s*(?P<x>.+)$",
    re.IGNORECASE | re.DOTALL,
)
_REMEMBER_ZH = re.compile(
    r"^\s*(?:请|請)?(?:帮我|幫我)?(?:记住|記住|记一下|記一下)\s*[:：,，]?\s*(?P<x>.+)$", re.DOTALL
)
# One side of an exchange to store: role, text, when, and why it got no answer (the user's side of a failed turn).
_Side = tuple[Literal["user", "assistant"], str, datetime, str | None]
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


@dataclass(eq=False)  # one exchange's, kept by identity (``ExchangeRecorder.open``)
class Owed:
    """What one exchange still owes before its last byte: the recorder's bookkeeping, changed by nothing
    else (docs/ARCHITECTURE.md, "Lambda rules").

    ``pending``: writes started during the request (an explicit "remember ...", the injection record, a
    reminder claim that landed after the deadline), awaited before the last byte; ``reminders``: the
    claim this turn injected (delivered once the upstream answered, else released); ``fragments``: the
    past-conversation messages it injected (marked seen once the upstream answered); ``forwarded``: the
    request went upstream, so from here on the user's turn is kept; ``turn``/``turn_note``: the turn
    this request belongs to (``ExchangeRecorder.turn_of``), decided once.
    """

    pending: list[asyncio.Future[None]] = field(default_factory=list)
    reminders: ReminderClaim | None = None
    fragments: tuple[str, ...] = ()
    forwarded: bool = False
    settled: bool = False
    turn: str = ""
    turn_note: dict[str, Any] = field(default_factory=dict)


class ExchangeStore(AuditRows, KeyValueRows, MemoryRows, Protocol):
    """What an exchange writes besides messages: usage, the turn marks, the once-a-day cleanup mark; and
    the memory a "remember ..." wrote (whether a repeat is still a retry)."""


class ExchangeRecorder:
    """The writes of an exchange. ``cleanup_interval()`` is read per use (runtime settings);
    ``record_injection(namespace, memory_ids)`` notes that memories were injected (anti-repeat).

    The writes stay side by side, one worker-thread hop each: run one after another in one hop on an
    in-process store they cost less CPU but held the GIL long enough to delay the other turns' first
    bytes at concurrency 8 (bench/README.md, "Gateway overhead", round 3). With ``instant_writes`` (the
    store and the index are this process's memory: no I/O, each write a few dict updates under a lock)
    the usage row, the messages with their keyword-index entries and the injection record are written
    on the event loop instead while no other turn is in flight (``open``): each costs far less than the
    hop it would take (~140 µs of CPU and two thread wake-ups). With other turns in flight they keep
    their hops: a worker's write waits for the loop to idle (the GIL's switch interval), so the other
    turns' first bytes go first, where on the loop it would delay them (bench/README.md, "session 11").
    The once-a-day cleanup mark (it enqueues a job) and an explicit "remember ..." (it may embed) always
    keep their hop."""

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
        record_injection: Callable[[str, Sequence[str]], None] | None = None,
        instant_writes: bool = False,
    ) -> None:
        self._store = store
        self._instant = instant_writes
        # The exchanges in flight (``open`` .. ``settle``); one dropped unsettled leaves with its turn.
        self._open: weakref.WeakSet[Owed] = weakref.WeakSet()
        self._messages = messages  # services.library.messages.MessageService
        self._memories = memories  # services.library.memories.MemoryService: an explicit "remember ..."
        self._clock = clock
        self._cleanup_interval = cleanup_interval
        self._retry_window = retry_window
        self._queue = queue
        self._reminders = reminders  # services.library.reminders.ReminderService
        self._conversations = conversations  # services.recall.conversations.ConversationService
        self._record_injection = record_injection
        # Until when this process knows a namespace's cleanup mark holds (``_maybe_cleanup``).
        self._cleanup_marked: dict[str, datetime] = {}

    def open(self) -> Owed:
        """A new exchange's bookkeeping, in flight until it is settled (counted only with ``instant_writes``:
        no other store asks how many are in flight)."""
        owed = Owed()
        if self._instant:
            self._open.add(owed)
        return owed

    def _alone(self, owed: Owed) -> bool:
        """Whether ``owed``'s writes go on the event loop now: instant writes, no other turn in flight."""
        others = len(self._open) - (1 if owed in self._open else 0)
        return self._instant and others == 0

    # -- the turn ------------------------------------------------------------------------------------
    def turn_of(self, req: TurnRequest, owed: Owed) -> str:
        """The turn of this request, decided once: the earlier attempt's turn when this is a retry of it
        (same request within the retry window, its first attempt still reflected in the store), else a
        new turn, noted under the request's key for the window."""
        if owed.turn:
            return owed.turn
        now = self._clock.now()
        window = self._retry_window()
        mark = f"gateway:turn:{req.key}"
        turn = f"{req.key[:16]}{new_id('t')[2:]}"
        note = {"turn": turn, "at": now.isoformat()}
        if window > timedelta(0):
            # Noted unless a mark is held, in one store call (the read and the write of a first attempt);
            # of two first attempts at once, the second finds the first's note and joins its turn.
            stored, prior = self._store.add_cache(req.namespace, mark, note, expires_at=now + window)
            if stored:
                owed.turn, owed.turn_note = turn, note
                return turn
        else:
            prior = self._store.get_cache(req.namespace, mark)
        if isinstance(prior, dict) and self._is_retry_of(req, prior, now, window):
            owed.turn = str(prior["turn"])
            return owed.turn
        owed.turn = turn
        if window > timedelta(0):  # the mark held is no earlier attempt of this one: this turn's replaces it
            owed.turn_note = note
            self._store.put_cache(req.namespace, mark, note, expires_at=now + window)
        return owed.turn

    def _note_remembered(self, req: TurnRequest, owed: Owed, memory_id: str) -> None:
        """Note on the turn which memory its "remember ..." wrote or found (a look-alike it merged into has
        another external id), so a repeat is a retry only while that memory is still there."""
        if not owed.turn_note:
            return
        at = datetime.fromisoformat(str(owed.turn_note["at"]))
        owed.turn_note = {**owed.turn_note, "memory": memory_id}
        mark = f"gateway:turn:{req.key}"
        self._store.put_cache(req.namespace, mark, owed.turn_note, expires_at=at + self._retry_window())

    def _is_retry_of(self, req: TurnRequest, prior: dict[str, Any], now: datetime, window: timedelta) -> bool:
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
        if not self._asks_to_remember(req):
            return True
        if noted := prior.get("memory"):  # the memory the first attempt wrote, or the look-alike it found
            found = self._store.get_memories(req.namespace, [str(noted)])
            if not found:  # gone for good
                return False
            kept = found[0]
        else:
            kept_or_none = self._store.find_by_external_id(req.namespace, "gw-rem-" + turn)
            if kept_or_none is None:  # the first attempt has not written it yet (still running)
                return True
            kept = kept_or_none
        if kept.status != "active":
            return False
        return kept.type != "task" or kept.remind_at is not None  # a cancelled reminder clears remind_at

    def _asks_to_remember(self, req: TurnRequest) -> bool:
        text = req.user_text or ""
        if explicit_remember(text) is not None:
            return True
        return self._reminders is not None and self._reminders.request_in(text) is not None

    # -- during the request -------------------------------------------------------------------------
    def start(self, owed: Owed, fn: Callable[[], object], failure: str, *, instant: bool = False) -> None:
        """Start a write now, beside the upstream call; the reply's last byte waits for it (``settle``).
        Its failure is logged as ``failure``. ``instant`` (a write the store does in memory): done here and
        now, on the event loop, while no other turn is in flight (class docstring)."""
        if instant and self._alone(owed):
            self._write_now(fn, failure)
            return
        owed.pending.append(asyncio.ensure_future(self._write(fn, failure)))

    def remember(self, req: TurnRequest, owed: Owed) -> None:
        """Start storing an explicit "remember ..." now, beside the upstream call."""
        text = req.user_text or ""
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
            named = request.model_copy(update={"external_id": "gw-rem-" + self.turn_of(req, owed)})
            # A reminder is its own memory: merged into a look-alike it would not fire again.
            written = self._memories.write(req.namespace, named, dedup=when is None)
            self._note_remembered(req, owed, written.memory.id)

        self.start(owed, write, "storing an explicit remember request failed")

    def take(self, owed: Owed, told: TurnContext) -> None:
        """Take on what the turn's context committed it to, as soon as it is known: its reminder claim
        and fragments (settled before the last byte whatever happens next) and a reminder claim that
        was still running at the deadline (released once it lands)."""
        if told.late_claim is not None:
            owed.pending.append(asyncio.ensure_future(self._release_late(told.late_claim)))
        owed.reminders = told.reminders
        owed.fragments = told.fragments

    async def placed(
        self, req: TurnRequest, owed: Owed, told: TurnContext, *, reminders: bool, fragments: bool, recall: bool
    ) -> None:
        """What the injection placed in the request: the memories it injected are recorded (a write
        started now), fragments with no place are not marked seen, and reminders with no place are
        released now (a later turn delivers them)."""
        if recall and told.recalled and self._record_injection is not None:
            record, ids = self._record_injection, told.recalled
            self.start(owed, lambda: record(req.namespace, ids), "recording the injected memories failed", instant=True)
        if not fragments:
            owed.fragments = ()
        if not reminders:
            await self._settle_reminders(req, owed, delivered=False)

    def sent(self, owed: Owed) -> None:
        """The request is going upstream: from here on the user's turn is kept whatever happens."""
        owed.forwarded = True

    async def _release_late(self, claim: asyncio.Future[ReminderClaim | None]) -> None:
        try:
            late = await claim
        except Exception:  # the claim failed: nothing was claimed
            return
        if late is not None:
            await self._settle_claim(late, delivered=False)

    async def _settle_claim(self, claim: ReminderClaim, *, delivered: bool) -> None:
        if self._reminders is None or not claim.memory_ids:
            return
        try:
            await asyncio.to_thread(
                self._reminders.settle, claim.namespace, claim.owner, list(claim.memory_ids), delivered=delivered
            )
        except Exception:
            log.warning("settling reminders failed (their lease runs out and a later turn retries)", exc_info=True)

    async def _settle_reminders(self, req: TurnRequest, owed: Owed, *, delivered: bool) -> None:
        """Delivered (the upstream answered) or released (it did not); once per exchange."""
        held, owed.reminders = owed.reminders, None
        if held is not None:
            await self._settle_claim(held, delivered=delivered)

    async def _settle_fragments(self, req: TurnRequest, owed: Owed, *, seen: bool) -> None:
        """Mark the injected fragments seen in this thread (the upstream answered), else forget them."""
        held, owed.fragments = owed.fragments, ()
        if not held or not seen or self._conversations is None:
            return
        try:
            await asyncio.to_thread(self._conversations.mark_seen, req.namespace, req.conversation, list(held))
        except Exception:
            log.warning("marking conversation fragments seen failed (they may be injected again)", exc_info=True)

    # -- before the last byte ------------------------------------------------------------------------
    async def settle(
        self, req: TurnRequest, owed: Owed, assistant_text: str, usage: TokenUsage, error: EngramError | None = None
    ) -> None:
        """Every write the exchange owes, done before the reply's last byte. The writes are independent,
        so they run side by side (one store round trip of wait on DynamoDB, not four); each failure is
        logged and the reply goes out regardless. ``error``: the turn failed after it was sent (no answer
        is stored, the user's turn carries the error; usage only if the upstream reported any)."""
        self._open.discard(owed)
        await self._settle_pending(owed)
        if not req.persist or owed.settled:
            if owed.reminders is not None or owed.fragments:  # else nothing is owed: no tasks to gather
                await asyncio.gather(
                    self._settle_reminders(req, owed, delivered=error is None),
                    self._settle_fragments(req, owed, seen=error is None),
                )
            return
        owed.settled = True
        now = self._clock.now()
        writes = self._exchange_writes(req, owed, assistant_text, usage, error, now)
        hops: list[Coroutine[Any, Any, None]] = []
        alone = self._alone(owed)
        for fn, failure, instant in writes:
            if instant and alone:  # here and now, on the event loop (class docstring)
                self._write_now(fn, failure)
            else:
                hops.append(self._write(fn, failure))
        if owed.reminders is not None or owed.fragments:  # else nothing is owed there: no tasks for them
            hops += [
                self._settle_reminders(req, owed, delivered=error is None),
                self._settle_fragments(req, owed, seen=error is None),
            ]
        if hops:
            await asyncio.gather(*hops)

    def _exchange_writes(
        self,
        req: TurnRequest,
        owed: Owed,
        assistant_text: str,
        usage: TokenUsage,
        error: EngramError | None,
        now: datetime,
    ) -> list[tuple[Callable[[], object], str, bool]]:
        """The exchange's own writes (usage, its messages, the cleanup mark), each with its failure's log
        line and whether it is the store's alone (done on the event loop with ``instant_writes``)."""
        writes: list[tuple[Callable[[], object], str, bool]] = []
        if error is None or usage.input or usage.output:
            writes.append((lambda: self._store_usage(req, usage, now), "storing usage failed", True))
        if req.user_text:
            note = f"{error.code}: {error.message}"[:MAX_ERROR_CHARS] if error is not None else None
            sides: list[_Side] = [("user", req.user_text, now, note)]
            if assistant_text.strip():
                sides.append(("assistant", assistant_text, now + timedelta(microseconds=1), None))
            writes.append((lambda: self._store_messages(req, owed, sides), "storing the exchange failed", True))
        if self._queue is not None and not self._cleanup_known(req.namespace, now):
            writes.append((lambda: self._maybe_cleanup(req.namespace, now), "enqueueing cleanup failed", False))
        return writes

    async def settle_failed(
        self, req: TurnRequest | None, owed: Owed, error: EngramError, usage: TokenUsage | None = None
    ) -> None:
        """The writes of a turn that got no answer: the user's turn (with ``error``) once it was sent
        upstream; before that (a request refused by Engram itself) only what was already started.
        ``req`` is None when the request could not even be read."""
        self._open.discard(owed)
        if req is not None and owed.forwarded:
            await self.settle(req, owed, "", usage or TokenUsage(), error)
            return
        await self._settle_pending(owed)
        if req is not None:
            await self._settle_reminders(req, owed, delivered=False)
            await self._settle_fragments(req, owed, seen=False)

    async def _settle_pending(self, owed: Owed) -> None:
        """Wait for the writes started during the request (each logs its own failure)."""
        while owed.pending:
            await owed.pending.pop()

    @staticmethod
    async def _write(fn: Callable[[], object], failure: str) -> None:
        try:
            await asyncio.to_thread(fn)
        except Exception:
            log.warning(failure, exc_info=True)

    @staticmethod
    def _write_now(fn: Callable[[], object], failure: str) -> None:
        try:
            fn()
        except Exception:
            log.warning(failure, exc_info=True)

    def _store_usage(self, req: TurnRequest, usage: TokenUsage, now: datetime) -> None:
        self._store.append_usage(
            UsageRecord(
                id=new_id("use"),
                namespace=req.namespace,
                model=req.route.model,
                thread=req.conversation,
                input_tokens=usage.input,
                output_tokens=usage.output,
                cache_read_tokens=usage.cache_read,
                cache_write_tokens=usage.cache_write,
                created_at=now,
            )
        )

    def _store_messages(self, req: TurnRequest, owed: Owed, sides: Sequence[_Side]) -> None:
        """The exchange's sides under its turn's id, which a retry of the same turn repeats (``turn_of``),
        in one ingest: one store transaction and one conversation-index write for the turn (SQLite). If
        that fails, each side is tried alone, so one that can be stored is not lost with the other.
        The turn is decided here, in the same worker-thread hop (the messages are the only write that
        names it; a hop of its own before the writes cost one more thread hand-off per turn)."""
        try:
            turn = self.turn_of(req, owed)
        except Exception:  # the store is away: name the turn by the request, as a retry would
            log.warning("deciding the turn of an exchange failed", exc_info=True)
            turn = owed.turn = owed.turn or req.key
        messages = [self._message_in(req, turn, *side) for side in sides]
        try:
            self._messages.ingest(req.namespace, messages)
        except Exception:
            if len(messages) == 1:
                raise
            log.warning("storing the exchange in one write failed; storing each side alone", exc_info=True)
            failed: Exception | None = None
            for message in messages:
                try:
                    self._messages.ingest(req.namespace, [message])
                except Exception as exc:
                    failed = exc
            if failed is not None:
                raise failed from None

    @staticmethod
    def _message_in(
        req: TurnRequest, turn: str, role: Literal["user", "assistant"], content: str, at: datetime, error: str | None
    ) -> MessageIn:
        """One side of the exchange, named by its turn and role."""
        model = req.route.requested if role == "user" else req.route.model
        return MessageIn(
            role=role,
            content=content[:_MAX_STORED_CHARS],
            conversation_id=req.conversation,
            id=f"gw-{turn}-{role[0]}",
            created_at=at,
            model=model[:200],
            error=error,
        )

    def _cleanup_known(self, namespace: str, now: datetime) -> bool:
        """Whether this process knows the namespace's cleanup mark still holds at ``now`` (it wrote or
        read the mark, and the mark's interval has not run out since): then the turn skips the mark's
        read. Another process's mark is read once, then known here too. A mark removed from the store
        meanwhile (the cache cleared) is not seen until then: the next cleanup is enqueued at most one
        interval later than it would have been, never twice in one interval. Keyed by namespace."""
        until = self._cleanup_marked.get(namespace)
        return until is not None and now < until

    def _maybe_cleanup(self, namespace: str, now: datetime) -> None:
        if self._queue is None:
            return
        interval = self._cleanup_interval()
        mark = self._store.get_cache(namespace, "gateway:cleanup-enqueued")
        if mark is not None:
            try:
                at = datetime.fromisoformat(str(mark))
            except ValueError:
                return  # not a time: read again next turn
            if (at.tzinfo is None) == (now.tzinfo is None):
                self._note_cleanup(namespace, at + interval)
            return
        self._store.put_cache(namespace, "gateway:cleanup-enqueued", now.isoformat(), expires_at=now + interval)
        self._queue.enqueue("cleanup", {"namespace": namespace})
        self._note_cleanup(namespace, now + interval)

    def _note_cleanup(self, namespace: str, until: datetime) -> None:
        if len(self._cleanup_marked) >= _CLEANUP_MARKS_KEPT and namespace not in self._cleanup_marked:
            self._cleanup_marked.clear()  # many namespaces: start over (each reads its mark once more)
        self._cleanup_marked[namespace] = until
