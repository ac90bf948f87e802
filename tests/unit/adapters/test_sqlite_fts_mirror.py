"""FTS5's candidate cut reproduced in memory (search/fts_mirror.py): keyword results with the mirror equal
FTS5's own ranking to the bit, across ties, type filters, writes by this index and by another connection,
and a namespace the mirror must leave to FTS5."""

from __future__ import annotations

import random
import sqlite3
from datetime import UTC, datetime
from pathlib import Path

import pytest
from engram.adapters.search import fts_mirror
from engram.adapters.search import sqlite as sqlite_index
from engram.adapters.search.fts_mirror import FTS5_CHARS, FtsMirror
from engram.adapters.search.sqlite import SqliteSearchIndex
from engram.domain.models import IndexedDoc
from engram.domain.text import tokenize

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
# Other scripts (each token one FTS5 keeps whole and unchanged: Fts5Chars), some ASCII among them; "服务器"
# is two overlapping tokens ("服务", "务器"), "カメラ" too.
OTHER_WORDS = [
    "咖啡",
    "花园",
    "钢琴",
    "猫",
    "服务器",
    "预算",
    "旅行",
    "über",
    "café",
    "кошка",
    "γάτα",
    "ねこ",
    "カメラ",
    "note",
    "cat",
    "12",
]
TYPES = ("fact", "event", "preference")


def a_doc(rng: random.Random, namespace: str, memory_id: str, extra: str = "", words: list[str] = WORDS) -> IndexedDoc:
    text = " ".join(rng.choice(words) for _ in range(rng.randint(1, 9))) + extra
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


@pytest.mark.parametrize("words", [WORDS, OTHER_WORDS], ids=["ascii", "other-scripts"])
def test_the_mirror_ranks_as_fts5(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, words: list[str]) -> None:
    # Given 3 namespaces of ~150-400 short look-alike documents in one index (ASCII words, or Chinese,
    # Japanese, accented Latin, Cyrillic and Greek ones), and another index writing to the same file
    # (another process)
    path = tmp_path / "engram.db"
    index, other = SqliteSearchIndex(path), SqliteSearchIndex(path)
    rng = random.Random(11)
    for i in range(700):
        index.upsert(a_doc(rng, rng.choice("aab c"), f"m{i}", words=words))
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
                query = " ".join(rng.sample(words, rng.randint(1, 4)))
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
                    writer.upsert(a_doc(rng, rng.choice("abc"), f"m{rng.randrange(760)}", words=words))
            if step == 15:  # more writes than the arrays patch one by one: rebuilt
                for i in range(200):
                    index.upsert(a_doc(rng, "a", f"n{i}", words=words))
        assert taken["mirror"] > taken["fts5"]  # the mirror answered most of them
    finally:
        index.close()
        other.close()


def _a_token_fts5_splits() -> str:
    """A character ``tokenize`` keeps as a token but this SQLite build's ``unicode61`` does not keep whole
    (drops it: a character its Unicode tables do not count as a letter, such as U+19B0)."""
    chars = [chr(c) for c in range(0x80, 0x3000)]
    FTS5_CHARS.learn(chars)
    return next(c for c in chars if tokenize(c) == [c] and not FTS5_CHARS.whole(c))


def test_fts5s_tokenizer_decides_which_tokens_are_whole(monkeypatch: pytest.MonkeyPatch) -> None:
    # [a-z0-9] are whole; other scripts' letters are when FTS5 keeps each of them unchanged
    assert all(map(FTS5_CHARS.whole, ["cat", "12", "咖啡", "über", "кошка", "γάτα", "ねこ"]))
    # An upper-case letter is folded, a middle dot separates, a character unicode61 drops is dropped
    assert not any(map(FTS5_CHARS.whole, ["Cat", "café_", "É", "a·b", "x" + _a_token_fts5_splits()]))
    # And a character FTS5 could not be asked about is not whole (asked again next time)
    chars = fts_mirror.Fts5Chars()

    def broken(texts: object) -> object:
        raise sqlite3.OperationalError("no fts5")

    monkeypatch.setattr(fts_mirror, "_fts5_terms", broken)
    assert not chars.whole("猫")
    monkeypatch.undo()
    assert chars.whole("猫")


def test_a_namespace_with_other_tokens_is_left_to_fts5(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Given a namespace where one document holds a token FTS5 does not keep whole (unicode61 drops it)
    index = SqliteSearchIndex(tmp_path / "engram.db")
    rng = random.Random(3)
    for i in range(150):
        index.upsert(a_doc(rng, "a", f"m{i}"))
    index.upsert(a_doc(rng, "a", "odd", extra=f" über 猫 x{_a_token_fts5_splits()}y"))
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
