"""A turn's context read in one worker-thread hop on an in-process store (services/chat/turn_context.py):
one job, the event loop woken once for every answer, and an answer that comes after the deadline still
reaches its reader (bench/README.md, "session 10")."""

from __future__ import annotations

import asyncio
import threading
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from engram.adapters.search.inmemory import InMemorySearchIndex
from engram.adapters.storage.inmemory import InMemoryMemoryStore
from engram.bootstrap import Container, Overrides, build_container
from engram.services.chat.routing import Route
from engram.services.chat.turn import ReminderClaim, TurnContext, TurnRequest
from engram.services.chat.turn_context import TurnContextSource, _OneHop
from engram.services.library.memories import MemoryWrite
from engram.settings import Settings

from tests.fakes.clock import ManualClock

CLAIM = ReminderClaim("default", "turn_x", ("mem_1",), "- feed the cat")


def _container() -> Container:
    clock = ManualClock()
    settings = Settings(store="memory", search="memory", embedder="none", data_dir=Path("."), scheduler_enabled=False)
    return build_container(
        settings, Overrides(store=InMemoryMemoryStore(clock=clock), index=InMemorySearchIndex(), clock=clock)
    )


def _source(c: Container) -> TurnContextSource:
    return TurnContextSource(
        boot=c.boot, recall=c.recall, reminders=c.reminders, conversations=c.conversations, in_process=True
    )


def _turn(text: str) -> TurnRequest:
    body = {"model": "companion", "messages": [{"role": "user", "content": text}]}
    route = Route(provider="openai", model="fake-chat", requested="companion")
    return TurnRequest(namespace="default", wire="openai", body=body, route=route, user_text=text)


async def _gather(source: TurnContextSource, req: TurnRequest, deadline: float = 5.0) -> TurnContext:
    return await source.gather(req, deadline=deadline, boot_cache_seconds=0, boot_max_chars=4000, patch_max_tokens=800)


def test_an_in_process_turn_reads_every_source_in_one_hop_and_wakes_the_loop_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Given a namespace with a pinned memory (the boot block), a memory the question recalls and a due reminder
    c = _container()
    c.memories.write("default", MemoryWrite(content="Pinned: Lin ships on Fridays.", pinned=True))
    c.memories.write("default", MemoryWrite(content="The deploy script is ./ship.sh --prod"))
    c.memories.write("default", MemoryWrite(content="feed the cat", remind_at=c.clock.now() - timedelta(minutes=1)))
    jobs: Counter[str] = Counter()
    submit = ThreadPoolExecutor.submit

    def counted(self: ThreadPoolExecutor, fn: Any, /, *args: Any, **kwargs: Any) -> Any:
        jobs["jobs"] += 1
        return submit(self, fn, *args, **kwargs)

    monkeypatch.setattr(ThreadPoolExecutor, "submit", counted)

    async def run() -> TurnContext:
        loop = asyncio.get_running_loop()
        wake = loop.call_soon_threadsafe

        def woken(*args: Any, **kwargs: Any) -> Any:
            jobs["wake-ups"] += 1
            return wake(*args, **kwargs)

        monkeypatch.setattr(loop, "call_soon_threadsafe", woken)
        told = await _gather(_source(c), _turn("which deploy script do I use?"))
        monkeypatch.setattr(loop, "call_soon_threadsafe", wake)  # asyncio.run's own shutdown is not counted
        return told

    # When the turn's context is read
    told = asyncio.run(run())
    # Then every source answered (boot block, recall, reminder claim) from one worker job, and the loop was
    # woken once for them all (the job's end)
    assert "Lin ships on Fridays" in told.boot
    assert "ship.sh" in told.recall and told.reason == "injected"
    assert told.reminders is not None and "feed the cat" in told.reminders.text
    assert told.late_claim is None
    assert jobs == {"jobs": 1, "wake-ups": 1}


def test_what_is_ready_at_the_deadline_is_handed_over_and_a_late_answer_still_comes() -> None:
    async def run() -> None:
        # Given the one hop's futures, a job that answers the claim and the boot block, then waits
        hop = _OneHop(past=False, claim=True, recall=True)
        go = threading.Event()

        def read_all() -> None:
            hop.answer(hop.claim, CLAIM)  # type: ignore[arg-type]
            hop.answer(hop.boot, ("boot", ()))
            go.wait(5)
            hop.answer(hop.recall, ("injected", "recalled", ("m1",)))  # type: ignore[arg-type]

        hop.start(read_all)
        assert hop.job is not None
        # When the deadline comes before the job ends
        await asyncio.wait({hop.job}, timeout=0.05)
        late = hop.hand_over()
        # Then what was ready is settled, and only the recall is late
        assert late == {hop.recall}
        assert hop.claim is not None and hop.claim.result() == CLAIM
        assert hop.boot.result() == ("boot", ())
        # And the recall's answer, once it comes, reaches the loop on its own
        go.set()
        assert hop.recall is not None
        assert await asyncio.wait_for(hop.recall, 5) == ("injected", "recalled", ("m1",))

    asyncio.run(run())


def test_a_failed_source_is_handed_over_as_its_failure() -> None:
    async def run() -> None:
        hop = _OneHop(past=True, claim=False, recall=False)
        failure = RuntimeError("the conversation index is away")

        def read_all() -> None:
            hop.answer(hop.past, None, failure)  # type: ignore[arg-type]
            hop.answer(hop.boot, ("", ()))

        hop.start(read_all)
        assert hop.job is not None
        await hop.job
        assert hop.hand_over() == set()
        assert hop.past is not None and hop.past.exception() is failure

    asyncio.run(run())


def test_a_turn_whose_read_cannot_start_goes_on_without_context_and_owes_no_claim(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Given an in-process source whose event loop cannot start a worker job (its executor shut down)
    c = _container()
    c.memories.write("default", MemoryWrite(content="The deploy script is ./ship.sh --prod"))

    async def run() -> TurnContext:
        loop = asyncio.get_running_loop()

        def refused(*args: Any, **kwargs: Any) -> Any:
            raise RuntimeError("cannot schedule new futures after shutdown")

        monkeypatch.setattr(loop, "run_in_executor", refused)
        return await _gather(_source(c), _turn("which deploy script do I use?"), deadline=5.0)

    # When the turn's context is read
    told = asyncio.run(run())
    # Then the turn goes on at once without its context, says why, and holds no reminder claim to release
    assert told.reason == "recall_timeout" and told.recall == ""
    assert told.reminders is None and told.late_claim is None
    assert told.elapsed_ms < 1000
