"""FTS5's candidate cut reproduced in memory (search/fts_mirror.py): keyword results with the mirror equal
FTS5's own ranking to the bit, across ties, type filters, writes by this index and by another connection,
and a namespace the mirror must leave to FTS5."""

from __future__ import annotations

import random
import sqlite3
from datetime import UTC, datetime
from pathlib import Path

import pytest
from engram.adapters.search import fts_mirror, sqlite_caches, sqlite_reads
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


def traced(index: SqliteSearchIndex, statements: list[str]) -> None:
    """Every statement ``index`` runs from now on appended to ``statements``: on its connection and on its
    read connections (search/sqlite_reads.py), those open and those it opens later."""
    index._db().set_trace_callback(statements.append)
    for conn in index._readers._idle:
        conn.set_trace_callback(statements.append)
    opener = index._readers._open_reader

    def open_traced() -> sqlite3.Connection:
        conn = opener()
        conn.set_trace_callback(statements.append)
        return conn

    index._readers._open_reader = open_traced


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
        for module in (sqlite_reads, sqlite_caches):  # the answer from memory, and the cut in a transaction
            patch.setattr(module, "plain_terms", lambda terms: False)
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


def test_a_near_tie_of_different_rows_at_the_cut_is_left_to_fts5(monkeypatch: pytest.MonkeyPatch) -> None:
    def cut(docs: list[tuple[int, str, str, str]], terms: list[str], depth: int, df: dict[str, int]) -> object:
        mirror = FtsMirror(1, docs)
        arrays = mirror.candidates(terms, depth, (), n_rows=100, total_tokens=300, df=df)
        typed = mirror.candidates(terms, depth, ("fact",), n_rows=100, total_tokens=300, df=df)  # rows one by one
        assert (arrays is None) == (typed is None)
        return arrays

    # Given rows whose scores SQLite's arithmetic could order either way (within the tie band, widened to
    # catch rows of near scores), the mirror declines when the cut falls between them, and answers when
    # it keeps them all: rows of one length with another idf ("x" vs "y"), ...
    monkeypatch.setattr(fts_mirror, "TIE_EPSILON", 0.5)
    idf = [(1, "a", "fact", "x w"), (2, "b", "fact", "y w")]
    assert cut(idf, ["x", "y"], 1, {"x": 4, "y": 5}) is None
    assert cut(idf, ["x", "y"], 2, {"x": 4, "y": 5}) is not None
    # ... rows of one term and another length ...
    length = [(1, "a", "fact", "x w"), (2, "b", "fact", "x")]
    assert cut(length, ["x"], 1, {"x": 4}) is None
    # ... and (at the true tie band) the same three products added in another order
    monkeypatch.undo()
    order = [(1, "a", "fact", "x y z"), (2, "b", "fact", "u v t")]
    df = {"x": 1, "y": 2, "z": 3, "u": 3, "v": 2, "t": 1}
    assert cut(order, ["x", "y", "z", "u", "v", "t"], 1, df) is None
    assert cut(order, ["x", "y", "z", "u", "v", "t"], 2, df) is not None


def test_rows_that_add_the_same_numbers_tie_at_the_cut_by_rowid() -> None:
    # Given rows of one length holding different query terms of the same document count (the same idf):
    # FTS5 adds the same product to 0.0 for each, so their scores are the same double in any arithmetic
    mirror = FtsMirror(1, [(5, "late", "fact", "x w"), (3, "early", "fact", "y w"), (4, "mid", "fact", "x w")])
    df = {"x": 2, "y": 1, "w": 3}
    # When the cut falls inside the tie (x is in two rows, y in one: equal idf needs equal counts, so ask
    # with "x" counted as y's), then the mirror answers, ties by rowid as FTS5's ORDER BY does
    same_idf = {"x": 1, "y": 1}
    first = mirror.candidates(["y", "x"], 1, (), n_rows=3, total_tokens=9, df=same_idf)
    assert first is not None and [r[0] for r in first.rows] == ["early"]
    typed = mirror.candidates(["y", "x"], 2, ("fact",), n_rows=3, total_tokens=9, df=same_idf)
    assert typed is not None and [r[0] for r in typed.rows] == ["early", "late"]  # with a type filter: by memory_id
    # And with the real counts (another idf for x), the rows are not tied: the rarer term's row first
    ranked = mirror.candidates(["y", "x"], 1, (), n_rows=3, total_tokens=9, df=df)
    assert ranked is not None and [r[0] for r in ranked.rows] == ["early"]


