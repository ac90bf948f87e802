"""What one chat turn is told: the boot block, the memories recalled for it, fragments of past
conversations and the reminders due now (where each goes in the request: ``services/chat/injection.py``).

``gather`` reads the sources side by side — the conversation search and the reminder claim start at
once, the memory recall as soon as the boot block says which memories it already holds; the
conversation search shares the recall's query vector (cached) — and returns a ``TurnContext``. Each
source degrades on its own: a failed source is logged and the turn goes on without it (memory never
fails a chat).

With ``in_process`` (the store and the index live in this process: memory, SQLite) the reads that need
a worker thread — the reminder claim, the conversation search, the boot block when it is not cached,
then the recall — run one after another in ONE worker-thread hop; the event loop takes every answer
ready when the hop ends or the deadline comes, whichever is first (a source answered before the deadline
is used even when a later one misses it, as side by side), and is woken once for them all. Each of them
takes less CPU than a hop of its own would (bench/README.md, "Gateway overhead", and "session 10");
side by side pays off only where each waits on the network (DynamoDB, OpenSearch).

The turn waits for its context at most ``deadline`` seconds (``ENGRAM_CHAT_CONTEXT_DEADLINE_SECONDS``;
docs/recall.md, "A deadline per turn"): it then goes on with what is ready and the reason
``recall_timeout``. What was still running is left to finish on its own and its answer dropped: the
boot block, the recall and the conversation search only read (the recall's injection record is
written by the turn once it used the memories), so nothing is half done; a reminder claim still
running is handed to the recorder, which releases it once it lands, before the reply's last byte.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from engram.domain.models import new_id
from engram.domain.text import estimate_tokens
from engram.services.chat.turn import Reason, ReminderClaim, TurnContext, TurnRequest
from engram.services.library.reminders import ReminderService
from engram.services.recall.boot import BootService
from engram.services.recall.conversations import ConversationService
from engram.services.recall.pipeline import Recall, RecallResult, render_prompt

log = logging.getLogger(__name__)


class TurnContextSource:
    def __init__(
        self,
        *,
        boot: BootService,
        recall: Recall,
        reminders: ReminderService | None = None,
        conversations: ConversationService | None = None,
        render_recall: Callable[[RecallResult], str] = render_prompt,
        in_process: bool = False,
    ) -> None:
        self._boot = boot
        self._recall = recall
        self._reminders = reminders
        self._conversations = conversations
        self._render_recall = render_recall
        self._in_process = in_process

    async def gather(
        self,
        req: TurnRequest,
        *,
        deadline: float,
        boot_cache_seconds: float,
        boot_max_chars: int,
        patch_max_tokens: int,
    ) -> TurnContext:
        t0 = time.perf_counter()
        late: set[asyncio.Future[Any]]
        if self._in_process:
            hop = self._start_in_one_hop(req, boot_cache_seconds, boot_max_chars)
            past, claim, boot, recall = hop.past, hop.claim, hop.boot, hop.recall
            if hop.job is not None:
                await asyncio.wait({hop.job}, timeout=deadline)
            late = hop.hand_over()
        else:
            past = self._start_conversations(req)
            claim = asyncio.ensure_future(self._claim_reminders(req.namespace)) if self._reminders is not None else None
            boot = asyncio.ensure_future(self._boot_block(req.namespace, req.agent, boot_cache_seconds, boot_max_chars))
            recall = asyncio.ensure_future(self._recall_after(boot, req)) if req.user_text is not None else None
            running: set[asyncio.Future[Any]] = {t for t in (past, claim, boot, recall) if t is not None}
            _, late = await asyncio.wait(running, timeout=deadline)
        for task in late - {claim}:
            task.cancel()  # read-only: its thread finishes on its own, its answer is dropped

        boot_text = _outcome(boot, ("", ()))[0] if boot.done() and not boot.cancelled() else ""
        reason: Reason
        recall_text = ""
        recalled: tuple[str, ...] = ()
        if recall is None:
            reason = "not_injectable"
        elif recall in late:
            reason = "recall_timeout"
        else:
            reason, recall_text, recalled = _outcome(recall, ("recall_failed", "", ()))
        conversation_text = ""
        fragments: tuple[str, ...] = ()
        if past is not None and past not in late:
            conversation_text, fragments = self._past_conversations(
                past, patch_max_tokens - estimate_tokens(recall_text)
            )
        reminders: ReminderClaim | None = None
        late_claim: asyncio.Future[ReminderClaim | None] | None = None
        if claim is not None:
            if claim in late:
                late_claim = claim
            else:
                reminders = _outcome(claim, None)
        if late and reason not in ("not_injectable", "recall_timeout"):
            reason = "recall_timeout"  # another source missed the deadline: the context is incomplete
        return TurnContext(
            reason=reason,
            boot=boot_text,
            recall=recall_text,
            conversations=conversation_text,
            recalled=recalled,
            fragments=fragments,
            reminders=reminders,
            late_claim=late_claim,
            elapsed_ms=(time.perf_counter() - t0) * 1000,
        )

    # -- the sources ----------------------------------------------------------------------------------
    def _start_in_one_hop(self, req: TurnRequest, boot_cache_seconds: float, boot_max_chars: int) -> _OneHop:
        """Every source's future, answered from one worker-thread job that reads them one after another
        (``in_process``: module docstring). The cheap reads go first. Each answer is kept where the event
        loop takes it once the job ends or the deadline comes (``_OneHop.hand_over``), whichever is first,
        so a slow recall does not hold the others past the deadline, and the loop is woken once per turn,
        not once per source (a wake-up while the recall holds the GIL costs both threads a hand-off)."""
        asks = req.user_text is not None
        hop = _OneHop(past=self._conversations is not None and asks, claim=self._reminders is not None, recall=asks)
        past, claim, boot, recall = hop.past, hop.claim, hop.boot, hop.recall
        cached = self._boot.cached_block(req.namespace, req.agent, boot_cache_seconds)
        if cached is not None:
            boot.set_result((cached.text, cached.memory_ids))
            if past is None and claim is None and recall is None:
                return hop  # nothing to read on a worker thread

        def read_all() -> None:
            if recall is not None:
                self._start_embedding(req)
            # Each read answers its own future, whatever happens to the others: a source that fails past
            # its own guard is answered with its degraded value, and the reads after it still run.
            if claim is not None:
                answer_from(claim, lambda: self._claim_now(req.namespace), None)
            if past is not None:
                answer_from(past, lambda: self._search_conversations(req), _FAILED)
            block: tuple[str, tuple[str, ...]]
            if cached is None:
                block = answer_from(boot, lambda: self._boot_now(req.namespace, req.agent, boot_max_chars), ("", ()))
            else:
                block = (cached.text, cached.memory_ids)
            if recall is not None:
                answer_from(recall, lambda: self._recall_now(req, block[1]), ("recall_failed", "", ()))

        def answer_from(future: asyncio.Future[Any], read: Callable[[], Any], degraded: Any) -> Any:
            try:
                value = read()
            except Exception as exc:
                if degraded is _FAILED:  # read by ``_past_conversations``, which logs it
                    hop.answer(future, None, exc)
                    return None
                log.warning("a source of the turn's context failed; the chat goes on without it", exc_info=True)
                value = degraded
            hop.answer(future, value)
            return value

        hop.start(read_all)
        return hop

    def _start_embedding(self, req: TurnRequest) -> None:
        """The query embedding started first in the one hop, on the recall's embedding threads: the reads
        before the recall overlap it, and the conversation search and the recall share that one embedding."""
        try:
            self._recall.start_embedding(req.namespace, req.user_text or "")
        except Exception:  # the recall (or the conversation search) embeds it then
            log.warning("starting the query embedding failed", exc_info=True)

    async def _boot_block(
        self, namespace: str, agent: str | None, cache_seconds: float, max_chars: int
    ) -> tuple[str, tuple[str, ...]]:
        """The rendered boot block (kept briefly per namespace and agent) and the ids of its memories."""
        cached = self._boot.cached_block(namespace, agent, cache_seconds)
        if cached is None:
            return await asyncio.to_thread(self._boot_now, namespace, agent, max_chars)
        return cached.text, cached.memory_ids

    def _boot_now(self, namespace: str, agent: str | None, max_chars: int) -> tuple[str, tuple[str, ...]]:
        try:
            block = self._boot.block(namespace, agent, max_chars=max_chars)
        except Exception:
            log.warning("boot block unavailable; the chat goes on without it", exc_info=True)
            return "", ()
        return block.text, block.memory_ids

    async def _recall_after(
        self, boot: asyncio.Future[tuple[str, tuple[str, ...]]], req: TurnRequest
    ) -> tuple[Reason, str, tuple[str, ...]]:
        """The memories for the turn (not those of the boot block): the reason, their text, their ids."""
        await asyncio.wait({boot})  # a failed boot block leaves the recall to go on without its ids
        _, boot_ids = _outcome(boot, ("", ()))
        return await asyncio.to_thread(self._recall_now, req, boot_ids)

    def _recall_now(self, req: TurnRequest, boot_ids: tuple[str, ...]) -> tuple[Reason, str, tuple[str, ...]]:
        try:
            result = self._recall.recall(
                req.namespace,
                req.user_text or "",
                exclude_ids=boot_ids,
                # Recorded by the turn once it used them (``record_injection``), not here: a recall
                # that misses the deadline must leave no trace.
                record_injection=False,
                # A token budget (docs/recall.md, "How much is injected"); 0 = the top_k best.
                budget_tokens=self._recall.config.budget_tokens,
            )
            text = self._render_recall(result) if result.hits else ""
        except Exception:
            log.warning("recall failed; the chat goes on without memories", exc_info=True)
            return "recall_failed", "", ()
        reason: Reason = "injected" if text.strip() else "no_content"
        if result.meta.get("index") == "unavailable":
            reason = "index_unavailable"  # boot block (and what the index gave) only
        return reason, text, tuple(h.memory.id for h in result.hits)

    async def _claim_reminders(self, namespace: str) -> ReminderClaim | None:
        """Claim the namespace's due reminders for this turn (None when there are none or they are away)."""
        return await asyncio.to_thread(self._claim_now, namespace)

    def _claim_now(self, namespace: str) -> ReminderClaim | None:
        assert self._reminders is not None
        owner = new_id("turn")
        try:
            due = self._reminders.claim_due(namespace, owner)
            if not due:
                return None
            return ReminderClaim(namespace, owner, tuple(d.memory.id for d in due), str(self._reminders.render(due)))
        except Exception:
            log.warning("reminders unavailable; the chat goes on without them", exc_info=True)
            return None

    def _start_conversations(self, req: TurnRequest) -> asyncio.Future[Any] | None:
        """Start the search of other threads for the current turn (None when there is nothing to search)."""
        if self._conversations is None or req.user_text is None:
            return None
        return asyncio.ensure_future(asyncio.to_thread(self._search_conversations, req))

    def _search_conversations(self, req: TurnRequest) -> Any:
        assert self._conversations is not None
        return self._conversations.search(
            req.namespace, req.user_text or "", exclude_thread=req.conversation, skip_seen=True
        )

    def _past_conversations(self, search: asyncio.Future[Any], budget: int) -> tuple[str, tuple[str, ...]]:
        """The fragments' block for the patch in the token ``budget`` the memories left, and their ids."""
        assert self._conversations is not None
        try:
            result = search.result()
            text, shown = self._conversations.render(result.fragments, budget)
        except Exception:
            log.warning("recalling past conversations failed; the chat goes on without them", exc_info=True)
            return "", ()
        return str(text), tuple(shown)


