"""The chat gateway use case: recall, inject, forward (streaming), store the exchange.

``ChatService.handle`` takes a client request on either wire (OpenAI chat completions or Anthropic
Messages) and returns a ``ChatReply``: a status, the ``x-engram-*`` headers and either a whole body or
an async byte stream that passes upstream events on as they arrive. Nothing here fails the chat
because of memory: recall, boot block, remember and persistence errors are logged and skipped.

Nothing happens after the last byte (docs/aws.md, "How Lambda runs it"): every write a request owes
(its messages, usage, an explicit "remember ...", the cleanup enqueue) is done before the response
ends — a whole body is built after them, a stream holds back only its closing event (``[DONE]``,
``message_stop``) until they are done. A frozen or recycled process has nothing left to lose.

Nothing the user wrote is lost: once a request was sent upstream, the user's turn is stored whatever
happens next (an error status, a timeout, an unreachable or malformed upstream, a stream cut midway,
the client going away), with ``Message.error`` saying what went wrong, so extraction still learns from
it. A retry of the same turn is not stored twice: the stored rows are keyed by the conversation so far
(``_exchange_key``: namespace, conversation id and every message of the request), so the retry's user
turn is recognised as the one already stored and only its answer is added.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
import re
import time
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Literal, Protocol

import anyio

from engram.domain.errors import EngramError, NotConfigured, UpstreamTimeout, UpstreamUnavailable
from engram.domain.models import UsageRecord, new_id
from engram.domain.ports import AuditRows, ChatUpstream, Clock, JobQueue, KeyValueRows, NoteRows, UpstreamReply
from engram.domain.prompt_cache import CachePolicy
from engram.domain.sse import SSE_DONE, SSE_PING, SseEvent, SseParser, sse_bytes
from engram.services import wire as w
from engram.services.injection import (
    BootData,
    Injected,
    inject_anthropic,
    inject_openai,
    last_user_text,
    render_boot_block,
)
from engram.services.library import MAX_ERROR_CHARS, LibraryService, MessageIn
from engram.services.memories import MemoryService
from engram.services.recall import RecallResult, RecallService, render_prompt
from engram.services.reminders import ReminderService
from engram.services.routing import Route, RouteConfig, anthropic_has_images, openai_has_images, route
from engram.services.skills import SkillService
from engram.services.threads import thread_id_of
from engram.services.wire_shapes import (
    check_upstream_response,
    parse_chat_request,
    parse_upstream_event,
    upstream_error_message,
)

log = logging.getLogger(__name__)

Wire = Literal["openai", "anthropic"]
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


def _thread_of(wire: Wire, body: dict[str, Any], pinned: str | None) -> str:
    """The thread (conversation id) of a request: the ``x-engram-thread`` header, else the wire's own
    user field (OpenAI ``user``, Anthropic ``metadata.user_id``), else ``default`` (docs/threads.md)."""
    if wire == "openai":
        return thread_id_of(pinned, body.get("user"))
    metadata = body.get("metadata")
    return thread_id_of(pinned, metadata.get("user_id") if isinstance(metadata, dict) else None)


@dataclass(frozen=True)
class ChatConfig:
    routing: RouteConfig
    inject_enabled: bool = True
    inject_max_body_bytes: int = 2 * 1024 * 1024
    boot_max_chars: int = 8000
    boot_cache_seconds: float = 30.0
    keepalive_seconds: float = 15.0
    store_messages: bool = True
    default_max_tokens: int = 4096
    cleanup_interval: timedelta = timedelta(hours=24)
    cache: CachePolicy | None = field(default_factory=CachePolicy)

    @classmethod
    def from_settings(
        cls, s: Any, *, openai_configured: bool, anthropic_configured: bool, bedrock_configured: bool = False
    ) -> ChatConfig:
        return cls(
            routing=RouteConfig(
                public_model=s.public_model_name,
                chat_model=s.chat_model,
                vision_model=s.vision_model,
                allow_passthrough=s.chat_allow_model_passthrough,
                openai_configured=openai_configured,
                anthropic_configured=anthropic_configured,
                bedrock_configured=bedrock_configured,
            ),
            inject_enabled=s.chat_inject_enabled,
            inject_max_body_bytes=s.chat_inject_max_body_bytes,
            boot_max_chars=s.chat_boot_max_chars,
            boot_cache_seconds=s.chat_boot_cache_seconds,
            keepalive_seconds=s.chat_keepalive_seconds,
            store_messages=s.chat_store_messages,
            default_max_tokens=s.chat_default_max_tokens,
            cleanup_interval=timedelta(hours=s.cleanup_min_interval_hours),
            cache=CachePolicy(ttl=s.anthropic_cache_ttl) if s.anthropic_cache_enabled else None,
        )


@dataclass
class ChatReply:
    """What the HTTP layer sends: ``error`` (not yet mapped to a status) or ``body`` or ``stream``."""

    status: int
    headers: dict[str, str]
    body: bytes | None = None
    stream: AsyncIterator[bytes] | None = None
    media_type: str = "application/json"
    error: EngramError | None = None


@dataclass
class _Exchange:
    """One request on its way through the gateway."""

    namespace: str
    wire: Wire
    body: dict[str, Any]
    route: Route | None = None
    user_text: str | None = None
    conversation: str = "default"
    agent: str | None = None  # x-engram-agent: its allocated skills join the boot block
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
    key: str = ""  # the exchange's idempotency key, computed once (``ChatService._exchange_key``)
    # Reminders this turn claimed and injected: delivered once the upstream answered, else released.
    reminders: list[str] = field(default_factory=list)
    reminder_owner: str = ""

    def headers(self) -> dict[str, str]:
        return {
            "x-engram-injected": "1" if self.injected else "0",
            "x-engram-reason": self.reason,
            "x-engram-recall-ms": f"{self.recall_ms:.1f}",
            "x-engram-upstream-ms": f"{self.upstream_ms:.1f}",
        }


class ChatStore(NoteRows, AuditRows, KeyValueRows, Protocol):
    """What the chat gateway reads and writes: the boot block's notes, usage, the boot cache."""


