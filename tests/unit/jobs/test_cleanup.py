"""Cleanup: every retention period with a hand-moved clock, expiry rules, and vector-first erasure
with a search index that fails on demand."""

from __future__ import annotations

import threading
from datetime import datetime, timedelta
from typing import Any

import pytest
from engram.adapters.queue.inline import InlineJobQueue
from engram.adapters.search.inmemory import InMemorySearchIndex
from engram.bootstrap import Overrides, build_container
from engram.domain.errors import InvalidInput, UpstreamUnavailable
from engram.domain.models import IdempotencyRecord, MemoryEvent, UsageRecord, new_id
from engram.settings import Settings

from tests.fakes.clock import ManualClock
from tests.fakes.embedder import HashEmbedder
from tests.unit.jobs.conftest import NS, Env, ago


class FlakyIndex(InMemorySearchIndex):
    """The in-memory index, whose deletes fail while ``failing`` is set (an unreachable vector store)."""

    def __init__(self) -> None:
        super().__init__()
        self.failing = False
        self.deleted: list[str] = []

    def delete(self, namespace: str, memory_id: str, ref: str | None = None) -> None:
        if self.failing:
            raise UpstreamUnavailable("vector store unreachable")
        self.deleted.append(memory_id)
        super().delete(namespace, memory_id, ref)


def backdate(env: Env, memory_id: str, **fields: Any) -> None:
    store = env.container.store
    # The last sighting is a counter: only record_seen moves it (docs/ARCHITECTURE.md, "Write rules").
    if (seen_at := fields.pop("last_seen_at", None)) is not None:
        store.record_seen(NS, memory_id, seen_at)
    if fields:
        store.update_memory(store.get_memory(NS, memory_id).model_copy(update=fields))


def test_every_row_kind_is_deleted_after_its_period(env: Env) -> None:
    # Given rows just inside and just outside each period
    store = env.container.store
    old_msg = env.message("old", at=ago(env, days=14, minutes=1))
    new_msg = env.message("new", at=ago(env, days=13, hours=23))
    for days in (31, 29):
        store.append_usage(UsageRecord(id=new_id("use"), namespace=NS, model="m", created_at=ago(env, days=days)))
        store.append_event(MemoryEvent(id=new_id("evt"), namespace=NS, kind="x", created_at=ago(env, days=days)))
    for days in (8, 6):
        store.put_idempotency(IdempotencyRecord(namespace=NS, key=f"k{days}", created_at=ago(env, days=days)))
    # When cleanup runs
    result = env.container.cleanup.run(NS).to_dict()
    # Then exactly the old rows are gone
    assert (result["messages"], result["usage"], result["events"], result["idempotency"]) == (1, 1, 1, 1)
    remaining = [m.id for m in store.list_messages(NS)]
    assert remaining == [new_msg.id] and old_msg.id not in remaining
    assert store.get_idempotency(NS, "k6") is not None and store.get_idempotency(NS, "k8") is None
    assert len(store.list_usage(NS)) == 1


def test_periods_are_settings(make_env: Any) -> None:
    # Given a 2-day message retention
    env = make_env(retention_messages_days=2)
    env.message("three days old", at=ago(env, days=3))
    env.message("one day old", at=ago(env, days=1))
    # When cleanup runs
    result = env.container.cleanup.run(NS).to_dict()
    # Then the 3-day-old message is gone
    assert result["messages"] == 1 and len(env.container.store.list_messages(NS)) == 1


