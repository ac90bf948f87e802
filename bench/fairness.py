"""Tenant isolation in time: one namespace's chat while another floods searches at its rate limit.

    python bench/fairness.py [--turns 40] [--flood-chars 4000] [--flood-concurrency 4]

Processes: the scripted fake upstream (tests/fakes/upstream.py), Engram (uvicorn; the local stack: SQLite
store and index, the local e5 embedder with its default copies) and this client. Namespace ``alice`` holds 300
memories and chats (streamed turns, recall with query vectors, every exchange stored); namespace
``mallory`` holds a read-only search key and sends ``--flood-concurrency`` concurrent searches of
``--flood-chars`` characters each, distinct every time, paced at its own rate limit
(``ENGRAM_RATE_LIMIT_REQUESTS_PER_MINUTE``, 600/min by default), the case of issue #23 item 2.

Two gateways, same data, run one after the other:

- before: every query in one line (the local embedder's own lanes only, no turns between namespaces),
  queries embedded up to ``ENGRAM_EMBEDDING_MAX_TOKENS`` (512);
- after:  the shipped configuration (``FairEmbedder``: namespaces take turns; queries embedded from
  their last ``ENGRAM_EMBEDDING_QUERY_MAX_TOKENS``; the turn's context deadline).

Per gateway: alice's TTFB added over the upstream's own (p50 / p95) quiet, then during the flood, side by
side with the ratio (goal: flood p95 added <= 2x quiet p95 added), the turns that hit the context
deadline (``x-engram-reason: recall_timeout``) and the flood's searches answered.
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
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "functions"), str(ROOT)]

from bench.gateway import QUERIES, TOPICS, _pct, _serve_upstream  # noqa: E402
from bench.gateway import _spawn as spawn  # noqa: E402

CHAT_KEY = "ek-bench-alice-chat-key"
FLOOD_KEY = "ek-bench-mallory-search-key"
GOAL_RATIO = 2.0
_TEXT = (
    "the quarterly report mentions shipping delays warehouses in Rotterdam invoices customers refunds pallets "
    "forecast budget migration database outage rollback staging cluster latency dashboard alert escalation"
)
WORDS = _TEXT.split()


# -- child processes ------------------------------------------------------------------------------------
def _serve_gateway(config: str, upstream: str, keys_file: str) -> None:
    import uvicorn
    from engram.adapters.clock import SystemClock
    from engram.adapters.embed.local import LocalEmbedder
    from engram.bootstrap import Overrides, build_container
    from engram.entrypoints.http.app import create_app
    from engram.services.library.memories import MemoryWrite
    from engram.services.recall.pipeline import RecallService
    from engram.settings import Settings

    from tests.servers import free_port

    before = config == "before"
    data_dir = Path(keys_file).parent / config
    data_dir.mkdir()
    settings = Settings(
        store="sqlite",
        search="local",
        data_dir=data_dir,
        embedder="local",
        keys_file=Path(keys_file),
        upstream_base_url=upstream + "/v1",
        chat_model="fake-chat",
        scheduler_enabled=False,
        log_level="WARNING",
        rate_limit_chat_per_minute=0,  # alice's turns are measured, not limited
        # before: a query is embedded up to the per-item cap, as it was
        embedding_query_max_tokens=0 if before else Settings.model_fields["embedding_query_max_tokens"].default,
    )
    clock = SystemClock()
    overrides: dict[str, Any] = {}
    if before:  # the local model's own lanes only: no turns between namespaces
        copies = settings.embedding_instances or min(4, os.cpu_count() or 1)
        overrides["embedder"] = LocalEmbedder(num_threads=settings.embedding_threads or None, instances=copies)
    container = build_container(settings, Overrides(clock=clock, **overrides))
    rng = random.Random(7)
    writes = [
        MemoryWrite(content=f"Memory {i}: the user's {rng.choice(TOPICS)} note number {rng.randint(1, 10_000)}.")
        for i in range(300)
    ]
    for w in writes:
        container.memories.write("alice", w)
    assert isinstance(container.recall, RecallService)  # the real one (no override)
    container.recall.warm()
    port = free_port()
    server = uvicorn.Server(
        uvicorn.Config(create_app(container), host="127.0.0.1", port=port, log_level="warning", access_log=False)
    )
    print(port, flush=True)
    server.run()


def _spawn(*args: str) -> tuple[subprocess.Popen[str], str]:
    return spawn(*args, script=__file__)


# -- the client ------------------------------------------------------------------------------------------
async def _turn(client: Any, url: str, headers: dict[str, str], text: str) -> tuple[float, str]:
    body = {"model": "companion", "stream": True, "messages": [{"role": "user", "content": text}]}
    t0 = time.perf_counter()
    ttfb = 0.0
    async with client.stream("POST", url, content=json.dumps(body), headers=headers) as resp:
        if resp.status_code != 200:
            raise RuntimeError(f"{url} -> {resp.status_code}: {(await resp.aread())[:200]!r}")
        reason = resp.headers.get("x-engram-reason", "")
        async for _ in resp.aiter_raw():
            if not ttfb:
                ttfb = time.perf_counter() - t0
    return ttfb * 1000, reason


async def _chat(url: str, headers: dict[str, str], turns: int, label: str) -> tuple[list[float], list[str]]:
    import httpx

    async with httpx.AsyncClient(timeout=60) as client:
        ttfb: list[float] = []
        reasons: list[str] = []
        for i in range(turns):
            text = f"{QUERIES[i % len(QUERIES)]} ({TOPICS[i % len(TOPICS)]} {label}.{i})"
            a, reason = await _turn(client, url, headers, text)
            ttfb.append(a)
            reasons.append(reason)
            await asyncio.sleep(0.05)  # a person's pace, not a load test
    return ttfb, reasons


async def _flood(url: str, stop: asyncio.Event, concurrency: int, chars: int, per_minute: int) -> dict[str, int]:
    """Distinct long searches, ``concurrency`` in flight, started no faster than ``per_minute``."""
    import httpx

    rng = random.Random(11)
    counts = {"ok": 0, "limited": 0, "other": 0}
    gap = 60.0 / per_minute if per_minute else 0.0
    next_start = time.perf_counter()
    lock = asyncio.Lock()

    async def worker(client: httpx.AsyncClient) -> None:
        nonlocal next_start
        while not stop.is_set():
            async with lock:  # pace the starts at the rate limit
                wait = next_start - time.perf_counter()
                next_start = max(next_start, time.perf_counter()) + gap
            if wait > 0:
                await asyncio.sleep(wait)
            text = " ".join(rng.choice(WORDS) for _ in range(chars // 7))[:chars]
            resp = await client.post(
                url, json={"query": text, "top_k": 5}, headers={"authorization": f"Bearer {FLOOD_KEY}"}
            )
            counts["ok" if resp.status_code == 200 else "limited" if resp.status_code == 429 else "other"] += 1

    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    async with httpx.AsyncClient(timeout=120, limits=limits) as client:
        await asyncio.gather(*(worker(client) for _ in range(concurrency)))
    return counts


async def _direct(url: str, turns: int) -> list[float]:
    import httpx

    async with httpx.AsyncClient(timeout=30) as client:
        return [(await _turn(client, url, {}, f"{QUERIES[i % len(QUERIES)]} #{i}"))[0] for i in range(turns)]


async def _measure(gw: str, args: argparse.Namespace) -> dict[str, Any]:
    chat_url = gw + "/v1/chat/completions"
    headers = {"authorization": f"Bearer {CHAT_KEY}"}
    await _chat(chat_url, headers, 5, "warm")
    quiet, quiet_reasons = await _chat(chat_url, headers, args.turns, "quiet")
    stop = asyncio.Event()
    flood = asyncio.ensure_future(
        _flood(gw + "/v1/search/memories", stop, args.flood_concurrency, args.flood_chars, args.flood_per_minute)
    )
    await asyncio.sleep(2.0)  # the flood under way
    loud, loud_reasons = await _chat(chat_url, headers, args.turns, "flood")
    stop.set()
    counts = await flood
    return {
        "quiet": quiet,
        "flood": loud,
        "timeouts": (quiet_reasons.count("recall_timeout"), loud_reasons.count("recall_timeout")),
        "searches": counts,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("role", nargs="?", default="bench", help=argparse.SUPPRESS)
    parser.add_argument("--config", default="after", help=argparse.SUPPRESS)
    parser.add_argument("--upstream", default="", help=argparse.SUPPRESS)
    parser.add_argument("--keys", default="", help=argparse.SUPPRESS)
    parser.add_argument("--turns", type=int, default=40, help="alice's measured turns per row (default 40)")
    parser.add_argument("--flood-chars", type=int, default=4000)
    parser.add_argument("--flood-concurrency", type=int, default=4)
    parser.add_argument("--flood-per-minute", type=int, default=600, help="the flood key's rate limit (default 600)")
    parser.add_argument("--configs", nargs="+", default=["before", "after"], choices=["before", "after"])
    args = parser.parse_args()
    if args.role == "_upstream":
        _serve_upstream()
        return
    if args.role == "_gateway":
        _serve_gateway(args.config, args.upstream, args.keys)
        return

    procs: list[subprocess.Popen[str]] = []
    with tempfile.TemporaryDirectory(prefix="engram-fairness-") as tmp:
        keys = Path(tmp) / "keys.json"
        keys.touch(mode=0o600)
        keys.write_text(
            json.dumps(
                [
                    {"name": "alice", "key": CHAT_KEY, "namespace": "alice", "scopes": ["*"]},
                    {
                        "name": "mallory",
                        "key": FLOOD_KEY,
                        "namespace": "mallory",
                        "scopes": ["memory:read"],
                        "requests_per_minute": args.flood_per_minute,
                    },
                ]
            )
        )
        try:
            up, up_url = _spawn("_upstream")
            procs.append(up)
            direct = asyncio.run(_direct(up_url + "/v1/chat/completions", args.turns))
            floor = statistics.median(direct)
            rows = []
            for config in args.configs:
                gw, gw_url = _spawn("_gateway", "--config", config, "--upstream", up_url, "--keys", str(keys))
                procs.append(gw)
                try:
                    rows.append((config, asyncio.run(_measure(gw_url, args))))
                finally:
                    gw.stdin.close() if gw.stdin else None
                    gw.terminate()
                    gw.wait(timeout=20)
        finally:
            for proc in procs:
                if proc.poll() is None:
                    if proc.stdin:
                        proc.stdin.close()
                    proc.terminate()
                    proc.wait(timeout=20)
    print(
        f"\nalice's chat while mallory floods {args.flood_concurrency} concurrent {args.flood_chars}-character "
        f"searches at {args.flood_per_minute}/min; {args.turns} streamed turns per row; TTFB added over the "
        f"upstream's own p50 ({floor:.1f} ms), ms\n"
    )
    print(
        "| gateway | quiet p50 | quiet p95 | flood p50 | flood p95 | flood/quiet p95 (goal <= 2.0) "
        "| recall_timeout quiet/flood | searches ok/429 |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for config, res in rows:
        q = [t - floor for t in res["quiet"]]
        f = [t - floor for t in res["flood"]]
        ratio = _pct(f, 95) / max(_pct(q, 95), 1e-9)
        verdict = "met" if ratio <= GOAL_RATIO else "not met"
        t_quiet, t_flood = res["timeouts"]
        s = res["searches"]
        print(
            f"| {config} | {_pct(q, 50):.1f} | {_pct(q, 95):.1f} | {_pct(f, 50):.1f} | {_pct(f, 95):.1f} | "
            f"{ratio:.2f} ({verdict}) | {t_quiet}/{t_flood} | {s['ok']}/{s['limited']} |"
        )


if __name__ == "__main__":
    main()