class ChatService:
    def __init__(
        self,
        *,
        openai: ChatUpstream,
        anthropic: ChatUpstream,
        store: ChatStore,
        library: LibraryService,
        memories: MemoryService,
        recall: RecallService,
        clock: Clock,
        config: ChatConfig | Callable[[], ChatConfig],
        queue: JobQueue | None = None,
        render_recall: Callable[[RecallResult], str] = render_prompt,
        bedrock: ChatUpstream | None = None,
        reminders: ReminderService | None = None,
        skills: SkillService | None = None,
    ) -> None:
        self._openai = openai
        self._reminders = reminders
        self._skills = skills  # the skills an agent is told about
        self._anthropic = anthropic
        # Bedrock takes the OpenAI wire (its adapter converts to Converse), so past routing it is
        # handled exactly like the OpenAI-compatible upstream: same injection, same stream tap.
        self._bedrock = bedrock
        self._store = store
        self._library = library
        self._memories = memories
        self._recall = recall
        self._render_recall = render_recall
        self._clock = clock
        # A callable is read per use: runtime settings (admin panel) change it without a restart.
        self._config_of: Callable[[], ChatConfig] = config if callable(config) else (lambda: config)
        self._queue = queue
        self._boot_cache: dict[str, tuple[float, str, tuple[str, ...]]] = {}

    @property
    def _config(self) -> ChatConfig:
        return self._config_of()

    # -- the request ----------------------------------------------------------------------------
    async def handle(
        self,
        namespace: str,
        wire: Wire,
        raw: bytes,
        *,
        guide_dog: bool = False,
        conversation_id: str | None = None,
        memory_off: bool = False,
        forward_headers: Mapping[str, str] | None = None,
        agent: str | None = None,
    ) -> ChatReply:
        ex = _Exchange(namespace=namespace, wire=wire, body={}, agent=(agent or "").strip()[:64] or None)
        try:
            body = parse_chat_request(raw, wire)
            ex.body = body
            ex.persist = self._config.store_messages and not guide_dog
            ex.conversation = _thread_of(wire, body, conversation_id)
            has_images = openai_has_images(body) if wire == "openai" else anthropic_has_images(body)
            ex.route = route(
                str(body.get("model") or ""), has_images=has_images, config=self._config.routing, vision_only=guide_dog
            )
            ex.user_text = last_user_text(body)
            upstream_body = self._to_upstream(ex)
            if not guide_dog:
                upstream_body = await self._inject(ex, upstream_body, len(raw), memory_off)
                self._remember(ex)
            return await self._forward(ex, upstream_body, forward_headers or {})
        except EngramError as exc:
            await self._settle_failed(ex, exc)
            return ChatReply(status=0, headers=ex.headers(), error=exc)

    def _to_upstream(self, ex: _Exchange) -> dict[str, Any]:
        assert ex.route is not None
        out = self._convert(ex)
        if ex.route.provider == "bedrock":
            # Prompt caching on Bedrock: the adapter places Converse cache points (Claude models only)
            # where a top-level ``cache_control`` asks for them; the settings decide, not the client.
            cache = self._config.cache
            if cache is None:
                out.pop("cache_control", None)
            else:
                out["cache_control"] = cache.marker()
        return out

    def _convert(self, ex: _Exchange) -> dict[str, Any]:
        assert ex.route is not None
        body, provider, model = ex.body, ex.route.provider, ex.route.model
        if ex.wire == "openai" and provider in ("openai", "bedrock"):
            out = {**body, "model": model}
            if body.get("stream") and ex.persist:  # usage is logged with the exchange
                opts = dict(body.get("stream_options") or {})
                ex.client_wants_usage = bool(opts.get("include_usage"))
                out["stream_options"] = {**opts, "include_usage": True}
            return out
        if ex.wire == "anthropic" and provider == "anthropic":
            return {**body, "model": model}
        if ex.wire == "openai":
            ex.client_wants_usage = bool((body.get("stream_options") or {}).get("include_usage"))
            out = w.openai_request_to_anthropic(body, model)
            if not (body.get("max_completion_tokens") or body.get("max_tokens")):
                out["max_tokens"] = self._config.default_max_tokens
            return out
        return w.anthropic_request_to_openai(body, model)

    # -- memory -------------------------------------------------------------------------------------
    async def _inject(self, ex: _Exchange, body: dict[str, Any], size: int, memory_off: bool) -> dict[str, Any]:
        assert ex.route is not None
        if not self._config.inject_enabled or memory_off:
            ex.reason = "disabled"
            return body
        if size > self._config.inject_max_body_bytes:
            ex.reason = "body_too_large"
            return body
        t0 = time.perf_counter()
        boot_text, boot_ids = await self._boot(ex.namespace, ex.agent)
        recall_text = ""
        if ex.user_text is None:
            ex.reason = "not_injectable"
        else:
            try:
                result = await asyncio.to_thread(
                    self._recall.recall, ex.namespace, ex.user_text, exclude_ids=boot_ids, record_injection=True
                )
                recall_text = self._render_recall(result) if result.hits else ""
                ex.reason = "injected" if recall_text.strip() else "no_content"
                if result.meta.get("index") == "unavailable":
                    ex.reason = "index_unavailable"  # boot block (and what the index gave) only
            except Exception:
                log.warning("recall failed; the chat goes on without memories", exc_info=True)
                ex.reason = "recall_failed"
        reminder_text = await self._claim_reminders(ex)
        ex.recall_ms = (time.perf_counter() - t0) * 1000
        info: Injected
        if ex.route.provider == "anthropic":
            body, info = inject_anthropic(body, boot_text, recall_text, self._config.cache, reminder_text)
        else:
            body, info = inject_openai(body, boot_text, recall_text, reminder_text)
        ex.injected = info.any
        if info.reminders and ex.reason == "no_content":
            ex.reason = "injected"
        if ex.reminders and not info.reminders:  # no place for them in this turn: leave them for the next
            await self._settle_reminders(ex, delivered=False)
        return body

    async def _claim_reminders(self, ex: _Exchange) -> str:
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

    async def _settle_reminders(self, ex: _Exchange, *, delivered: bool) -> None:
        """Delivered (the upstream answered) or released (it did not); once per exchange."""
        if not ex.reminders or self._reminders is None:
            return
        held, ex.reminders = ex.reminders, []
        try:
            await asyncio.to_thread(self._reminders.settle, ex.namespace, ex.reminder_owner, held, delivered=delivered)
        except Exception:
            log.warning("settling reminders failed (their lease runs out and a later turn retries)", exc_info=True)

    async def _boot(self, namespace: str, agent: str | None = None) -> tuple[str, tuple[str, ...]]:
        """The rendered boot block (cached briefly per namespace and agent) and the ids of its memories."""
        key = f"{namespace}\x00{agent or ''}"
        cached = self._boot_cache.get(key)
        now = time.monotonic()
        if cached and now - cached[0] < self._config.boot_cache_seconds:
            return cached[1], cached[2]
        try:
            text, ids = await asyncio.to_thread(self._build_boot, namespace, agent)
        except Exception:
            log.warning("boot block unavailable; the chat goes on without it", exc_info=True)
            return "", ()
        self._boot_cache[key] = (now, text, ids)
        return text, ids

    def _build_boot(self, namespace: str, agent: str | None = None) -> tuple[str, tuple[str, ...]]:
        stable = self._library.stable_memories(namespace)
        digest = self._store.get_digest(namespace)
        yesterday = self._library.yesterday()
        log_row = self._store.get_daily_log(namespace, yesterday)
        precious = sorted(self._store.list_precious(namespace, limit=10), key=lambda p: (p.created_at, p.id))
        glossary = sorted(self._store.list_glossary(namespace), key=lambda g: (g.term.lower(), g.id))[:50]
        data = BootData(
            persona=[m.content for m in stable if m.type == "persona"],
            about=[m.content for m in stable if m.type != "persona"],
            glossary=[(g.term, g.aliases, g.definition) for g in glossary],
            precious=[p.content for p in precious],
            digest=digest.content if digest else "",
            yesterday=(yesterday, log_row.summary or log_row.title) if log_row else None,
            skills=self._agent_skills(namespace, agent),
        )
        return render_boot_block(data, max_chars=self._config.boot_max_chars), tuple(m.id for m in stable)

    def _agent_skills(self, namespace: str, agent: str | None) -> list[tuple[str, str]]:
        """(name, one-line description) of the skills allocated to ``agent``; a failure lists none."""
        if not agent or self._skills is None:
            return []
        try:
            return [(s.name, s.description) for s in self._skills.for_agent(namespace, agent)]
        except Exception:
            log.warning("skills unavailable; the boot block goes on without them", exc_info=True)
            return []

    def _remember(self, ex: _Exchange) -> None:
        """Start storing an explicit "remember ..." now, beside the upstream call; the reply's last
        byte waits for it (``_settle``)."""
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
        from engram.services.memories import MemoryWrite

        key = "gw-rem-" + self._exchange_key(ex)
        request = MemoryWrite(
            content=fact,
            type="task" if when is not None else "fact",
            source="chat",
            importance=0.8,
            confidence=0.95,
            external_id=key,
            remind_at=when,
        )

        def write() -> None:
            try:
                # A reminder is its own memory: merged into a look-alike it would not fire again.
                self._memories.write(ex.namespace, request, dedup=when is None)
            except Exception:
                log.warning("storing an explicit remember request failed", exc_info=True)

        ex.pending.append(asyncio.ensure_future(asyncio.to_thread(write)))

    # -- forwarding ---------------------------------------------------------------------------------
    async def _forward(self, ex: _Exchange, body: dict[str, Any], fwd: Mapping[str, str]) -> ChatReply:
        assert ex.route is not None
        upstream = self._upstream_for(ex.route.provider)
        path = "/v1/messages" if ex.route.provider == "anthropic" else "/chat/completions"
        headers = {k: v for k, v in fwd.items() if k in ("anthropic-beta", "anthropic-version")}
        if ex.route.provider != "anthropic":
            headers = {}
        stream = bool(body.get("stream"))
        t0 = time.perf_counter()
        ex.forwarded = True
        task = asyncio.ensure_future(upstream.send("POST", path, body, headers=headers))
        if not stream:
            try:
                reply = await task
            finally:
                ex.upstream_ms = (time.perf_counter() - t0) * 1000
            raw = await reply.aread()
            return await self._whole(ex, raw)
        done, _ = await asyncio.wait({task}, timeout=self._config.keepalive_seconds)
        ex.upstream_ms = (time.perf_counter() - t0) * 1000
        first: UpstreamReply | None = None
        if done:
            first = task.result()  # an error status, unreachable or timeout raise here -> real status
        return ChatReply(
            status=200,
            headers={**ex.headers(), "cache-control": "no-cache", "x-accel-buffering": "no"},
            stream=self._stream(ex, task, first),
            media_type="text/event-stream",
        )

    def _upstream_for(self, provider: str) -> ChatUpstream:
        if provider == "anthropic":
            return self._anthropic
        if provider == "bedrock":
            if self._bedrock is None:
                raise NotConfigured("bedrock/ models are not available in this build (needs boto3)")
            return self._bedrock
        return self._openai

    async def _whole(self, ex: _Exchange, raw: bytes) -> ChatReply:
        assert ex.route is not None
        upstream_wire: Wire = "anthropic" if ex.route.provider == "anthropic" else "openai"
        try:
            data = json.loads(raw)
        except (ValueError, RecursionError) as exc:
            raise UpstreamUnavailable(
                "the upstream sent a response that is not JSON", code="upstream_malformed"
            ) from exc
        data = check_upstream_response(data, upstream_wire)
        if upstream_wire == "anthropic":
            text = "".join(b.get("text", "") for b in data.get("content") or [] if b.get("type") == "text")
            usage = w.usage_from_anthropic(data.get("usage"))
        else:
            message = ((data.get("choices") or [{}])[0]).get("message") or {}
            text = w.text_of(message.get("content"))
            usage = w.usage_from_openai(data.get("usage"))
        if upstream_wire != ex.wire:
            data = (
                w.anthropic_response_to_openai(data, ex.route.requested)
                if ex.wire == "openai"
                else w.openai_response_to_anthropic(data, ex.route.requested)
            )
            raw = json.dumps(data, ensure_ascii=False).encode()
        await self._settle(ex, text, usage)
        return ChatReply(status=200, headers=ex.headers(), body=raw)

    async def _stream(
        self, ex: _Exchange, task: asyncio.Future[UpstreamReply], reply: UpstreamReply | None
    ) -> AsyncIterator[bytes]:
        assert ex.route is not None
        tap = _Tap(
            "anthropic" if ex.route.provider == "anthropic" else "openai",
            ex.wire,
            ex.route.requested,
            ex.client_wants_usage,
            observe=ex.persist,
        )
        try:
            if reply is None:
                while True:
                    done, _ = await asyncio.wait({task}, timeout=self._config.keepalive_seconds)
                    if done:
                        break
                    yield SSE_PING
                reply = task.result()
            parser = SseParser()
            closing: list[bytes] = []  # the stream's end, held back until the writes are done
            # Whatever one network read brought is passed on in one write: as soon as it arrives, and
            # with one syscall instead of one per event.
            async for chunk in reply.aiter_bytes():
                out, failure = _relay(tap, parser.feed(chunk), closing)
                if out:
                    yield out
                if failure is not None:
                    raise failure
            out, failure = _relay(tap, parser.flush(), closing)
            if out:
                yield out
            if failure is not None:
                raise failure
            if not tap.finished:
                raise UpstreamUnavailable("the upstream ended the stream early")
            await self._settle(ex, tap.text, tap.usage)
            yield b"".join(closing)
        except EngramError as exc:
            log.warning("chat stream ended with an error event: %s", exc.message)
            await self._settle_failed(ex, exc, tap.usage)
            yield b"".join(_error_event(ex.wire, exc))
        except Exception:
            # The status line is gone: a clean error event is the only answer left (never a cut stream).
            log.exception("chat stream failed")
            internal = EngramError("internal error", code="internal_error")
            await self._settle_failed(ex, internal, tap.usage)
            yield b"".join(_error_event(ex.wire, internal))
        finally:
            if not task.done():
                task.cancel()
            elif reply is None and not task.cancelled() and task.exception() is None:
                reply = task.result()  # answered just as the client went away
            with anyio.CancelScope(shield=True):
                if reply is not None:
                    await reply.aclose()
                # Settled already unless the client went away: keep its turn, and what was started.
                await self._settle_failed(ex, _CLIENT_GONE, tap.usage)

    # -- before the last byte ------------------------------------------------------------------------
    async def _settle(
        self, ex: _Exchange, assistant_text: str, usage: w.TokenUsage, error: EngramError | None = None
    ) -> None:
        """Every write the exchange owes, done before the reply's last byte. The writes are independent,
        so they run side by side (one store round trip of wait on DynamoDB, not four); each failure is
        logged and the reply goes out regardless. ``error``: the turn failed after it was sent (no
        answer is stored, the user's turn carries the error; usage only if the upstream reported any)."""
        await self._settle_pending(ex)
        reminders = self._settle_reminders(ex, delivered=error is None)
        if not ex.persist or ex.settled:
            await reminders
            return
        ex.settled = True
        assert ex.route is not None
        now = self._clock.now()
        writes = [reminders]
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

    async def _settle_failed(self, ex: _Exchange, error: EngramError, usage: w.TokenUsage | None = None) -> None:
        """The writes of a turn that got no answer: the user's turn (with ``error``) once it was sent
        upstream; before that (a request refused by Engram itself) only what was already started."""
        if ex.forwarded:
            await self._settle(ex, "", usage or w.TokenUsage(), error)
        else:
            await self._settle_pending(ex)
            await self._settle_reminders(ex, delivered=False)

    async def _settle_pending(self, ex: _Exchange) -> None:
        """Wait for the writes started during the request (each logs its own failure)."""
        while ex.pending:
            await ex.pending.pop()

    @staticmethod
    async def _write(fn: Callable[..., object], failure: str, *args: Any) -> None:
        try:
            await asyncio.to_thread(fn, *args)
        except Exception:
            log.warning(failure, exc_info=True)

    def _store_usage(self, ex: _Exchange, usage: w.TokenUsage, now: datetime) -> None:
        assert ex.route is not None
        self._store.append_usage(
            UsageRecord(
                id=new_id("use"),
                namespace=ex.namespace,
                model=ex.route.model,
                input_tokens=usage.input,
                output_tokens=usage.output,
                cache_read_tokens=usage.cache_read,
                cache_write_tokens=usage.cache_write,
                created_at=now,
            )
        )

    def _store_message(
        self,
        ex: _Exchange,
        role: Literal["user", "assistant"],
        content: str,
        at: datetime,
        error: str | None = None,
    ) -> None:
        """One side of the exchange under a key that a retry of the same turn repeats (``_exchange_key``)."""
        assert ex.route is not None
        model = ex.route.requested if role == "user" else ex.route.model
        message = MessageIn(
            role=role,
            content=content[:_MAX_STORED_CHARS],
            conversation_id=ex.conversation,
            id=f"gw-{self._exchange_key(ex)}-{role[0]}",
            created_at=at,
            model=model[:200],
            error=error,
        )
        self._library.ingest(ex.namespace, [message])

    def _maybe_cleanup(self, namespace: str, now: datetime) -> None:
        if self._queue is None:
            return
        if self._store.get_cache(namespace, "gateway:cleanup-enqueued") is not None:
            return
        self._store.put_cache(
            namespace, "gateway:cleanup-enqueued", now.isoformat(), expires_at=now + self._config.cleanup_interval
        )
        self._queue.enqueue("cleanup", {"namespace": namespace})

    def _exchange_key(self, ex: _Exchange) -> str:
        """Same namespace, conversation, earlier turns and last user message -> same key (retries)."""
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

    async def aclose(self) -> None:
        """Close the upstream HTTP clients (app shutdown)."""
        for upstream in (self._openai, self._anthropic, self._bedrock):
            closer = getattr(upstream, "aclose", None)
            if closer is not None:
                await closer()

    # -- models and usage --------------------------------------------------------------------------------
    async def models(self) -> dict[str, Any]:
        cfg = self._config.routing
        names: list[str] = [cfg.public_model]
        for name in (cfg.chat_model, cfg.vision_model):
            if name and name not in names:
                names.append(name)
        if cfg.allow_passthrough and cfg.openai_configured:
            with contextlib.suppress(EngramError, ValueError, KeyError, TypeError, AttributeError):
                reply = await asyncio.wait_for(self._openai.send("GET", "/models"), 5.0)
                for item in json.loads(await reply.aread()).get("data") or []:
                    if item.get("id") and item["id"] not in names:
                        names.append(str(item["id"]))
        created = int(time.time())
        return {
            "object": "list",
            "data": [{"id": n, "object": "model", "created": created, "owned_by": "engram"} for n in names],
        }

    def usage(self, namespace: str, *, days: int = 30) -> dict[str, Any]:
        since = self._clock.now() - timedelta(days=days)
        per_model: dict[str, dict[str, int]] = {}
        for rec in self._store.list_usage(namespace, since=since):
            row = per_model.setdefault(
                rec.model,
                {"requests": 0, "input_tokens": 0, "output_tokens": 0, "cache_read_tokens": 0, "cache_write_tokens": 0},
            )
            row["requests"] += 1
            row["input_tokens"] += rec.input_tokens
            row["output_tokens"] += rec.output_tokens
            row["cache_read_tokens"] += rec.cache_read_tokens
            row["cache_write_tokens"] += rec.cache_write_tokens
        return {
            "since": since.isoformat(),
            "days": days,
            "models": [{"model": m, **v} for m, v in sorted(per_model.items())],
        }


