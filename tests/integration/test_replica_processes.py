"""Two processes' worth of Engram on one local data dir with ``ENGRAM_SEARCH=replica``: each keeps its
own private index, and a write, a supersede or a delete on one is seen by the other's recall.

Real: SQLite store and document log, the replica index, the services; the embedder is off (keyword
recall) so the test does not load a model.
"""

from __future__ import annotations

from pathlib import Path

from engram.bootstrap import build_container
from engram.services.library.memories import MemoryWrite
from engram.settings import Settings

from tests.conftest import write_keys


def _settings(data_dir: Path) -> Settings:
    return Settings(
        data_dir=data_dir,
        keys_file=write_keys(data_dir / "keys.json"),
        search="replica",
        embedder="none",
        replica_sync_seconds=0,
    )


def _found(container: object, query: str) -> list[str]:
    return [h.memory.content for h in container.recall.recall("alice", query).hits]  # type: ignore[attr-defined]


def test_two_processes_share_memories_through_their_replicas(tmp_path: Path) -> None:
    # Given two containers (two `engram serve` processes) on one data dir
    a = build_container(_settings(tmp_path))
    b = build_container(_settings(tmp_path))
    assert _found(b, "cello") == []
    # When A remembers something, B recalls it
    first = a.memories.write("alice", MemoryWrite(content="Alice plays the cello", fact_key="music:instrument"))
    assert _found(b, "cello") == ["Alice plays the cello"]
    # When B corrects it, neither side returns the old version
    b.memories.supersede("alice", first.memory.id, MemoryWrite(content="Alice plays the viola now"))
    for side in (a, b):
        assert _found(side, "cello plays") == ["Alice plays the viola now"]
    # When A deletes the new version, it is gone on both
    current = a.store.find_active_by_fact_key("alice", "music:instrument")
    assert current is not None
    a.memories.set_status("alice", current.id, "deleted")
    for side in (a, b):
        assert _found(side, "viola") == []
    # And a third process started from A's snapshot sees the same
    a.memories.write("alice", MemoryWrite(content="Alice bakes sourdough"))
    assert a.jobs.snapshot() == 1
    assert (tmp_path / "snapshots").is_dir()
    c = build_container(_settings(tmp_path))
    assert _found(c, "sourdough") == ["Alice bakes sourdough"]
    for container in (a, b, c):
        container.close()
    assert list((tmp_path / "replica").iterdir()) == []


def test_the_nightly_cleanup_rebuilds_a_replica_that_missed_a_late_log_entry(tmp_path: Path) -> None:
    from engram.adapters.search.document_log import LATE_OVERLAP_MS, LogRow
    from engram.adapters.search.replica import ReplicaSearchIndex
    from engram.services.index.guard import GuardedIndex

    # Given a process with memories, and a log entry that landed hours after its sequence number (a write
    # retried after an outage): no sync reaches that far back
    a = build_container(_settings(tmp_path))
    a.memories.write("alice", MemoryWrite(content="Alice plays the cello"))
    index = a.index.inner if isinstance(a.index, GuardedIndex) else a.index
    assert isinstance(index, ReplicaSearchIndex)
    late = index._spaces["alice"].cursor - LATE_OVERLAP_MS - 3_600_000
    index._log.put(LogRow(namespace="alice", memory_id="late-1", seq=late, type="fact", text="Alice keeps bees"))
    assert index.keyword_search("alice", "bees") == []
    # When a per-namespace cleanup runs (after chats) / Then it does not count the replica against the log
    assert a.jobs.run("cleanup", {"namespace": "alice"}).report["replicas_rebuilt"] == 0
    # When the nightly cleanup runs over every namespace / Then the replica is rebuilt from the log
    report = a.jobs.run("cleanup", {"all": True}).report
    assert report["replicas_rebuilt"] == 1 and report["errors"] == 0
    assert [h.memory_id for h in index.keyword_search("alice", "bees")] == ["late-1"]
    # And a process that starts later loads the rebuilt snapshot: it holds the late row too
    c = build_container(_settings(tmp_path))
    c_index = c.index.inner if isinstance(c.index, GuardedIndex) else c.index
    assert [h.memory_id for h in c_index.keyword_search("alice", "bees")] == ["late-1"]
    # And the next night finds nothing to rebuild
    assert a.jobs.run("cleanup", {"all": True}).report["replicas_rebuilt"] == 0
    for container in (a, c):
        container.close()
