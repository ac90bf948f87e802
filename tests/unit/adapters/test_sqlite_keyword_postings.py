"""Big namespaces' keyword ranking from in-memory postings (search/keyword_cache.py) equals the in-memory
reference BM25 — scores and order — through writes, deletes, another process's writes and reloads; and the
postings (with the vectors) load in the background without a query waiting, writes meanwhile replayed."""

from __future__ import annotations

import random
import threading
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from engram.adapters.search.inmemory import InMemorySearchIndex
from engram.adapters.search.keyword_cache import KeywordCache
from engram.adapters.search.sqlite import SqliteSearchIndex
from engram.domain.models import IndexedDoc

from tests.unit.adapters.warm_gate import Gate

T0 = datetime(2025, 1, 1, tzinfo=UTC)
WORDS = ["coffee", "morning", "sister", "job", "dentist", "trip", "japan", "cat", "budget", "food"]
WORDS += ["garden", "piano", "lesson", "friday", "花生", "过敏", "项目", "截止", "日期", "我的猫"]
QUERIES = ["coffee", "sister's new job", "trip to japan in the morning", "我对花生过敏", "项目截止日期", "cat food"]
QUERIES += ["piano lesson friday", "nothing matches xyzzy", "coffee coffee morning garden"]
TYPES = ["fact", "preference", "event"]


def docs(n: int, rng: random.Random, *, ns: str = "a", prefix: str = "m") -> list[IndexedDoc]:
    # Zipf-like word frequencies, so some query words are in most documents and some in few.
    weights = [1.0 / (i + 1) for i in range(len(WORDS))]
    return [
        IndexedDoc(
            memory_id=f"{prefix}{i:04d}",
            namespace=ns,
            text=" ".join(rng.choices(WORDS, weights, k=rng.randint(1, 12))),
            type=rng.choice(TYPES),
            created_at=T0,
        )
        for i in range(n)
    ]


def fill(reference: InMemorySearchIndex, batch: list[IndexedDoc]) -> None:
    for d in batch:
        reference.upsert(d)


def ranking(index: object, ns: str, query: str, types: tuple[str, ...] = (), k: int = 20) -> list[tuple[str, float]]:
    hits = index.keyword_search(ns, query, k=k, types=types)  # type: ignore[attr-defined]
    return [(h.memory_id, round(h.score, 9)) for h in hits]


def assert_same(index: SqliteSearchIndex, reference: InMemorySearchIndex, ns: str = "a") -> None:
    for query in QUERIES:
        for types in [(), ("preference",), ("fact", "event"), ("task",)]:
            assert ranking(index, ns, query, types) == ranking(reference, ns, query, types), (query, types)


def load(index: SqliteSearchIndex, reference: InMemorySearchIndex, batch: list[IndexedDoc]) -> KeywordCache:
    """``batch`` written to both, checked alike; the postings the SQLite index loaded for it."""
    index.upsert_many(batch)
    fill(reference, batch)
    assert_same(index, reference)
    return index._keywords["a"]


@pytest.fixture
def indexes(tmp_path: Path) -> tuple[SqliteSearchIndex, InMemorySearchIndex]:
    return SqliteSearchIndex(tmp_path / "e.db", keyword_threshold=50), InMemorySearchIndex()


def test_postings_rank_exactly_as_the_reference(indexes: tuple[SqliteSearchIndex, InMemorySearchIndex]) -> None:
    # Given 400 documents (over the threshold of 50) in the SQLite index and in the reference
    index, reference = indexes
    batch = docs(400, random.Random(1))
    index.upsert_many(batch)
    fill(reference, batch)
    # Then every query, with and without type filters, ranks and scores alike
    assert_same(index, reference)
    assert "a" in index._keywords  # ranked from the postings, not by FTS5
    index.close()


