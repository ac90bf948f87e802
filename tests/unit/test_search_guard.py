"""The search index guard, the lazy embedding-model check and the repair of index writes that failed.

Real: the services, the in-memory store and index, the inline job queue. The index is made to fail
by a thin subclass (an unreachable OpenSearch raises ``UpstreamUnavailable`` just like this).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

import pytest
from engram.adapters.search.inmemory import InMemorySearchIndex
from engram.bootstrap import Overrides, build_container
from engram.domain.errors import InvalidInput, UpstreamRejected, UpstreamUnavailable
from engram.domain.models import IndexedDoc, IndexInfo, SearchHit
from engram.services.index.gated_embedder import GatedEmbedder
from engram.services.index.guard import GuardedIndex, is_index_unavailable
from engram.services.library.memories import MemoryWrite
from engram.settings import Settings

from tests.fakes.clock import ManualClock
from tests.fakes.embedder import HashEmbedder

NS = "alice"


class SwitchableIndex(InMemorySearchIndex):
    """The in-memory index; every call fails with ``error`` while it is set; calls are counted."""

    def __init__(self) -> None:
        super().__init__()
        self.error: Exception | None = None
        self.calls = 0

    def _maybe_fail(self) -> None:
        self.calls += 1
        if self.error is not None:
            raise self.error

    def upsert(self, doc: IndexedDoc) -> str:
        self._maybe_fail()
        return super().upsert(doc)

    def delete(self, namespace: str, memory_id: str, ref: str | None = None) -> None:
        self._maybe_fail()
        super().delete(namespace, memory_id, ref)

    def keyword_search(self, namespace: str, query: str, *, k: int = 50, types: Sequence[str] = ()) -> list[SearchHit]:
        self._maybe_fail()
        return super().keyword_search(namespace, query, k=k, types=types)

    def info(self, namespace: str | None = None) -> IndexInfo:
        self._maybe_fail()
        return super().info(namespace)


class Ticker:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_the_guard_fails_fast_while_the_index_is_away_then_one_call_probes() -> None:
    # Given a guarded index that is unreachable
    inner, tick = SwitchableIndex(), Ticker()
    recovered: list[bool] = []
    clock = ManualClock()
    guard = GuardedIndex(
        inner, clock=clock, retry_seconds=15, monotonic=tick, on_recovered=lambda: recovered.append(True)
    )
    inner.error = UpstreamUnavailable("connect refused")
    assert guard.describe() == {"status": "unknown"}
    # When it is called: the real call fails and marks it unavailable
    with pytest.raises(UpstreamUnavailable) as first:
        guard.keyword_search(NS, "tea")
    assert is_index_unavailable(first.value) and inner.calls == 1
    # Then calls within the wait fail at once, without reaching the index
    with pytest.raises(UpstreamUnavailable) as fast:
        guard.info()
    assert fast.value.code == "index_unavailable" and inner.calls == 1
    state = guard.describe()
    assert state["status"] == "unavailable" and state["error"] == "upstream_unavailable" and state["retry_in_s"] == 15
    assert state["since"] == clock.now().isoformat()  # stamped by the injected clock
    # When the wait is over and the index is back, the next call probes it and closes the guard
    tick.now += 15
    inner.error = None
    assert guard.keyword_search(NS, "tea") == []
    assert guard.describe() == {"status": "ok"} and inner.calls == 2 and recovered == [True]


def test_refused_requests_trip_the_guard_but_bad_input_does_not() -> None:
    # Given a guarded index
    inner = SwitchableIndex()
    guard = GuardedIndex(inner, clock=ManualClock(), retry_seconds=15)
    # When the index rejects a request as invalid, Then that says nothing about its availability
    inner.error = InvalidInput("bad query")
    with pytest.raises(InvalidInput):
        guard.keyword_search(NS, "tea")
    after_bad_input = guard.state  # read once: mypy would keep the narrowed state past the next call
    assert after_bad_input == "unknown"
    # When it refuses access (a data-access policy still propagating), Then it counts as unavailable
    inner.error = UpstreamRejected("403 forbidden", status=502)
    with pytest.raises(UpstreamUnavailable):
        guard.keyword_search(NS, "tea")
    assert guard.state == "unavailable"


def test_building_the_container_asks_nothing_of_the_index() -> None:
    # Given an index that would fail any call
    inner = SwitchableIndex()
    inner.error = UpstreamUnavailable("asleep")
    settings = Settings(store="memory", search="memory", embedder="none", scheduler_enabled=False)
    # When the container is built with an embedder
    container = build_container(
        settings, Overrides(index=inner, embedder=HashEmbedder(dimension=8), extract_model=None)
    )
    # Then the index was not called; the model check waits for first use
    assert inner.calls == 0
    assert container.embedder is not None and container.embedder.state == "unknown"
    assert container.index.describe() == {"status": "unknown"}
    container.close()


def test_a_mismatched_model_is_looked_at_again_after_another_process_rebuilt_the_index() -> None:
    # Given an index built by another model, and a gate over it
    index, tick = InMemorySearchIndex(), Ticker()
    index.reset("other-model", 8)
    gate = GatedEmbedder(HashEmbedder(dimension=8), index, recheck_seconds=10, monotonic=tick)
    assert gate.matches_index is False and gate.state == "reindex_needed"
    # When another process resets the index to this model
    index.reset(HashEmbedder(dimension=8).model_id, 8)
    # Then the gate opens once the recheck interval has passed, not before
    assert gate.matches_index is False
    tick.now += 10
    assert gate.matches_index is True and gate.state == "ok"


def _container(index: SwitchableIndex, clock: ManualClock) -> Any:
    settings = Settings(
        store="memory", search="memory", embedder="none", scheduler_enabled=False, search_retry_seconds=0
    )
    return build_container(
        settings, Overrides(index=index, clock=clock, embedder=HashEmbedder(dimension=8), extract_model=None)
    )


def test_writes_while_the_index_is_away_are_kept_and_repaired_when_it_answers_again() -> None:
    # Given a container whose index is unreachable
    index, clock = SwitchableIndex(), ManualClock()
    c = _container(index, clock)
    index.error = UpstreamUnavailable("asleep")
    # When memories are written, one of them deduplicated against the index
    first = c.memories.write(NS, MemoryWrite(content="Alice plays the cello"))
    second = c.memories.write(NS, MemoryWrite(content="Alice grows tomatoes"), dedup=True)
    # Then both are stored, and the store records that the index misses them
    assert first.created and second.created
    failed = c.store.list_events(NS, kind="index_failed")
    assert {e.memory_id for e in failed} == {first.memory.id, second.memory.id}
    assert c.upkeep.health(NS).status == "pending"
    assert InMemorySearchIndex.keyword_search(index, NS, "cello") == []
    # When the index answers again (the next call through the guard succeeds)
    index.error = None
    clock.advance(seconds=1)
    assert c.index.keyword_search(NS, "cello") == []
    c.queue.join(10)
    # Then a repair was queued and ran: both memories are searchable with vectors, the flag is gone
    assert [h.memory_id for h in c.index.keyword_search(NS, "cello")] == [first.memory.id]
    assert [h.memory_id for h in c.index.keyword_search(NS, "tomatoes")] == [second.memory.id]
    assert c.index.info().vectors == 2
    assert c.upkeep.health(NS).status == "ok"
    c.close()


def test_the_cleanup_job_repairs_what_a_restarted_process_no_longer_remembers() -> None:
    # Given index writes that failed in a process that is gone (only the store remembers them)
    index, clock = SwitchableIndex(), ManualClock()
    c = _container(index, clock)
    index.error = UpstreamUnavailable("asleep")
    kept = c.memories.write(NS, MemoryWrite(content="Alice works as a nurse")).memory
    dropped = c.memories.write(NS, MemoryWrite(content="Alice lives in Oslo")).memory
    c.memories.set_status(NS, dropped.id, "deleted")  # its index delete fails too
    c.upkeep.take_dirty()
    index.error = None
    super(SwitchableIndex, index).upsert(  # a stale document the failed delete left behind
        IndexedDoc(memory_id=dropped.id, namespace=NS, text=dropped.content, type="fact", created_at=clock.now())
    )
    # When the cleanup job runs for the namespace
    clock.advance(minutes=1)
    report = c.cleanup.run(NS).to_dict()
    # Then the active memory is indexed, the deleted one is gone from the index, and the flag is cleared
    assert report["index_repaired"] == 2 and report["errors"] == 0
    assert [h.memory_id for h in c.index.keyword_search(NS, "nurse")] == [kept.id]
    assert c.index.keyword_search(NS, "Oslo") == []
    assert c.upkeep.health(NS).status == "ok"
    # And a second run has nothing left to repair
    assert c.cleanup.run(NS).to_dict()["index_repaired"] == 0
    c.close()


def test_a_repair_while_the_index_is_still_away_keeps_the_record() -> None:
    # Given a failed write
    index, clock = SwitchableIndex(), ManualClock()
    c = _container(index, clock)
    index.error = UpstreamUnavailable("asleep")
    c.memories.write(NS, MemoryWrite(content="Alice plays the cello"))
    # When the repair runs while the index is still away
    with pytest.raises(UpstreamUnavailable):
        c.upkeep.repair(NS)
    # Then the record stays for the next attempt, which succeeds once the index is back
    assert c.upkeep.health(NS).status == "pending"
    index.error = None
    clock.advance(seconds=30)
    assert c.upkeep.repair(NS) == 1
    assert c.upkeep.health(NS).status == "ok"
    assert (
        c.store.get_cursor(NS, "index:repaired")
        == c.store.list_events(NS, kind="index_failed")[0].created_at.isoformat()
    )
    assert [h.memory_id for h in c.index.keyword_search(NS, "cello")] != []
    c.close()


def test_a_looping_cause_chain_is_not_an_unavailable_index() -> None:
    # Given an error whose cause chain loops back on itself (as a retried coroutine's can)
    first, second = RuntimeError("a"), TimeoutError("b")
    first.__cause__, second.__cause__ = second, first
    # Then the check ends, and says no
    assert is_index_unavailable(first) is False
    assert is_index_unavailable(UpstreamUnavailable("x", code="index_unavailable")) is True


def test_the_guard_passes_neighbour_densities_through_when_the_index_has_them() -> None:
    class NoVectorsAtHand:
        """Only the SearchIndex port (as OpenSearch): no ``neighbour_density``."""

        def __init__(self) -> None:
            self.inner = InMemorySearchIndex()

        def __getattr__(self, name: str) -> Any:
            if name == "neighbour_density":
                raise AttributeError(name)
            return getattr(self.inner, name)

    when = datetime(2025, 1, 1, tzinfo=UTC)
    docs = [
        IndexedDoc(memory_id=f"m{i}", namespace=NS, text="x", type="fact", vector=(1.0, 0.1 * i, 0.0), created_at=when)
        for i in range(3)
    ]
    # Given the guard over an index that keeps its vectors, and over one that does not
    local = GuardedIndex(InMemorySearchIndex(), clock=ManualClock())
    remote = GuardedIndex(NoVectorsAtHand(), clock=ManualClock())
    for index in (local, remote):
        for d in docs:
            index.upsert(d)
    # Then recall's hubness correction gets densities from the first and none (not an error) from the second
    assert set(local.neighbour_density(NS, ["m0", "m1", "m2"], k=1)) == {"m0", "m1", "m2"}
    assert remote.neighbour_density(NS, ["m0", "m1", "m2"], k=1) == {}


def test_recall_in_the_built_app_runs_the_hubness_correction_through_the_guard() -> None:
    # Given the app's own wiring (every index call through the guard) and a dozen memories with vectors
    c = _container(SwitchableIndex(), ManualClock())
    for i in range(12):
        c.memories.write(NS, MemoryWrite(content=f"note {i} about the garden and the weather"))
    c.memories.write(NS, MemoryWrite(content="Alice is allergic to peanuts"))
    # When recalling
    result = c.recall.recall(NS, "allergic to peanuts", min_relevance=0.0)
    # Then the densities came through the guard and corrected the vector scores
    assert "hubness" in result.meta["stages"], result.meta
    c.close()
