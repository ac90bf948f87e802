"""The writes a chat exchange owes (services/chat/exchange.py): each fails alone, and the once-a-day
cleanup mark is read once per namespace and interval, not on every turn (bench/README.md, "Gateway
overhead")."""

from __future__ import annotations

import asyncio
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
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


def _recorder(c: Container, clock: ManualClock, queue: RecordingQueue, *, instant: bool = False) -> ExchangeRecorder:
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
        instant_writes=instant,
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
    # Given a recorder with a job queue
    clock = ManualClock()
    c, store = _container(clock)
    reads = Reads(store)
    queue = RecordingQueue()
    rec = _recorder(c, clock, queue)
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
    _exchange(_recorder(c, clock, first_queue), _turn("one"))
    clock.advance(hours=1)
    reads = Reads(store)
    queue = RecordingQueue()
    rec = _recorder(c, clock, queue)
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


def test_a_retry_reuses_its_turn() -> None:
    # Given a recorder
    clock = ManualClock()
    c, store = _container(clock)
    queue = RecordingQueue()
    rec = _recorder(c, clock, queue)
    # When an exchange is settled, and a retry of it within the window
    _exchange(rec, _turn("what is my cat called?"))
    _exchange(rec, _turn("what is my cat called?"), answer="the answer again")
    # Then the retry reused the turn: its user turn and its answer (same turn, same moment) are stored
    # once; usage twice, cleanup once
    messages = store.list_messages("default")
    assert [(m.role, m.content) for m in messages] == [("user", "what is my cat called?"), ("assistant", "the answer")]
    assert len(store.list_usage("default")) == 2
    assert queue.jobs == [("cleanup", {"namespace": "default"})]


def test_the_turn_mark_is_one_store_call_per_turn() -> None:
    # Given a recorder over a store whose cache calls are counted
    clock = ManualClock()
    c, store = _container(clock)
    calls: Counter[str] = Counter()
    for name in ("get_cache", "put_cache", "add_cache"):
        real = getattr(store, name)

        def counted(namespace: str, key: str, *args: Any, _name: str = name, _real: Any = real, **kw: Any) -> Any:
            if key.startswith("gateway:turn:"):
                calls[_name] += 1
            return _real(namespace, key, *args, **kw)

        setattr(store, name, counted)
    rec = _recorder(c, clock, RecordingQueue())
    # When a new turn is settled / Then its mark was noted by one put-if-absent, nothing read before it
    _exchange(rec, _turn("where did I park?"))
    assert calls == {"add_cache": 1}
    # When its retry comes within the window / Then the same one call found the first attempt's note
    # (nothing written), and the retry joined its turn: the exchange is stored once
    clock.advance(minutes=1)
    _exchange(rec, _turn("where did I park?"))
    assert calls == {"add_cache": 2}
    assert [m.role for m in store.list_messages("default")] == ["user", "assistant"]
    # When the same request comes after the window (its mark expired) / Then it is a new turn, one call again
    clock.advance(minutes=10)
    _exchange(rec, _turn("where did I park?"))
    assert calls == {"add_cache": 3}
    assert len(store.list_messages("default")) == 4


def test_a_mark_held_that_is_no_earlier_attempt_is_replaced() -> None:
    # Given a turn mark under the request's key that no attempt of it wrote (noted "now" by a clock
    # another process ran ahead: not within the window by this service's clock)
    clock = ManualClock()
    c, store = _container(clock)
    rec = _recorder(c, clock, RecordingQueue())
    req = _turn("what did we decide?")
    ahead = (clock.now() + timedelta(minutes=5)).isoformat()
    store.put_cache("default", f"gateway:turn:{req.key}", {"turn": "t_elsewhere", "at": ahead})
    # When the request is settled
    owed = Owed()
    turn = rec.turn_of(req, owed)
    # Then it is a new turn, and its own note replaced the one held
    assert turn != "t_elsewhere"
    assert (
        store.get_cache("default", f"gateway:turn:{req.key}")
        == owed.turn_note
        == {
            "turn": turn,
            "at": clock.now().isoformat(),
        }
    )


