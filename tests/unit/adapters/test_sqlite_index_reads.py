"""The SQLite search index's statements before its lock (search/sqlite_reads.py): read on read connections,
a search never answers from caches older than a write committed before it began, whichever thread or
connection wrote, and ``close`` closes the read connections."""

from __future__ import annotations

import sqlite3
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pytest
from engram.adapters.search.sqlite import SqliteSearchIndex
from engram.domain.models import IndexedDoc

from tests.unit.adapters.races import reads_during

T0 = datetime(2025, 3, 1, 12, 0, tzinfo=UTC)
DIMENSION = 8


def a_vector(i: int) -> tuple[float, ...]:
    vector = np.random.default_rng(i).standard_normal(DIMENSION)
    return tuple(float(x) for x in vector / np.linalg.norm(vector))


def a_doc(i: int, namespace: str = "a") -> IndexedDoc:
    # A few common words (the namespace stays small: its FTS5 mirror and the in-memory cut answer) and a
    # token of its own, so a search for it finds exactly this document.
    text = f"the user likes tea and notes number tok{i}x"
    return IndexedDoc(memory_id=f"m{i}", namespace=namespace, text=text, type="fact", vector=a_vector(i), created_at=T0)


def found(index: SqliteSearchIndex, i: int) -> tuple[bool, bool]:
    """Whether a keyword search for document ``i``'s own token, and a vector search for its vector, find it."""
    by_word = [h.memory_id for h in index.keyword_search("a", f"tok{i}x tea", k=5)]
    by_vector = [h.memory_id for h in index.vector_search("a", a_vector(i), k=1)]
    return f"m{i}" in by_word, by_vector == [f"m{i}"]


@pytest.mark.parametrize("writer_kind", ["same index, another thread", "another index on the file"])
def test_concurrent_searches_see_every_write_committed_before_they_began(tmp_path: Path, writer_kind: str) -> None:
    # Given an index searched from memory (caches loaded), and a writer adding one document at a time
    path = tmp_path / "engram.db"
    index = SqliteSearchIndex(path)
    writer = index if writer_kind.startswith("same") else SqliteSearchIndex(path)
    index.upsert_many([a_doc(i) for i in range(40)])
    assert found(index, 0) == (True, True)
    committed = [39]  # the newest document whose write has returned

    def write() -> None:
        for i in range(40, 160):
            writer.upsert(a_doc(i))
            committed[0] = i
            if i % 7 == 0:  # moves the generation without a document to find (one no search looks for)
                writer.delete("a", f"m{i // 7}")

    def check() -> str | None:
        newest = committed[0]
        by_word, by_vector = found(index, newest)
        return None if by_word and by_vector else f"m{newest}: keyword {by_word}, vector {by_vector}"

    # When three threads search while it writes
    missed = reads_during(write, check)
    # Then every search found the newest document committed before it began, by keyword and by vector
    assert not missed, missed[:5]
    assert index._readers.opened >= 1  # the statements before the lock ran on read connections
    index.close()
    if writer is not index:
        writer.close()


def test_close_closes_the_read_connections_and_the_index_opens_again(tmp_path: Path) -> None:
    index = SqliteSearchIndex(tmp_path / "engram.db")
    index.upsert_many([a_doc(i) for i in range(5)])
    assert found(index, 3) == (True, True)
    readers = list(index._readers._idle)
    assert readers
    index.close()
    for conn in readers:
        with pytest.raises(sqlite3.ProgrammingError):
            conn.execute("SELECT 1")
    # And the index, used again, opens what it needs again
    assert found(index, 4) == (True, True)
    index.close()


def test_a_read_connection_of_the_index_cannot_write(tmp_path: Path) -> None:
    index = SqliteSearchIndex(tmp_path / "engram.db")
    index.upsert(a_doc(1))
    with index._readers as conn, pytest.raises(sqlite3.OperationalError, match="readonly"):
        conn.execute("DELETE FROM search_docs")
    assert found(index, 1) == (True, True)
    index.close()


def test_an_in_memory_index_reads_its_own_connection() -> None:
    index = SqliteSearchIndex(":memory:")
    index.upsert_many([a_doc(i) for i in range(5)])
    assert found(index, 2) == (True, True)
    assert index._readers.opened == 0
    index.close()
