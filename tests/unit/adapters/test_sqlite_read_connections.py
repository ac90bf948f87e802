"""The SQLite store's reads on their own connections (sqlite/readers.py): a read does not wait for a write
transaction open on another thread, sees every write committed before it, sees its own thread's
uncommitted writes inside a write transaction, and ``close`` closes every connection the store opened."""

from __future__ import annotations

import os
import sqlite3
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path

import pytest
from engram.adapters.storage.sqlite import SqliteMemoryStore
from engram.adapters.storage.sqlite.readers import READ_CONNECTIONS
from engram.domain.errors import UpstreamUnavailable
from engram.domain.models import Memory, MemoryFilter, Reminder

from tests.fakes.clock import ManualClock
from tests.unit.adapters.races import reads_during

T0 = datetime(2025, 3, 1, 12, 0, tzinfo=UTC)
WAIT_S = 10.0  # how long a test waits for a thread that should finish at once


def a_memory(memory_id: str, content: str = "likes tea") -> Memory:
    return Memory(id=memory_id, namespace="alice", content=content, created_at=T0, updated_at=T0)


@pytest.fixture
def store(tmp_path: Path) -> Iterator[SqliteMemoryStore]:
    store = SqliteMemoryStore(tmp_path / "engram.db", clock=ManualClock(T0))
    yield store
    store.close()


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def test_reads_go_on_while_another_thread_holds_a_write_transaction_open(store: SqliteMemoryStore) -> None:
    # Given a memory, and another thread inside a write transaction that changed it and has not committed
    store.insert_memory(a_memory("m0"))
    store.put_reminder(Reminder(namespace="alice", memory_id="m0", remind_at=T0))
    inside, finish = threading.Event(), threading.Event()

    def write() -> None:
        with store._transaction() as db:
            db.execute("UPDATE memories SET content = 'uncommitted' WHERE id = 'm0'")
            inside.set()
            finish.wait(WAIT_S)

    with ThreadPoolExecutor(2) as pool:
        writer = pool.submit(write)
        assert inside.wait(WAIT_S)
        # When this thread reads meanwhile (the store's one lock made it wait for the commit before)
        reads = pool.submit(
            lambda: (
                store.get_memory("alice", "m0"),
                store.get_memories("alice", ["m0"]),
                store.list_reminders("alice", "pending"),
                store.count_memories("alice"),
            )
        )
        # Then the reads finish while the transaction is still open, and see what was committed
        memory, rows, reminders, counts = reads.result(timeout=WAIT_S)
        assert not writer.done()
        assert memory.content == "likes tea" and [m.content for m in rows] == ["likes tea"]
        assert [r.memory_id for r in reminders] == ["m0"] and counts["status"]["active"] == 1
        finish.set()
        writer.result(timeout=WAIT_S)
    # And once it committed, a read sees it
    assert store.get_memory("alice", "m0").content == "uncommitted"
    assert store.get_memories("alice", ["m0"])[0].content == "uncommitted"


def test_a_read_inside_a_write_transaction_sees_the_transactions_own_writes(store: SqliteMemoryStore) -> None:
    store.insert_memory(a_memory("m0"))
    with store._transaction() as db:
        db.execute("UPDATE memories SET content = 'mine' WHERE id = 'm0'")
        assert store.get_memory("alice", "m0").content == "mine"
        assert store.list_memories("alice", MemoryFilter()).items[0].content == "mine"
    assert store._readers.opened <= 1  # only reads outside the transaction borrowed a read connection


def test_a_read_after_a_commit_on_another_thread_sees_it(store: SqliteMemoryStore) -> None:
    # Given the read connections used once (each with a snapshot read before the writes below)
    store.insert_memory(a_memory("m0"))
    assert [m.content for m in store.get_memories("alice", ["m0"])] == ["likes tea"]
    assert store.get_cache("alice", "k") is None
    # When other threads write and commit, one after another, each followed by a read here
    with ThreadPoolExecutor(1) as pool:
        for step in range(20):
            current = store.get_memory("alice", "m0")
            pool.submit(store.update_memory, current.model_copy(update={"content": f"v{step}"})).result()
            pool.submit(store.put_cache, "alice", "k", step).result()
            # Then every read sees the write just committed: the row, its cached copy, the cache entry
            assert store.get_memory("alice", "m0").content == f"v{step}"
            assert store.get_memories("alice", ["m0"])[0].content == f"v{step}"
            assert store.get_cache("alice", "k") == step