def test_unseen_memories_expire_except_pinned_identity_and_persona(env: Env) -> None:
    # Given memories last seen 181 days ago of several kinds, and one seen 179 days ago
    long_ago = ago(env, days=181)
    doomed = env.remember("The user once tried sushi")
    pinned = env.remember("The user's wedding day is June 3", pinned=True)
    identity = env.remember("The user is called Alice", type="identity")
    persona = env.remember("The assistant is called Nova", type="persona")
    recent = env.remember("The user likes kayaking")
    for m in (doomed, pinned, identity, persona):
        backdate(env, m.id, created_at=long_ago, last_seen_at=long_ago)
    backdate(env, recent.id, created_at=ago(env, days=179), last_seen_at=ago(env, days=179))
    # When cleanup runs
    result = env.container.cleanup.run(NS).to_dict()
    # Then only the ordinary memory expired, and it left the search index
    assert result["expired"] == 1
    assert env.container.store.get_memory(NS, doomed.id).status == "expired"
    assert {m.id for m in env.active()} == {pinned.id, identity.id, persona.id, recent.id}
    hits = env.container.index.keyword_search(NS, "sushi")
    assert doomed.id not in [h.memory_id for h in hits]


def test_expiry_pages_past_a_full_page_of_memories_that_stay(env: Env, monkeypatch: pytest.MonkeyPatch) -> None:
    from engram.services.jobs import cleanup as cleanup_module

    # Given pages of 2 rows, and the three oldest unseen memories pinned (they never expire)
    monkeypatch.setattr(cleanup_module, "_PAGE", 2)
    kept = [env.remember(f"Pinned fact number {i}", pinned=True) for i in range(3)]
    doomed = env.remember("The user once tried sushi")
    for days, memory in zip((190, 189, 188, 181), (*kept, doomed), strict=True):
        backdate(env, memory.id, created_at=ago(env, days=days), last_seen_at=ago(env, days=days))
    # When cleanup runs
    result = env.container.cleanup.run(NS).to_dict()
    # Then the expirable memory behind the pinned ones expired; the pinned stay
    assert result["expired"] == 1
    assert env.container.store.get_memory(NS, doomed.id).status == "expired"
    assert all(env.container.store.get_memory(NS, m.id).status == "active" for m in kept)


def _container_with(index: FlakyIndex, clock: ManualClock, tmp_store: str = "memory") -> Any:
    # No wait after an index failure: the next run comes a day later in real life, here at once.
    settings = Settings(
        store=tmp_store, search="memory", embedder="none", scheduler_enabled=False, search_retry_seconds=0
    )
    return build_container(settings, Overrides(index=index, clock=clock, embedder=HashEmbedder(), extract_model=None))


def test_old_deleted_superseded_and_expired_rows_are_erased_vector_first() -> None:
    # Given memories deleted, superseded and expired 31 days ago, and one deleted 29 days ago
    index, clock = FlakyIndex(), ManualClock()
    c = _container_with(index, clock)
    from engram.services.library.memories import MemoryWrite

    gone = c.memories.write(NS, MemoryWrite(content="to delete")).memory
    v1 = c.memories.write(NS, MemoryWrite(content="City is Rome", fact_key="profile:city")).memory
    c.memories.write(NS, MemoryWrite(content="City is Oslo", fact_key="profile:city"))
    fresh = c.memories.write(NS, MemoryWrite(content="deleted recently")).memory
    c.memories.set_status(NS, gone.id, "deleted")
    c.memories.set_status(NS, fresh.id, "deleted")
    month_ago = clock.now() - timedelta(days=31)
    for mid in (gone.id, v1.id):
        c.store.update_memory(c.store.get_memory(NS, mid).model_copy(update={"status_changed_at": month_ago}))
    c.store.update_memory(
        c.store.get_memory(NS, fresh.id).model_copy(update={"status_changed_at": clock.now() - timedelta(days=29)})
    )
    index.deleted.clear()
    # When cleanup runs
    result = c.cleanup.run(NS).to_dict()
    # Then the two old rows are erased after their search documents, the recent one stays
    assert result["hard_deleted"] == 2 and result["kept_for_retry"] == 0
    assert sorted(index.deleted) == sorted([gone.id, v1.id])
    remaining = {m.id for m in c.store.iter_memories(NS)}
    assert gone.id not in remaining and v1.id not in remaining and fresh.id in remaining
    c.close()


