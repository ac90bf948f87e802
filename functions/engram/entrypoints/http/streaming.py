"""A chat door's streamed answer sent over ASGI (``ChatDoors``, entrypoints/http/chat.py): the head a
Starlette ``StreamingResponse`` would send, then each chunk as it comes, without the response object or
its task group (bench/README.md, "Gateway overhead").

The upstream is called in the request's own task; ``StreamOut`` is the turn's ``EarlyStart``
(services/chat/stream_relay.py): only when the upstream has not answered within the keep-alive interval
does it start a task, to send the head and the keep-alive comments while the request's task waits."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Mapping

from starlette.types import Receive, Send

from engram.domain.wire.sse import SSE_PING
from engram.services.chat.stream_relay import LastChunk

log = logging.getLogger(__name__)


def stream_head(headers: Mapping[str, str], media_type: str) -> list[tuple[bytes, bytes]]:
    """The response headers of a streamed reply, as Starlette's ``StreamingResponse`` sets them (the same
    bytes in the same order: the reply's headers, then the content type with its charset), without
    building a response only to take it apart (tests/unit/test_chat_doors.py holds it to Starlette's)."""
    raw = [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in headers.items()]
    if all(k != b"content-type" for k, _ in raw):
        if media_type.startswith("text/") and "charset=" not in media_type.lower():
            media_type += "; charset=utf-8"
        raw.append((b"content-type", media_type.encode("latin-1")))
    return raw


class StreamOut:
    """One chat turn's streamed answer, sent as Starlette sends a ``StreamingResponse`` but without its task
    group: each chunk as it comes, and a client that goes away (``http.disconnect``) cancels the request's
    task where it waits, so the relay settles the turn as ``client_disconnected``
    (services/chat/stream_relay.py); ``gone`` then says the cancellation was the client's. A body left
    unfinished is closed here, before the response ends, not whenever it is collected.

    The relay's ``LastChunk`` (the closing event, sent once the exchange is stored, or the error event)
    goes out with the end of the body, once the body is done: the same bytes in one write instead of
    two, and one wake-up less for the client (bench/README.md, "Gateway overhead").

    Made in the request's task, before the turn: the service may ``begin`` the answer while the upstream
    has not answered yet (a timer's callback), and ``end`` the keep-alives once it has."""

    def __init__(self, receive: Receive, send: Send) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._task = task
        self._receive = receive
        self._send = send
        self.started = False  # the head went out
        self.gone = False  # the client went away while the answer was under way
        self._done = False
        self._watcher: asyncio.Task[None] | None = None
        self._pinger: asyncio.Task[None] | None = None

    # -- EarlyStart (services/chat/stream_relay.py) -------------------------------------------------------
    def begin(self, headers: Mapping[str, str], media_type: str, keepalive_seconds: float) -> None:
        """The head (200) now and a keep-alive comment every ``keepalive_seconds`` (the first one
        interval after the head, as before), from a task of their own, until ``end``."""
        self._watch()
        self._pinger = asyncio.ensure_future(self._keep_alive(stream_head(headers, media_type), keepalive_seconds))

    async def end(self) -> bool:
        """No more keep-alives; whether the head went out."""
        pinger, self._pinger = self._pinger, None
        if pinger is not None:
            pinger.cancel()
            try:
                await pinger
            except asyncio.CancelledError:
                if self._task.cancelling():  # this task's own cancellation (the client went away): on it goes
                    raise
            except Exception:  # a server whose send raises once the client is gone: the body's next send says so
                log.warning("a keep-alive could not be sent", exc_info=True)
        return self.started

    async def _keep_alive(self, headers: list[tuple[bytes, bytes]], every: float) -> None:
        self.started = True
        await self._send({"type": "http.response.start", "status": 200, "headers": headers})
        while True:
            await asyncio.sleep(every)
            await self._send({"type": "http.response.body", "body": SSE_PING, "more_body": True})

    # -- the answer -----------------------------------------------------------------------------------------
    def _watch(self) -> None:
        if self._watcher is None:
            self._watcher = asyncio.ensure_future(self._watch_disconnect())

    async def _watch_disconnect(self) -> None:
        while (await self._receive())["type"] != "http.disconnect":
            pass
        if not self._done:
            self.gone = True
            self._task.cancel()

    async def stream(self, status: int, headers: list[tuple[bytes, bytes]], body: AsyncIterator[bytes]) -> None:
        """``body`` sent (after the head, unless ``begin`` sent it)."""
        send = self._send
        self._watch()
        try:
            if not self.started:
                self.started = True
                await send({"type": "http.response.start", "status": status, "headers": headers})
            last: bytes = b""
            async for chunk in body:
                if last:  # more came after the last chunk: it was not the last
                    await send({"type": "http.response.body", "body": last, "more_body": True})
                    last = b""
                if isinstance(chunk, LastChunk):
                    last = chunk
                else:
                    await send({"type": "http.response.body", "body": chunk, "more_body": True})
            self._done = True
            await send({"type": "http.response.body", "body": last, "more_body": False})
        finally:
            self._done = True
            closer = getattr(body, "aclose", None)
            if closer is not None:
                await closer()

    async def close(self) -> None:
        """The end of the request: the keep-alives and the watcher stopped (whatever happened)."""
        self._done = True
        await self.end()
        if self._watcher is not None:
            self._watcher.cancel()
