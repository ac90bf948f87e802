"""The SQLite store's in-memory memory rows (sqlite/row_cache.py): ``get_memories`` answers what the file
holds after every kind of write, by this store, another connection or another process's store."""

from __future__ import annotations

import random
import sqlite3
from collections.abc import Iterator
from contextlib import closing
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from engram.adapters.storage.sqlite import SqliteMemoryStore
from engram.adapters.storage.sqlite.row_cache import LOG_KEPT
from engram.adapters.storage.sqlite.tables import MEMORIES
from engram.domain.models import Memory

from tests.fakes.clock import ManualClock

T0 = datetime(2025, 3, 1, 12, 0, tzinfo=UTC)
CLOCK = ManualClock(T0)
IDS = [f"m{i}" for i in range(12)]


def a_memory(memory_id: str, content: str = "likes tea", namespace: str = "alice") -> Memory:
    return Memory(id=memory_id, namespace=namespace, content=content, created_at=T0, updated_at=T0)


def in_file(path: Path, namespace: str, ids: list[str]) -> list[Memory]:
    """What the file holds, read on a connection of its own with no cache."""
    with closing(sqlite3.connect(path)) as db:
        db.row_factory = sqlite3.Row
        rows = db.execute(
            f"SELECT * FROM memories WHERE namespace = ? AND id IN ({','.join('?' * len(ids))})", [namespace, *ids]
        ).fetchall()
    by_id = {row["id"]: MEMORIES.load(row) for row in rows}
    return [by_id[i] for i in ids if i in by_id]


@pytest.fixture
def stores(tmp_path: Path) -> Iterator[tuple[Path, SqliteMemoryStore, SqliteMemoryStore]]:
    path = tmp_path / "engram.db"
    first, second = SqliteMemoryStore(path, clock=CLOCK), SqliteMemoryStore(path, clock=CLOCK)
    yield path, first, second
    first.close()
    second.close()


def test_every_kind_of_write_is_seen(stores: tuple[Path, SqliteMemoryStore, SqliteMemoryStore]) -> None:
    # Given rows read once through the cache
    path, store, other = stores
    for memory_id in IDS[:4]:
        store.insert_memory(a_memory(memory_id))
    assert store.get_memories("alice", IDS[:4]) == in_file(path, "alice", IDS[:4])
    # When this store replaces one and counts injections, another store counts a sighting and deletes
    # one, and a bare connection edits one (as another process or an older Engram would)
    store.update_memory(store.get_memory("alice", "m0").model_copy(update={"content": "likes coffee"}))
    store.record_injected("alice", ["m1"], T0 + timedelta(hours=1))
    other.record_seen("alice", "m2", T0 + timedelta(hours=2))
    other.delete_memory_row("alice", "m3")
    with closing(sqlite3.connect(path)) as db:
        db.execute("UPDATE memories SET content = 'likes water' WHERE id = 'm2'")
        db.commit()
    # Then the next read answers what the file holds
    got = store.get_memories("alice", IDS[:4])
    assert got == in_file(path, "alice", IDS[:4])
    assert [m.content for m in got] == ["likes coffee", "likes tea", "likes water"]
    assert got[1].recall_count == 1 and got[2].seen_count == 1


def test_a_row_read_inside_a_rolled_back_write_is_not_kept(
    stores: tuple[Path, SqliteMemoryStore, SqliteMemoryStore],
) -> None:
    # Given a row, and a write transaction of the same store that changes it, reads it, then fails
    _path, store, _ = stores
    store.insert_memory(a_memory("m0"))
    assert store.get_memories("alice", ["m0"])[0].content == "likes tea"
    with pytest.raises(RuntimeError), store._transaction() as db:
        db.execute("UPDATE memories SET content = 'rolled back' WHERE id = 'm0'")
        assert store.get_memories("alice", ["m0"])[0].content == "rolled back"  # read, not cached
        raise RuntimeError("the write fails")
    # Then the rolled-back content is not served, and a later change still is
    assert store.get_memories("alice", ["m0"])[0].content == "likes tea"
    store.update_memory(store.get_memory("alice", "m0").model_copy(update={"content": "likes milk"}))
    assert store.get_memories("alice", ["m0"])[0].content == "likes milk"


def test_changes_pruned_unseen_drop_the_whole_cache(
    stores: tuple[Path, SqliteMemoryStore, SqliteMemoryStore],
) -> None:
    # Given a row cached, then more changes than the log keeps written by another store (the row's own
    # change among the first, pruned before this store looks)
    path, store, other = stores
    store.insert_memory(a_memory("m0"))
    store.get_memories("alice", ["m0"])
    other.update_memory(other.get_memory("alice", "m0").model_copy(update={"content": "changed early"}))
    other.insert_memory(a_memory("x", namespace="bob"))
    for _ in range(LOG_KEPT + 1_000):
        other.record_injected("bob", ["x"], T0)
    with closing(sqlite3.connect(path)) as db:
        (kept,) = db.execute("SELECT COUNT(*) FROM memory_changes").fetchone()
    assert kept <= LOG_KEPT + 1_000 - 1  # the log was pruned
    # Then the cache notices the gap and reads the row again
    assert store.get_memories("alice", ["m0"])[0].content == "changed early"


def test_random_writes_from_two_stores_never_serve_a_stale_row(
    stores: tuple[Path, SqliteMemoryStore, SqliteMemoryStore],
) -> None:
    # Given two stores on one file and a random sequence of writes by either, reads through the first
    path, store, other = stores
    rng = random.Random(23)
    for memory_id in IDS:
        store.insert_memory(a_memory(memory_id))
    for step in range(300):
        writer = rng.choice((store, other))
        memory_id = rng.choice(IDS)
        action = rng.random()
        if action < 0.3:
            current = writer.get_memories("alice", [memory_id])
            if current:
                writer.update_memory(current[0].model_copy(update={"content": f"v{step}"}))
        elif action < 0.5:
            writer.record_injected("alice", [memory_id], T0 + timedelta(seconds=step))
        elif action < 0.6:
            writer.delete_memory_row("alice", memory_id)
        elif action < 0.7 and not writer.get_memories("alice", [memory_id]):
            writer.insert_memory(a_memory(memory_id, f"back {step}"))
        wanted = [*rng.sample(IDS, 6), rng.choice(IDS)]  # a repeated id keeps its place twice
        # Then every read equals the file's rows, in the order asked
        assert store.get_memories("alice", wanted) == in_file(path, "alice", wanted)


def test_rows_all_held_are_answered_after_one_read_of_the_log(
    stores: tuple[Path, SqliteMemoryStore, SqliteMemoryStore],
) -> None:
    # Given rows read once through the cache
    path, store, other = stores
    for memory_id in IDS[:6]:
        store.insert_memory(a_memory(memory_id))
    store.get_memories("alice", IDS[:6])
    statements: list[str] = []
    for db in (store._connection(), *store._readers._idle):  # the writing connection and the read ones
        db.set_trace_callback(statements.append)
    # When they are read again, then the change log is the one statement read, and they are the file's
    assert store.get_memories("alice", IDS[:6]) == in_file(path, "alice", IDS[:6])
    assert len(statements) == 1 and "memory_changes" in statements[0], statements
    # And after another store changed one, it is read again (in one read transaction with the log)
    other.update_memory(other.get_memory("alice", "m3").model_copy(update={"content": "likes cocoa"}))
    statements.clear()
    assert store.get_memories("alice", IDS[:6]) == in_file(path, "alice", IDS[:6])
    assert statements[0].startswith("SELECT seq") and "BEGIN" in statements and "COMMIT" in statements
