"""The SearchIndex contract, run against every adapter.

OpenSearch runs here on osmem-server (an OpenSearch-compatible server on loopback, without kNN), so it
takes the keyword half of the contract (``keyword_index``); its kNN queries are checked for shape in
tests/integration/test_opensearch_index.py."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Iterator
from contextlib import ExitStack
from datetime import UTC, datetime
from pathlib import Path

import pytest
from engram.adapters.search.inmemory import InMemorySearchIndex
from engram.adapters.search.replica import ReplicaSearchIndex
from engram.adapters.search.replica_log import SqliteSearchLog
from engram.adapters.search.sqlite import SqliteSearchIndex
from engram.domain.errors import InvalidInput
from engram.domain.models import IndexedDoc, SearchHit
from engram.domain.ports import NeighbourDensity, SearchIndex


def _replica_on_dynamodb(tmp: Path, stack: ExitStack) -> SearchIndex:
    pytest.importorskip("moto")
    from tests.fakes.moto_aws import dynamo_search_log

    return ReplicaSearchIndex(stack.enter_context(dynamo_search_log()), tmp / "replica")


INDEXES: dict[str, Callable[[Path, ExitStack], SearchIndex]] = {
    "memory": lambda tmp, _: InMemorySearchIndex(),
    "sqlite": lambda tmp, _: SqliteSearchIndex(tmp / "engram.db"),
    # The same adapter with its HNSW graph on from the first vector, built in the foreground (big namespaces
    # build it in the background and scan exactly until it is ready).
    "sqlite-ann": lambda tmp, _: SqliteSearchIndex(tmp / "engram.db", ann_threshold=1, ann_background=False),
    # The same adapter ranking keywords from its in-memory postings from the first document (big namespaces
    # do; small ones are ranked by FTS5).
    "sqlite-postings": lambda tmp, _: SqliteSearchIndex(tmp / "engram.db", keyword_threshold=1),
    # A private replica per process of the document log in the store (SQLite file, DynamoDB under moto).
    "replica-sqlite": lambda tmp, _: ReplicaSearchIndex(SqliteSearchLog(tmp / "engram.db"), tmp / "replica"),
    "replica-dynamodb": _replica_on_dynamodb,
}

T0 = datetime(2025, 1, 1, tzinfo=UTC)


def _opensearch_on_osmem(request: pytest.FixtureRequest, stack: ExitStack) -> SearchIndex:
    from engram.adapters.search.opensearch import OpenSearchIndex

    clone = request.getfixturevalue("osmem_base").clone()
    stack.callback(clone.close)
    return OpenSearchIndex(clone.url, sign=False)


def _open(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[SearchIndex]:
    with ExitStack() as stack:
        if request.param == "opensearch-osmem":
            idx = _opensearch_on_osmem(request, stack)
        else:
            idx = INDEXES[request.param](tmp_path, stack)
        yield idx
        close = getattr(idx, "close", None)
        if close is not None:
            close()


@pytest.fixture(params=sorted(INDEXES))
def index(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[SearchIndex]:
    """Every adapter, for the whole contract (keywords and vectors)."""
    yield from _open(request, tmp_path)


@pytest.fixture(params=[*sorted(INDEXES), "opensearch-osmem"])
def keyword_index(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[SearchIndex]:
    """Every adapter plus OpenSearch on osmem-server, for the keyword half of the contract."""
    yield from _open(request, tmp_path)


def doc(
    mid: str, text: str, *, ns: str = "a", type_: str = "fact", vector: tuple[float, ...] | None = None
) -> IndexedDoc:
    return IndexedDoc(memory_id=mid, namespace=ns, text=text, type=type_, vector=vector, created_at=T0)


def ids(hits: Iterable[SearchHit]) -> list[str]:
    return [h.memory_id for h in hits]


def test_adapter_satisfies_the_port(keyword_index: SearchIndex) -> None:
    assert isinstance(keyword_index, SearchIndex)


def test_keyword_search_finds_english_by_stem(keyword_index: SearchIndex) -> None:
    # Given memories in English
    keyword_index.upsert(doc("m1", "I love hiking in the Alps"))
    keyword_index.upsert(doc("m2", "My cat is called Miso"))
    # When the query uses another form of the word
    hits = keyword_index.keyword_search("a", "hikes in Switzerland")
    # Then the stemmed match is found, with a positive score
    assert ids(hits) == ["m1"]
    assert hits[0].score > 0


def test_keyword_search_finds_chinese_and_mixed_text(keyword_index: SearchIndex) -> None:
    # Given Chinese and mixed memories
    keyword_index.upsert(doc("zh", "我对花生过敏"))
    keyword_index.upsert(doc("mix", "我在用Python写AI记忆系统"))
    keyword_index.upsert(doc("en", "peanut butter is tasty"))
    # When querying in Chinese, and with a mixed query
    assert ids(keyword_index.keyword_search("a", "花生")) == ["zh"]
    assert ids(keyword_index.keyword_search("a", "记忆 python"))[0] == "mix"
    # Then an English query does not match the Chinese memory
    assert ids(keyword_index.keyword_search("a", "peanut")) == ["en"]


def test_keyword_ranking_prefers_more_matching_terms(keyword_index: SearchIndex) -> None:
    # Given one memory matching two query terms and one matching one
    keyword_index.upsert(doc("both", "coffee with oat milk every morning"))
    keyword_index.upsert(doc("one", "coffee beans from Ethiopia"))
    keyword_index.upsert(doc("none", "tea in the afternoon"))
    # When searching for both terms
    hits = keyword_index.keyword_search("a", "oat milk coffee")
    # Then the fuller match ranks first and scores are descending
    assert ids(hits) == ["both", "one"]
    assert hits[0].score > hits[1].score > 0


def test_namespaces_are_isolated(keyword_index: SearchIndex) -> None:
    # Given the same words in two namespaces
    keyword_index.upsert(doc("a1", "secret project falcon", ns="alice"))
    keyword_index.upsert(doc("b1", "secret project falcon", ns="bob"))
    # When each namespace searches
    # Then it only sees its own documents
    assert ids(keyword_index.keyword_search("alice", "falcon")) == ["a1"]
    assert ids(keyword_index.keyword_search("bob", "falcon")) == ["b1"]
    assert ids(keyword_index.keyword_search("carol", "falcon")) == []


def test_vector_search_is_namespaced(index: SearchIndex) -> None:
    # Given the same vector in two namespaces
    index.upsert(doc("a1", "secret project falcon", ns="alice", vector=(1.0, 0.0, 0.0)))
    index.upsert(doc("b1", "secret project falcon", ns="bob", vector=(1.0, 0.0, 0.0)))
    # Then each namespace's vector search sees only its own documents
    assert ids(index.vector_search("alice", (1.0, 0.0, 0.0))) == ["a1"]
    assert ids(index.vector_search("carol", (1.0, 0.0, 0.0))) == []


def test_same_memory_id_in_two_namespaces_are_two_documents(keyword_index: SearchIndex) -> None:
    # Given the same id in two namespaces
    keyword_index.upsert(doc("m", "apples", ns="x"))
    keyword_index.upsert(doc("m", "bananas", ns="y"))
    # When one is deleted
    keyword_index.delete("x", "m")
    # Then the other survives
    assert ids(keyword_index.keyword_search("y", "bananas")) == ["m"]
    assert ids(keyword_index.keyword_search("x", "apples")) == []


def test_type_filters_apply_to_keyword_search(keyword_index: SearchIndex) -> None:
    # Given memories of several types
    keyword_index.upsert(doc("f", "likes green tea", type_="fact"))
    keyword_index.upsert(doc("p", "prefers green tea", type_="preference"))
    keyword_index.upsert(doc("i", "always answer about green tea", type_="instruction"))
    # When filtering by type / Then only those types come back
    assert sorted(ids(keyword_index.keyword_search("a", "green tea", types=["preference", "instruction"]))) == [
        "i",
        "p",
    ]
    assert keyword_index.keyword_search("a", "green tea", types=["task"]) == []


def test_type_filters_apply_to_both_searches(index: SearchIndex) -> None:
    # Given memories of several types
    index.upsert(doc("f", "likes green tea", type_="fact", vector=(1.0, 0.0, 0.0)))
    index.upsert(doc("p", "prefers green tea", type_="preference", vector=(0.9, 0.1, 0.0)))
    index.upsert(doc("i", "always answer about green tea", type_="instruction", vector=(0.8, 0.2, 0.0)))
    # When filtering by type
    kw = index.keyword_search("a", "green tea", types=["preference", "instruction"])
    vec = index.vector_search("a", (1.0, 0.0, 0.0), types=["preference"])
    # Then only those types come back
    assert sorted(ids(kw)) == ["i", "p"]
    assert ids(vec) == ["p"]
    assert index.vector_search("a", (1.0, 0.0, 0.0), types=["task"]) == []


def test_upsert_replaces_text_and_type(keyword_index: SearchIndex) -> None:
    # Given a memory
    keyword_index.upsert(doc("m1", "lives in Berlin"))
    # When it is upserted with new content
    ref = keyword_index.upsert(doc("m1", "lives in Lisbon", type_="identity"))
    # Then only the new content matches, once
    assert ref
    assert ids(keyword_index.keyword_search("a", "berlin")) == []
    assert ids(keyword_index.keyword_search("a", "lisbon")) == ["m1"]
    assert ids(keyword_index.keyword_search("a", "lisbon", types=["fact"])) == []
    assert keyword_index.info().documents == 1


def test_upsert_many_upserts_each_in_order(keyword_index: SearchIndex) -> None:
    # Given a memory
    keyword_index.upsert(doc("m1", "lives in Berlin"))
    # When a batch replaces it, adds two (one in another namespace) and repeats one (the later one wins)
    keyword_index.upsert_many(
        [
            doc("m1", "lives in Lisbon", type_="identity"),
            doc("m2", "drinks green tea"),
            doc("m2", "drinks black coffee"),
            doc("m3", "drinks green tea", ns="b"),
        ]
    )
    keyword_index.upsert_many([])
    # Then each is found as if upserted one by one
    assert ids(keyword_index.keyword_search("a", "berlin")) == []
    assert ids(keyword_index.keyword_search("a", "lisbon", types=["identity"])) == ["m1"]
    assert ids(keyword_index.keyword_search("a", "tea")) == []
    assert ids(keyword_index.keyword_search("a", "coffee")) == ["m2"]
    assert ids(keyword_index.keyword_search("b", "tea")) == ["m3"]
    assert keyword_index.info("a").documents == 2


def test_upsert_replaces_text_vector_and_type(index: SearchIndex) -> None:
    # Given a memory
    index.upsert(doc("m1", "lives in Berlin", vector=(1.0, 0.0, 0.0)))
    # When it is upserted with new content
    ref = index.upsert(doc("m1", "lives in Lisbon", type_="identity", vector=(0.0, 1.0, 0.0)))
    # Then only the new content matches, once
    assert ref
    assert ids(index.keyword_search("a", "berlin")) == []
    assert ids(index.keyword_search("a", "lisbon")) == ["m1"]
    assert ids(index.keyword_search("a", "lisbon", types=["fact"])) == []
    hits = index.vector_search("a", (0.0, 1.0, 0.0))
    assert ids(hits) == ["m1"]
    assert hits[0].score == pytest.approx(1.0, abs=1e-5)
    assert index.info().documents == 1
    assert index.info().vectors == 1


def test_upsert_without_vector_drops_the_old_vector(index: SearchIndex) -> None:
    # Given a memory with a vector
    index.upsert(doc("m1", "text", vector=(1.0, 0.0, 0.0)))
    # When it is replaced without one
    index.upsert(doc("m1", "text"))
    # Then it is keyword-only
    assert index.vector_search("a", (1.0, 0.0, 0.0)) == []
    assert ids(index.keyword_search("a", "text")) == ["m1"]


def test_delete_removes_keywords_and_unknown_delete_is_fine(keyword_index: SearchIndex) -> None:
    # Given two memories
    ref = keyword_index.upsert(doc("m1", "red bicycle"))
    keyword_index.upsert(doc("m2", "blue bicycle"))
    # When one is deleted by its reference (and unknown ids too)
    keyword_index.delete("a", "m1", ref)
    keyword_index.delete("a", "nope")
    keyword_index.delete("nobody", "m2")
    # Then it is gone and the other stays
    assert ids(keyword_index.keyword_search("a", "bicycle")) == ["m2"]
    assert keyword_index.info().documents == 1


def test_delete_removes_and_unknown_delete_is_fine(index: SearchIndex) -> None:
    # Given two memories
    ref = index.upsert(doc("m1", "red bicycle", vector=(1.0, 0.0, 0.0)))
    index.upsert(doc("m2", "blue bicycle", vector=(0.0, 1.0, 0.0)))
    # When one is deleted (and unknown ids too)
    index.delete("a", "m1", ref)
    index.delete("a", "nope")
    index.delete("nobody", "m2")
    # Then it is gone from both searches and the other stays
    assert ids(index.keyword_search("a", "bicycle")) == ["m2"]
    assert ids(index.vector_search("a", (1.0, 0.0, 0.0))) == ["m2"]
    assert index.info().documents == 1


def test_vector_search_ranks_by_cosine(index: SearchIndex) -> None:
    # Given vectors at known angles (not normalized on input)
    index.upsert(doc("near", "x", vector=(2.0, 0.2, 0.0)))
    index.upsert(doc("mid", "x", vector=(1.0, 1.0, 0.0)))
    index.upsert(doc("far", "x", vector=(-1.0, 0.0, 0.0)))
    # When searching near the x axis
    hits = index.vector_search("a", (1.0, 0.0, 0.0), k=3)
    # Then the order follows cosine, and scores are cosines in [-1, 1]
    assert ids(hits) == ["near", "mid", "far"]
    assert hits[0].score == pytest.approx(0.995, abs=1e-3)
    assert hits[1].score == pytest.approx(0.7071, abs=1e-3)
    assert hits[2].score == pytest.approx(-1.0, abs=1e-5)
    assert ids(index.vector_search("a", (1.0, 0.0, 0.0), k=1)) == ["near"]


def test_neighbour_density_is_the_mean_cosine_to_the_nearest_others(index: SearchIndex) -> None:
    # Given three near-identical "templated" vectors, one loner, one memory without a vector, and another namespace
    index.upsert(doc("t1", "x", vector=(1.0, 0.0, 0.0)))
    index.upsert(doc("t2", "x", vector=(1.0, 0.1, 0.0)))
    index.upsert(doc("t3", "x", vector=(1.0, 0.0, 0.1)))
    index.upsert(doc("lone", "x", vector=(0.0, 0.0, 1.0)))
    index.upsert(doc("plain", "no vector"))
    index.upsert(doc("t1", "x", ns="b", vector=(0.0, 1.0, 0.0)))
    assert isinstance(index, NeighbourDensity)
    # When asking for the density among these candidates, 2 neighbours each
    density = index.neighbour_density("a", ["t1", "t2", "t3", "lone", "plain", "gone"], k=2)
    # Then the templated ones are crowded, the loner is not, and ids without a vector are left out
    assert set(density) == {"t1", "t2", "t3", "lone"}
    assert density["t1"] == pytest.approx((0.99504 + 0.99504) / 2, abs=1e-3)
    assert min(density["t1"], density["t2"], density["t3"]) > 0.95 > 0.2 > density["lone"]
    assert index.neighbour_density("a", ["t1"], k=2) == {}
    assert index.neighbour_density("nobody", ["t1", "t2"], k=2) == {}


def test_dimension_is_checked(index: SearchIndex) -> None:
    # Given an index holding 3-dimensional vectors
    index.upsert(doc("m1", "x", vector=(1.0, 0.0, 0.0)))
    assert index.info().dimension == 3
    # When a 4-dimensional vector arrives
    # Then it is refused and nothing changes
    with pytest.raises(InvalidInput):
        index.upsert(doc("m2", "y", vector=(1.0, 0.0, 0.0, 0.0)))
    with pytest.raises(InvalidInput):
        index.vector_search("a", (1.0, 0.0, 0.0, 0.0))
    assert index.info().documents == 1


def test_reset_drops_vectors_keeps_keywords_and_records_model(index: SearchIndex) -> None:
    # Given documents with 3-dimensional vectors
    index.upsert(doc("m1", "orange juice", vector=(1.0, 0.0, 0.0)))
    index.upsert(doc("m2", "apple juice", ns="b", vector=(0.0, 1.0, 0.0)))
    assert index.vector_search("a", (1.0, 0.0, 0.0))  # warm any cache
    # When the index is reset for a 4-dimensional model
    index.reset("model-b", 4)
    # Then vectors are gone, keyword search still works, and the new model is recorded
    info = index.info()
    assert (info.model_id, info.dimension, info.documents, info.vectors) == ("model-b", 4, 2, 0)
    assert index.vector_search("a", (1.0, 0.0, 0.0, 0.0)) == []
    assert ids(index.keyword_search("a", "juice")) == ["m1"]
    with pytest.raises(InvalidInput):
        index.upsert(doc("m1", "orange juice", vector=(1.0, 0.0, 0.0)))
    index.upsert(doc("m1", "orange juice", vector=(1.0, 0.0, 0.0, 0.0)))
    assert ids(index.vector_search("a", (1.0, 0.0, 0.0, 0.0))) == ["m1"]


def test_info_counts(index: SearchIndex) -> None:
    # Given an empty index
    assert index.info().documents == 0
    assert index.info().model_id is None
    # When documents with and without vectors are added
    index.reset("m", 3)
    index.upsert(doc("1", "a b", vector=(1.0, 0.0, 0.0)))
    index.upsert(doc("2", "c d"))
    index.upsert(doc("3", "e f", ns="z", vector=(0.0, 0.0, 1.0)))
    # Then info counts them
    info = index.info()
    assert (info.documents, info.vectors, info.dimension, info.model_id) == (3, 2, 3, "m")


def test_query_without_tokens_returns_nothing(keyword_index: SearchIndex) -> None:
    # Given a memory
    keyword_index.upsert(doc("m1", "the quick brown fox"))
    # When the query is only stop words or punctuation, or quotes FTS syntax
    # Then nothing matches and nothing breaks
    assert keyword_index.keyword_search("a", "the of and") == []
    assert keyword_index.keyword_search("a", "?!  ...") == []
    assert ids(keyword_index.keyword_search("a", 'fox" OR "x* NEAR(')) == ["m1"]


def test_writes_are_visible_at_once_between_vector_searches(index: SearchIndex) -> None:
    # Given a warmed vector search
    index.upsert(doc("m1", "one", vector=(1.0, 0.0, 0.0)))
    assert ids(index.vector_search("a", (0.0, 1.0, 0.0))) == ["m1"]
    # When documents are added, replaced and deleted in between searches
    index.upsert(doc("m2", "two", vector=(0.0, 1.0, 0.0)))
    assert ids(index.vector_search("a", (0.0, 1.0, 0.0)))[0] == "m2"
    index.upsert(doc("m3", "three", vector=(0.0, 0.0, 1.0)))
    index.delete("a", "m1")
    index.upsert(doc("m2", "two", vector=(0.0, 0.0, -1.0)))
    # Then every search reflects every write
    hits = index.vector_search("a", (0.0, 0.0, 1.0))
    assert ids(hits) == ["m3", "m2"]
    assert ids(index.keyword_search("a", "three")) == ["m3"]


def test_concurrent_writers_and_readers_stay_consistent(index: SearchIndex) -> None:
    # Given several threads upserting, deleting and searching at once
    errors: list[BaseException] = []

    def writer(w: int) -> None:
        try:
            for i in range(40):
                index.upsert(doc(f"w{w}-{i}", f"note {w} {i}", vector=(1.0, float(w), float(i))))
                if i % 3 == 0:
                    index.delete("a", f"w{w}-{i}")
                index.vector_search("a", (1.0, 0.0, 0.0), k=5)
                index.keyword_search("a", "note", k=5)
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(w,)) for w in range(4)]
    # When they run
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    # Then nothing failed and the final state is exactly the surviving documents
    assert errors == []
    expected = {f"w{w}-{i}" for w in range(4) for i in range(40) if i % 3 != 0}
    assert set(ids(index.vector_search("a", (1.0, 0.0, 0.0), k=500))) == expected
    assert set(ids(index.keyword_search("a", "note", k=500))) == expected
    assert index.info().documents == len(expected)


def test_sqlite_index_survives_reopen_and_sees_other_writers(tmp_path: Path) -> None:
    # Given two index objects on one file (two processes, say), one with a warm cache
    first = SqliteSearchIndex(tmp_path / "e.db")
    first.upsert(doc("m1", "persisted words", vector=(1.0, 0.0, 0.0)))
    assert ids(first.vector_search("a", (1.0, 0.0, 0.0))) == ["m1"]
    second = SqliteSearchIndex(tmp_path / "e.db")
    # When the other one writes
    second.upsert(doc("m2", "other words", vector=(0.0, 1.0, 0.0)))
    second.delete("a", "m1")
    # Then the first sees it, keyword and vector, without restarting
    assert ids(first.keyword_search("a", "words")) == ["m2"]
    assert ids(first.vector_search("a", (1.0, 0.0, 0.0))) == ["m2"]
    first.close()
    second.close()


def test_info_counts_one_namespace_or_all(index: SearchIndex) -> None:
    # Given documents in two namespaces, one without a vector
    index.upsert(doc("m1", "lives in Berlin", vector=(1.0, 0.0, 0.0)))
    index.upsert(doc("m2", "likes tea", ns="b", vector=(0.0, 1.0, 0.0)))
    index.upsert(doc("m3", "likes cats", ns="b"))
    # Then each namespace's counts are its own, and no namespace means all
    assert (index.info("a").documents, index.info("a").vectors) == (1, 1)
    assert (index.info("b").documents, index.info("b").vectors) == (2, 1)
    assert (index.info("nobody").documents, index.info("nobody").vectors) == (0, 0)
    assert (index.info().documents, index.info().vectors) == (3, 2)


def test_document_counts_one_namespace_or_all(keyword_index: SearchIndex) -> None:
    # Given keyword documents in two namespaces
    keyword_index.upsert(doc("m1", "lives in Berlin"))
    keyword_index.upsert(doc("m2", "likes tea", ns="b"))
    keyword_index.upsert(doc("m3", "likes cats", ns="b"))
    # Then each namespace's count is its own, and no namespace means all
    assert [keyword_index.info(ns).documents for ns in ("a", "b", "nobody")] == [1, 2, 0]
    assert keyword_index.info().documents == 3
