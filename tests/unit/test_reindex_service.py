"""One reindex use case (services/index/reindex.py): a job whose state lives in the store, resumable at a
deadline, that turns vectors back on in every process after a model change.

Real: the services, the in-memory store and index (shared by two containers, as two Lambda instances
share DynamoDB and OpenSearch), the inline job queue. The embedders are deterministic fakes.
"""

from __future__ import annotations

import time
from typing import Any

import pytest
from engram.adapters.search.inmemory import InMemorySearchIndex
from engram.adapters.storage.inmemory import InMemoryMemoryStore
from engram.bootstrap import Overrides, build_container
from engram.domain.errors import UpstreamUnavailable
from engram.services.index.reindex import STATE_KEY
from engram.services.index.upkeep import INDEX_DIRTY
from engram.services.library.memories import MemoryWrite
from engram.settings import Settings

from tests.fakes.clock import ManualClock
from tests.fakes.embedder import HashEmbedder


class RecordingQueue:
    def __init__(self) -> None:
        self.jobs: list[tuple[str, dict[str, Any]]] = []

    def enqueue(self, job: str, payload: dict[str, Any]) -> None:
        self.jobs.append((job, payload))


CLOCK = ManualClock()  # the store and every container share it; no test here moves it


def _container(store: Any, index: Any, embedder: Any, **overrides: Any) -> Any:
    # No wait after an index failure (15 s in a real process): the tests retry at once.
    settings = Settings(
        store="memory", search="memory", embedder="none", scheduler_enabled=False, search_retry_seconds=0
    )
    return build_container(
        settings,
        Overrides(store=store, index=index, embedder=embedder, clock=CLOCK, extract_model=None, **overrides),
    )


def _fill(container: Any, namespace: str, count: int) -> None:
    for i in range(count):
        container.memories.write(namespace, MemoryWrite(content=f"memory {i} of {namespace} about topic {i % 5}"))


def test_a_run_started_on_one_instance_reports_progress_on_another() -> None:
    # Given two instances over one store and index, with 40 memories
    store, index = InMemoryMemoryStore(clock=CLOCK), InMemorySearchIndex()
    first = _container(store, index, HashEmbedder(dimension=8))
    second = _container(store, index, HashEmbedder(dimension=8))
    _fill(first, "alice", 40)
    # When the first starts a reindex (its in-process queue runs it)
    started = first.reindex.start("alice")
    assert started["state"] == "running" and started["run_id"].startswith("rdx")
    first.queue.join(10)
    # Then the second reports the finished run from the store
    state = second.reindex.status("alice")
    assert (state["state"], state["done"], state["total"], state["reset"]) == ("done", 40, 40, False)
    assert state["namespaces"] == ["alice"] and state["finished_at"] is not None
    # And another namespace sees no run of its own
    assert second.reindex.status("bob") == {"state": "idle", "done": 0, "total": 0}


def test_a_run_stops_at_its_deadline_and_its_continuation_finishes_it() -> None:
    # Given 70 memories and a queue that only records (the jobs queue on AWS)
    store, index, queue = InMemoryMemoryStore(clock=CLOCK), InMemorySearchIndex(), RecordingQueue()
    c = _container(store, index, HashEmbedder(dimension=8), queue=queue)
    _fill(c, "alice", 70)
    started = c.reindex.start("alice")
    assert queue.jobs == [("reindex", {"namespace": "alice", "run_id": started["run_id"]})]
    # When each invocation has no time left (every run does one batch of 32, then stops)
    runs = 0
    while queue.jobs:
        _job, payload = queue.jobs.pop(0)
        state = c.reindex.run(payload["namespace"], payload["run_id"], deadline=time.monotonic())
        runs += 1
        assert runs < 10
    # Then three invocations did it, each memory once, and the run is done
    assert runs == 3
    assert (state["state"], state["done"], state["total"]) == ("done", 70, 70)
    assert index.info().documents == 70


