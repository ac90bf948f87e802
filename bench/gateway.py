"""Gateway overhead: the fake upstream called directly vs through Engram, side by side in one run.

    python bench/gateway.py [--requests 200] [--embedder none|local] [--markdown]

Three processes: the scripted fake upstream (tests/fakes/upstream.py), Engram (uvicorn, in-memory
store and index) and this client. Engram runs twice: pure forwarding (injection and storage off) and
with recall over 1,000 memories (boot block + keyword recall, or keyword + vectors with
``--embedder local``; every exchange stored). Each request streams (`stream: true`); TTFB is the time
to the first body byte, total the time to the end of the stream. Concurrency 1 and 8.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "functions"), str(ROOT)]

KEY = "ek-bench-owner-key"
TOPICS = ["coffee", "deploy", "garden", "piano", "cat", "server", "novel", "bike", "tea", "camera", "trip", "budget"]
QUERIES = [
    "what do you remember about my cat?",
    "which deploy script do I use on Fridays?",
    "how is my garden doing this week?",
    "remind me of my budget for the trip",
]


# -- child processes ------------------------------------------------------------------------------------
def _serve_upstream() -> None:
    from tests.fakes.upstream import FakeUpstream, Reply

    up = FakeUpstream(default=Reply(text="Sure - here is a short answer from the fake model.", chunks=4)).start()
    print(up.port, flush=True)
    sys.stdin.read()  # until the parent closes our stdin
    up.stop()


def _serve_gateway(mode: str, upstream: str, embedder: str) -> None:
    import uvicorn
    from engram.adapters.clock import SystemClock
    from engram.adapters.search.inmemory import InMemorySearchIndex
    from engram.adapters.storage.inmemory import InMemoryMemoryStore
    from engram.bootstrap import Overrides, build_container
    from engram.domain.models import Digest
    from engram.entrypoints.http.app import create_app
    from engram.services.library.memories import MemoryWrite
    from engram.settings import Settings

    from tests.servers import free_port

    recall = mode == "recall"
    settings = Settings(
        store="memory",
        search="memory",
        embedder=embedder if recall else "none",
        api_key=KEY,
        upstream_base_url=upstream + "/v1",
        chat_model="fake-chat",
        scheduler_enabled=False,
        chat_inject_enabled=recall,
        chat_store_messages=recall,
        log_level="WARNING",
        rate_limit_chat_per_minute=0,  # one key sends every request: measure the gateway, not the limit
    )  # type: ignore[call-arg]
    clock = SystemClock()  # one clock for the store and the container
    container = build_container(
        settings, Overrides(store=InMemoryMemoryStore(clock=clock), index=InMemorySearchIndex(), clock=clock)
    )
    if recall:
        rng = random.Random(7)
        for i in range(1000):
            topic = rng.choice(TOPICS)
            content = f"Memory {i}: the user's {topic} note number {rng.randint(1, 10_000)} ({rng.choice(TOPICS)})."
            container.memories.write("default", MemoryWrite(content=content, pinned=i < 5))
        container.store.put_digest(
            Digest(
                namespace="default", content="Lin, Rust developer, ships on Fridays.", updated_at=container.clock.now()
            )
        )
    port = free_port()
    server = uvicorn.Server(
        uvicorn.Config(create_app(container), host="127.0.0.1", port=port, log_level="warning", access_log=False)
    )
    print(port, flush=True)
    server.run()


def _spawn(*args: str) -> tuple[subprocess.Popen[str], str]:
    proc = subprocess.Popen(
        [sys.executable, __file__, *args],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": f"{ROOT / 'functions'}:{ROOT}"},
    )
    assert proc.stdout is not None
    port = proc.stdout.readline().strip()
    if not port.isdigit():
        proc.kill()
        raise RuntimeError(f"child {args[0]} did not start")
    return proc, f"http://127.0.0.1:{port}"


# -- the client ------------------------------------------------------------------------------------------
async def _one(client: Any, url: str, headers: dict[str, str], query: str) -> tuple[float, float]:
    body = {"model": "companion", "stream": True, "messages": [{"role": "user", "content": query}]}
    t0 = time.perf_counter()
    ttfb = 0.0
    async with client.stream("POST", url, content=json.dumps(body), headers=headers) as resp:
        if resp.status_code != 200:
            raise RuntimeError(f"{url} -> {resp.status_code}: {(await resp.aread())[:200]!r}")
        async for _ in resp.aiter_raw():
            if not ttfb:
                ttfb = time.perf_counter() - t0
    return ttfb * 1000, (time.perf_counter() - t0) * 1000


async def _run(url: str, headers: dict[str, str], concurrency: int, n: int, warmup: int) -> dict[str, list[float]]:
    import httpx

    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    async with httpx.AsyncClient(limits=limits, timeout=30) as client:
        for i in range(warmup):
            await _one(client, url, headers, QUERIES[i % len(QUERIES)])
        ttfb: list[float] = []
        total: list[float] = []
        counter = iter(range(n))

        async def worker() -> None:
            for i in counter:
                # A distinct text per request (a real user rarely repeats a message verbatim), so the
                # query-embedding cache does not flatter the recall row.
                text = f"{QUERIES[i % len(QUERIES)]} ({TOPICS[i % len(TOPICS)]} #{concurrency}.{i})"
                a, b = await _one(client, url, headers, text)
                ttfb.append(a)
                total.append(b)

        await asyncio.gather(*(worker() for _ in range(concurrency)))
    return {"ttfb": ttfb, "total": total}


def _cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process (Linux /proc); 0 elsewhere."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("role", nargs="?", default="bench", help=argparse.SUPPRESS)
    parser.add_argument("--mode", default="forward", help=argparse.SUPPRESS)
    parser.add_argument("--upstream", default="", help=argparse.SUPPRESS)
    parser.add_argument("--requests", type=int, default=200, help="measured requests per row (default 200)")
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 8], help="levels to run (default 1 8)")
    parser.add_argument(
        "--embedder",
        choices=["none", "local"],
        default="none",
        help="recall row: keyword only (none) or keyword + local e5 vectors (local)",
    )
    args = parser.parse_args()
    if args.role == "_upstream":
        _serve_upstream()
        return
    if args.role == "_gateway":
        _serve_gateway(args.mode, args.upstream, args.embedder)
        return

    procs: list[subprocess.Popen[str]] = []
    try:
        up, up_url = _spawn("_upstream")
        procs.append(up)
        fwd, fwd_url = _spawn("_gateway", "--mode", "forward", "--upstream", up_url)
        procs.append(fwd)
        rec, rec_url = _spawn("_gateway", "--mode", "recall", "--upstream", up_url, "--embedder", args.embedder)
        procs.append(rec)
        auth = {"authorization": f"Bearer {KEY}"}
        kind = "keyword" if args.embedder == "none" else "keyword+e5"
        targets = [
            ("direct (fake upstream)", up_url + "/v1/chat/completions", {}, up.pid),
            ("gateway, forwarding", fwd_url + "/v1/chat/completions", auth, fwd.pid),
            (f"gateway, recall 1k ({kind})", rec_url + "/v1/chat/completions", auth, rec.pid),
        ]
        rows = []
        for concurrency in args.concurrency:
            base: dict[str, list[float]] | None = None
            for name, url, headers, pid in targets:
                cpu0 = _cpu_seconds(pid)
                res = asyncio.run(_run(url, headers, concurrency, args.requests, args.warmup))
                cpu = (_cpu_seconds(pid) - cpu0) * 1000 / (args.requests + args.warmup)
                base = base or res
                added = statistics.median(res["total"]) - statistics.median(base["total"])
                stats = [_pct(res["ttfb"], 50), _pct(res["ttfb"], 95), _pct(res["total"], 50), _pct(res["total"], 95)]
                rows.append((name, concurrency, stats, added, cpu))
        print(f"\nGateway overhead, {args.requests} streamed requests per row (ms)\n")
        print("| target | c | TTFB p50 | TTFB p95 | total p50 | total p95 | added p50 vs direct | server CPU/req |")
        print("|---|---:|---:|---:|---:|---:|---:|---:|")
        for name, c, stats, added, cpu in rows:
            extra = "—" if name.startswith("direct") else f"+{added:.1f}"
            cells = " | ".join(f"{v:.1f}" for v in stats)
            print(f"| {name} | {c} | {cells} | {extra} | {cpu:.2f} |")
    finally:
        for proc in procs:
            if proc.stdin:
                proc.stdin.close()
            proc.terminate()
        for proc in procs:
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()


if __name__ == "__main__":
    main()
