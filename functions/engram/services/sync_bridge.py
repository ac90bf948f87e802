"""The one bridge from synchronous code to coroutines: one event loop per process, in a daemon thread.

An ``httpx.AsyncClient`` (the model adapters keep one per process) belongs to the loop it first ran
on. Code that made a new loop per call (``asyncio.run``) handed a warm Lambda or the next recall a
client bound to a closed loop: "Event loop is closed" on every second run. So every synchronous
caller — the job Lambda handlers, the CLI's job commands, recall's compression — runs its coroutines
through ``run_sync``, on the same loop, which stays open for the life of the process (a frozen Lambda
environment freezes the thread with it and resumes it on the next invocation). See docs/aws.md.

The HTTP server does not use it: its handlers already run on the server's loop.
"""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import inspect
import os
import threading
from collections.abc import Awaitable
from typing import TypeVar

T = TypeVar("T")

_lock = threading.Lock()
_loop: asyncio.AbstractEventLoop | None = None
_thread: threading.Thread | None = None
_pid = 0


def process_loop() -> asyncio.AbstractEventLoop:
    """The process's loop, started on first use (and again in a forked child, which has no thread)."""
    global _loop, _thread, _pid
    with _lock:
        if _loop is None or _thread is None or not _thread.is_alive() or _pid != os.getpid():
            loop = asyncio.new_event_loop()
            thread = threading.Thread(target=_serve, args=(loop,), name="engram-loop", daemon=True)
            thread.start()
            if _loop is None:
                atexit.register(_stop)
            _loop, _thread, _pid = loop, thread, os.getpid()
        return _loop


def _serve(loop: asyncio.AbstractEventLoop) -> None:
    asyncio.set_event_loop(loop)
    loop.run_forever()


async def _awaited(awaitable: Awaitable[T]) -> T:
    return await awaitable


def run_sync(awaitable: Awaitable[T], *, timeout: float | None = None) -> T:
    """Wait for ``awaitable`` on the process loop and return its value. On ``timeout`` the coroutine
    is cancelled and ``TimeoutError`` raised. Calling it from a coroutine on the process loop itself
    would wait for ever, so that is refused with ``RuntimeError`` (await instead). From a thread whose
    own loop is running (another server's), it blocks that loop while waiting, like any sync call."""
    loop = process_loop()
    if threading.current_thread() is _thread:
        if inspect.iscoroutine(awaitable):
            awaitable.close()
        raise RuntimeError("run_sync called on the process loop's own thread: await the coroutine instead")
    future: concurrent.futures.Future[T] = asyncio.run_coroutine_threadsafe(_awaited(awaitable), loop)
    try:
        return future.result(timeout)
    except TimeoutError:
        future.cancel()
        raise


def _stop() -> None:
    # At exit: let the loop finish the callback it is running, then stop (open clients are not awaited).
    with _lock:
        loop, thread = _loop, _thread
    if loop is not None and thread is not None and thread.is_alive() and _pid == os.getpid():
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=1)