def _anthropic_kind(event: SseEvent, data: dict[str, Any]) -> str:
    """The type of an Anthropic stream event; raises for an error event or one without a type."""
    kind = data.get("type") or event.event
    if kind == "error" or (kind is None and data.get("error") is not None):
        raise UpstreamUnavailable(f"upstream error: {upstream_error_message(data.get('error'))}")
    if not kind:
        raise UpstreamUnavailable("the upstream sent a stream event without a type", code="upstream_malformed")
    return str(kind)


def _relay(tap: _Tap, events: list[SseEvent], closing: list[bytes]) -> tuple[bytes, Exception | None]:
    """The client's bytes for ``events`` up to the first bad one, and what was wrong with it (if any),
    so the events before a malformed one still reach the client ahead of the error event. What comes
    from the upstream's end event on (``[DONE]``, ``message_stop``) goes to ``closing`` instead, to be
    sent once the exchange is stored."""
    out: list[bytes] = []
    for event in events:
        try:
            pieces = tap.feed(event)
        except Exception as exc:
            return b"".join(out), exc
        (closing if tap.finished else out).extend(pieces)
    return b"".join(out), None


_CLIENT_GONE = EngramError("the client went away before the answer ended", code="client_disconnected")


def _error_event(wire: Wire, exc: EngramError) -> list[bytes]:
    """The SSE error event for a failure after the stream began (status can no longer change)."""
    kind = "upstream_timeout" if isinstance(exc, UpstreamTimeout) else "upstream_error"
    if wire == "anthropic":
        payload = {"type": "error", "error": {"type": "api_error", "message": exc.message, "code": exc.code}}
        return [sse_bytes(payload, "error")]
    return [sse_bytes({"error": {"message": exc.message, "type": kind, "code": exc.code}}), SSE_DONE]