@pytest.mark.parametrize("instant", [False, True], ids=["hops", "instant"])
def test_each_write_fails_alone(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, instant: bool
) -> None:
    # Given a store whose usage rows and turn marks are away (its writes in hops, or on the loop)
    clock = ManualClock()
    c, store = _container(clock)
    queue = RecordingQueue()
    rec = _recorder(c, clock, queue, instant=instant)

    def away(*args: Any, **kwargs: Any) -> Any:
        raise UpstreamUnavailable("the store is away")

    monkeypatch.setattr(store, "append_usage", away)
    monkeypatch.setattr(store, "get_cache", away)
    monkeypatch.setattr(store, "add_cache", away)
    # When an exchange is settled
    _exchange(rec, _turn("hello"))
    # Then the messages are stored all the same (under the request's own turn), each failure logged
    assert [m.role for m in store.list_messages("default")] == ["user", "assistant"]
    logged = [r.getMessage() for r in caplog.records]
    assert "storing usage failed" in logged
    assert "deciding the turn of an exchange failed" in logged
    assert "enqueueing cleanup failed" in logged


def test_a_claim_is_settled_beside_the_writes() -> None:
    # Given a recorder and a turn holding a reminder claim
    clock = ManualClock()
    c, store = _container(clock)
    rec = _recorder(c, clock, RecordingQueue())
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


def test_a_turns_two_sides_are_one_store_write_and_one_index_write(monkeypatch: pytest.MonkeyPatch) -> None:
    # Given a recorder whose store's and conversation index's batch writes are counted
    clock = ManualClock()
    c, store = _container(clock)
    rec = _recorder(c, clock, RecordingQueue())
    batches: list[list[str]] = []
    indexed: list[list[str]] = []
    real_insert, index = store.insert_messages, c.conversations.index
    real_upsert = index.upsert_many

    def insert_messages(messages: Any) -> Any:
        batches.append([m.role for m in messages])
        return real_insert(messages)

    def upsert_many(docs: Any) -> None:
        indexed.append([d.text for d in docs])
        real_upsert(docs)

    monkeypatch.setattr(store, "insert_messages", insert_messages)
    monkeypatch.setattr(index, "upsert_many", upsert_many)
    # When an exchange is settled
    _exchange(rec, _turn("hello there"))
    # Then both sides went to the store in one call, in order, and to the conversation index in one call
    assert batches == [["user", "assistant"]]
    assert indexed == [["hello there", "the answer"]]
    assert [m.role for m in store.list_messages("default")] == ["user", "assistant"]


@pytest.mark.parametrize("instant", [False, True], ids=["hops", "instant"])
def test_a_failed_turn_write_stores_each_side_alone(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, instant: bool
) -> None:
    # Given a store that refuses a write of two messages at once, and one refusing the assistant's side
    clock = ManualClock()
    c, store = _container(clock)
    rec = _recorder(c, clock, RecordingQueue(), instant=instant)
    real_insert = store.insert_messages

    def insert_messages(messages: Any) -> Any:
        if len(messages) > 1 or messages[0].role == "assistant":
            raise UpstreamUnavailable("the store is away")
        return real_insert(messages)

    monkeypatch.setattr(store, "insert_messages", insert_messages)
    # When an exchange is settled
    _exchange(rec, _turn("hello"))
    # Then the user's side is stored alone, and both failures are logged
    assert [m.role for m in store.list_messages("default")] == ["user"]
    logged = [r.getMessage() for r in caplog.records]
    assert "storing the exchange in one write failed; storing each side alone" in logged
    assert "storing the exchange failed" in logged


def _jobs(monkeypatch: pytest.MonkeyPatch) -> tuple[list[str], Any]:
    """Worker jobs, counted by name until the returned ``stop`` is called."""
    jobs: list[str] = []
    submit = ThreadPoolExecutor.submit

    def counted(self: ThreadPoolExecutor, fn: Any, /, *args: Any, **kwargs: Any) -> Any:
        jobs.append(getattr(fn, "__name__", "?"))
        return submit(self, fn, *args, **kwargs)

    monkeypatch.setattr(ThreadPoolExecutor, "submit", counted)
    return jobs, lambda: monkeypatch.setattr(ThreadPoolExecutor, "submit", submit)


def test_a_new_turn_is_named_in_its_messages_write_not_in_a_hop_of_its_own(monkeypatch: pytest.MonkeyPatch) -> None:
    # Given a recorder whose namespace's cleanup mark is known (no cleanup write owed), worker jobs counted
    clock = ManualClock()
    c, store = _container(clock)
    rec = _recorder(c, clock, RecordingQueue())
    _exchange(rec, _turn("first"))
    jobs, stop = _jobs(monkeypatch)
    # When a new turn is settled
    req = _turn("where did I park?")
    owed = Owed()

    async def run() -> None:
        rec.sent(owed)
        await rec.settle(req, owed, "by the river", TokenUsage(input=3, output=2))
        stop()  # asyncio.run's own shutdown is not counted

    asyncio.run(run())
    # Then two worker jobs ran (usage; the messages, named by the turn decided in the same job)
    assert len(jobs) == 2
    stored = {m.external_id for m in store.list_messages("default")}
    assert owed.turn and {f"id:gw-{owed.turn}-u", f"id:gw-{owed.turn}-a"} <= stored


