"""The chat gateway's stream relay: upstream SSE events in, the client's wire out, as they arrive.

``relay_stream`` is the body of a streamed chat reply. It keeps the connection alive with SSE comments
while the upstream has not answered yet, passes each network read on in one write (converted by a
``StreamTap`` when the upstream speaks the other wire), holds back the closing event (``[DONE]``,
``message_stop``) until the exchange's writes are done (docs/ARCHITECTURE.md, "Lambda rules": nothing
after the last byte), and ends a failed stream with one clean error event, never a cut stream. What
the exchange owes is the caller's: ``settle(text, usage)`` on success, ``settle_failed(error, usage)``
otherwise (also when the client goes away; it must be safe to call after ``settle``).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import Any, Literal, Protocol

import anyio

from engram.domain.errors import EngramError, UpstreamTimeout, UpstreamUnavailable
from engram.domain.ports import UpstreamReply
from engram.domain.wire.anthropic_stream import AnthropicToOpenAIStream, OpenAIToAnthropicStream
from engram.domain.wire.responses import ChatToResponsesStream, failed_event
from engram.domain.wire.shapes import parse_upstream_event, upstream_error_message
from engram.domain.wire.sse import SSE_DONE, SSE_PING, SseEvent, SseParser, sse_bytes
from engram.domain.wire.usage import TokenUsage, usage_from_anthropic, usage_from_openai, usage_from_responses

log = logging.getLogger(__name__)

Wire = Literal["openai", "anthropic", "responses"]


class LastChunk(bytes):
    """The stream's last bytes (its closing event, or the error event of a failed one), marked so the
    HTTP layer can send them with the end of the body in one write (entrypoints/http/chat.py,
    ``send_stream``); to anything else they are the bytes they hold."""

    __slots__ = ()


class EarlyStart(Protocol):
    """The HTTP layer's side of a streamed answer that begins before the upstream answers
    (entrypoints/http/streaming.py): the upstream is called in the request's own task, and only a slow
    upstream (no answer within the keep-alive interval) makes the answer begin without it."""

    def begin(self, headers: Mapping[str, str], media_type: str, keepalive_seconds: float) -> None:
        """The head (200, ``headers``) now, then a keep-alive comment every ``keepalive_seconds`` until
        ``end``; called from a timer's callback, so it only starts what sends them."""

    async def end(self) -> bool:
        """No more keep-alives; whether the head went out (if so, what follows is the body's to say,
        an upstream error included)."""


async def first_answer(
    call: Awaitable[UpstreamReply],
    early: EarlyStart | None,
    keepalive: float,
    head: Callable[[], dict[str, str]],
) -> tuple[asyncio.Future[UpstreamReply], UpstreamReply | None, dict[str, str]]:
    """A streamed turn's upstream ``call`` up to its answer (for ``relay_stream``: the answer, the reply if
    it came, and the reply's headers, ``head()`` when read): an upstream error before the answer begins
    raises here (a real status), after it the stream's error event says it.

    With ``early`` (the HTTP layer's), the call runs in this task; if it has not answered within
    ``keepalive`` seconds, a timer has ``early`` begin the answer (its head, then keep-alive comments)
    with the headers of that moment. Without it, the call is a task of its own while this one waits up
    to ``keepalive`` seconds, and ``relay_stream`` sends the keep-alives."""
    if early is None:
        task = asyncio.ensure_future(call)
        done, _ = await asyncio.wait({task}, timeout=keepalive)
        headers = head()
        return task, (task.result() if done else None), headers
    begun: dict[str, str] = {}

    def slow() -> None:
        begun.update(head())
        early.begin(begun, "text/event-stream", keepalive)

    loop = asyncio.get_running_loop()
    timer = loop.call_later(keepalive, slow)
    answer: asyncio.Future[UpstreamReply] = loop.create_future()
    try:
        answer.set_result(await call)
    except Exception as exc:  # raised below, or the stream's error event once begun
        answer.set_exception(exc)
    finally:
        timer.cancel()
    if begun and await early.end():  # the head went out: an error is the stream's error event now
        return answer, (None if answer.exception() is not None else answer.result()), begun
    headers = head()
    return answer, answer.result(), headers


CLIENT_GONE = EngramError("the client went away before the answer ended", code="client_disconnected")
INTERNAL = EngramError("internal error", code="internal_error")  # a bug: nothing more is said to the client


async def relay_stream(  # noqa: C901 - one loop over the upstream events; each branch is one event kind
    task: asyncio.Future[UpstreamReply],
    reply: UpstreamReply | None,
    tap: StreamTap,
    *,
    keepalive_seconds: float,
    settle: Callable[[str, TokenUsage], Awaitable[None]],
    settle_failed: Callable[[EngramError, TokenUsage], Awaitable[None]],
) -> AsyncIterator[bytes]:
    """The client's bytes for the upstream reply ``task`` (already answered: ``reply``)."""
    try:
        if reply is None:
            while True:
                done, _ = await asyncio.wait({task}, timeout=keepalive_seconds)
                if done:
                    break
                yield SSE_PING
            reply = task.result()
        parser = SseParser()
        closing: list[bytes] = []  # the stream's end, held back until the writes are done
        # Whatever one network read brought is passed on in one write: as soon as it arrives, and
        # with one syscall instead of one per event.
        async for chunk in reply.aiter_bytes():
            out, failure = relay_events(tap, parser.feed(chunk), closing)
            if out:
                yield out
            if failure is not None:
                raise failure
        out, failure = relay_events(tap, parser.flush(), closing)
        if out:
            yield out
        if failure is not None:
            raise failure
        if not tap.finished:
            raise UpstreamUnavailable("the upstream ended the stream early")
        await settle(tap.text, tap.usage)
        yield LastChunk(b"".join(closing))
    except EngramError as exc:
        log.warning("chat stream ended with an error event: %s", exc.message)
        await settle_failed(exc, tap.usage)
        yield LastChunk(b"".join(error_event(tap.client, exc)))
    except Exception:
        # The status line is gone: a clean error event is the only answer left (never a cut stream).
        log.exception("chat stream failed")
        await settle_failed(INTERNAL, tap.usage)
        yield LastChunk(b"".join(error_event(tap.client, INTERNAL)))
    finally:
        if not task.done():
            task.cancel()
        elif reply is None and not task.cancelled() and task.exception() is None:
            reply = task.result()  # answered just as the client went away
        with anyio.CancelScope(shield=True):
            if reply is not None:
                await reply.aclose()
            # Settled already unless the client went away: keep its turn, and what was started.
            await settle_failed(CLIENT_GONE, tap.usage)


