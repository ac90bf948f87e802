"""What one chat turn is told: the boot block, the memories recalled for it, fragments of past
conversations and the reminders due now (where each goes in the request: ``services/chat/injection.py``).

The sources are read side by side — the conversation search starts before the boot block and the
memory recall and shares their query vector (cached) — and each degrades on its own: a failed
source is logged and the turn goes on without it (memory never fails a chat). The outcome is noted
on the exchange: ``ex.reason`` (the ``x-engram-reason`` header), ``ex.fragments`` (marked seen once
the upstream answered) and the claimed reminders (``ExchangeRecorder``).
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from engram.domain.text import estimate_tokens
from engram.services.chat.exchange import Exchange, ExchangeRecorder
from engram.services.recall.boot import BootService
from engram.services.recall.conversations import ConversationService
from engram.services.recall.pipeline import RecallResult, RecallService, render_prompt

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class TurnContext:
    """The texts for one turn ('' for a source with nothing to say)."""

    boot: str = ""
    recall: str = ""
    conversations: str = ""
    reminders: str = ""


class TurnContextSource:
    def __init__(
        self,
        *,
        boot: BootService,
        recall: RecallService,
        record: ExchangeRecorder,
        conversations: ConversationService | None = None,
        render_recall: Callable[[RecallResult], str] = render_prompt,
    ) -> None:
        self._boot = boot
        self._recall = recall
        self._record = record  # claims the turn's due reminders
        self._conversations = conversations
        self._render_recall = render_recall

    async def gather(
        self, ex: Exchange, *, boot_cache_seconds: float, boot_max_chars: int, patch_max_tokens: int
    ) -> TurnContext:
        # Past conversations are searched beside the memories (their query vector is the recall's, cached).
        past = self._search_conversations(ex)
        boot_text, boot_ids = await self._boot_block(ex.namespace, ex.agent, boot_cache_seconds, boot_max_chars)
        recall_text = ""
        if ex.user_text is None:
            ex.reason = "not_injectable"
        else:
            try:
                result = await asyncio.to_thread(
                    functools.partial(
                        self._recall.recall,
                        ex.namespace,
                        ex.user_text,
                        exclude_ids=boot_ids,
                        record_injection=True,
                        # A token budget (docs/recall.md, "How much is injected"); 0 = the top_k best.
                        budget_tokens=self._recall.config.budget_tokens,
                    )
                )
                recall_text = self._render_recall(result) if result.hits else ""
                ex.reason = "injected" if recall_text.strip() else "no_content"
                if result.meta.get("index") == "unavailable":
                    ex.reason = "index_unavailable"  # boot block (and what the index gave) only
            except Exception:
                log.warning("recall failed; the chat goes on without memories", exc_info=True)
                ex.reason = "recall_failed"
        conversation_text = await self._past_conversations(ex, past, patch_max_tokens - estimate_tokens(recall_text))
        reminder_text = await self._record.claim_reminders(ex)
        return TurnContext(boot_text, recall_text, conversation_text, reminder_text)

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

    def _search_conversations(self, ex: Exchange) -> asyncio.Future[Any] | None:
        """Start the search of other threads for the current turn (None when there is nothing to search)."""
        if self._conversations is None or ex.user_text is None:
            return None
        return asyncio.ensure_future(
            asyncio.to_thread(
                self._conversations.search, ex.namespace, ex.user_text, exclude_thread=ex.conversation, skip_seen=True
            )
        )

    async def _past_conversations(self, ex: Exchange, search: asyncio.Future[Any] | None, budget: int) -> str:
        """The fragments' block for the patch, in the token ``budget`` the memories left ('' if none)."""
        if search is None or self._conversations is None:
            return ""
        try:
            result = await search
            text, shown = self._conversations.render(result.fragments, budget)
        except Exception:
            log.warning("recalling past conversations failed; the chat goes on without them", exc_info=True)
            return ""
        ex.fragments = list(shown)
        return str(text)
