"""The HNSW graph of big namespaces: built off the query path, patched by writes, saved and reloaded."""

from __future__ import annotations

import logging
import threading
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pytest
from engram.adapters.search.ann import EXPANSION_ADD, EXPANSION_SEARCH, AnnGraph, row_digests
from engram.adapters.search.sqlite import SqliteSearchIndex
from engram.adapters.search.vector_cache import VectorCache
from engram.domain.models import IndexedDoc

pytestmark = pytest.mark.skipif(not AnnGraph.available(), reason="usearch is not installed")

T0 = datetime(2025, 1, 1, tzinfo=UTC)
DIM = 16


def vectors(n: int, seed: int = 1) -> np.ndarray:
    m = np.random.default_rng(seed).standard_normal((n, DIM)).astype(np.float32)
    normed: np.ndarray = m / np.linalg.norm(m, axis=1, keepdims=True)
    return normed


def fill(index: SqliteSearchIndex, matrix: np.ndarray) -> None:
    for i, v in enumerate(matrix):
        index.upsert(
            IndexedDoc(
                memory_id=f"m{i}", namespace="a", text=f"note {i}", type="fact", vector=tuple(v.tolist()), created_at=T0
            )
        )


def top1(index: SqliteSearchIndex, v: np.ndarray) -> str:
    return index.vector_search("a", tuple(v.tolist()), k=1)[0].memory_id


def test_first_query_scans_exactly_while_the_graph_builds_and_writes_during_the_build_are_kept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a namespace above the ANN threshold whose graph build is held back
    release = threading.Event()
    original = VectorCache._build

    def slow_build(self, ids, matrix):  # type: ignore[no-untyped-def]
        release.wait(10)
        return original(self, ids, matrix)

    monkeypatch.setattr(VectorCache, "_build", slow_build)
    index = SqliteSearchIndex(tmp_path / "e.db", ann_threshold=50)
    m = vectors(80)
    fill(index, m)
    # When the first query arrives
    first = index.vector_search("a", tuple(m[7].tolist()), k=5)
    # Then it is answered at once by the exact scan (the graph is not ready)
    assert first[0].memory_id == "m7"
    assert index.wait_for_ann("a", timeout=0) is False
    # When writes happen during the build, then the build finishes
    new = vectors(1, seed=99)[0]
    index.upsert(
        IndexedDoc(memory_id="new", namespace="a", text="new", type="fact", vector=tuple(new.tolist()), created_at=T0)
    )
    index.delete("a", "m3")
    release.set()
    assert index.wait_for_ann("a", timeout=10) is True
    # Then the graph answers and reflects both writes
    assert top1(index, new) == "new"
    assert "m3" not in {h.memory_id for h in index.vector_search("a", tuple(m[3].tolist()), k=5)}
    assert top1(index, m[11]) == "m11"
    index.close()


