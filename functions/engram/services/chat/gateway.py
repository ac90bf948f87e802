"""The chat gateway use case: recall, inject, forward (streaming), store the exchange.

``ChatService.handle`` takes a client request on any of its doors (OpenAI chat completions, Anthropic
Messages, or the OpenAI Responses API, translated to a chat request first: ``domain/wire/responses.py``)
and returns a ``ChatReply``: a status, the ``x-engram-*`` headers and either a whole body or
an async byte stream that passes upstream events on as they arrive. Nothing here fails the chat
because of memory: recall, boot block, remember and persistence errors are logged and skipped.

Nothing happens after the last byte (docs/aws.md, "How Lambda runs it"): every write a request owes
(its messages, usage, an explicit "remember ...", the cleanup enqueue) is done before the response
ends — a whole body is built after them, a stream holds back only its closing event (``[DONE]``,
``message_stop``) until they are done. A frozen or recycled process has nothing left to lose.

Nothing the user wrote is lost: once a request was sent upstream, the user's turn is stored whatever
happens next (an error status, a timeout, an unreachable or malformed upstream, a stream cut midway,
the client going away), with ``Message.error`` saying what went wrong, so extraction still learns from
it; a retried turn is stored once.

This module is the request pipeline; its parts live beside it: the writes an exchange owes in
``services/chat/exchange.py``, the stream relay in ``services/chat/stream_relay.py``, what a turn is told (boot
block, memories, past conversations, reminders) in ``services/chat/turn_context.py``, where it goes in the
request in ``services/chat/injection.py``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Literal

from engram.domain.errors import EngramError, NotConfigured, UpstreamUnavailable
from engram.domain.ports import ChatUpstream, UpstreamReply
from engram.domain.wire.anthropic import (
    answer_text,
    anthropic_request_to_openai,
    anthropic_response_to_openai,
    openai_request_to_anthropic,
    openai_response_to_anthropic,
)
from engram.domain.wire.cache_markers import CachePolicy, reads_cache_control, strip_cache_control
from engram.domain.wire.content import text_of
from engram.domain.wire.responses import chat_to_response, custom_tools, response_text, responses_to_chat
from engram.domain.wire.shapes import check_upstream_response, parse_chat_request
from engram.domain.wire.usage import TokenUsage, usage_from_anthropic, usage_from_openai, usage_from_responses
from engram.services.chat.exchange import Exchange, ExchangeRecorder, Wire
from engram.services.chat.history import HistoryService, place_history
from engram.services.chat.injection import Injected, inject_anthropic, inject_openai, inject_responses, last_user_text
from engram.services.chat.routing import RouteConfig, anthropic_has_images, openai_has_images, route
from engram.services.chat.stream_relay import StreamTap, relay_stream
from engram.services.chat.turn_context import TurnContextSource
from engram.services.library.threads import thread_id_of
from engram.services.runtime_settings import Live

log = logging.getLogger(__name__)


def _thread_of(wire: Wire, body: dict[str, Any], pinned: str | None) -> str:
    """The thread (conversation id) of a request: the ``x-engram-thread`` header, else the wire's own
    user field (OpenAI ``user``, Anthropic ``metadata.user_id``), else ``default`` (docs/threads.md)."""
    if wire != "anthropic":  # the Responses door's body is already a chat request here
        return thread_id_of(pinned, body.get("user"))
    metadata = body.get("metadata")
    return thread_id_of(pinned, metadata.get("user_id") if isinstance(metadata, dict) else None)


@dataclass(frozen=True)
class ChatConfig:
    """The chat gateway's settings.

    ``settings.py`` holds the defaults (written once); ``bootstrap/configs.py`` maps them.
    """

    routing: RouteConfig
    inject_enabled: bool
    inject_max_body_bytes: int
    boot_max_chars: int
    patch_max_tokens: int
    boot_cache_seconds: float
    keepalive_seconds: float
    store_messages: bool
    default_max_tokens: int
    cleanup_interval: timedelta
    retry_window: timedelta
    cache: CachePolicy | None  # None: no prompt-cache markers
    responses_native: bool  # the OpenAI-compatible upstream takes `/responses` requests as they are


@dataclass
class ChatReply:
    """What the HTTP layer sends: ``error`` (not yet mapped to a status) or ``body`` or ``stream``."""

    status: int
    headers: dict[str, str]
    body: bytes | None = None
    stream: AsyncIterator[bytes] | None = None
    media_type: str = "application/json"
    error: EngramError | None = None


class ChatService:
    def __init__(
        self,
        *,
        openai: ChatUpstream,
        anthropic: ChatUpstream,
        context: TurnContextSource,
        record: ExchangeRecorder,
        config: ChatConfig | Live[ChatConfig],
        bedrock: ChatUpstream | None = None,
        history: HistoryService | None = None,
    ) -> None:
        self._history = history
        self._openai = openai
        self._anthropic = anthropic
        # Bedrock takes the OpenAI wire (its adapter converts to Converse), so past routing it is
        # handled exactly like the OpenAI-compatible upstream: same injection, same stream tap.
        self._bedrock = bedrock
        self._context = context
        self._record = record
        self._config = Live.of(config)

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
        server_history: bool = False,
    ) -> ChatReply:
        ex = Exchange(namespace=namespace, wire=wire, body={}, agent=(agent or "").strip()[:64] or None)
        try:
            body = parse_chat_request(raw, wire)
            if wire == "responses":  # read as a chat request from here on (domain/wire/responses.py)
                ex.custom_tools = custom_tools(body)
                ex.responses = body
                body = responses_to_chat(body)
            ex.body = body
            ex.persist = self._config().store_messages and not guide_dog
            ex.conversation = _thread_of(wire, body, conversation_id)
            kept = None
            # The chat doors only: a Responses client chains its own turns (previous_response_id).
            if server_history and not guide_dog and wire in ("openai", "anthropic"):
                body, kept = await self._with_history(ex, body)
                ex.body = body
            has_images = anthropic_has_images(body) if wire == "anthropic" else openai_has_images(body)
            ex.route = route(
                str(body.get("model") or ""),
                has_images=has_images,
                config=self._config().routing,
                vision_only=guide_dog,
            )
            ex.user_text = last_user_text(body)
            # The Responses door goes to the upstream as it is when the upstream speaks that API too.
            ex.native = ex.responses is not None and ex.route.provider == "openai" and self._config().responses_native
            upstream_body = self._to_upstream(ex)
            if not guide_dog:
                upstream_body = await self._inject(ex, upstream_body, len(raw), memory_off)
                self._record.remember(ex)
            reply = await self._forward(ex, upstream_body, forward_headers or {})
            if kept is not None:
                reply.headers["x-engram-history"] = kept
            return reply
        except EngramError as exc:
            await self._record.settle_failed(ex, exc)
            return ChatReply(status=0, headers=ex.headers(), error=exc)

    async def _with_history(self, ex: Exchange, body: dict[str, Any]) -> tuple[dict[str, Any], str]:
        """The thread's kept history before the client's message (services/chat/history.py) and the
        ``x-engram-history`` header value (turns placed; ``unavailable`` when it could not be read)."""
        if self._history is None:
            return body, "off"
        try:
            kept = await asyncio.to_thread(self._history.load, ex.namespace, ex.conversation)
            if kept.rotate_due:
                await asyncio.to_thread(self._history.request_rotation, ex.namespace, ex.conversation)
        except EngramError:
            # Memory never fails a chat; the header says this turn went without its history.
            log.warning("server-kept history unavailable; the turn goes on without it", exc_info=True)
            return body, "unavailable"
        return place_history(ex.wire, body, kept), str(len(kept.turns))

    def _to_upstream(self, ex: Exchange) -> dict[str, Any]:
        assert ex.route is not None
        out = self._convert(ex)
        if ex.route.provider == "bedrock":
            # Prompt caching on Bedrock: the adapter places Converse cache points (Claude models only)
            # where a top-level ``cache_control`` asks for them; the settings decide, not the client.
            cache = self._config().cache
            if cache is None:
                out.pop("cache_control", None)
            else:
                out["cache_control"] = cache.marker()
        return out

    def _convert(self, ex: Exchange) -> dict[str, Any]:
        assert ex.route is not None
        body, provider, model = ex.body, ex.route.provider, ex.route.model
        if ex.native and ex.responses is not None:
            return {**ex.responses, "model": model}
        if ex.wire != "anthropic" and provider in ("openai", "bedrock"):
            out = {**body, "model": model}
            if provider == "openai" and not reads_cache_control(model):
                out = strip_cache_control(out)  # a marker only Claude reads (README, "Coming from Pawwake")
            # usage is logged with the exchange, and a Response always reports it
            if body.get("stream") and (ex.persist or ex.wire == "responses"):
                opts = dict(body.get("stream_options") or {})
                ex.client_wants_usage = bool(opts.get("include_usage"))
                out["stream_options"] = {**opts, "include_usage": True}
            return out
        if ex.wire == "anthropic" and provider == "anthropic":
            return {**body, "model": model}
        if ex.wire != "anthropic":
            ex.client_wants_usage = bool((body.get("stream_options") or {}).get("include_usage"))
            return openai_request_to_anthropic(body, model, default_max_tokens=self._config().default_max_tokens)
        return anthropic_request_to_openai(body, model)

    # -- memory -------------------------------------------------------------------------------------
    async def _inject(self, ex: Exchange, body: dict[str, Any], size: int, memory_off: bool) -> dict[str, Any]:
        assert ex.route is not None
        if not self._config().inject_enabled or memory_off:
            ex.reason = "disabled"
            return body
        if size > self._config().inject_max_body_bytes:
            ex.reason = "body_too_large"
            return body
        t0 = time.perf_counter()
        told = await self._context.gather(
            ex,
            boot_cache_seconds=self._config().boot_cache_seconds,
            boot_max_chars=self._config().boot_max_chars,
            patch_max_tokens=self._config().patch_max_tokens,
        )
        ex.recall_ms = (time.perf_counter() - t0) * 1000
        info: Injected
        if ex.native:
            body, info = inject_responses(body, told.boot, told.recall, told.reminders, told.conversations)
        elif ex.route.provider == "anthropic":
            body, info = inject_anthropic(
                body, told.boot, told.recall, self._config().cache, told.reminders, told.conversations
            )
        else:
            body, info = inject_openai(body, told.boot, told.recall, told.reminders, told.conversations)
        ex.injected = info.any
        if (info.reminders or info.conversations) and ex.reason == "no_content":
            ex.reason = "injected"
        if not info.conversations:  # no place for them in this turn: nothing was shown
            ex.fragments = []
        if ex.reminders and not info.reminders:  # no place for them in this turn: leave them for the next
            await self._record.settle_reminders(ex, delivered=False)
        return body

    # -- forwarding ---------------------------------------------------------------------------------
    async def _forward(self, ex: Exchange, body: dict[str, Any], fwd: Mapping[str, str]) -> ChatReply:
        assert ex.route is not None
        upstream = self._upstream_for(ex.route.provider)
        path = (
            "/v1/messages" if ex.route.provider == "anthropic" else "/responses" if ex.native else "/chat/completions"
        )
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
        done, _ = await asyncio.wait({task}, timeout=self._config().keepalive_seconds)
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

    async def _whole(self, ex: Exchange, raw: bytes) -> ChatReply:
        assert ex.route is not None
        upstream_wire: Literal["openai", "anthropic"] = "anthropic" if ex.route.provider == "anthropic" else "openai"
        try:
            data = json.loads(raw)
        except (ValueError, RecursionError) as exc:
            raise UpstreamUnavailable(
                "the upstream sent a response that is not JSON", code="upstream_malformed"
            ) from exc
        if ex.native:  # a Response from the upstream: passed on as it came
            data = check_upstream_response(data, "responses")
            await self._record.settle(ex, response_text(data), usage_from_responses(data.get("usage")))
            return ChatReply(status=200, headers=ex.headers(), body=raw)
        data = check_upstream_response(data, upstream_wire)
        if upstream_wire == "anthropic":
            text = answer_text(data.get("content") or [])
            usage = usage_from_anthropic(data.get("usage"))
        else:
            message = ((data.get("choices") or [{}])[0]).get("message") or {}
            text = text_of(message.get("content"))
            usage = usage_from_openai(data.get("usage"))
        client_wire: Literal["openai", "anthropic"] = "anthropic" if ex.wire == "anthropic" else "openai"
        if upstream_wire != client_wire:
            data = (
                anthropic_response_to_openai(data, ex.route.requested)
                if client_wire == "openai"
                else openai_response_to_anthropic(data, ex.route.requested)
            )
            raw = json.dumps(data, ensure_ascii=False).encode()
        if ex.wire == "responses":
            raw = json.dumps(chat_to_response(data, ex.route.requested, ex.custom_tools), ensure_ascii=False).encode()
        await self._record.settle(ex, text, usage)
        return ChatReply(status=200, headers=ex.headers(), body=raw)

    def _stream(
        self, ex: Exchange, task: asyncio.Future[UpstreamReply], reply: UpstreamReply | None
    ) -> AsyncIterator[bytes]:
        assert ex.route is not None
        tap = StreamTap(
            "anthropic" if ex.route.provider == "anthropic" else "responses" if ex.native else "openai",
            ex.wire,
            ex.route.requested,
            ex.client_wants_usage,
            observe=ex.persist,
            custom_tools=ex.custom_tools,
        )

        async def settle(text: str, usage: TokenUsage) -> None:
            await self._record.settle(ex, text, usage)

        async def settle_failed(error: EngramError, usage: TokenUsage) -> None:
            await self._record.settle_failed(ex, error, usage)

        return relay_stream(
            task,
            reply,
            tap,
            keepalive_seconds=self._config().keepalive_seconds,
            settle=settle,
            settle_failed=settle_failed,
        )

    async def aclose(self) -> None:
        """Close the upstream HTTP clients (app shutdown)."""
        for upstream in (self._openai, self._anthropic, self._bedrock):
            if upstream is not None:
                await upstream.aclose()

    # -- models and usage --------------------------------------------------------------------------------
    async def provider_models(self) -> list[str]:
        """The model ids the OpenAI-compatible upstream lists at its ``/models`` (the admin panel's model
        field offers them; ``GET /v1/models`` lists them only with passthrough on). ``NotConfigured``
        without that upstream; an upstream that cannot answer is ``UpstreamUnavailable``."""
        if not self._config().routing.openai_configured:
            raise NotConfigured("no OpenAI-compatible upstream: set ENGRAM_UPSTREAM_BASE_URL to list its models")
        try:
            reply = await asyncio.wait_for(self._openai.send("GET", "/models"), 5.0)
            data = json.loads(await reply.aread()).get("data") or []
        except (TimeoutError, ValueError, AttributeError) as exc:
            raise UpstreamUnavailable(f"the upstream's model list could not be read: {type(exc).__name__}") from exc
        if not isinstance(data, list):
            raise UpstreamUnavailable("the upstream's model list is not a list")
        ids = (item.get("id") for item in data if isinstance(item, dict))
        return sorted({str(i) for i in ids if isinstance(i, str) and i})

    async def models(self) -> dict[str, Any]:
        cfg = self._config().routing
        names: list[str] = [cfg.public_model]
        for name in (cfg.chat_model, cfg.vision_model):
            if name and name not in names:
                names.append(name)
        if cfg.allow_passthrough and cfg.openai_configured:
            with contextlib.suppress(EngramError):
                names += [n for n in await self.provider_models() if n not in names]
        created = int(time.time())
        return {
            "object": "list",
            "data": [{"id": n, "object": "model", "created": created, "owned_by": "engram"} for n in names],
        }