def test_a_failing_vector_delete_keeps_the_row_for_the_next_run() -> None:
    # Given a memory deleted 40 days ago and a vector store that is down
    index, clock = FlakyIndex(), ManualClock()
    c = _container_with(index, clock)
    from engram.services.library.memories import MemoryWrite

    memory = c.memories.write(NS, MemoryWrite(content="forget me")).memory
    c.memories.set_status(NS, memory.id, "deleted")
    c.store.update_memory(
        c.store.get_memory(NS, memory.id).model_copy(update={"status_changed_at": clock.now() - timedelta(days=40)})
    )
    index.failing = True
    # When cleanup runs
    first = c.cleanup.run(NS).to_dict()
    # Then the row stays and the failure is reported
    assert first["hard_deleted"] == 0 and first["kept_for_retry"] == 1 and first["errors"] == 1
    assert c.store.get_memory(NS, memory.id).status == "deleted"
    # When the vector store is back and cleanup runs again
    index.failing = False
    second = c.cleanup.run(NS).to_dict()
    # Then the row is erased
    assert second["hard_deleted"] == 1
    assert memory.id not in {m.id for m in c.store.iter_memories(NS)}
    c.close()


def test_inline_queue_runs_in_the_background_and_never_twice_at_once_per_namespace() -> None:
    # Given an inline queue whose cleanup of alice waits until released
    release = threading.Event()
    ran: list[str] = []

    def run(job: str, payload: dict[str, Any]) -> None:
        ran.append(payload["namespace"])
        if payload["namespace"] == "alice":
            assert release.wait(10)

    queue = InlineJobQueue(run, ["cleanup"])
    # When cleanup is queued twice for alice while her first run is still going, and once for bob
    queue.enqueue("cleanup", {"namespace": "alice"})
    queue.enqueue("cleanup", {"namespace": "alice"})
    queue.enqueue("cleanup", {"namespace": "bob"})
    release.set()
    queue.join(5)
    # Then alice ran once and bob once; once alice's run is over she can be queued again
    assert sorted(ran) == ["alice", "bob"]
    queue.enqueue("cleanup", {"namespace": "alice"})
    queue.join(5)
    assert sorted(ran) == ["alice", "alice", "bob"]
    # And an unknown job is refused
    with pytest.raises(InvalidInput):
        queue.enqueue("nope", {})


def test_the_container_wires_an_inline_queue_that_cleans(env: Env) -> None:
    # Given an old message and the container's own queue
    env.message("old", at=env.clock.now() - timedelta(days=20))
    queue = env.container.queue
    assert isinstance(queue, InlineJobQueue)
    # When cleanup is requested through it
    queue.enqueue("cleanup", {"namespace": NS})
    queue.join(10)
    # Then the background run deleted the message
    assert env.container.store.list_messages(NS) == []


def test_cleanup_records_a_run_event(env: Env) -> None:
    env.container.cleanup.run(NS)
    events = env.container.store.list_events(NS, kind="job.cleanup")
    assert len(events) == 1 and events[0].detail["messages"] == 0 and isinstance(events[0].created_at, datetime)


def test_empty_and_near_empty_memories_are_swept_except_pinned(make_env: Any) -> None:
    # Given memories with next to no text (Aelios' EMPTY_MEMORY_MIN_CHARS sweep), a pinned one among them,
    # and short real facts (three Chinese characters are a whole fact)
    env = make_env(empty_memory_min_chars=2)
    dot = env.remember("…")
    one = env.remember("a")
    kept_pinned = env.remember("?", pinned=True)
    fact = env.remember("爱吃辣")
    ok = env.remember("OK")
    # When cleanup runs
    result = env.container.cleanup.run(NS).to_dict()
    # Then only the unpinned near-empty ones are deleted (soft: restorable), and they left the index
    assert result["emptied"] == 2
    store = env.container.store
    assert {store.get_memory(NS, m.id).status for m in (dot, one)} == {"deleted"}
    assert {m.id for m in env.active()} == {kept_pinned.id, fact.id, ok.id}


def test_the_empty_sweep_is_off_at_zero(make_env: Any) -> None:
    env = make_env(empty_memory_min_chars=0)
    env.remember("a")
    assert env.container.cleanup.run(NS).to_dict()["emptied"] == 0
    assert len(env.active()) == 1