def test_instant_writes_store_the_exchange_without_a_worker_job(monkeypatch: pytest.MonkeyPatch) -> None:
    # Given a recorder with instant writes (the in-memory store and index) and a recalled memory
    clock = ManualClock()
    c, store = _container(clock)
    queue = RecordingQueue()
    rec = _recorder(c, clock, queue, instant=True)
    _exchange(rec, _turn("first"))  # the namespace's cleanup mark: written in a hop of its own
    assert queue.jobs == [("cleanup", {"namespace": "default"})]
    memory = c.memories.write("default", MemoryWrite(content="The user parks by the river")).memory
    jobs, stop = _jobs(monkeypatch)
    req = _turn("where did I park?")
    owed = Owed()
    told = TurnContext(reason="injected", recall="- parks by the river", recalled=(memory.id,))

    async def run() -> None:
        await rec.placed(req, owed, told, reminders=False, fragments=False, recall=True)
        rec.sent(owed)
        await rec.settle(req, owed, "by the river", TokenUsage(input=3, output=2))
        stop()  # asyncio.run's own shutdown is not counted

    asyncio.run(run())
    # Then no worker job ran, and the injection, the usage row and both messages were written
    assert jobs == []
    assert store.get_memories("default", [memory.id])[0].recall_count == 1
    assert [u.input_tokens for u in store.list_usage("default")] == [3, 3]
    stored = {m.external_id for m in store.list_messages("default")}
    assert owed.turn and {f"id:gw-{owed.turn}-u", f"id:gw-{owed.turn}-a"} <= stored


def test_instant_writes_take_their_hops_while_another_turn_is_in_flight(monkeypatch: pytest.MonkeyPatch) -> None:
    # Given a recorder with instant writes whose namespace's cleanup mark is known, and two turns opened
    clock = ManualClock()
    c, store = _container(clock)
    rec = _recorder(c, clock, RecordingQueue(), instant=True)
    _exchange(rec, _turn("first"))
    jobs, stop = _jobs(monkeypatch)

    async def run() -> None:
        other, owed = rec.open(), rec.open()
        # When one settles while the other is still in flight
        rec.sent(owed)
        await rec.settle(_turn("hello"), owed, "hi", TokenUsage(input=1, output=1))
        # Then its usage and messages went to worker threads (the other turn's first bytes go first)
        assert len(jobs) == 2
        # And once the other settled too, the next turn alone writes on the loop
        rec.sent(other)
        await rec.settle(_turn("again"), other, "yes", TokenUsage(input=1, output=1))
        assert len(jobs) == 2
        stop()

    asyncio.run(run())
    assert {"hello", "hi", "again", "yes"} <= {m.content for m in store.list_messages("default")}


def test_instant_writes_keep_the_cleanup_marks_hop(monkeypatch: pytest.MonkeyPatch) -> None:
    # Given a recorder with instant writes whose namespace has no cleanup mark yet
    clock = ManualClock()
    c, store = _container(clock)
    queue = RecordingQueue()
    rec = _recorder(c, clock, queue, instant=True)
    jobs, stop = _jobs(monkeypatch)

    async def run() -> None:
        owed = Owed()
        rec.sent(owed)
        await rec.settle(_turn("hello"), owed, "hi", TokenUsage(input=1, output=1))
        stop()

    asyncio.run(run())
    # Then the cleanup mark (it enqueues a job) went to a worker, the exchange's own writes did not
    assert len(jobs) == 1 and queue.jobs == [("cleanup", {"namespace": "default"})]
    assert [m.role for m in store.list_messages("default")] == ["user", "assistant"]


@pytest.mark.parametrize(("store", "search", "instant"), [("memory", "memory", True), ("sqlite", "local", False)])
def test_the_chat_writes_instantly_only_on_the_in_memory_store(
    tmp_path: Path, store: str, search: str, instant: bool
) -> None:
    # Given a container on the in-memory store and index, or on SQLite
    settings = Settings(store=store, search=search, embedder="none", data_dir=tmp_path, scheduler_enabled=False)
    c = build_container(settings, Overrides(clock=ManualClock()))
    # Then only the in-memory one writes an exchange on the event loop (SQLite's writes wait on the disk)
    assert c.chat._record._instant is instant
