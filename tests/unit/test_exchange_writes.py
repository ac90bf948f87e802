"""The writes a chat exchange owes (services/chat/exchange.py): on an in-process store they go to a
worker thread in one hop, side by side otherwise, with the same rows either way; the once-a-day cleanup
mark is read once per namespace and interval, not on every turn (bench/README.md, "Gateway overhead")."""

from __future__ import annotations

import asyncio
import dataclasses
from collections import Counter
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from engram.adapters.search.inmemory import InMemorySearchIndex
from engram.adapters.storage.inmemory import InMemoryMemoryStore
from engram.bootstrap import Container, Overrides, build_container
from engram.domain.errors import UpstreamUnavailable
from engram.domain.wire.usage import TokenUsage
from engram.services.chat.exchange import ExchangeRecorder, Owed
from engram.services.chat.routing import Route
from engram.services.chat.turn import ReminderClaim, TurnContext, TurnRequest
from engram.services.library.memories import MemoryWrite
from engram.settings import Settings

from tests.fakes.clock import ManualClock

DAY = timedelta(days=1)


class RecordingQueue:
    def __init__(self) -> None:
        self.jobs: list[tuple[str, dict[str, Any]]] = []

    def enqueue(self, job: str, payload: dict[str, Any]) -> None:
        self.jobs.append((job, payload))


class Reads:
    """Counts the store's cache reads by key (a spy over the real in-memory store)."""

    def __init__(self, store: InMemoryMemoryStore) -> None:
        self.keys: Counter[str] = Counter()
        real = store.get_cache

        def get_cache(namespace: str, key: str) -> Any:
            self.keys[f"{namespace}/{key}"] += 1
            return real(namespace, key)

        store.get_cache = get_cache  # type: ignore[method-assign]


def _container(clock: ManualClock) -> tuple[Container, InMemoryMemoryStore]:
    settings = Settings(store="memory", search="memory", embedder="none", data_dir=Path("."), scheduler_enabled=False)
    store = InMemoryMemoryStore(clock=clock)
    return build_container(settings, Overrides(store=store, index=InMemorySearchIndex(), clock=clock)), store


def _recorder(c: Container, clock: ManualClock, queue: RecordingQueue, *, in_process: bool) -> ExchangeRecorder:
    return ExchangeRecorder(
        store=c.store,
        messages=c.messages,
        memories=c.memories,
        clock=clock,
        cleanup_interval=lambda: DAY,
        retry_window=lambda: timedelta(minutes=10),
        queue=queue,
        reminders=c.reminders,
        conversations=c.conversations,
        record_injection=c.recall.record_injected,
        in_process=in_process,
    )


def _turn(text: str, namespace: str = "default") -> TurnRequest:
    body = {"model": "companion", "messages": [{"role": "user", "content": text}]}
    route = Route(provider="openai", model="fake-chat", requested="companion")
    return TurnRequest(namespace=namespace, wire="openai", body=body, route=route, user_text=text)


def _exchange(rec: ExchangeRecorder, req: TurnRequest, answer: str = "the answer") -> None:
    async def run() -> None:
        owed = Owed()
        rec.sent(owed)
        await rec.settle(req, owed, answer, TokenUsage(input=3, output=2))

    asyncio.run(run())


def test_the_cleanup_mark_is_read_once_per_namespace_and_interval() -> None:
    # Given a recorder on an in-process store with a job queue
    clock = ManualClock()
    c, store = _container(clock)
    reads = Reads(store)
    queue = RecordingQueue()
    rec = _recorder(c, clock, queue, in_process=True)
    # When three turns go through in one namespace and one in another
    for text in ("one", "two", "three"):
        _exchange(rec, _turn(text))
    _exchange(rec, _turn("hello", namespace="other"))
    # Then each namespace's mark was read once (its first turn wrote it), and each cleanup enqueued once
    assert reads.keys["default/gateway:cleanup-enqueued"] == 1
    assert reads.keys["other/gateway:cleanup-enqueued"] == 1
    assert queue.jobs == [("cleanup", {"namespace": "default"}), ("cleanup", {"namespace": "other"})]
    # And once the interval ran out the mark is read again and the cleanup enqueued again
    clock.advance(days=1, seconds=1)
    _exchange(rec, _turn("four"))
    assert reads.keys["default/gateway:cleanup-enqueued"] == 2
    assert queue.jobs[-1] == ("cleanup", {"namespace": "default"})
    assert len(queue.jobs) == 3