def test_document_frequencies_come_from_the_mirrors_when_they_hold_every_row(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given an index of two small namespaces, and another index writing to the same file (another process)
    path = tmp_path / "engram.db"
    index, other = SqliteSearchIndex(path), SqliteSearchIndex(path)
    rng = random.Random(5)
    for i in range(300):
        index.upsert(a_doc(rng, rng.choice("ab"), f"m{i}"))
    vocab = sqlite3.connect(path)
    statements: list[str] = []
    index._db().set_trace_callback(statements.append)
    try:
        for step in range(40):
            # When searching both namespaces (each query with a term never asked before, as a chat turn's is)
            for namespace in "ab":
                query = " ".join(rng.sample(WORDS, rng.randint(1, 3))) + f" {step}{namespace} 1"
                statements.clear()
                found = search(index, namespace, query, 50, ())
                asked = any("search_vocab" in s for s in statements)
                # Then the results equal FTS5's own ranking
                assert found == by_fts5(monkeypatch, index, namespace, query, 50, ())
                # And the frequencies the re-scoring used are search_vocab's, for present and absent terms
                for term, count in index._rescore.df.items():
                    row = vocab.execute("SELECT doc FROM search_vocab WHERE term = ?", (term,)).fetchone()
                    assert count == (row[0] if row else 0), term
                # And once both namespaces are mirrored at their generations, search_vocab is not asked
                generations = dict(vocab.execute("SELECT namespace, generation FROM search_namespaces"))
                current = {ns: m.generation for ns, m in index._mirrors.items()} == generations
                assert asked != current, (step, namespace)
            # And between searches, either index writes or deletes (every third step the other one)
            writer = other if step % 3 == 1 else index
            for _ in range(rng.randint(1, 3)):
                if rng.random() < 0.3:
                    writer.delete(rng.choice("ab"), f"m{rng.randrange(300)}")
                else:
                    writer.upsert(a_doc(rng, rng.choice("ab"), f"m{rng.randrange(330)}"))
        # And a third namespace, written but never searched (no mirror): search_vocab answers again, the same
        index.upsert(a_doc(rng, "c", "c1", extra=" cat"))
        statements.clear()
        assert search(index, "a", "cat zzz", 50, ()) == by_fts5(monkeypatch, index, "a", "cat zzz", 50, ())
        assert any("search_vocab" in s for s in statements)
    finally:
        vocab.close()
        index.close()
        other.close()


def test_a_search_the_caches_hold_reads_one_statement(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Given two small namespaces (mirrored), and in another file a big one (postings), each searched once so
    # their caches are loaded, and other connections writing to both files
    small, big = SqliteSearchIndex(tmp_path / "small.db"), SqliteSearchIndex(tmp_path / "big.db", keyword_threshold=200)
    others = {small: SqliteSearchIndex(tmp_path / "small.db"), big: SqliteSearchIndex(tmp_path / "big.db")}
    rng = random.Random(9)
    small.upsert_many([a_doc(rng, rng.choice("ab"), f"s{i}") for i in range(200)])
    big.upsert_many([a_doc(rng, "big", f"b{i}") for i in range(250)])
    statements: list[str] = []
    for index in (small, big):
        traced(index, statements)
    try:
        for step in range(12):
            for index, namespace in ((small, "a"), (small, "b"), (big, "big")):
                query = " ".join(rng.sample(WORDS, rng.randint(1, 3))) + f" {step}x"
                index.keyword_search(namespace, query, k=20)  # loads what a write dropped
                index.keyword_search("b" if namespace == "a" else namespace, query, k=20)
                statements.clear()
                # When searching again (with a term never asked before), then the one statement read is the
                # index's version with the namespace's generation, and the results are as before
                found = search(index, namespace, query + f" {step}y", 20, ())
                assert len(statements) == 1 and "FROM search_namespaces" in statements[0], statements
                if index is small:
                    assert found == by_fts5(monkeypatch, index, namespace, query + f" {step}y", 20, ())
            # And a write by another connection is seen: the caches reload in one read transaction
            for index, namespace in ((small, rng.choice("ab")), (big, "big")):
                others[index].upsert(a_doc(rng, namespace, f"o{step}"))
                statements.clear()
                search(index, namespace, "cat note", 20, ())
                assert "BEGIN" in statements and "COMMIT" in statements
    finally:
        for index in (small, big, *others.values()):
            index.close()
