"""Every benchmark, one after another, then all their tables together (`make bench`).

    python bench/run_all.py [--quick] [--full-latency]
        [--only quality,retrieval,bilingual,latency,gateway,last_byte,init,conversations]

- quality:   LoCoMo and the bilingual set in one run, BM25 vs vectors vs the pipeline per aggregate row, and
  the gateway's injection (no_answer hits, answer memories injected, tokens per turn); ``--quick``: bilingual only
- retrieval: LoCoMo recall@5/10, NDCG@10 (skipped with a note if the data file is missing);
  ``--quick`` asks only the first 20 questions per conversation
- bilingual: the Chinese/English/mixed set
- latency:   1k and 10k memories by default (``--full-latency`` adds 100k, ~5 more minutes)
- gateway:   the chat gateway's overhead over the fake upstream (``--quick``: 100 requests per row)
- init:      cold start (import + create_app) per HTTP function surface beside a bare FastAPI import
- last_byte: how long a stream's closing chunk waits for the turn's writes, SQLite vs DynamoDB (moto)
- conversations: message vectors at ingest vs in the extraction job, conversation search on the chat
  path, LoCoMo answers in the fragments (skipped with a note if the data file is missing)

Each runs in its own process (so one's threads and caches do not skew another's timings); its
output streams through, and the tables (Markdown lines) are printed again at the end with the
machine's load average.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def commands(args: argparse.Namespace) -> dict[str, list[str]]:
    py = sys.executable
    sizes = "1000,10000,100000" if args.full_latency else "1000,10000"
    return {
        "quality": [py, "bench/quality.py", *(["--no-locomo"] if args.quick else [])],
        "retrieval": [py, "bench/retrieval.py", *(["--limit", "20"] if args.quick else [])],
        "bilingual": [py, "bench/bilingual.py"],
        "latency": [py, "bench/latency.py", "--sizes", sizes, "--queries", "30" if args.quick else "60"],
        "gateway": [py, "bench/gateway.py", *(["--requests", "100"] if args.quick else [])],
        "last_byte": [py, "bench/last_byte.py", *(["--requests", "30"] if args.quick else [])],
        "init": [py, "bench/init.py", *(["--runs", "3"] if args.quick else [])],
        "conversations": [py, "bench/conversations.py", *(["--questions", "50"] if args.quick else [])],
    }


def tables(output: str) -> str:
    """The Markdown tables of a benchmark's output, with the line just before each (its caption)."""
    lines = output.splitlines()
    out: list[str] = []
    for i, line in enumerate(lines):
        if line.startswith("|"):
            if not out or not out[-1].startswith("|"):
                caption = next((c for c in reversed(lines[max(0, i - 3) : i]) if c.strip()), "")
                if out:
                    out.append("")
                if caption and not caption.startswith("|"):
                    out.append(caption)
            out.append(line)
        elif line.startswith(("hit@", "miss")) and not line.startswith("|"):
            out.append(line)
    return "\n".join(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--only",
        default="",
        help="comma-separated subset of: quality,retrieval,bilingual,latency,gateway,last_byte,init,conversations",
    )
    parser.add_argument("--quick", action="store_true", help="fewer questions and requests (a smoke run)")
    parser.add_argument("--full-latency", action="store_true", help="latency at 100k memories too")
    args = parser.parse_args()
    todo = commands(args)
    if args.only:
        wanted = [w.strip() for w in args.only.split(",") if w.strip()]
        unknown = set(wanted) - set(todo)
        if unknown:
            sys.exit(f"unknown benchmark(s): {', '.join(sorted(unknown))}")
        todo = {k: v for k, v in todo.items() if k in wanted}
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO / "functions"), str(REPO)])}
    results: list[tuple[str, int, float, str]] = []
    for name, cmd in todo.items():
        print(f"\n=== {name}: {' '.join(cmd[1:])}", flush=True)
        t0 = time.perf_counter()
        proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        captured: list[str] = []
        assert proc.stdout is not None
        for line in proc.stdout:
            captured.append(line)
            print(line, end="", flush=True)
        code = proc.wait()
        results.append((name, code, time.perf_counter() - t0, "".join(captured)))
    load = os.getloadavg()
    print("\n" + "=" * 100)
    print(f"All benchmarks (load average {load[0]:.1f} / {load[1]:.1f} / {load[2]:.1f} on {os.cpu_count()} CPUs)")
    failed = 0
    for name, code, seconds, output in results:
        status = "ok" if code == 0 else f"FAILED (exit {code})"
        print(f"\n## {name} ({seconds:.0f} s, {status})\n")
        print(tables(output) or output.strip().splitlines()[-1] if output.strip() else "(no output)")
        failed += code != 0
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
