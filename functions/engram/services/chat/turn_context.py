"""What one chat turn is told: the boot block, the memories recalled for it, fragments of past
conversations and the reminders due now (where each goes in the request: ``services/chat/injection.py``).

``gather`` reads the sources side by side — the conversation search and the reminder claim start at
once, the memory recall as soon as the boot block says which memories it already holds; the
conversation search shares the recall's query vector (cached) — and returns a ``TurnContext``. Each
source degrades on its own: a failed source is logged and the turn goes on without it (memory never
fails a chat).

The turn waits for its context at most ``deadline`` seconds (``ENGRAM_CHAT_CONTEXT_DEADLINE_SECONDS``;
docs/recall.md, "A deadline per turn"): it then goes on with what is ready and the reason
``recall_timeout``. What was still running is left to finish on its own and its answer dropped: the
boot block, the recall and the conversation search only read (the recall's injection record is
written by the turn once it used the memories), so nothing is half done; a reminder claim still
running is handed to the recorder, which releases it once it lands, before the reply's last byte.
"""

from __future__ import annotations

import asyncio
import functools
import logging
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
    ) -> None:
        self._boot = boot
        self._recall = recall
        self._reminders = reminders
        self._conversations = conversations
        self._render_recall = render_recall

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
        past = self._start_conversations(req)
        claim = asyncio.ensure_future(self._claim_reminders(req.namespace)) if self._reminders is not None else None
        boot = asyncio.ensure_future(self._boot_block(req.namespace, req.agent, boot_cache_seconds, boot_max_chars))
        recall = asyncio.ensure_future(self._recall_after(boot, req)) if req.user_text is not None else None
        running: set[asyncio.Future[Any]] = {t for t in (past, claim, boot, recall) if t is not None}
        _, late = await asyncio.wait(running, timeout=deadline)
        for task in late - {claim}:
            task.cancel()  # read-only: its thread finishes on its own, its answer is dropped

        boot_text = boot.result()[0] if boot.done() and not boot.cancelled() else ""
        reason: Reason
        recall_text = ""
        recalled: tuple[str, ...] = ()
        if recall is None:
            reason = "not_injectable"
        elif recall in late:
            reason = "recall_timeout"
        else:
            reason, recall_text, recalled = recall.result()
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
                reminders = claim.result()
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
    async def _boot_block(
        self, namespace: str, agent: str | None, cache_seconds: float, max_chars: int
    ) -> tuple[str, tuple[str, ...]]:
        """The rendered boot block (kept briefly per namespace and agent) and the ids of its memories."""
        cached = self._boot.cached_block(namespace, agent, cache_seconds)
        if cached is None:
            try:
                cached = await asyncio.to_thread(self._boot.block, namespace, agent, max_chars=max_chars)
            except Exception:
                log.warning("boot block unavailable; the chat goes on without it", exc_info=True)
                return "", ()
        return cached.text, cached.memory_ids

    async def _recall_after(
        self, boot: asyncio.Future[tuple[str, tuple[str, ...]]], req: TurnRequest
    ) -> tuple[Reason, str, tuple[str, ...]]:
        """The memories for the turn (not those of the boot block): the reason, their text, their ids."""
        _, boot_ids = await boot
        try:
            result = await asyncio.to_thread(
                functools.partial(
                    self._recall.recall,
                    req.namespace,
                    req.user_text or "",
                    exclude_ids=boot_ids,
                    # Recorded by the turn once it used them (``record_injection``), not here: a recall
                    # that misses the deadline must leave no trace.
                    record_injection=False,
                    # A token budget (docs/recall.md, "How much is injected"); 0 = the top_k best.
                    budget_tokens=self._recall.config.budget_tokens,
                )
            )
        except Exception:
            log.warning("recall failed; the chat goes on without memories", exc_info=True)
            return "recall_failed", "", ()
        text = self._render_recall(result) if result.hits else ""
        reason: Reason = "injected" if text.strip() else "no_content"
        if result.meta.get("index") == "unavailable":
            reason = "index_unavailable"  # boot block (and what the index gave) only
        return reason, text, tuple(h.memory.id for h in result.hits)

    async def _claim_reminders(self, namespace: str) -> ReminderClaim | None:
        """Claim the namespace's due reminders for this turn (None when there are none or they are away)."""
        assert self._reminders is not None
        owner = new_id("turn")
        try:
            due = await asyncio.to_thread(self._reminders.claim_due, namespace, owner)
        except Exception:
            log.warning("reminders unavailable; the chat goes on without them", exc_info=True)
            return None
        if not due:
            return None
        return ReminderClaim(namespace, owner, tuple(d.memory.id for d in due), str(self._reminders.render(due)))

    def _start_conversations(self, req: TurnRequest) -> asyncio.Future[Any] | None:
        """Start the search of other threads for the current turn (None when there is nothing to search)."""
        if self._conversations is None or req.user_text is None:
            return None
        return asyncio.ensure_future(
            asyncio.to_thread(
                self._conversations.search,
                req.namespace,
                req.user_text,
                exclude_thread=req.conversation,
                skip_seen=True,
            )
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
