"""Concurrent writers never undo each other (docs/ARCHITECTURE.md, "Write rules"): a recall's bookkeeping
paused between its read and its write while a person archives the memory, edits racing a stale version,
restore as one transaction. The real services on every store (DynamoDB under moto), over real threads.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

import pytest
from engram.bootstrap import Container, Overrides, build_container
from engram.domain.errors import Conflict
from engram.domain.ports import Clock, MemoryStore
from engram.services.library.memories import MemoryPatch, MemoryWrite
from engram.settings import Settings

from tests.contract.conftest import STORE_FACTORIES
from tests.fakes.clock import ManualClock
from tests.fakes.embedder import HashEmbedder
from tests.fakes.pausing_store import PausingStore

NS = "alice"
WAIT_S = 20.0


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture(params=list(STORE_FACTORIES))
def store(request: pytest.FixtureRequest, tmp_path: Path, clock: ManualClock) -> Iterator[MemoryStore]:
    factory: Callable[[Path, Clock], AbstractContextManager[MemoryStore]] = STORE_FACTORIES[request.param]
    with factory(tmp_path, clock) as adapter:
        yield adapter


@pytest.fixture
def paused(store: MemoryStore) -> PausingStore:
    return PausingStore(store)


@pytest.fixture
def container(paused: PausingStore, clock: ManualClock) -> Iterator[Container]:
    settings = Settings(store="memory", search="memory", embedder="none", scheduler_enabled=False)
    built = build_container(settings, Overrides(store=paused, embedder=HashEmbedder(), clock=clock))
    try:
        yield built
    finally:
        built.close()


def _in_paused_thread(paused: PausingStore, work: Callable[[], Any]) -> tuple[threading.Thread, list[Any]]:
    """Start ``work`` on the thread whose memory writes wait at the gate; wait until one does."""
    outcome: list[Any] = []

    def run() -> None:
        try:
            outcome.append(work())
        except Exception as exc:  # the test inspects it
            outcome.append(exc)

    thread = threading.Thread(target=run)
    paused.thread = thread
    thread.start()
    assert paused.reached.wait(WAIT_S), "the paused writer never reached its write"
    return thread, outcome


def _finish(paused: PausingStore, thread: threading.Thread) -> None:
    paused.release.set()
    thread.join(WAIT_S)
    assert not thread.is_alive()


def test_a_recall_bump_paused_mid_write_never_undoes_an_archive(
    container: Container, paused: PausingStore, store: MemoryStore
) -> None:
    # Given an active memory that a chat turn's recall finds
    memory = container.memories.write(NS, MemoryWrite(content="The user's cat is called Miso")).memory
    assert memory.id in [h.memory.id for h in container.recall.recall(NS, "cat Miso", record_injection=True).hits]
    # When the next recall is paused at its bookkeeping write, and the owner archives the memory meanwhile
    thread, outcome = _in_paused_thread(
        paused, lambda: container.recall.recall(NS, "what is my cat called?", record_injection=True)
    )
    archived = container.memories.set_status(NS, memory.id, "archived")
    _finish(paused, thread)
    # Then the memory stays archived, and both recalls are counted
    assert archived.status == "archived"
    assert not isinstance(outcome[0], Exception)
    assert memory.id in [h.memory.id for h in outcome[0].hits]
    stored = store.get_memory(NS, memory.id)
    assert stored.status == "archived"
    assert stored.recall_count == 2


def test_concurrent_recall_bumps_lose_no_count(container: Container, store: MemoryStore) -> None:
    # Given an active memory
    memory = container.memories.write(NS, MemoryWrite(content="The user plays the cello")).memory
    # When eight threads record it as injected at once, five times each
    barrier = threading.Barrier(8)

    def bump() -> None:
        barrier.wait()
        for _ in range(5):
            store.record_injected(NS, [memory.id], container.clock.now())

    threads = [threading.Thread(target=bump) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(WAIT_S)
    # Then every bump counted
    assert store.get_memory(NS, memory.id).recall_count == 40


def test_an_edit_paused_mid_write_is_retried_on_a_fresh_read_not_overwritten(
    container: Container, paused: PausingStore, store: MemoryStore
) -> None:
    # Given an active memory
    memory = container.memories.write(NS, MemoryWrite(content="The user lives in Berlin")).memory
    # When an edit of its tags (no version given) is paused at its write while the owner archives it
    thread, outcome = _in_paused_thread(
        paused, lambda: container.memories.update(NS, memory.id, MemoryPatch(tags=["home"]))
    )
    container.memories.set_status(NS, memory.id, "archived")
    _finish(paused, thread)
    assert not isinstance(outcome[0], Exception)
    # Then the edit landed on the archived row: both writes are kept
    stored = store.get_memory(NS, memory.id)
    assert (stored.status, stored.tags) == ("archived", ("home",))
    assert stored.version == 3


def test_an_edit_at_a_version_read_before_another_write_is_refused(container: Container, store: MemoryStore) -> None:
    # Given a memory a person read (version 1), then archived by a job
    memory = container.memories.write(NS, MemoryWrite(content="The user lives in Berlin")).memory
    container.memories.set_status(NS, memory.id, "archived")
    # When the person saves an edit made on what they read
    with pytest.raises(Conflict) as caught:
        container.memories.update(NS, memory.id, MemoryPatch(content="The user lives in Lisbon"), version=1)
    # Then it is refused as a version conflict; the job's archive stays
    assert caught.value.code == "version_conflict"
    stored = store.get_memory(NS, memory.id)
    assert (stored.status, stored.content) == ("archived", "The user lives in Berlin")


def test_a_restore_paused_before_its_write_does_not_leave_two_active_versions(
    container: Container, paused: PausingStore, store: MemoryStore
) -> None:
    # Given a key with an old version (superseded) and its current holder
    first = container.memories.write(NS, MemoryWrite(content="Lives in Berlin", fact_key="profile:city")).memory
    second = container.memories.write(NS, MemoryWrite(content="Lives in Lisbon", fact_key="profile:city")).memory
    # When a restore of the old version is paused at its write while the holder is superseded again
    thread, outcome = _in_paused_thread(paused, lambda: container.memories.restore(NS, first.id))
    third = container.memories.supersede(NS, second.id, MemoryWrite(content="Lives in Porto"))
    _finish(paused, thread)
    # Then the restore went through on a fresh read: the old version is the one active memory of
    # the key, and the newest holder it replaced is superseded by it
    assert not isinstance(outcome[0], Exception)
    active = [m for m in store.iter_memories(NS, ("active",)) if m.fact_key == "profile:city"]
    assert [m.id for m in active] == [first.id]
    assert store.get_memory(NS, third.memory.id).status == "superseded"
    assert store.get_memory(NS, third.memory.id).superseded_by_id == first.id
