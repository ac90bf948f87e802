"""Big namespaces' keyword ranking from in-memory postings (search/keyword_cache.py) equals the in-memory
reference BM25 — scores and order — through writes, deletes, another process's writes and reloads."""

from __future__ import annotations

import random
from datetime import UTC, datetime
from pathlib import Path

import pytest
from engram.adapters.search.inmemory import InMemorySearchIndex
from engram.adapters.search.keyword_cache import KeywordCache
from engram.adapters.search.sqlite import SqliteSearchIndex
from engram.domain.models import IndexedDoc

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