def test_the_graph_is_saved_on_close_and_reloaded_and_reconciled_with_later_writes(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # Given a big namespace whose graph was built and saved
    path = tmp_path / "e.db"
    index = SqliteSearchIndex(path, ann_threshold=50)
    m = vectors(80)
    fill(index, m)
    index.warm("a")
    assert index.wait_for_ann("a", timeout=10)
    index.close()
    assert list(tmp_path.glob("e.db.ann-*.npz"))
    # When another process changes the namespace while nobody holds the graph
    other = SqliteSearchIndex(path, ann_threshold=10**9)
    moved = vectors(1, seed=5)[0]
    other.upsert(
        IndexedDoc(
            memory_id="m0", namespace="a", text="moved", type="fact", vector=tuple(moved.tolist()), created_at=T0
        )
    )
    other.delete("a", "m1")
    other.close()
    # And the index is reopened
    caplog.set_level(logging.INFO, logger="engram.adapters.search.vector_cache")
    reopened = SqliteSearchIndex(path, ann_threshold=50)
    reopened.warm("a")
    assert reopened.wait_for_ann("a", timeout=10)
    # Then the saved graph was loaded (not rebuilt) and only the difference was applied (m0 out and in, m1 out)
    assert any("loaded the saved ANN graph" in r.message and "3 reconciled" in r.message for r in caplog.records)
    assert top1(reopened, moved) == "m0"
    assert "m1" not in {h.memory_id for h in reopened.vector_search("a", tuple(m[1].tolist()), k=5)}
    assert top1(reopened, m[42]) == "m42"
    reopened.close()


def test_row_digests_see_any_change_and_sync_reports_the_difference() -> None:
    # Given a graph over some rows
    m = vectors(20)
    graph = AnnGraph(DIM)
    graph.add_many([f"m{i}" for i in range(20)], m)
    changed = m.copy()
    changed[4, 0] = np.nextafter(changed[4, 0], np.float32(2))  # one ulp
    # When it is synced to rows with one changed, one removed and one added
    ids = [f"m{i}" for i in range(19)] + ["x"]
    rows = np.vstack([changed[:19], vectors(1, seed=3)])
    # Then the digests differ only on the changed row and sync touches only those rows
    assert (row_digests(m) != row_digests(changed)).sum() == 1
    assert graph.sync(ids, rows) == 4  # m4 out and in, m19 out, x in
    assert len(graph) == 20
    assert graph.search(rows[-1], 1)[0][0] == "x"


def test_an_unreadable_saved_graph_is_ignored_and_rebuilt(tmp_path: Path) -> None:
    # Given a saved graph file that got truncated
    path = tmp_path / "e.db"
    index = SqliteSearchIndex(path, ann_threshold=50)
    m = vectors(60)
    fill(index, m)
    index.warm("a")
    assert index.wait_for_ann("a", timeout=10)
    index.close()
    (saved,) = tmp_path.glob("e.db.ann-*.npz")
    saved.write_bytes(saved.read_bytes()[:100])
    # When the index is reopened
    reopened = SqliteSearchIndex(path, ann_threshold=50)
    reopened.warm("a")
    # Then the graph is rebuilt and answers
    assert reopened.wait_for_ann("a", timeout=10)
    assert top1(reopened, m[9]) == "m9"
    reopened.close()


def test_a_reloaded_graph_searches_as_broadly_as_a_built_one(tmp_path: Path) -> None:
    # Given a built graph saved to a file (usearch does not keep the search breadth in it)
    rng = np.random.default_rng(11)
    vectors = rng.standard_normal((300, DIM)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    built = AnnGraph(DIM)
    built.add_many([f"m{i}" for i in range(300)], vectors)
    built.save(tmp_path / "g.npz")
    # When it is loaded back
    loaded = AnnGraph.load(tmp_path / "g.npz", DIM)
    # Then it searches with the same expansions, and finds what the built one finds
    assert loaded is not None
    assert (
        (loaded._index.expansion_search, loaded._index.expansion_add)
        == (
            built._index.expansion_search,
            built._index.expansion_add,
        )
        == (EXPANSION_SEARCH, EXPANSION_ADD)
    )
    for query in vectors[:20]:
        assert loaded.search(query, 10) == built.search(query, 10)


def test_a_graph_over_any_restored_index_searches_as_broadly_as_a_built_one() -> None:
    # Given an index restored from a built graph's bytes by hand (not through AnnGraph.load): usearch
    # gives it the library's default search breadth
    from usearch.index import Index

    built = AnnGraph(DIM)
    built.add_many([f"m{i}" for i in range(50)], vectors(50))
    restored = Index.restore(bytes(built._index.save()))
    assert restored is not None and restored.expansion_search != EXPANSION_SEARCH
    # When a graph is made over it / Then the constructor gives it the graph's expansions
    graph = AnnGraph(DIM, restored)
    assert (graph._index.expansion_search, graph._index.expansion_add) == (EXPANSION_SEARCH, EXPANSION_ADD)