def test_concurrent_readers_never_see_a_row_older_than_a_write_committed_before_they_asked(
    store: SqliteMemoryStore,
) -> None:
    # Given rows, one writer thread replacing them at their versions, and readers through the row cache
    ids = [f"m{i}" for i in range(6)]
    for memory_id in ids:
        store.insert_memory(a_memory(memory_id))
    store._memory_rows._capacity = 4  # fewer than a read asks for: most reads also load rows, racing the writes
    committed = dict.fromkeys(ids, 1)  # the newest version whose write has returned

    def write() -> None:
        for step in range(300):
            memory_id = ids[step % len(ids)]
            current = store.get_memory("alice", memory_id)
            written = store.update_memory(current.model_copy(update={"content": f"v{step}"}))
            committed[memory_id] = written.version

    def check() -> str | None:
        floor = dict(committed)
        for memory in store.get_memories("alice", ids):
            if memory.version < floor[memory.id]:
                return f"{memory.id} read at version {memory.version} after {floor[memory.id]} committed"
        return None

    # When four threads read while it writes
    stale = reads_during(write, check, readers=4)
    # Then no reader was served a row older than a write that had committed before it asked
    assert not stale, stale[:5]
    assert store.get_memories("alice", ids) == [store.get_memory("alice", i) for i in ids]


def test_close_closes_the_writing_and_every_read_connection(store: SqliteMemoryStore) -> None:
    # Given the store's reads spread over many short-lived threads, several at once
    store.insert_memory(a_memory("m0"))
    before = open_fds()
    together = threading.Barrier(4)
    connections: set[sqlite3.Connection] = set()
    guard = threading.Lock()

    def read_together() -> None:
        with store._reading() as db:
            with guard:
                connections.add(db)
            together.wait(WAIT_S)
            assert store.get_memory("alice", "m0").content == "likes tea"  # nested: the same connection

    for _ in range(3):
        threads = [threading.Thread(target=read_together) for _ in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(WAIT_S)
    for _ in range(40):  # and many threads one after another
        thread = threading.Thread(target=store.get_memory, args=("alice", "m0"))
        thread.start()
        thread.join(WAIT_S)
    # Then they shared a bounded pool: four at once needed four connections, never more than the bound
    assert len(connections) == 4 and store._readers.opened == 4 <= READ_CONNECTIONS
    assert open_fds() <= before + 4 * 3  # each connection: the file, its -wal and -shm
    # And close closes them all and the writing one; the store then says it is closed
    writer = store._connection()
    store.close()
    for db in (*connections, writer):
        with pytest.raises(sqlite3.ProgrammingError):
            db.execute("SELECT 1")
    assert store._readers.opened == 0 and open_fds() < before
    with pytest.raises(UpstreamUnavailable):
        store.get_memory("alice", "m0")


def test_a_read_connection_lent_at_close_is_closed_when_its_read_returns(store: SqliteMemoryStore) -> None:
    store.insert_memory(a_memory("m0"))
    lent, closing = threading.Event(), threading.Event()
    held: list[sqlite3.Connection] = []

    def read() -> str:
        with store._reading() as db:
            held.append(db)
            lent.set()
            closing.wait(WAIT_S)
            return str(db.execute("SELECT content FROM memories").fetchone()[0])

    with ThreadPoolExecutor(1) as pool:
        reading = pool.submit(read)
        assert lent.wait(WAIT_S)
        store.close()
        closing.set()
        assert reading.result(timeout=WAIT_S) == "likes tea"  # the read in flight finished
    with pytest.raises(sqlite3.ProgrammingError):
        held[0].execute("SELECT 1")
    assert store._readers.opened == 0


def test_a_read_connection_cannot_write(store: SqliteMemoryStore) -> None:
    store.insert_memory(a_memory("m0"))
    with store._reading() as db, pytest.raises(sqlite3.OperationalError, match="readonly"):
        db.execute("DELETE FROM memories")
    assert store.get_memory("alice", "m0").content == "likes tea"


def test_an_in_memory_store_reads_its_own_connection() -> None:
    store = SqliteMemoryStore(":memory:", clock=ManualClock(T0))
    store.insert_memory(a_memory("m0"))
    assert store.get_memories("alice", ["m0"])[0].content == "likes tea"
    assert store.get_memory("alice", "m0").content == "likes tea"
    assert store._readers.opened == 0
    store.close()
