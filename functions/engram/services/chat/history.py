"""History kept by the server, for clients that send only their newest message (README, "Server-kept
history"; Pawwake calls it the partition cache).

Opted into per key (keys file ``"server_history": true``) or per request (``x-engram-history: on``),
a chat request gets its thread's history placed before the new message: a rolling summary of the older
turns, then the recent turns verbatim (a turn: a stored user message and the assistant reply after it).

The window of verbatim turns grows by one turn a request until a rotation: when it holds
``2 x ENGRAM_HISTORY_ROTATE_TURNS`` turns (or, with ``ENGRAM_HISTORY_ROTATE_MINUTES``, when its oldest
turn is older than that), its oldest turns are folded into the summary. Between rotations the summary
and the window only grow at their end, so everything before the new message is byte-stable from one
request to the next and a prompt cache keeps hitting (``domain/wire/cache_markers.py`` puts the system
anchor on the summary's block and the tail on the last stored turn). What is placed is kept within
``ENGRAM_HISTORY_BUDGET_CHARS``: when the window alone is over it, its oldest turns are left out.

The summary is written by the extraction model (``ENGRAM_EXTRACT_MODEL``, else the chat model) in a
queued ``history`` job, never in the request (docs/ARCHITECTURE.md, "Lambda rules"): the chat path only
notices a rotation is due and enqueues it. A failed summary call leaves the window as it was, to be
folded by a later job; with no model the folded turns just leave the context. The summary can be read,
edited, cleared, or copied from another thread (REST ``/v1/threads/{id}/summary``, MCP
``thread_summary`` / ``thread_summary_set``, the panel's Threads view).

The state of a thread (summary, the last folded message, rotations) is one cursor row of the store.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from itertools import pairwise
from typing import Any, Protocol

from engram.domain.errors import VERSION_CONFLICT, Conflict, InvalidInput, NotFound
from engram.domain.models import Message
from engram.domain.ports import ChatModel, Clock, JobQueue, KeyValueRows, MessageRows, ThreadRows
from engram.services.runtime_settings import Live

log = logging.getLogger(__name__)

CURSOR_PREFIX = "history:"
JOB = "history"
SUMMARY_HEADING = "Summary of the earlier conversation in this thread:"
_READ_SLACK = 20  # messages read beyond the window's turns (unanswered turns, tool rows)
_EDIT_ATTEMPTS = 5  # a hand edit re-read after a rotation landed between its read and its write

SUMMARY_SYSTEM = """\
You keep the running summary of one long conversation between a user and an assistant.
Rewrite the summary so it also covers the new part of the conversation. Keep what the rest of the
conversation may need: facts about the user, decisions, open questions, promises, names, dates, the
tone between them. Drop small talk. Write plain prose in the conversation's language, at most
{max_chars} characters. Answer with the summary text only."""


@dataclass(frozen=True)
class HistoryConfig:
    """``settings.py`` holds the defaults (written once); ``bootstrap/configs.py`` maps them."""

    rotate_turns: int
    rotate_minutes: float
    budget_chars: int
    summary_max_chars: int


@dataclass(frozen=True)
class ThreadHistory:
    """A thread's kept state: its summary and the position (``created_at``, id) of the last message folded
    into it; messages after that position are the verbatim window."""

    thread: str
    summary: str = ""
    until: tuple[datetime, str] | None = None
    rotations: int = 0
    updated_at: datetime | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "thread": self.thread,
            "summary": self.summary,
            "folded_until": self.until[0].isoformat() if self.until else None,
            "rotations": self.rotations,
            "updated_at": self.updated_at.isoformat() if self.updated_at else None,
        }


@dataclass(frozen=True)
class Turn:
    user: Message
    assistant: Message


@dataclass(frozen=True)
class History:
    """What one request is given: the summary and the verbatim turns (oldest first), within the budget."""

    summary: str
    turns: list[Turn]
    rotate_due: bool

    def summary_text(self) -> str:
        return f"{SUMMARY_HEADING}\n{self.summary}" if self.summary else ""


class HistoryStore(MessageRows, ThreadRows, KeyValueRows, Protocol):
    """What kept history reads (a thread's latest messages) and writes (its state, a cursor row)."""


class HistoryService:
    def __init__(
        self,
        store: HistoryStore,
        clock: Clock,
        model: ChatModel | None,
        config: HistoryConfig | Live[HistoryConfig],
        queue: JobQueue | None = None,
    ) -> None:
        self._store = store
        self._clock = clock
        self._model = model
        self._config = Live.of(config)
        self._queue = queue

    def attach_queue(self, queue: JobQueue) -> None:
        """The queue rotation jobs go to (bootstrap builds the queue after this service)."""
        self._queue = queue

    # -- the state ----------------------------------------------------------------------------------
    def state(self, namespace: str, thread: str) -> ThreadHistory:
        return self._read(namespace, thread)[0]

    def _read(self, namespace: str, thread: str) -> tuple[ThreadHistory, str | None]:
        """The thread's state and the raw row it was read from (what a write back must still find)."""
        raw = self._store.get_cursor(namespace, CURSOR_PREFIX + thread)
        return self._parse(thread, raw), raw

    @staticmethod
    def _parse(thread: str, raw: str | None) -> ThreadHistory:
        if not raw:
            return ThreadHistory(thread=thread)
        data = json.loads(raw)
        until = data.get("until")
        return ThreadHistory(
            thread=thread,
            summary=str(data.get("summary") or ""),
            until=(datetime.fromisoformat(until[0]), str(until[1])) if until else None,
            rotations=int(data.get("rotations") or 0),
            updated_at=datetime.fromisoformat(data["updated_at"]) if data.get("updated_at") else None,
        )

    def _save(self, namespace: str, state: ThreadHistory, read: str | None) -> ThreadHistory | None:
        """Write ``state`` back over the row ``read``; ``None`` if the row changed since (nothing written:
        docs/ARCHITECTURE.md, "Write rules")."""
        state = replace(state, updated_at=self._clock.now())
        data = {
            "summary": state.summary,
            "until": [state.until[0].isoformat(), state.until[1]] if state.until else None,
            "rotations": state.rotations,
            "updated_at": state.updated_at.isoformat() if state.updated_at else None,
        }
        value = json.dumps(data, ensure_ascii=False)
        if not self._store.replace_cursor(namespace, CURSOR_PREFIX + state.thread, value, expected=read):
            return None
        return state

    def set_summary(self, namespace: str, thread: str, summary: str) -> ThreadHistory:
        """Replace a thread's summary (an edit; the window is unchanged). Empty clears it."""
        text = summary.strip()
        limit = self._config().summary_max_chars
        if len(text) > limit:
            raise InvalidInput(
                f"a summary is at most {limit} characters (ENGRAM_HISTORY_SUMMARY_MAX_CHARS); got {len(text)}",
                code="summary_too_long",
            )
        for _ in range(_EDIT_ATTEMPTS):  # a rotation may land between the read and the write: read again
            state, raw = self._read(namespace, thread)
            saved = self._save(namespace, replace(state, summary=text), raw)
            if saved is not None:
                return saved
        raise Conflict(f"thread {thread!r}'s history kept changing; try again", code=VERSION_CONFLICT)

    def copy_summary(self, namespace: str, thread: str, source: str) -> ThreadHistory:
        """Start ``thread`` from ``source``'s summary (its own window is unchanged)."""
        found = self.state(namespace, source)
        if not found.summary:
            raise NotFound(f"thread {source!r} has no summary to start from", code="no_summary")
        return self.set_summary(namespace, thread, found.summary)

    def clear(self, namespace: str, thread: str) -> ThreadHistory:
        return self.set_summary(namespace, thread, "")

    # -- the request ----------------------------------------------------------------------------------
    def load(self, namespace: str, thread: str) -> History:
        """The history a request of ``thread`` is given, and whether a rotation is due."""
        cfg = self._config()
        state = self.state(namespace, thread)
        turns = self._window(namespace, thread, state, max_turns=4 * cfg.rotate_turns)
        due = bool(self._to_fold(turns, cfg))
        budget = max(0, cfg.budget_chars - len(state.summary))
        kept: list[Turn] = []
        used = 0
        for turn in reversed(turns):
            size = len(turn.user.content) + len(turn.assistant.content)
            if kept and used + size > budget:
                break
            kept.append(turn)
            used += size
        return History(summary=state.summary, turns=kept[::-1], rotate_due=due)

    def request_rotation(self, namespace: str, thread: str) -> bool:
        """Queue the rotation job of ``thread`` (the chat path calls this when ``load`` says it is due)."""
        if self._queue is None:
            return False
        self._queue.enqueue(JOB, {"namespace": namespace, "thread": thread})
        return True

    def _window(self, namespace: str, thread: str, state: ThreadHistory, *, max_turns: int) -> list[Turn]:
        """The thread's complete turns after the last folded message, oldest first (at most ``max_turns``)."""
        try:
            info = self._store.get_thread(namespace, thread)
        except NotFound:
            return []
        if info.last_message_at is None:
            return []
        latest = [
            m
            for m in self._store.list_messages(namespace, since=info.last_message_at, limit=100)
            if m.conversation_id == thread
        ]
        if not latest:
            return []
        last = latest[-1]
        rows = self._store.messages_around(namespace, last, before=2 * max_turns + _READ_SLACK, after=0)
        if state.until is not None:
            rows = [m for m in rows if (m.created_at, m.id) > state.until]
        return _turns(rows)[-max_turns:]

    def _to_fold(self, turns: Sequence[Turn], cfg: HistoryConfig) -> list[Turn]:
        """The oldest turns a rotation folds now (none: not due)."""
        if cfg.rotate_turns > 0 and len(turns) >= 2 * cfg.rotate_turns:
            return list(turns[: cfg.rotate_turns])
        if cfg.rotate_minutes > 0 and turns:
            cutoff = self._clock.now() - timedelta(minutes=cfg.rotate_minutes)
            return [t for t in turns if t.assistant.created_at < cutoff]
        return []

    # -- the job ------------------------------------------------------------------------------------
    async def rotate(self, namespace: str, thread: str) -> dict[str, Any]:
        """Fold the window's oldest turns into the summary, if a rotation is due (the ``history`` job;
        a second delivery of the same job finds nothing due)."""
        cfg = self._config()
        state, raw = self._read(namespace, thread)
        turns = self._window(namespace, thread, state, max_turns=4 * cfg.rotate_turns)
        fold = self._to_fold(turns, cfg)
        if not fold:
            return {"job": JOB, "thread": thread, "folded": 0, "errors": 0}
        summary = state.summary
        if self._model is not None:
            summary = await self._summarize(state.summary, fold, cfg.summary_max_chars)
        last = fold[-1].assistant
        folded = replace(state, summary=summary, until=(last.created_at, last.id), rotations=state.rotations + 1)
        if self._save(namespace, folded, raw) is None:
            # The summary was edited (or another rotation landed) while the model wrote: the person's edit
            # stays; the window is still due and the next turn queues the rotation again, from the edit.
            return {"job": JOB, "thread": thread, "folded": 0, "errors": 0, "conflict": True}
        return {"job": JOB, "thread": thread, "folded": len(fold), "errors": 0}

    async def _summarize(self, summary: str, fold: Sequence[Turn], max_chars: int) -> str:
        assert self._model is not None
        lines = [f"User: {t.user.content}\nAssistant: {t.assistant.content}" for t in fold]
        prompt = f"Summary so far:\n{summary or '(none yet)'}\n\nConversation to add:\n" + "\n\n".join(lines)
        text = await self._model.complete(
            [
                {"role": "system", "content": SUMMARY_SYSTEM.format(max_chars=max_chars)},
                {"role": "user", "content": prompt},
            ],
            max_tokens=max(256, max_chars // 2),
        )
        text = text.strip()
        if not text:
            # The window stays as it was; a later job folds it (a model that spent its tokens thinking).
            raise InvalidInput("the summary model answered with no text", code="empty_summary")
        return _cut(text, max_chars)


def _turns(rows: Sequence[Message]) -> list[Turn]:
    """Complete turns: a user message followed directly by an assistant reply (unanswered turns and tool
    rows left out)."""
    out: list[Turn] = []
    for before, after in pairwise(rows):
        if before.role == "user" and after.role == "assistant" and not before.error and after.content:
            out.append(Turn(user=before, assistant=after))
    return out


def _cut(text: str, max_chars: int) -> str:
    """At most ``max_chars``, cut after the last sentence end that fits when there is one."""
    if len(text) <= max_chars:
        return text
    head = text[:max_chars]
    end = max(head.rfind(p) for p in (". ", "。", "! ", "? ", "！", "？", "\n"))
    return head[: end + 1].strip() if end > max_chars // 2 else head.strip()


# -- placing it in a request (pure) -----------------------------------------------------------------------
def place_history(wire: str, body: dict[str, Any], history: History) -> dict[str, Any]:
    """``body`` with ``history`` before the client's messages: the summary as the last system block (after
    the client's own), the turns as user/assistant messages. The client's body is left as it was."""
    if not history.summary and not history.turns:
        return body
    turns: list[dict[str, Any]] = []
    for turn in history.turns:
        turns += [
            {"role": "user", "content": turn.user.content},
            {"role": "assistant", "content": turn.assistant.content},
        ]
    summary = history.summary_text()
    messages = list(body.get("messages") or [])
    if wire == "anthropic":
        out = {**body, "messages": turns + messages}
        if summary:
            system = body.get("system")
            blocks = [{"type": "text", "text": system}] if isinstance(system, str) and system else list(system or [])
            out["system"] = [*blocks, {"type": "text", "text": summary}]
        return out
    lead = 0
    while lead < len(messages) and messages[lead].get("role") in ("system", "developer"):
        lead += 1
    placed = [{"role": "system", "content": summary}] if summary else []
    return {**body, "messages": messages[:lead] + placed + turns + messages[lead:]}