_FAILED = object()  # ``answer_from``: hand the exception itself to the future's reader


class _OneHop:
    """The futures of the one-hop read (``TurnContextSource._start_in_one_hop``) and the answers its job
    has ready. Until the loop takes them (``hand_over``: the job ended, or the deadline came) the job only
    keeps each answer; after that, an answer still to come is handed to the loop on its own (a reminder
    claim that lands late is released by the recorder; the others are cancelled and their answer dropped)."""

    def __init__(self, *, past: bool, claim: bool, recall: bool) -> None:
        self._loop = loop = asyncio.get_running_loop()
        self.past: asyncio.Future[Any] | None = loop.create_future() if past else None
        self.claim: asyncio.Future[ReminderClaim | None] | None = loop.create_future() if claim else None
        self.boot: asyncio.Future[tuple[str, tuple[str, ...]]] = loop.create_future()
        self.recall: asyncio.Future[tuple[Reason, str, tuple[str, ...]]] | None = (
            loop.create_future() if recall else None
        )
        self.job: asyncio.Future[None] | None = None
        self._lock = threading.Lock()
        self._ready: list[tuple[asyncio.Future[Any], Any, BaseException | None]] = []
        self._handed = False

    def start(self, read_all: Callable[[], None]) -> None:
        """Run ``read_all`` on a worker thread as ``asyncio.to_thread`` does (the caller's context variables
        go along: services/library/journal.py), without a task around it."""
        try:
            job = self._loop.run_in_executor(None, functools.partial(contextvars.copy_context().run, read_all))
        except Exception:  # no worker thread (the loop's executor is shut down): every source is late,
            log.warning("reading the turn's context failed", exc_info=True)
            if self.claim is not None:  # but no reminder was claimed: nothing for the recorder to release
                self.claim.set_result(None)
            return
        job.add_done_callback(_log_failure)
        self.job = job

    def answer(self, future: asyncio.Future[Any], value: Any, error: BaseException | None = None) -> None:
        """A source's answer, from the job's thread."""
        with self._lock:
            if not self._handed:
                self._ready.append((future, value, error))
                return
        self._loop.call_soon_threadsafe(_settle, future, value, error)

    def hand_over(self) -> set[asyncio.Future[Any]]:
        """On the loop: settle every future whose answer is ready; the ones still running (late)."""
        with self._lock:
            self._handed, ready = True, self._ready
            self._ready = []
        for future, value, error in ready:
            _settle(future, value, error)
        return {f for f in (self.past, self.claim, self.boot, self.recall) if f is not None and not f.done()}


def _outcome(future: asyncio.Future[Any], degraded: Any) -> Any:
    """A finished source's answer, or its degraded value when it failed past its own guard (logged)."""
    try:
        return future.result()
    except Exception:
        log.warning("a source of the turn's context failed; the chat goes on without it", exc_info=True)
        return degraded


def _settle(future: asyncio.Future[Any], value: Any, error: BaseException | None) -> None:
    """A source's answer, handed over on the event loop (dropped when the deadline cancelled it)."""
    if future.done():
        return
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(value)


def _log_failure(job: asyncio.Future[None]) -> None:
    """The one-hop job's own failure (each source catches its own): logged, the turn goes on."""
    if not job.cancelled() and job.exception() is not None:
        log.warning("reading the turn's context failed", exc_info=job.exception())
