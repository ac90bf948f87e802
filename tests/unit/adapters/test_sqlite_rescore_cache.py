"""The FTS5 re-scoring's cache (search/fts.py ``RescoreCache``): keyword results with the cache equal,
to the bit, the re-scoring that reads every statistic and text back from FTS5, across writes by this
index and by another connection to the same file."""

from __future__ import annotations

import random
import sqlite3
from datetime import UTC, datetime
from pathlib import Path

from engram.adapters.search.fts import RESCORE_DEPTH, fts_query, varints
from engram.adapters.search.inmemory import bm25_idf, bm25_norm, bm25_term, query_terms
from engram.adapters.search.sqlite import SqliteSearchIndex
from engram.domain.models import IndexedDoc

T0 = datetime(2025, 1, 1, tzinfo=UTC)
WORDS = [
    "cat",
    "deploy",
    "garden",
    "piano",
    "tea",
    "server",
    "novel",
    "bike",
    "budget",
    "trip",
    "coffee",
    "note",
    "user",
    "friday",
    "script",
    "1",
    "2",
    "3",
    "12",
    "über",
    "猫",
]


def reference(index: SqliteSearchIndex, namespace: str, query: str, k: int = 50) -> list[tuple[str, float]]:
    """The re-scoring as it was before the cache: every statistic and text read from FTS5 per query."""
    conn = sqlite3.connect(index._path)
    try:
        terms = query_terms(query)
        rows = conn.execute(
            "SELECT d.memory_id, s.score, d.id FROM (SELECT rowid AS rid, -bm25(search_fts, 0.0, 1.0) AS score "
            "FROM search_fts WHERE search_fts MATCH ? ORDER BY score DESC, rowid LIMIT ?) s "
            "JOIN search_docs d ON d.id = s.rid WHERE d.namespace = ? ORDER BY s.score DESC, d.memory_id",
            [fts_query(namespace, terms), max(k, RESCORE_DEPTH), namespace],
        ).fetchall()
        if not rows:
            return []
        n_rows, _, total = varints(bytes(conn.execute("SELECT block FROM search_fts_data WHERE id = 1").fetchone()[0]))[
            :3
        ]
        marks = ",".join("?" * len(terms))
        df = dict(conn.execute(f"SELECT term, doc FROM search_vocab WHERE term IN ({marks})", terms).fetchall())
        weights = [(t, bm25_idf(n_rows, n)) for t, n in df.items() if n]
        ids = [r[2] for r in rows]
        texts = dict(
            conn.execute(f"SELECT rowid, tokens FROM search_fts WHERE rowid IN ({','.join('?' * len(ids))})", ids)
        )
        scored = []
        for memory_id, _, rowid in rows:
            tokens = str(texts.get(rowid, "")).split()
            norm = bm25_norm(len(tokens), total / n_rows, index._bm25_b)
            score = sum((bm25_term(w, tokens.count(t), norm) for t, w in weights if tokens.count(t)), 0.0)
            scored.append((memory_id, score))
        scored.sort(key=lambda pair: (-pair[1], pair[0]))
        return [pair for pair in scored if pair[1] > 0][:k]
    finally:
        conn.close()


def a_doc(rng: random.Random, namespace: str, memory_id: str) -> IndexedDoc:
    text = " ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 14)))
    return IndexedDoc(memory_id=memory_id, namespace=namespace, text=text, type="fact", created_at=T0)


def got(index: SqliteSearchIndex, namespace: str, query: str) -> list[tuple[str, float]]:
    return [(h.memory_id, h.score) for h in index.keyword_search(namespace, query)]


def test_cached_rescoring_equals_reading_everything_back(tmp_path: Path) -> None:
    # Given two namespaces in one index, and a second index on the same file (another process)
    path = tmp_path / "engram.db"
    index, other = SqliteSearchIndex(path), SqliteSearchIndex(path)
    rng = random.Random(5)
    for i in range(150):
        index.upsert(a_doc(rng, rng.choice("ab"), f"m{i}"))
    queries = [" ".join(rng.sample(WORDS, rng.randint(1, 5))) for _ in range(12)]
    try:
        for _step in range(40):
            # When queries repeat (the cache fills) between writes by either index
            for query in rng.sample(queries, 4):
                for namespace in "ab":
                    # Then each result equals the uncached re-scoring, score for score
                    assert got(index, namespace, query) == reference(index, namespace, query)
            writer = rng.choice((index, other))
            if rng.random() < 0.2:
                writer.delete(rng.choice("ab"), f"m{rng.randrange(150)}")
            else:
                writer.upsert(a_doc(rng, rng.choice("ab"), f"m{rng.randrange(170)}"))
        assert index._rescore.df and index._rescore.docs  # the cache was used
    finally:
        index.close()
        other.close()


def test_the_cache_is_emptied_when_the_index_moves(tmp_path: Path) -> None:
    # Given a query answered once (its terms and candidates cached)
    path = tmp_path / "engram.db"
    index, other = SqliteSearchIndex(path), SqliteSearchIndex(path)
    for i, text in enumerate(["peanut allergy", "peanut butter toast", "the dentist on friday"]):
        index.upsert(IndexedDoc(memory_id=f"m{i}", namespace="a", text=text, type="fact", created_at=T0))
    try:
        first = got(index, "a", "peanut dentist")
        version = index._rescore.version
        # When another connection writes a document that changes "peanut"'s document frequency
        other.upsert(IndexedDoc(memory_id="m9", namespace="b", text="peanut peanut", type="fact", created_at=T0))
        # Then the next query re-reads the statistics, and its scores move with them
        second = got(index, "a", "peanut dentist")
        assert index._rescore.version != version
        assert second == reference(index, "a", "peanut dentist") and second != first
    finally:
        index.close()
        other.close()