def test_writes_and_deletes_after_the_load_are_patched_in(
    indexes: tuple[SqliteSearchIndex, InMemorySearchIndex],
) -> None:
    # Given a loaded namespace
    index, reference = indexes
    rng = random.Random(2)
    loaded = load(index, reference, docs(300, rng))
    # When documents are replaced, added and deleted (fewer than a reload's worth)
    changed = docs(40, rng) + docs(30, rng, prefix="new")
    index.upsert_many(changed)
    fill(reference, changed)
    for mid in ["m0003", "m0100", "new0005", "missing"]:
        index.delete("a", mid)
        reference.delete("a", mid)
    # Then the same postings answer, patched, and still rank as the reference
    assert index._keywords["a"] is loaded
    assert_same(index, reference)
    index.close()


def test_many_writes_reload_the_postings(indexes: tuple[SqliteSearchIndex, InMemorySearchIndex]) -> None:
    index, reference = indexes
    rng = random.Random(3)
    loaded = load(index, reference, docs(200, rng))
    # When more than a reload's worth of rows change (1,000 here)
    more = docs(1100, rng, prefix="x")
    for start in range(0, len(more), 100):
        index.upsert_many(more[start : start + 100])
    fill(reference, more)
    # Then the next query loads them afresh, and ranks as the reference
    assert_same(index, reference)
    assert index._keywords["a"] is not loaded
    index.close()


def test_another_process_writes_are_seen(tmp_path: Path) -> None:
    # Given two processes on one file, the first with the namespace's postings loaded
    first = SqliteSearchIndex(tmp_path / "e.db", keyword_threshold=50)
    second = SqliteSearchIndex(tmp_path / "e.db", keyword_threshold=50)
    reference = InMemorySearchIndex()
    batch = docs(100, random.Random(4))
    first.upsert_many(batch)
    fill(reference, batch)
    assert_same(first, reference)
    # When the other process adds a document and deletes one
    new = IndexedDoc(memory_id="late", namespace="a", text="dentist dentist piano", type="fact", created_at=T0)
    second.upsert(new)
    reference.upsert(new)
    second.delete("a", "m0001")
    reference.delete("a", "m0001")
    # Then the first sees both on its next query
    assert ranking(first, "a", "dentist piano")[0][0] == "late"
    assert_same(first, reference)
    first.close()
    second.close()


def test_small_and_big_namespaces_side_by_side(tmp_path: Path) -> None:
    # Given a namespace over the threshold and one under it, in one file
    index = SqliteSearchIndex(tmp_path / "e.db", keyword_threshold=100)
    big, small = docs(150, random.Random(5), ns="big"), docs(20, random.Random(6), ns="small")
    index.upsert_many(big + small)
    # Then the big one is ranked from postings, the small one by FTS5, each only within its namespace
    top_big = ranking(index, "big", "coffee morning", k=200)
    top_small = ranking(index, "small", "coffee morning", k=200)
    assert "big" in index._keywords and "small" not in index._keywords
    assert top_big and all(mid in {d.memory_id for d in big} for mid, _ in top_big)
    assert {mid for mid, _ in top_small} <= {d.memory_id for d in small}
    # When the small one grows past the threshold, it moves to postings and keeps its namespace
    index.upsert_many(docs(120, random.Random(7), ns="small", prefix="s"))
    grown = ranking(index, "small", "coffee morning", k=500)
    assert "small" in index._keywords
    assert len(grown) > len(top_small) and not {mid for mid, _ in grown} & {
        d.memory_id for d in big if d.memory_id[0] == "x"
    }
    assert ranking(index, "nobody", "coffee") == []
    index.close()


def test_chinese_bigrams_match_in_postings(indexes: tuple[SqliteSearchIndex, InMemorySearchIndex]) -> None:
    index, reference = indexes
    batch = docs(120, random.Random(8))
    batch.append(IndexedDoc(memory_id="zh", namespace="a", text="我对花生过敏很严重", type="fact", created_at=T0))
    index.upsert_many(batch)
    fill(reference, batch)
    assert "zh" in [mid for mid, _ in ranking(index, "a", "花生过敏", k=200)]
    assert ranking(index, "a", "花生过敏") == ranking(reference, "a", "花生过敏")
    index.close()


