"""Chat messages stored once each (`POST /v1/ingest/messages`, MCP `memory_ingest`, the chat gateway's
exchange); the extraction job later turns them into memories."""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, ConfigDict, Field

from engram.domain.models import Message, MessageRole, new_id
from engram.domain.policies import MAX_THREAD_ID_CHARS, instant_in_range, thread_id_field
from engram.domain.ports import Clock, MessageRows

log = logging.getLogger(__name__)

MAX_MESSAGE_CHARS = 100_000
MAX_ERROR_CHARS = 500


# A thread id wherever one enters (ingest, MCP, merges): the grammar of domain/policies.py, 400 else.
ThreadId = Annotated[str, Field(min_length=1, max_length=MAX_THREAD_ID_CHARS), AfterValidator(thread_id_field)]


class MessageIn(BaseModel):
    """One chat message to store. ``id`` (or ``created_at``) keeps identical repeats apart."""

    model_config = ConfigDict(extra="forbid")

    role: MessageRole
    content: str = Field(min_length=1, max_length=MAX_MESSAGE_CHARS)
    conversation_id: ThreadId = "default"
    id: str | None = Field(default=None, max_length=200)
    created_at: Annotated[datetime, AfterValidator(instant_in_range)] | None = None
    model: str | None = Field(default=None, max_length=200)
    error: str | None = Field(
        default=None, max_length=MAX_ERROR_CHARS, description="why this turn got no answer (upstream failure)"
    )


def message_key(namespace: str, msg: MessageIn) -> str:
    """The idempotency key of an ingested message: the client's id, else a content hash."""
    if msg.id:
        return f"id:{msg.id}"
    stamp = msg.created_at.isoformat() if msg.created_at else ""
    raw = "\x1f".join((namespace, msg.conversation_id, msg.role, msg.content, stamp))
    return "h:" + hashlib.sha256(raw.encode()).hexdigest()[:32]


class MessageService:
    """``on_stored(namespace, messages)`` is told the newly stored messages (conversation recall indexes
    their words at once: ``ConversationService.index_stored``); its failure never fails an ingest."""

    def __init__(
        self,
        store: MessageRows,
        clock: Clock,
        on_stored: Callable[[str, Sequence[Message]], object] | None = None,
    ) -> None:
        self._store = store
        self._clock = clock
        self._on_stored = on_stored

    def ingest(self, namespace: str, messages: Sequence[MessageIn]) -> dict[str, Any]:
        """Store messages once each, in one store call (one transaction on SQLite); returns ids and how
        many were new."""
        now = self._clock.now()
        rows = self._store.insert_messages(
            [
                Message(
                    id=new_id("msg"),
                    namespace=namespace,
                    conversation_id=msg.conversation_id,
                    role=msg.role,
                    content=msg.content,
                    model=msg.model,
                    external_id=message_key(namespace, msg),
                    created_at=msg.created_at or now,
                    error=msg.error,
                    stored_at=now,
                )
                for msg in messages
            ]
        )
        stored = [{"id": row.id, "created": new} for row, new in rows]
        fresh = [row for row, new in rows if new]
        created = len(fresh)
        if fresh and self._on_stored is not None:
            try:
                self._on_stored(namespace, fresh)
            except Exception:
                log.warning("after-store hook failed; the messages are stored", exc_info=True)
        return {"messages": stored, "created": created, "duplicates": len(messages) - created}