def relay_events(tap: StreamTap, events: list[SseEvent], closing: list[bytes]) -> tuple[bytes, Exception | None]:
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


def error_event(wire: Wire, exc: EngramError) -> list[bytes]:
    """The SSE error event for a failure after the stream began (status can no longer change)."""
    kind = "upstream_timeout" if isinstance(exc, UpstreamTimeout) else "upstream_error"
    if wire == "responses":
        return [failed_event(exc.code, exc.message)]
    if wire == "anthropic":
        payload = {"type": "error", "error": {"type": "api_error", "message": exc.message, "code": exc.code}}
        return [sse_bytes(payload, "error")]
    return [sse_bytes({"error": {"message": exc.message, "type": kind, "code": exc.code}}), SSE_DONE]


def _anthropic_kind(event: SseEvent, data: dict[str, Any]) -> str:
    """The type of an Anthropic stream event; raises for an error event or one without a type."""
    kind = data.get("type") or event.event
    if kind == "error" or (kind is None and data.get("error") is not None):
        raise UpstreamUnavailable(f"upstream error: {upstream_error_message(data.get('error'))}")
    if not kind:
        raise UpstreamUnavailable("the upstream sent a stream event without a type", code="upstream_malformed")
    return str(kind)


class StreamTap:
    """Per-event pass-through or conversion to the client's wire, noting reply text and usage."""

    def __init__(
        self,
        upstream: str,
        client: Wire,
        model: str,
        client_wants_usage: bool,
        *,
        observe: bool = True,
        custom_tools: frozenset[str] = frozenset(),
    ) -> None:
        self.upstream = upstream
        self.observe = observe
        self.client = client
        self.client_wants_usage = client_wants_usage
        self.text_parts: list[str] = []
        self.usage = TokenUsage()
        self._anthropic_usage: dict[str, Any] = {}
        self.finished = False
        # The Responses door: the chat stream (converted from Anthropic first when needed) becomes
        # Responses events; the usage it reports is always asked for.
        self._responses = (
            ChatToResponsesStream(model, custom_tools) if client == "responses" and upstream != "responses" else None
        )
        self._a2o = (
            AnthropicToOpenAIStream(model, include_usage=client_wants_usage or self._responses is not None)
            if (upstream == "anthropic" and client != "anthropic")
            else None
        )
        self._o2a = OpenAIToAnthropicStream(model) if (upstream == "openai" and client == "anthropic") else None
        self._converts = self._a2o is not None or self._o2a is not None or self._responses is not None
        # Pure forwarding: each event is checked and passed on as it came (``_pass``).
        self._passes = not observe and not self._converts and upstream != "responses"

    @property
    def text(self) -> str:
        return "".join(self.text_parts)

    def feed(self, event: SseEvent) -> list[bytes]:
        if not event.data:  # a comment (a keep-alive), or no data: a bare "event:", a line that is no field
            return [] if not event.is_comment or self._converts else [event.raw]
        if self._passes:
            return self._pass(event)
        if self.upstream == "openai":
            return self._openai(event)
        if self.upstream == "responses":
            return self._responses_native(event)
        return self._anthropic(event)

    def _responses_native(self, event: SseEvent) -> list[bytes]:
        """An upstream's own Responses event, passed on as it came; its text and usage noted."""
        data = parse_upstream_event(event.data, "responses")
        kind = data["type"]
        if kind in ("response.failed", "error"):
            error = (data.get("response") or {}).get("error") if kind == "response.failed" else data
            raise UpstreamUnavailable(f"upstream error: {upstream_error_message(error)}")
        if kind == "response.output_text.delta":
            self.text_parts.append(str(data.get("delta") or ""))
        elif kind in ("response.completed", "response.incomplete"):
            self.finished = True
            self.usage = usage_from_responses((data.get("response") or {}).get("usage"))
        return [event.raw]

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
            if self._responses is not None:
                return self._responses.finish()
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
            self.usage = usage_from_openai(data["usage"])
        if self._responses is not None:
            return self._responses.feed(data)
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
            self.usage = usage_from_anthropic(self._anthropic_usage)
        if self._a2o is not None:
            pieces = self._a2o.feed(event.event, data)
            return pieces if self._responses is None else self._chat_to_responses(pieces)
        return [event.raw]

    def _chat_to_responses(self, pieces: list[bytes]) -> list[bytes]:
        """Chat chunks (converted from Anthropic events) on to the Responses converter."""
        assert self._responses is not None
        out: list[bytes] = []
        for event in SseParser().feed(b"".join(pieces)):
            if event.data == "[DONE]":
                out += self._responses.finish()
            elif event.data:
                out += self._responses.feed(event.json())
        return out