def test_a_cleanup_mark_another_process_wrote_is_read_once_then_known() -> None:
    # Given a mark written by another process (another recorder on the same store) an hour ago
    clock = ManualClock()
    c, store = _container(clock)
    first_queue = RecordingQueue()
    _exchange(_recorder(c, clock, first_queue, in_process=True), _turn("one"))
    clock.advance(hours=1)
    reads = Reads(store)
    queue = RecordingQueue()
    rec = _recorder(c, clock, queue, in_process=True)
    # When this process's turns go through
    for text in ("two", "three", "four"):
        _exchange(rec, _turn(text))
    # Then it read the mark once, enqueued nothing, and knows it until the other's interval runs out
    assert reads.keys["default/gateway:cleanup-enqueued"] == 1
    assert queue.jobs == []
    clock.advance(hours=23, seconds=1)
    _exchange(rec, _turn("five"))
    assert reads.keys["default/gateway:cleanup-enqueued"] == 2
    assert queue.jobs == [("cleanup", {"namespace": "default"})]


@pytest.mark.parametrize("in_process", [True, False], ids=["one-hop", "side-by-side"])
def test_an_exchange_stores_the_same_rows_in_one_hop_or_side_by_side(in_process: bool) -> None:
    # Given a recorder either way
    clock = ManualClock()
    c, store = _container(clock)
    queue = RecordingQueue()
    rec = _recorder(c, clock, queue, in_process=in_process)
    # When an exchange is settled, and a retry of it within the window
    _exchange(rec, _turn("what is my cat called?"))
    _exchange(rec, _turn("what is my cat called?"), answer="the answer again")
    # Then the retry reused the turn: its user turn and its answer (same turn, same moment) are stored
    # once; usage twice, cleanup once
    messages = store.list_messages("default")
    assert [(m.role, m.content) for m in messages] == [("user", "what is my cat called?"), ("assistant", "the answer")]
    assert len(store.list_usage("default")) == 2
    assert queue.jobs == [("cleanup", {"namespace": "default"})]


@pytest.mark.parametrize("in_process", [True, False], ids=["one-hop", "side-by-side"])
def test_each_write_fails_alone_in_one_hop_or_side_by_side(
    in_process: bool, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # Given a store whose usage rows and turn marks are away, and a recorder either way
    clock = ManualClock()
    c, store = _container(clock)
    queue = RecordingQueue()
    rec = _recorder(c, clock, queue, in_process=in_process)

    def away(*args: Any, **kwargs: Any) -> Any:
        raise UpstreamUnavailable("the store is away")

    monkeypatch.setattr(store, "append_usage", away)
    monkeypatch.setattr(store, "get_cache", away)
    # When an exchange is settled
    _exchange(rec, _turn("hello"))
    # Then the messages are stored all the same (under the request's own turn), each failure logged
    assert [m.role for m in store.list_messages("default")] == ["user", "assistant"]
    logged = [r.getMessage() for r in caplog.records]
    assert "storing usage failed" in logged
    assert "deciding the turn of an exchange failed" in logged
    assert "enqueueing cleanup failed" in logged


def test_the_injection_record_of_a_turn_that_stores_nothing_is_still_written() -> None:
    # Given an in-process recorder and a turn that injected a memory but is not persisted
    clock = ManualClock()
    c, store = _container(clock)

    memory = c.memories.write("default", MemoryWrite(content="The cat is called Miso")).memory
    rec = _recorder(c, clock, RecordingQueue(), in_process=True)
    req = _turn("what is my cat called?")
    req = dataclasses.replace(req, persist=False)
    told = TurnContext(reason="injected", recall="- The cat is called Miso", recalled=(memory.id,))

    async def run() -> None:
        owed = Owed()
        rec.take(owed, told)
        await rec.placed(req, owed, told, reminders=False, fragments=False, recall=True)
        rec.sent(owed)
        await rec.settle(req, owed, "Miso", TokenUsage())

    asyncio.run(run())
    # Then the injection was recorded before settle returned
    [found] = store.get_memories("default", [memory.id])
    assert found.last_injected_at == clock.now()
    assert store.list_messages("default") == []


def test_a_claim_is_settled_beside_the_one_hop_of_writes() -> None:
    # Given an in-process recorder and a turn holding a (stale) reminder claim
    clock = ManualClock()
    c, store = _container(clock)
    rec = _recorder(c, clock, RecordingQueue(), in_process=True)
    settled: list[tuple[str, bool]] = []

    def settle(namespace: str, owner: str, memory_ids: Any, *, delivered: bool) -> None:
        settled.append((owner, delivered))

    c.reminders.settle = settle  # type: ignore[method-assign]
    told = TurnContext(reason="no_content", reminders=ReminderClaim("default", "turn_x", ("mem_1",), "- feed the cat"))
    req = _turn("hello")

    async def run() -> None:
        owed = Owed()
        rec.take(owed, told)
        rec.sent(owed)
        await rec.settle(req, owed, "hi", TokenUsage())

    asyncio.run(run())
    # Then the claim was delivered and the exchange stored
    assert settled == [("turn_x", True)]
    assert [m.role for m in store.list_messages("default")] == ["user", "assistant"]