def test_a_second_start_while_running_returns_the_running_one() -> None:
    store, queue = InMemoryMemoryStore(clock=CLOCK), RecordingQueue()
    c = _container(store, InMemorySearchIndex(), None, queue=queue)
    _fill(c, "alice", 3)
    first = c.reindex.start("alice")
    again = c.reindex.start("alice")
    assert again["run_id"] == first["run_id"] and len(queue.jobs) == 1
    # And a run whose id was replaced does nothing
    assert c.reindex.run("alice", "rdx_not_this_one")["run_id"] == first["run_id"]


def test_a_model_change_rebuilds_every_namespace_and_vectors_come_back_everywhere() -> None:
    # Given memories of two namespaces indexed with an old model
    store, index = InMemoryMemoryStore(clock=CLOCK), InMemorySearchIndex()
    old = _container(store, index, HashEmbedder(dimension=4))
    _fill(old, "alice", 5)
    _fill(old, "bob", 3)
    # And two instances running a new model: vectors are off in both
    first = _container(store, index, HashEmbedder(dimension=8))
    second = _container(store, index, HashEmbedder(dimension=8))
    assert not first.embedder.matches_index and not second.embedder.matches_index
    hits = second.recall.recall("alice", "topic 3")
    assert "vector" not in hits.meta["stages"]
    # When alice's admin starts a reindex on the first instance
    first.reindex.start("alice")
    first.queue.join(10)
    # Then the whole index was rebuilt with the new model
    state = second.reindex.status("alice")
    assert (state["state"], state["done"], state["total"], state["reset"]) == ("done", 8, 8, True)
    info = index.info()
    assert (info.dimension, info.vectors) == (8, 8)
    # And vectors are on in both instances without a restart
    assert first.embedder.state == "ok" and second.embedder.state != "reindex_needed"
    again = second.recall.recall("alice", "topic 3")
    assert "vector" in again.meta["stages"] and again.meta["counts"]["vector"] > 0


def test_an_unavailable_index_ends_the_run_with_an_error_and_keeps_the_repair_flag() -> None:
    class DownIndex(InMemorySearchIndex):
        down = False

        def upsert(self, doc: Any) -> str:
            if self.down:
                raise UpstreamUnavailable("asleep")
            return super().upsert(doc)

    store, index = InMemoryMemoryStore(clock=CLOCK), DownIndex()
    c = _container(store, index, None)
    _fill(c, "alice", 3)
    index.down = True
    c.memories.write("alice", MemoryWrite(content="written while the index sleeps"))
    # When a reindex runs while the index is away
    state = c.reindex.start("alice")
    c.queue.join(10)
    state = c.reindex.status("alice")
    # Then the run failed with a reason, and the failed write is still marked for repair
    assert state["state"] == "error" and "unavailable" in state["error"]
    assert store.get_cache("alice", INDEX_DIRTY) is not None
    # When the index is back and the reindex runs again
    index.down = False
    c.reindex.start("alice")
    c.queue.join(10)
    # Then it completes and clears the repair flag
    assert c.reindex.status("alice")["state"] == "done"
    assert store.get_cache("alice", INDEX_DIRTY) is None


def test_the_cli_rebuild_reports_each_namespace(capsys: pytest.CaptureFixture[str]) -> None:
    store, index = InMemoryMemoryStore(clock=CLOCK), InMemorySearchIndex()
    c = _container(store, index, HashEmbedder(dimension=8))
    _fill(c, "alice", 4)
    _fill(c, "bob", 2)
    bars: list[tuple[str, int, list[int]]] = []

    def progress(ns: str, count: int) -> Any:
        bars.append((ns, count, []))
        return bars[-1][2].append

    assert c.reindex.rebuild("default", every_namespace=True, progress=progress) == 6
    assert [(ns, count, sum(steps)) for ns, count, steps in bars] == [("alice", 4, 4), ("bob", 2, 2)]
    state = store.get_cache("default", STATE_KEY)
    assert state is not None and state["state"] == "done"
