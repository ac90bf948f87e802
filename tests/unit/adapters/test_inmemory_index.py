"""The in-memory index's per-namespace caches (adapters/search/inmemory.py): the BM25 shares and the
stacked vectors are kept between queries and dropped by every write, so a query after a write, a
delete or a reset sees it, and one namespace's never answer another's."""

from __future__ import annotations

import math
from datetime import UTC, datetime

from engram.adapters.search.inmemory import BM25_B, InMemorySearchIndex, bm25_idf, bm25_norm, bm25_term
from engram.domain.models import IndexedDoc, SearchHit

AT = datetime(2026, 3, 10, tzinfo=UTC)


def _doc(namespace: str, memory_id: str, text: str, vector: list[float] | None = None) -> IndexedDoc:
    return IndexedDoc(
        namespace=namespace,
        memory_id=memory_id,
        text=text,
        type="fact",
        vector=tuple(vector) if vector is not None else None,
        created_at=AT,
    )


def _ids(hits: list[SearchHit]) -> list[str]:
    return [h.memory_id for h in hits]


def test_keyword_scores_are_the_bm25_sums_and_follow_every_write() -> None:
    # Given two documents, queried once (the shares are cached)
    index = InMemorySearchIndex()
    index.upsert(_doc("a", "m1", "cat piano cat"))
    index.upsert(_doc("a", "m2", "cat garden"))
    first = index.keyword_search("a", "cat piano")
    # Then each score is the BM25 sum of its terms, in the query's order
    avg = (3 + 2) / 2
    norm1 = bm25_norm(3, avg, BM25_B)
    expected = bm25_term(bm25_idf(2, 2), 2, norm1) + bm25_term(bm25_idf(2, 1), 1, norm1)
    assert first[0].memory_id == "m1" and first[0].score == expected
    # When a third document is written, one deleted, and one rewritten
    index.upsert(_doc("a", "m3", "piano piano"))
    assert _ids(index.keyword_search("a", "piano")) == ["m3", "m1"]
    index.delete("a", "m3")
    assert _ids(index.keyword_search("a", "piano")) == ["m1"]
    index.upsert(_doc("a", "m1", "garden only"))
    # Then every query saw the write before it (a reused row answers for its new document only)
    assert _ids(index.keyword_search("a", "piano")) == []
    assert set(_ids(index.keyword_search("a", "garden"))) == {"m1", "m2"}
    index.upsert(_doc("a", "m4", "piano"))
    assert _ids(index.keyword_search("a", "piano")) == ["m4"]
    # And another namespace's documents never answer
    index.upsert(_doc("b", "x1", "piano cat"))
    assert set(_ids(index.keyword_search("a", "piano cat"))) == {"m2", "m4"}
    assert _ids(index.keyword_search("b", "piano cat")) == ["x1"]


def test_ties_keep_the_id_order_at_the_cut() -> None:
    # Given more equal-scoring matches than k
    index = InMemorySearchIndex()
    for name in ("m5", "m3", "m1", "m4", "m2"):
        index.upsert(_doc("a", name, "piano lessons"))
    # Then the k best are the lowest ids among the tied
    assert _ids(index.keyword_search("a", "piano", k=3)) == ["m1", "m2", "m3"]


def test_vector_queries_follow_every_write_delete_and_reset() -> None:
    # Given two documents with vectors, queried once (the stack is kept)
    index = InMemorySearchIndex()
    index.upsert(_doc("a", "m1", "one", [1.0, 0.0]))
    index.upsert(_doc("a", "m2", "two", [0.0, 1.0]))
    assert _ids(index.vector_search("a", [1.0, 0.1])) == ["m1", "m2"]
    # When a closer document is written, then deleted, then the vectors are reset
    index.upsert(_doc("a", "m3", "three", [1.0, 0.1]))
    hits = index.vector_search("a", [1.0, 0.1])
    assert _ids(hits) == ["m3", "m1", "m2"] and math.isclose(hits[0].score, 1.0, abs_tol=1e-6)
    index.delete("a", "m3")
    assert _ids(index.vector_search("a", [1.0, 0.1])) == ["m1", "m2"]
    assert _ids(index.vector_search("b", [1.0, 0.1])) == []
    index.reset("model-2", 2)
    # Then each query saw it
    assert index.vector_search("a", [1.0, 0.1]) == []
