"""Everything around the memories: precious notes, glossary, digest, stats and message ingest (the
boot package that gathers them: ``services/boot.py``)."""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

from pydantic import BaseModel, ConfigDict, Field

from engram.domain.models import (
    DailyLog,
    Digest,
    GlossaryTerm,
    Message,
    MessageRole,
    Precious,
    new_id,
)
from engram.domain.policies import clean_content, clean_digest, clean_tags
from engram.domain.ports import Clock, MemoryStore

MAX_MESSAGE_CHARS = 100_000
MAX_ERROR_CHARS = 500


class MessageIn(BaseModel):
    """One chat message to store. ``id`` (or ``created_at``) keeps identical repeats apart."""

    model_config = ConfigDict(extra="forbid")

    role: MessageRole
    content: str = Field(min_length=1, max_length=MAX_MESSAGE_CHARS)
    conversation_id: str = Field(default="default", min_length=1, max_length=200)
    id: str | None = Field(default=None, max_length=200)
    created_at: datetime | None = None
    model: str | None = Field(default=None, max_length=200)
    error: str | None = Field(
        default=None, max_length=MAX_ERROR_CHARS, description="why this turn got no answer (upstream failure)"
    )


class GlossaryIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    term: str = Field(min_length=1, max_length=200)
    aliases: list[str] = Field(default_factory=list, max_length=50)
    definition: str = Field(min_length=1, max_length=2000)


def message_key(namespace: str, msg: MessageIn) -> str:
    """The idempotency key of an ingested message: the client's id, else a content hash."""
    if msg.id:
        return f"id:{msg.id}"
    stamp = msg.created_at.isoformat() if msg.created_at else ""
    raw = "\x1f".join((namespace, msg.conversation_id, msg.role, msg.content, stamp))
    return "h:" + hashlib.sha256(raw.encode()).hexdigest()[:32]


class LibraryService:
    def __init__(self, store: MemoryStore, clock: Clock, timezone: str | Callable[[], str] = "UTC") -> None:
        self._store = store
        self._clock = clock
        # A callable reads the time zone per use (runtime settings change it without a restart).
        if isinstance(timezone, str):
            zone = ZoneInfo(timezone)
            self._timezone: Callable[[], str] = lambda: zone.key
        else:
            self._timezone = timezone

    @property
    def _tz(self) -> ZoneInfo:
        return ZoneInfo(self._timezone())

    # -- messages ---------------------------------------------------------------------------
    def ingest(self, namespace: str, messages: Sequence[MessageIn]) -> dict[str, Any]:
        """Store messages once each; returns ids and how many were new."""
        stored: list[dict[str, Any]] = []
        created = 0
        now = self._clock.now()
        for msg in messages:
            row, new = self._store.insert_message(
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
            )
            created += int(new)
            stored.append({"id": row.id, "created": new})
        return {"messages": stored, "created": created, "duplicates": len(messages) - created}

    # -- precious ---------------------------------------------------------------------------
    def add_precious(
        self,
        namespace: str,
        content: str,
        *,
        reason: str | None = None,
        tags: Sequence[str] = (),
        source: str = "api",
        source_message_ids: Sequence[str] = (),
    ) -> Precious:
        return self._store.insert_precious(
            Precious(
                id=new_id("prc"),
                namespace=namespace,
                content=clean_content(content),
                reason=reason,
                tags=clean_tags(tags),
                source=source,
                source_message_ids=tuple(source_message_ids),
                created_at=self._clock.now(),
            )
        )

    def list_precious(self, namespace: str, limit: int = 100) -> list[Precious]:
        return self._store.list_precious(namespace, limit=limit)

    def delete_precious(self, namespace: str, precious_id: str) -> None:
        self._store.delete_precious(namespace, precious_id)

    # -- glossary ---------------------------------------------------------------------------
    def set_term(self, namespace: str, body: GlossaryIn, term_id: str | None = None) -> GlossaryTerm:
        """Create a term, or replace one: by ``term_id``, else the existing term of the same name."""
        now = self._clock.now()
        existing: GlossaryTerm | None = None
        if term_id:
            existing = self._store.get_glossary_term(namespace, term_id)
        else:
            folded = body.term.strip().casefold()
            existing = next((t for t in self._store.list_glossary(namespace) if t.term.casefold() == folded), None)
        aliases = tuple(dict.fromkeys(a.strip() for a in body.aliases if a.strip()))
        return self._store.put_glossary_term(
            GlossaryTerm(
                id=existing.id if existing else new_id("gls"),
                namespace=namespace,
                term=body.term.strip(),
                aliases=aliases,
                definition=body.definition.strip(),
                created_at=existing.created_at if existing else now,
                updated_at=now,
            )
        )

    def list_glossary(self, namespace: str) -> list[GlossaryTerm]:
        return self._store.list_glossary(namespace)

    def get_term(self, namespace: str, term_id: str) -> GlossaryTerm:
        return self._store.get_glossary_term(namespace, term_id)

    def delete_term(self, namespace: str, term_id: str) -> None:
        self._store.delete_glossary_term(namespace, term_id)

    # -- digest and boot --------------------------------------------------------------------
    def get_digest(self, namespace: str) -> Digest | None:
        return self._store.get_digest(namespace)

    def set_digest(self, namespace: str, content: str) -> Digest:
        return self._store.put_digest(
            Digest(namespace=namespace, content=clean_digest(content), updated_at=self._clock.now())
        )

    def today(self) -> str:
        return self._clock.now().astimezone(self._tz).date().isoformat()

    def yesterday(self) -> str:
        return (self._clock.now().astimezone(self._tz).date() - timedelta(days=1)).isoformat()

    def start_of_today(self) -> datetime:
        local = self._clock.now().astimezone(self._tz)
        return local.replace(hour=0, minute=0, second=0, microsecond=0)

    def daily_log(self, namespace: str, date: str) -> DailyLog | None:
        return self._store.get_daily_log(namespace, date)

    def stats(self, namespace: str) -> dict[str, Any]:
        counts = self._store.count_memories(namespace)
        pending = len(self._store.list_candidates(namespace, "pending", limit=1000).items)
        return {
            "memories": counts,
            "pending_candidates": pending,
            "messages_today": self._store.count_messages(namespace, since=self.start_of_today()),
            "messages_total": self._store.count_messages(namespace),
            "precious": len(self._store.list_precious(namespace, limit=10_000)),
            "glossary": len(self._store.list_glossary(namespace)),
        }