class _Tap:
    """Per-event pass-through or conversion to the client's wire, noting reply text and usage."""

    def __init__(
        self, upstream: str, client: Wire, model: str, client_wants_usage: bool, *, observe: bool = True
    ) -> None:
        self.upstream = upstream
        self.observe = observe
        self.client = client
        self.client_wants_usage = client_wants_usage
        self.text_parts: list[str] = []
        self.usage = w.TokenUsage()
        self._anthropic_usage: dict[str, Any] = {}
        self.finished = False
        self._a2o = (
            w.AnthropicToOpenAIStream(model, include_usage=client_wants_usage)
            if (upstream == "anthropic" and client == "openai")
            else None
        )
        self._o2a = w.OpenAIToAnthropicStream(model) if (upstream == "openai" and client == "anthropic") else None

    @property
    def text(self) -> str:
        return "".join(self.text_parts)

    def feed(self, event: SseEvent) -> list[bytes]:
        if event.is_comment:
            return [event.raw] if self._a2o is None and self._o2a is None else []
        if not event.data:
            return []  # no data (a bare "event:" or a line that is no SSE field): nothing to pass on
        if not self.observe and self._a2o is None and self._o2a is None:
            return self._pass(event)
        if self.upstream == "openai":
            return self._openai(event)
        return self._anthropic(event)

    def _pass(self, event: SseEvent) -> list[bytes]:
        """Pure forwarding of well-formed events, the raw bytes unchanged."""
        if self.upstream == "openai":
            if event.data == "[DONE]":
                self.finished = True
                return [event.raw]
            data = parse_upstream_event(event.data, "openai")
            if data.get("error"):
                raise UpstreamUnavailable(f"upstream error: {upstream_error_message(data['error'])}")
            return [event.raw]
        data = parse_upstream_event(event.data, "anthropic")
        if _anthropic_kind(event, data) == "message_stop":
            self.finished = True
        return [event.raw]

    def _openai(self, event: SseEvent) -> list[bytes]:
        if event.data == "[DONE]":
            self.finished = True
            return self._o2a.finish() if self._o2a is not None else [event.raw]
        data = parse_upstream_event(event.data, "openai")
        if data.get("error"):
            raise UpstreamUnavailable(f"upstream error: {upstream_error_message(data['error'])}")
        choices = data.get("choices") or []
        for choice in choices:
            piece = (choice.get("delta") or {}).get("content")
            if piece:
                self.text_parts.append(piece)
        if data.get("usage"):
            self.usage = w.usage_from_openai(data["usage"])
        if self._o2a is not None:
            return self._o2a.feed(data)
        if not choices and data.get("usage") and not self.client_wants_usage:
            return []  # the usage chunk we asked for on our own account
        return [event.raw]

    def _anthropic(self, event: SseEvent) -> list[bytes]:
        data = parse_upstream_event(event.data, "anthropic")
        kind = _anthropic_kind(event, data)
        if kind == "message_start":
            self._anthropic_usage.update((data.get("message") or {}).get("usage") or {})
        elif kind == "content_block_delta":
            delta = data.get("delta") or {}
            if delta.get("type") == "text_delta":
                self.text_parts.append(delta.get("text", ""))
        elif kind == "message_delta":
            self._anthropic_usage.update({k: v for k, v in (data.get("usage") or {}).items() if v is not None})
        elif kind == "message_stop":
            self.finished = True
            self.usage = w.usage_from_anthropic(self._anthropic_usage)
        if self._a2o is not None:
            return self._a2o.feed(event.event, data)
        return [event.raw]
