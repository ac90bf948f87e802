"""A chat door's streamed answer sent over ASGI (``ChatDoors``, entrypoints/http/chat.py): the head a
Starlette ``StreamingResponse`` would send, then each chunk as it comes, without the response object or
its task group (bench/README.md, "Gateway overhead")."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from starlette.types import Receive, Send

from engram.services.chat.gateway import ChatReply
from engram.services.chat.stream_relay import LastChunk


def stream_head(reply: ChatReply) -> list[tuple[bytes, bytes]]:
    """The response headers of a streamed reply, as Starlette's ``StreamingResponse`` sets them (the same
    bytes in the same order: the reply's headers, then the content type with its charset), without
    building a response only to take it apart (tests/unit/test_chat_doors.py holds it to Starlette's)."""
    raw = [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in reply.headers.items()]
    if all(k != b"content-type" for k, _ in raw):
        media = reply.media_type
        if media.startswith("text/") and "charset=" not in media.lower():
            media += "; charset=utf-8"
        raw.append((b"content-type", media.encode("latin-1")))
    return raw


async def send_stream(
    status: int, headers: list[tuple[bytes, bytes]], body: AsyncIterator[bytes], receive: Receive, send: Send
) -> None:
    """A streamed body sent as Starlette sends a ``StreamingResponse``, without its task group: each
    chunk as it comes, and a client that goes away (``http.disconnect``) cancels the body where it
    waits, so the relay settles the turn as ``client_disconnected`` (services/chat/stream_relay.py). A
    body left unfinished is closed here, before the response ends, not whenever it is collected.

    The relay's ``LastChunk`` (the closing event, sent once the exchange is stored, or the error event)
    goes out with the end of the body, once the body is done: the same bytes in one write instead of
    two, and one wake-up less for the client (bench/README.md, "Gateway overhead")."""
    task = asyncio.current_task()
    assert task is not None
    state = {"done": False, "gone": False}

    async def watch() -> None:
        while (await receive())["type"] != "http.disconnect":
            pass
        if not state["done"]:
            state["gone"] = True
            task.cancel()

    watcher = asyncio.ensure_future(watch())
    try:
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
        state["done"] = True
        await send({"type": "http.response.body", "body": last, "more_body": False})
    except asyncio.CancelledError:
        if not state["gone"]:
            raise
        task.uncancel()  # the client went away: the request ends here, as Starlette's would
    finally:
        state["done"] = True
        watcher.cancel()
        closer = getattr(body, "aclose", None)
        if closer is not None:
            await closer()