def test_warm_loads_the_postings_and_b075_keeps_fts5(tmp_path: Path) -> None:
    # Given a namespace over the threshold, reopened
    first = SqliteSearchIndex(tmp_path / "e.db", keyword_threshold=50)
    first.upsert_many(docs(80, random.Random(9)))
    first.close()
    warmed = SqliteSearchIndex(tmp_path / "e.db", keyword_threshold=50)
    fts_only = SqliteSearchIndex(tmp_path / "e.db", keyword_threshold=50, bm25_b=0.75)
    # When warmed at start-up, the postings are there before any query
    warmed.warm("a")
    assert "a" in warmed._keywords
    # With b = 0.75 FTS5's own bm25() is the ranking at every size: no postings are loaded
    assert fts_only.keyword_search("a", "coffee") and "a" not in fts_only._keywords
    warmed.close()
    fts_only.close()


# -- loading in the background (``warm_in_background``, search/warmup.py) ------------------------------
def with_vectors(batch: list[IndexedDoc], rng: random.Random) -> list[IndexedDoc]:
    return [d.model_copy(update={"vector": tuple(rng.uniform(-1, 1) for _ in range(8))}) for d in batch]


def vector_ranking(index: object, vector: tuple[float, ...]) -> list[str]:
    return [h.memory_id for h in index.vector_search("a", vector, k=15)]  # type: ignore[attr-defined]


def reopened(tmp_path: Path, batch: list[IndexedDoc], reference: InMemorySearchIndex) -> SqliteSearchIndex:
    """``batch`` written by one process; a new one opened on the file (nothing loaded yet)."""
    first = SqliteSearchIndex(tmp_path / "e.db", keyword_threshold=50)
    first.upsert_many(batch)
    first.close()
    fill(reference, batch)
    return SqliteSearchIndex(tmp_path / "e.db", keyword_threshold=50)


def held_load(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, batch: list[IndexedDoc], reference: InMemorySearchIndex
) -> tuple[SqliteSearchIndex, Gate, threading.Thread]:
    """A reopened index with ``batch``, its background load of namespace "a" held inside the postings' build."""
    index = reopened(tmp_path, batch, reference)
    gate = Gate(monkeypatch)
    thread = index.warm_in_background(["a"])
    assert thread is not None and gate.entered.wait(10)
    return index, gate, thread


def test_a_background_warm_loads_big_namespaces_before_any_query(tmp_path: Path) -> None:
    # Given a reopened file with a namespace over the threshold and one under it
    rng, reference = random.Random(10), InMemorySearchIndex()
    index = reopened(tmp_path, with_vectors(docs(120, rng), rng) + docs(10, rng, ns="small"), reference)
    # When it is warmed in the background (every namespace big enough)
    thread = index.warm_in_background()
    assert thread is not None
    thread.join(10)
    # Then the big namespace's postings and vectors are loaded, the small one's not, and they rank as the reference
    assert "a" in index._keywords and "a" in index._caches and "small" not in index._keywords
    assert_same(index, reference)
    probe = tuple(rng.uniform(-1, 1) for _ in range(8))
    assert vector_ranking(index, probe) == vector_ranking(reference, probe)
    index.close()


