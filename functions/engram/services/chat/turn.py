"""The data of one chat turn, as values: what was asked (``TurnRequest``), what it was told
(``TurnContext``, returned by ``TurnContextSource.gather``) and what its headers say (``Outcome``).

Each is built once by the stage that knows it and never changed afterwards; the writes a turn still
owes before its last byte are the recorder's alone (``services/chat/exchange.py``, ``Owed``).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Literal

from engram.services.chat.routing import Route
from engram.services.library.threads import thread_id_of

Wire = Literal["openai", "anthropic", "responses"]  # the client's door
Reason = Literal[
    "injected",
    "no_content",
    "disabled",
    "body_too_large",
    "not_injectable",
    "recall_failed",
    "index_unavailable",
    "recall_timeout",
]


@dataclass(frozen=True)
class TurnRequest:
    """One chat request as the gateway understood it.

    ``body`` is chat-shaped (the Responses door translated, a thread's kept history placed);
    ``responses`` is the Responses request as the client sent it, and ``native`` whether it goes to the
    upstream as it is. ``memory`` is the client's ``x-engram-memory`` (README, "Turning memory off for a
    turn"): off, the turn is neither told nor remembered. ``persist``: the exchange is stored.
    """

    namespace: str
    wire: Wire
    body: dict[str, Any]
    route: Route
    user_text: str | None = None
    conversation: str = "default"
    agent: str | None = None  # x-engram-agent: its allocated skills join the boot block
    custom_tools: frozenset[str] = frozenset()  # Responses door: free-form tools, answered as custom_tool_call
    responses: dict[str, Any] | None = None
    native: bool = False
    memory: bool = True
    persist: bool = True
    client_wants_usage: bool = True  # the client asked for the usage chunk of a stream (OpenAI wire)

    @cached_property
    def key(self) -> str:
        """Same namespace, conversation, earlier turns and last user message -> same key (a retry candidate)."""
        material = json.dumps(
            [self.namespace, self.conversation, self.body.get("messages") or []],
            ensure_ascii=False,
            sort_keys=True,
            separators=(",", ":"),
            default=str,
        )
        return hashlib.sha256(material.encode()).hexdigest()[:32]


@dataclass(frozen=True)
class ReminderClaim:
    """Reminders a turn claimed (``ReminderService.claim_due``): delivered once the upstream answered,
    released otherwise."""

    namespace: str
    owner: str
    memory_ids: tuple[str, ...]
    text: str  # their lines for the patch


@dataclass(frozen=True)
class TurnContext:
    """What a turn is told ('' for a source with nothing to say), and what that commits it to.

    ``recalled``: the memories in ``recall`` (their injection is recorded once the turn used them);
    ``fragments``: the past-conversation messages in ``conversations`` (marked seen once the upstream
    answered); ``reminders``: the claim behind ``reminder_text``; ``late_claim``: a reminder claim still
    running when the deadline passed (released once it lands, before the last byte).
    """

    reason: Reason
    boot: str = ""
    recall: str = ""
    conversations: str = ""
    recalled: tuple[str, ...] = ()
    fragments: tuple[str, ...] = ()
    reminders: ReminderClaim | None = None
    late_claim: asyncio.Future[ReminderClaim | None] | None = field(default=None, compare=False)
    elapsed_ms: float = 0.0

    @property
    def reminder_text(self) -> str:
        return self.reminders.text if self.reminders is not None else ""


@dataclass(frozen=True)
class Outcome:
    """What the ``x-engram-*`` headers report."""

    reason: Reason = "disabled"
    injected: bool = False
    recall_ms: float = 0.0

    def headers(self, upstream_ms: float = 0.0) -> dict[str, str]:
        return {
            "x-engram-injected": "1" if self.injected else "0",
            "x-engram-reason": self.reason,
            "x-engram-recall-ms": f"{self.recall_ms:.1f}",
            "x-engram-upstream-ms": f"{upstream_ms:.1f}",
        }


def thread_of(wire: Wire, body: dict[str, Any], pinned: str | None) -> str:
    """The thread (conversation id) of a request: the ``x-engram-thread`` header, else the wire's own
    user field (OpenAI ``user``, Anthropic ``metadata.user_id``), else ``default`` (docs/threads.md)."""
    if wire != "anthropic":  # the Responses door's body is already a chat request here
        return thread_id_of(pinned, body.get("user"))
    metadata = body.get("metadata")
    return thread_id_of(pinned, metadata.get("user_id") if isinstance(metadata, dict) else None)


def client_wants_usage(body: dict[str, Any], wire: Wire, provider: str, *, native: bool, persist: bool) -> bool:
    """Whether the client itself asked for a stream's usage chunk (the gateway asks the upstream for it
    anyway where it logs usage or must report it: the tap then drops it unless asked)."""
    asked = bool((body.get("stream_options") or {}).get("include_usage"))
    if native or wire == "anthropic":
        return True
    if provider in ("openai", "bedrock"):
        return asked if body.get("stream") and (persist or wire == "responses") else True
    return asked  # to an Anthropic upstream: converted back, usage only if asked
