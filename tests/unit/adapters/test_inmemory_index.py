"""The in-memory index's per-namespace caches (adapters/search/inmemory.py): the BM25 shares and the
stacked vectors are kept between queries and dropped by every write, so a query after a write, a
delete or a reset sees it, and one namespace's never answer another's. The vector search's top k is the
stable sort's (ties in row order), and the neighbour density reads the stack's rows."""

from __future__ import annotations

import math
from datetime import UTC, datetime

import numpy as np
from engram.adapters.search.inmemory import (
    BM25_B,
    InMemorySearchIndex,
    best_rows,
    bm25_idf,
    bm25_norm,
    bm25_term,
    neighbour_density,
    unit_vector,
)
from engram.domain.models import IndexedDoc, SearchHit
from hypothesis import given, settings
from hypothesis import strategies as st

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


@settings(max_examples=300, deadline=None)
@given(
    scores=st.lists(st.sampled_from([-1.0, -0.25, 0.0, 0.1, 0.5, 0.5, 0.75, 1.0]), min_size=1, max_size=80),
    k=st.integers(min_value=1, max_value=90),
)
def test_best_rows_are_the_stable_sorts_top_k(scores: list[float], k: int) -> None:
    # Given scores with many ties (a few distinct values), some k
    array = np.array(scores, dtype=np.float32)
    # Then the partitioned top k is the whole stable sort's head: best first, ties in row order
    assert best_rows(array, k).tolist() == np.argsort(-array, kind="stable")[:k].tolist()


def test_neighbour_density_reads_the_stack_and_follows_writes() -> None:
    # Given four documents with vectors (one a duplicate), the stack built by a vector query
    index = InMemorySearchIndex()
    vectors = {"m1": [1.0, 0.0, 0.0], "m2": [0.9, 0.1, 0.0], "m3": [0.0, 1.0, 0.2], "m4": [1.0, 0.0, 0.0]}
    for mid, vector in vectors.items():
        index.upsert(_doc("a", mid, mid, vector))
    index.upsert(_doc("a", "m5", "no vector"))
    index.vector_search("a", [1.0, 0.0, 0.0])

    def expected(ids: list[str]) -> dict[str, float]:
        return neighbour_density(ids, np.stack([unit_vector(vectors[m]) for m in ids]), 2)

    # Then the density of the asked ids (repeats, unknown and vector-less ids left out) is the one of their
    # vectors stacked in the asked order
    assert index.neighbour_density("a", ["m3", "m1", "m3", "m5", "zz", "m4"], k=2) == expected(["m3", "m1", "m4"])
    # And after a delete and a new document (the stack dropped and rebuilt, rows moved) too
    index.delete("a", "m1")
    vectors["m6"] = [0.5, 0.5, 0.5]
    index.upsert(_doc("a", "m6", "six", vectors["m6"]))
    assert index.neighbour_density("a", ["m6", "m1", "m2", "m4"], k=2) == expected(["m6", "m2", "m4"])
    assert index.neighbour_density("b", ["m2"], k=2) == {}
