"""engram.services.sync_bridge: the one bridge from sync code to coroutines (one loop per process)."""

from __future__ import annotations

import asyncio
import threading

import pytest
from engram.services.sync_bridge import process_loop, run_sync


async def running_loop() -> asyncio.AbstractEventLoop:
    return asyncio.get_running_loop()


def test_every_call_runs_on_the_same_open_loop() -> None:
    # When sync code runs coroutines one after another and from another thread
    first = run_sync(running_loop())
    second = run_sync(running_loop())
    seen: list[asyncio.AbstractEventLoop] = []
    worker = threading.Thread(target=lambda: seen.append(run_sync(running_loop())))
    worker.start()
    worker.join()
    # Then they all ran on the process loop, which is still open
    assert first is second is seen[0] is process_loop()
    assert not first.is_closed() and first.is_running()


def test_errors_propagate() -> None:
    async def boom() -> None:
        raise ValueError("nope")

    with pytest.raises(ValueError, match="nope"):
        run_sync(boom())


@pytest.mark.real_monotonic
def test_a_timeout_cancels_the_coroutine() -> None:
    cancelled = threading.Event()

    async def slow() -> None:
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            cancelled.set()
            raise

    with pytest.raises(TimeoutError):
        run_sync(slow(), timeout=0.05)
    assert cancelled.wait(2)


def test_a_sync_call_works_inside_another_running_loop() -> None:
    # Given sync code called from a coroutine of some other loop (a server handler calling sync recall)
    async def handler() -> asyncio.AbstractEventLoop:
        return run_sync(running_loop())

    # Then it is served by the process loop, not by a loop made for the call
    assert asyncio.run(handler()) is process_loop()


def test_waiting_on_the_process_loop_itself_is_refused_not_a_deadlock() -> None:
    async def nested() -> None:
        run_sync(running_loop())

    with pytest.raises(RuntimeError, match="own thread"):
        run_sync(nested())
