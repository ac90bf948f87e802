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
    return Settings(  # type: ignore[call-arg]
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
