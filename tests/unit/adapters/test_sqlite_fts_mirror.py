"""FTS5's candidate cut reproduced in memory (search/fts_mirror.py): keyword results with the mirror equal
FTS5's own ranking to the bit, across ties, type filters, writes by this index and by another connection,
and a namespace the mirror must leave to FTS5."""

from __future__ import annotations

import random
from datetime import UTC, datetime
from pathlib import Path

import pytest
from engram.adapters.search import sqlite as sqlite_index
from engram.adapters.search.fts_mirror import FtsMirror
from engram.adapters.search.sqlite import SqliteSearchIndex
from engram.domain.models import IndexedDoc

T0 = datetime(2025, 1, 1, tzinfo=UTC)
# Few words, so many rows tie on FTS5's score and the cut at RESCORE_DEPTH falls inside tie groups.
WORDS = [
    "cat",
    "deploy",
    "garden",
    "piano",
    "server",
    "novel",
    "budget",
    "trip",
    "coffee",
    "note",
    "user",
    "friday",
    "script",
    "1",
    "2",
    "12",
]
TYPES = ("fact", "event", "preference")


def a_doc(rng: random.Random, namespace: str, memory_id: str, extra: str = "") -> IndexedDoc:
    text = " ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 9))) + extra
    return IndexedDoc(memory_id=memory_id, namespace=namespace, text=text, type=rng.choice(TYPES), created_at=T0)


def search(index: SqliteSearchIndex, namespace: str, query: str, k: int, types: tuple[str, ...]) -> list[object]:
    return [(h.memory_id, h.score) for h in index.keyword_search(namespace, query, k=k, types=types)]


def by_fts5(
    monkeypatch: pytest.MonkeyPatch,
    index: SqliteSearchIndex,
    namespace: str,
    query: str,
    k: int,
    types: tuple[str, ...],
) -> list[object]:
    """The same search with the mirror turned off: FTS5 ranks (the reference)."""
    with monkeypatch.context() as patch:
        patch.setattr(sqlite_index, "plain_terms", lambda terms: False)
        return search(index, namespace, query, k, types)


def test_the_mirror_ranks_as_fts5(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Given 3 namespaces of ~150-400 short look-alike documents in one index, and another index writing
    # to the same file (another process)
    path = tmp_path / "engram.db"
    index, other = SqliteSearchIndex(path), SqliteSearchIndex(path)
    rng = random.Random(11)
    for i in range(700):
        index.upsert(a_doc(rng, rng.choice("aab c"), f"m{i}"))
    taken = {"mirror": 0, "fts5": 0}
    real = FtsMirror.candidates

    def counted(self: FtsMirror, *args: object, **kwargs: object) -> object:
        out = real(self, *args, **kwargs)  # type: ignore[arg-type]
        taken["mirror" if out is not None else "fts5"] += 1
        return out

    monkeypatch.setattr(FtsMirror, "candidates", counted)
    try:
        for step in range(30):
            # When searching (with and without a type filter, k below and above the re-scoring depth)
            for _ in range(6):
                query = " ".join(rng.sample(WORDS, rng.randint(1, 4)))
                namespace = rng.choice("abc")
                k = rng.choice((5, 50, 150))
                types = rng.choice(((), ("fact",), ("event", "preference")))
                # Then the results equal FTS5's, id for id and score for score
                assert search(index, namespace, query, k, types) == by_fts5(
                    monkeypatch, index, namespace, query, k, types
                )
            # And between searches, either index writes or deletes
            writer = rng.choice((index, other))
            for _ in range(rng.randint(1, 3)):
                if rng.random() < 0.3:
                    writer.delete(rng.choice("abc"), f"m{rng.randrange(700)}")
                else:
                    writer.upsert(a_doc(rng, rng.choice("abc"), f"m{rng.randrange(760)}"))
            if step == 15:  # more writes than the arrays patch one by one: rebuilt
                for i in range(200):
                    index.upsert(a_doc(rng, "a", f"n{i}"))
        assert taken["mirror"] > taken["fts5"]  # the mirror answered most of them
    finally:
        index.close()
        other.close()


def test_a_namespace_with_other_tokens_is_left_to_fts5(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Given a namespace where one document holds a non-ASCII token (unicode61 might split or fold it)
    index = SqliteSearchIndex(tmp_path / "engram.db")
    rng = random.Random(3)
    for i in range(150):
        index.upsert(a_doc(rng, "a", f"m{i}"))
    index.upsert(a_doc(rng, "a", "odd", extra=" über 猫"))
    try:
        # When searching, then FTS5 ranks (the mirror is loaded but not used), with the same results
        assert search(index, "a", "cat über", 50, ()) == by_fts5(monkeypatch, index, "a", "cat über", 50, ())
        assert search(index, "a", "cat", 50, ()) == by_fts5(monkeypatch, index, "a", "cat", 50, ())
        assert not index._mirrors["a"].usable
        # And once that document is gone, the mirror is used again
        index.delete("a", "odd")
        assert search(index, "a", "cat", 50, ()) == by_fts5(monkeypatch, index, "a", "cat", 50, ())
        assert index._mirrors["a"].usable
    finally:
        index.close()


def test_a_near_tie_of_different_rows_at_the_cut_is_left_to_fts5() -> None:
    # Given two rows of equal score from different inputs ("x" once vs "y" once, same document count)
    mirror = FtsMirror(1, [(1, "a", "fact", "x w"), (2, "b", "fact", "y w")])
    df = {"x": 1, "y": 1}
    # When the cut falls between them, then the mirror declines (SQLite's arithmetic could order them
    # either way); when it keeps both, it answers, ties by rowid
    assert mirror.candidates(["x", "y"], 1, (), n_rows=2, total_tokens=6, df=df) is None
    both = mirror.candidates(["x", "y"], 2, (), n_rows=2, total_tokens=6, df=df)
    assert both is not None and [r[0] for r in both.rows] == ["a", "b"]
    # And rows of one input tied at the cut go by rowid, as FTS5's ORDER BY does
    same = FtsMirror(1, [(5, "late", "fact", "x w"), (3, "early", "fact", "x w")])
    first = same.candidates(["x"], 1, (), n_rows=2, total_tokens=6, df=df)
    assert first is not None and [r[0] for r in first.rows] == ["early"]
