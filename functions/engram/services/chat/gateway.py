"""The chat gateway use case: recall, inject, forward (streaming), store the exchange.

``ChatService.handle`` takes a client request on any of its doors (OpenAI chat completions, Anthropic
Messages, or the OpenAI Responses API, translated to a chat request first: ``domain/wire/responses.py``)
and returns a ``ChatReply``: a status, the ``x-engram-*`` headers and either a whole body or an async
byte stream that passes upstream events on as they arrive. Memory never fails the chat: its errors are
logged and skipped, and its context waits at most the turn's deadline.

Nothing happens after the last byte (docs/aws.md, "How Lambda runs it"): every write a request owes
(its messages, usage, an explicit "remember ...", the cleanup enqueue) is done before the response
ends — a whole body is built after them, a stream holds back only its closing event (``[DONE]``,
``message_stop``) until they are done. A frozen or recycled process has nothing left to lose.

Nothing the user wrote is lost: once a request was sent upstream, the user's turn is stored whatever
happens next (an error status, a timeout, an unreachable or malformed upstream, a stream cut midway,
the client going away), with ``Message.error`` saying what went wrong, so extraction still learns from
it; a retried turn is stored once.

This module is the request pipeline; beside it in ``services/chat/``: the turn's data (``turn.py``), what
it is told (``turn_context.py``), where that goes (``injection.py``), the stream relay, the writes owed.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from typing import Any, Literal

import anyio

from engram.domain.errors import EngramError, NotConfigured, UpstreamUnavailable
from engram.domain.ports import ChatUpstream, UpstreamReply
from engram.domain.wire.anthropic import (
    answer_text,
    anthropic_request_to_openai,
    anthropic_response_to_openai,
    openai_request_to_anthropic,
    openai_response_to_anthropic,
)
from engram.domain.wire.cache_markers import reads_cache_control, strip_cache_control
from engram.domain.wire.content import text_of
from engram.domain.wire.responses import chat_to_response, custom_tools, response_text, responses_to_chat
from engram.domain.wire.shapes import check_upstream_response, parse_chat_request
from engram.domain.wire.usage import TokenUsage, usage_from_anthropic, usage_from_openai, usage_from_responses
from engram.services.chat.config import ChatConfig
from engram.services.chat.exchange import ExchangeRecorder, Owed
from engram.services.chat.history import HistoryService, place_history
from engram.services.chat.injection import Injected, inject_anthropic, inject_openai, inject_responses, last_user_text
from engram.services.chat.routing import anthropic_has_images, openai_has_images, route
from engram.services.chat.stream_relay import (
    CLIENT_GONE,
    INTERNAL,
    EarlyStart,
    StreamTap,
    first_answer,
    relay_stream,
)
from engram.services.chat.turn import Outcome, TurnRequest, Wire, client_wants_usage, thread_of
from engram.services.chat.turn_context import TurnContextSource
from engram.services.runtime_settings import Live

log = logging.getLogger(__name__)


@dataclass
class _Timing:  # how long the upstream took to answer, for the headers of an error too
    upstream_ms: float = 0.0


@dataclass
class ChatReply:
    """What the HTTP layer sends: ``error`` (not yet mapped to a status) or ``body`` or ``stream``."""

    status: int
    headers: dict[str, str]
    body: bytes | None = None
    stream: AsyncIterator[bytes] | None = None
    media_type: str = "application/json"
    error: EngramError | None = None


_SSE = "text/event-stream"


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
        early: EarlyStart | None = None,
    ) -> ChatReply:
        """One chat request, answered whatever goes wrong (an ``EngramError`` is the reply's error, any other
        exception an ``internal_error``); the writes already started are awaited first, even on cancel.
        With ``early`` (the HTTP layer's), a streamed turn calls the upstream in this task and a slow
        upstream makes ``early`` begin the answer; without it, in a task of its own while this one waits
        the keep-alive interval."""
        owed = self._record.open()
        req: TurnRequest | None = None
        outcome = Outcome()
        timing = _Timing()
        try:
            req, kept = await self._read(
                namespace,
                wire,
                raw,
                guide_dog=guide_dog,
                conversation_id=conversation_id,
                memory=not (memory_off or guide_dog),
                agent=(agent or "").strip()[:64] or None,
                server_history=server_history,
            )
            upstream_body = self._to_upstream(req)
            if req.memory:
                upstream_body, outcome = await self._inject(req, owed, upstream_body, len(raw))
                self._record.remember(req, owed)
            extra = {"x-engram-history": kept} if kept is not None else {}
            return await self._forward(req, owed, outcome, upstream_body, forward_headers or {}, timing, extra, early)
        except EngramError as exc:
            await self._record.settle_failed(req, owed, exc)
            return ChatReply(status=0, headers=outcome.headers(timing.upstream_ms), error=exc)
        except Exception:
            # A bug, not a client or upstream fault: what the turn started is still settled.
            log.exception("chat request failed")
            await self._record.settle_failed(req, owed, INTERNAL)
            return ChatReply(status=0, headers=outcome.headers(timing.upstream_ms), error=INTERNAL)
        except asyncio.CancelledError:  # the client went away: settle what was started, then stop
            with anyio.CancelScope(shield=True):
                await self._record.settle_failed(req, owed, CLIENT_GONE)
            raise

    async def _read(
        self,
        namespace: str,
        wire: Wire,
        raw: bytes,
        *,
        guide_dog: bool,
        conversation_id: str | None,
        memory: bool,
        agent: str | None,
        server_history: bool,
    ) -> tuple[TurnRequest, str | None]:
        """The request as the gateway understands it, and the ``x-engram-history`` header value (None
        when no kept history was asked for)."""
        cfg = self._config()
        body = parse_chat_request(raw, wire)
        tools: frozenset[str] = frozenset()
        responses: dict[str, Any] | None = None
        if wire == "responses":  # read as a chat request from here on (domain/wire/responses.py)
            tools, responses = custom_tools(body), body
            body = responses_to_chat(body)
        conversation = thread_of(wire, body, conversation_id)
        kept = None
        # The chat doors only: a Responses client chains its own turns (previous_response_id).
        if server_history and not guide_dog and wire in ("openai", "anthropic"):
            body, kept = await self._with_history(namespace, wire, conversation, body)
        has_images = anthropic_has_images(body) if wire == "anthropic" else openai_has_images(body)
        chosen = route(str(body.get("model") or ""), has_images=has_images, config=cfg.routing, vision_only=guide_dog)
        # The Responses door goes to the upstream as it is when the upstream speaks that API too.
        native = responses is not None and chosen.provider == "openai" and cfg.responses_native
        persist = cfg.store_messages and memory
        req = TurnRequest(
            namespace=namespace,
            wire=wire,
            body=body,
            route=chosen,
            user_text=last_user_text(body),
            conversation=conversation,
            agent=agent,
            custom_tools=tools,
            responses=responses,
            native=native,
            memory=memory,
            persist=persist,
            client_wants_usage=client_wants_usage(body, wire, chosen.provider, native=native, persist=persist),
        )
        return req, kept

    async def _with_history(
        self, namespace: str, wire: Wire, conversation: str, body: dict[str, Any]
    ) -> tuple[dict[str, Any], str]:
        """The thread's kept history before the client's message (services/chat/history.py) and the
        ``x-engram-history`` header value (turns placed; ``unavailable`` when it could not be read)."""
        if self._history is None:
            return body, "off"
        try:
            kept = await asyncio.to_thread(self._history.load, namespace, conversation)
            if kept.rotate_due:
                await asyncio.to_thread(self._history.request_rotation, namespace, conversation)
        except EngramError:
            # Memory never fails a chat; the header says this turn went without its history.
            log.warning("server-kept history unavailable; the turn goes on without it", exc_info=True)
            return body, "unavailable"
        return place_history(wire, body, kept), str(len(kept.turns))

    def _to_upstream(self, req: TurnRequest) -> dict[str, Any]:
        out = self._convert(req)
        if req.route.provider == "bedrock":
            # Prompt caching on Bedrock: the adapter places Converse cache points (Claude models only)
            # where a top-level ``cache_control`` asks for them; the settings decide, not the client.
            cache = self._config().cache
            if cache is None:
                out.pop("cache_control", None)
            else:
                out["cache_control"] = cache.marker()
        return out

    def _convert(self, req: TurnRequest) -> dict[str, Any]:
        body, provider, model = req.body, req.route.provider, req.route.model
        if req.native and req.responses is not None:
            return {**req.responses, "model": model}
        if req.wire != "anthropic" and provider in ("openai", "bedrock"):
            out = {**body, "model": model}
            if provider == "openai" and not reads_cache_control(model):
                out = strip_cache_control(out)  # a marker only Claude reads (README, "Coming from Pawwake")
            # usage is logged with the exchange, and a Response always reports it
            if body.get("stream") and (req.persist or req.wire == "responses"):
                out["stream_options"] = {**(body.get("stream_options") or {}), "include_usage": True}
            return out
        if req.wire == "anthropic" and provider == "anthropic":
            return {**body, "model": model}
        if req.wire != "anthropic":
            return openai_request_to_anthropic(body, model, default_max_tokens=self._config().default_max_tokens)
        return anthropic_request_to_openai(body, model)

    # -- memory -------------------------------------------------------------------------------------
    async def _inject(
        self, req: TurnRequest, owed: Owed, body: dict[str, Any], size: int
    ) -> tuple[dict[str, Any], Outcome]:
        cfg = self._config()
        if not cfg.inject_enabled:
            return body, Outcome("disabled")
        if size > cfg.inject_max_body_bytes:
            return body, Outcome("body_too_large")
        told = await self._context.gather(
            req,
            deadline=cfg.context_deadline_seconds,
            boot_cache_seconds=cfg.boot_cache_seconds,
            boot_max_chars=cfg.boot_max_chars,
            patch_max_tokens=cfg.patch_max_tokens,
        )
        self._record.take(owed, told)  # from here on its reminders and fragments are settled whatever happens
        info: Injected
        if req.native:
            body, info = inject_responses(body, told.boot, told.recall, told.reminder_text, told.conversations)
        elif req.route.provider == "anthropic":
            body, info = inject_anthropic(
                body, told.boot, told.recall, cfg.cache, told.reminder_text, told.conversations
            )
        else:
            body, info = inject_openai(body, told.boot, told.recall, told.reminder_text, told.conversations)
        reason = told.reason
        if (info.reminders or info.conversations) and reason == "no_content":
            reason = "injected"
        await self._record.placed(
            req, owed, told, reminders=info.reminders, fragments=info.conversations, recall=info.patch
        )
        return body, Outcome(reason, info.any, told.elapsed_ms)

    # -- forwarding ---------------------------------------------------------------------------------
    async def _forward(
        self,
        req: TurnRequest,
        owed: Owed,
        outcome: Outcome,
        body: dict[str, Any],
        fwd: Mapping[str, str],
        timing: _Timing,
        extra: dict[str, str],
        early: EarlyStart | None,
    ) -> ChatReply:
        upstream = self._upstream_for(req.route.provider)
        path = (
            "/v1/messages" if req.route.provider == "anthropic" else "/responses" if req.native else "/chat/completions"
        )
        to_anthropic = req.route.provider == "anthropic"  # only Anthropic reads its beta and version headers
        headers = {k: v for k, v in fwd.items() if to_anthropic and k in ("anthropic-beta", "anthropic-version")}
        stream = bool(body.get("stream"))
        t0 = time.perf_counter()
        self._record.sent(owed)
        if not stream:
            try:
                reply = await upstream.send("POST", path, body, headers=headers)
            finally:
                timing.upstream_ms = (time.perf_counter() - t0) * 1000
            raw = await reply.aread()
            whole = await self._whole(req, owed, outcome.headers(timing.upstream_ms), raw)
            whole.headers.update(extra)
            return whole
        keepalive = self._config().keepalive_seconds

        def stream_headers() -> dict[str, str]:
            timing.upstream_ms = (time.perf_counter() - t0) * 1000
            return {
                **outcome.headers(timing.upstream_ms),
                "cache-control": "no-cache",
                "x-accel-buffering": "no",
                **extra,
            }

        call = upstream.send("POST", path, body, headers=headers)
        answer, first, head = await first_answer(call, early, keepalive, stream_headers)
        return ChatReply(200, head, stream=self._stream(req, owed, answer, first, keepalive), media_type=_SSE)

    def _upstream_for(self, provider: str) -> ChatUpstream:
        if provider == "anthropic":
            return self._anthropic
        if provider == "bedrock":
            if self._bedrock is None:
                raise NotConfigured("bedrock/ models are not available in this build (needs boto3)")
            return self._bedrock
        return self._openai

    async def _whole(self, req: TurnRequest, owed: Owed, headers: dict[str, str], raw: bytes) -> ChatReply:
        upstream_wire: Literal["openai", "anthropic"] = "anthropic" if req.route.provider == "anthropic" else "openai"
        try:
            data = json.loads(raw)
        except (ValueError, RecursionError) as exc:
            raise UpstreamUnavailable(
                "the upstream sent a response that is not JSON", code="upstream_malformed"
            ) from exc
        if req.native:  # a Response from the upstream: passed on as it came
            data = check_upstream_response(data, "responses")
            await self._record.settle(req, owed, response_text(data), usage_from_responses(data.get("usage")))
            return ChatReply(status=200, headers=headers, body=raw)
        data = check_upstream_response(data, upstream_wire)
        if upstream_wire == "anthropic":
            text = answer_text(data.get("content") or [])
            usage = usage_from_anthropic(data.get("usage"))
        else:
            message = ((data.get("choices") or [{}])[0]).get("message") or {}
            text = text_of(message.get("content"))
            usage = usage_from_openai(data.get("usage"))
        client_wire: Literal["openai", "anthropic"] = "anthropic" if req.wire == "anthropic" else "openai"
        if upstream_wire != client_wire:
            data = (
                anthropic_response_to_openai(data, req.route.requested)
                if client_wire == "openai"
                else openai_response_to_anthropic(data, req.route.requested)
            )
            raw = json.dumps(data, ensure_ascii=False).encode()
        if req.wire == "responses":
            raw = json.dumps(chat_to_response(data, req.route.requested, req.custom_tools), ensure_ascii=False).encode()
        await self._record.settle(req, owed, text, usage)
        return ChatReply(status=200, headers=headers, body=raw)

    def _stream(
        self,
        req: TurnRequest,
        owed: Owed,
        task: asyncio.Future[UpstreamReply],
        reply: UpstreamReply | None,
        keepalive: float,
    ) -> AsyncIterator[bytes]:
        tap = StreamTap(
            "anthropic" if req.route.provider == "anthropic" else "responses" if req.native else "openai",
            req.wire,
            req.route.requested,
            req.client_wants_usage,
            observe=req.persist,
            custom_tools=req.custom_tools,
        )

        async def settle(text: str, usage: TokenUsage) -> None:
            await self._record.settle(req, owed, text, usage)

        async def settle_failed(error: EngramError, usage: TokenUsage) -> None:
            await self._record.settle_failed(req, owed, error, usage)

        return relay_stream(
            task,
            reply,
            tap,
            keepalive_seconds=keepalive,
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