def test_queries_during_the_load_are_ranked_by_fts5_and_never_wait(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a big namespace whose postings are being built in the background, held mid-way
    reference = InMemorySearchIndex()
    index, gate, thread = held_load(tmp_path, monkeypatch, docs(200, random.Random(11)), reference)
    # When a query comes meanwhile / Then it is answered by FTS5 at once, loading nothing itself
    for query in QUERIES:
        assert ranking(index, "a", query) == [
            (h.memory_id, round(h.score, 9)) for h in index.fts_keyword_search("a", query, k=20)
        ]
    assert "a" not in index._keywords
    # And once the load is done the postings rank, as the reference
    gate.open.set()
    thread.join(10)
    assert "a" in index._keywords
    assert_same(index, reference)
    index.close()


def test_writes_during_the_load_are_replayed_onto_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Given a big namespace (with vectors) whose postings are being built in the background, held mid-way
    rng, reference = random.Random(12), InMemorySearchIndex()
    index, gate, thread = held_load(tmp_path, monkeypatch, with_vectors(docs(150, rng), rng), reference)
    # When this process replaces, adds and deletes documents meanwhile
    changed = with_vectors(docs(20, rng) + docs(15, rng, prefix="new"), rng)
    index.upsert_many(changed[:20])
    index.upsert_many(changed[20:])
    fill(reference, changed)
    for mid in ["m0004", "new0002", "missing"]:
        index.delete("a", mid)
        reference.delete("a", mid)
    gate.open.set()
    thread.join(10)
    # Then the loaded postings and vectors hold them (published by the load, not reloaded by a query)
    postings = index._keywords["a"]
    assert postings.generation == index._current("a") and "new0010" in postings.rows and "m0004" not in postings.rows
    assert_same(index, reference)
    assert index._keywords["a"] is postings
    for _ in range(5):
        probe = tuple(rng.uniform(-1, 1) for _ in range(8))
        assert vector_ranking(index, probe) == vector_ranking(reference, probe)
    index.close()


def test_another_process_write_during_the_load_drops_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Given a load held mid-way
    reference = InMemorySearchIndex()
    index, gate, thread = held_load(tmp_path, monkeypatch, docs(100, random.Random(13)), reference)
    # When another process writes meanwhile (this one cannot replay what it did not see)
    other = SqliteSearchIndex(tmp_path / "e.db", keyword_threshold=50)
    late = IndexedDoc(memory_id="late", namespace="a", text="dentist dentist piano", type="fact", created_at=T0)
    other.upsert(late)
    reference.upsert(late)
    gate.open.set()
    thread.join(10)
    # Then the load is dropped, and the next query loads the namespace afresh with the other's write
    assert "a" not in index._keywords
    assert ranking(index, "a", "dentist piano")[0][0] == "late"
    assert_same(index, reference)
    index.close()
    other.close()


def test_a_close_during_the_load_publishes_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    reference = InMemorySearchIndex()
    index, gate, thread = held_load(tmp_path, monkeypatch, docs(100, random.Random(14)), reference)
    index.close()
    gate.open.set()
    thread.join(10)
    assert not index._keywords and not index._caches and index._conn is None


@pytest.mark.real_monotonic  # `query.join(0.3)` must time out: it never does under libfaketime
def test_a_vector_query_during_the_load_waits_for_its_vectors(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Given a reopened namespace whose vectors a background load is building, held mid-way
    rng, reference = random.Random(15), InMemorySearchIndex()
    index = reopened(tmp_path, with_vectors(docs(120, rng), rng), reference)
    entered, release = threading.Event(), threading.Event()
    built: list[tuple[str, object]] = []
    build = index._vector_cache

    def held(*args: Any) -> Any:
        cache = build(*args)
        built.append((threading.current_thread().name, cache))
        if threading.current_thread().name == "engram-index-warm":
            entered.set()
            assert release.wait(10)
        return cache

    monkeypatch.setattr(index, "_vector_cache", held)
    thread = index.warm_in_background(["a"])
    assert thread is not None and entered.wait(10)
    # When a vector query comes meanwhile
    probe = tuple(rng.uniform(-1, 1) for _ in range(8))
    answers: list[list[str]] = []
    query = threading.Thread(target=lambda: answers.append(vector_ranking(index, probe)))
    query.start()
    query.join(0.3)
    # Then it waits for the load (it reads nothing itself), and answers from the loaded vectors
    assert query.is_alive() and not answers
    release.set()
    query.join(10)
    thread.join(10)
    assert answers == [vector_ranking(reference, probe)]
    assert [name for name, _ in built] == ["engram-index-warm"] and index._caches["a"] is built[0][1]
    index.close()
