"""What the closing chunk waits for: the writes a chat turn owes, SQLite vs DynamoDB, side by side.

    python bench/last_byte.py [--requests 100] [--warmup 10]

Nothing happens after a response's last byte (docs/aws.md, "How Lambda runs it"): a stream passes
the answer on as it arrives and sends its end (``data: [DONE]``) only once the exchange (user and
assistant messages, usage, cleanup bookkeeping) and any "remember ..." fact are stored. This measures,
from the client, the gap between the last content byte and the end of the stream, per store, with
storing off (the baseline: the same gateway, nothing to write) and on, for a plain turn and for a
"remember ..." turn. DynamoDB is moto's server in its own process (real HTTP on loopback, so each call
costs a round trip, like the real service but faster); the call count per turn tells what to expect at
real DynamoDB latencies (single-digit ms per call in-region).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from functools import partial
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "functions"), str(ROOT)]

import httpx  # noqa: E402

from tests.fakes.moto_aws import SerializedClient  # noqa: E402

KEY = "ek-bench-owner-key"
TABLE = "engram-bench"


@contextmanager
def moto_server() -> Iterator[str]:
    from tests.servers import free_port

    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                httpx.get(url + "/moto-api/", timeout=1)
                break
            except httpx.TransportError:
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise RuntimeError("moto server did not start") from None
                time.sleep(0.1)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


class SentQueue:
    """Stands in for SQS: the enqueue is recorded (the gateway's get/put of its once-a-day flag still runs)."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, dict[str, Any]]] = []

    def enqueue(self, job: str, payload: dict[str, Any]) -> None:
        self.sent.append((job, payload))


def empty_table(endpoint: str, client: Any) -> None:
    """A fresh, empty table: moto copies every table for each transaction (to roll back), so its write
    time grows with the table; real DynamoDB's does not. Reset before each turn (outside the timing)."""
    from engram.adapters.storage.dynamodb import create_table

    httpx.post(endpoint + "/moto-api/reset", timeout=10)
    create_table(client, TABLE)


def dynamo_store(endpoint: str) -> tuple[Any, SerializedClient]:
    import boto3
    from engram.adapters.clock import SystemClock
    from engram.adapters.storage.dynamodb import DynamoMemoryStore

    client = boto3.client(
        "dynamodb",
        endpoint_url=endpoint,
        region_name="us-east-1",
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
    )
    empty_table(endpoint, client)
    counting = SerializedClient(client, serialize=False)  # counts calls; moto's server takes them concurrently
    return DynamoMemoryStore(TABLE, counting, clock=SystemClock()), counting


def operation_ms(store: Any, n: int = 30) -> dict[str, float]:
    """p50 of each kind of write a turn makes, one at a time: what the waits above are made of."""
    from engram.adapters.clock import SystemClock
    from engram.domain.models import Message, UsageRecord, new_id

    utcnow = SystemClock().now

    def usage(i: int) -> None:
        store.append_usage(
            UsageRecord(
                id=new_id("use"),
                namespace="bench-ops",
                model="m",
                input_tokens=1,
                output_tokens=1,
                cache_read_tokens=0,
                cache_write_tokens=0,
                created_at=utcnow(),
            )
        )

    def message(i: int) -> None:
        store.insert_message(
            Message(
                id=new_id("msg"),
                namespace="bench-ops",
                role="user",
                content=f"op {i}",
                external_id=f"op-{i}",
                created_at=utcnow(),
            )
        )

    ops = {
        "get_cache (GetItem)": lambda i: store.get_cache("bench-ops", "k"),
        "append_usage (PutItem)": usage,
        "insert_message (TransactWriteItems)": message,
    }
    out = {}
    for name, op in ops.items():
        times = []
        for i in range(n):
            t0 = time.perf_counter()
            op(i)
            times.append((time.perf_counter() - t0) * 1000)
        out[name] = statistics.median(times)
    return out


def gateway(stack: ExitStack, upstream_url: str, *, store: Any, data_dir: Path, persist: bool) -> str:
    from engram.adapters.search.inmemory import InMemorySearchIndex
    from engram.bootstrap import Overrides, build_container
    from engram.entrypoints.http.app import create_app
    from engram.settings import Settings

    from tests.servers import serve_app

    settings = Settings(
        store="sqlite" if store is None else "memory",
        search="memory",
        embedder="none",
        data_dir=data_dir,
        api_key=KEY,
        upstream_base_url=upstream_url,
        upstream_api_key="sk-bench",
        chat_model="fake-chat",
        chat_inject_enabled=False,
        chat_store_messages=persist,
        scheduler_enabled=False,
        log_level="WARNING",
        rate_limit_chat_per_minute=0,  # one key sends every turn of the run
    )
    overrides: dict[str, Any] = {"index": InMemorySearchIndex(), "embedder": None, "queue": SentQueue()}
    if store is not None:
        overrides["store"] = store
    container = build_container(settings, Overrides(**overrides))
    stack.callback(container.close)
    return stack.enter_context(serve_app(create_app(container)))


def closing_gap(url: str, text: str) -> float:
    """ms between the arrival of the answer's last text and the end of the stream."""
    body = {"model": "companion", "stream": True, "messages": [{"role": "user", "content": text}]}
    last_text = end = 0.0
    with httpx.stream(
        "POST", url + "/v1/chat/completions", json=body, headers={"authorization": f"Bearer {KEY}"}, timeout=30
    ) as resp:
        resp.raise_for_status()
        for piece in resp.iter_raw():
            now = time.perf_counter()
            if b"answer." in piece:
                last_text = now
            end = now
    return (end - last_text) * 1000


def measure(
    url: str, label: str, *, remember: bool, requests: int, warmup: int, before: Callable[[], None] | None = None
) -> list[float]:
    out = []
    for i in range(warmup + requests):
        if before is not None:
            before()
        said = f"please remember: {label} fact number {i}" if remember else f"{label} turn number {i}"
        gap = closing_gap(url, said)
        if i >= warmup:
            out.append(gap)
    return out


def pct(values: list[float], p: int) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=100)
    parser.add_argument("--warmup", type=int, default=10)
    args = parser.parse_args()

    from tests.fakes.upstream import FakeUpstream, Reply

    rows: list[tuple[str, str, list[float], float]] = []
    ops: dict[str, float] = {}
    with ExitStack() as stack:
        up = stack.enter_context(FakeUpstream(default=Reply(text="Sure, here is the answer.", chunks=3)))
        tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="engram-lastbyte-")))
        endpoint = stack.enter_context(moto_server())
        for name in ("sqlite (file, WAL)", "dynamodb (moto server, loopback)"):
            for persist in (False, True):
                counter: SerializedClient | None = None
                store = reset = None
                if name.startswith("dynamodb"):
                    store, counter = dynamo_store(endpoint)
                    reset = partial(empty_table, endpoint, counter._client)
                data_dir = tmp / f"{len(rows)}"
                data_dir.mkdir()
                url = gateway(stack, up.openai_base_url, store=store, data_dir=data_dir, persist=persist)
                kinds = [("plain turn", False), ("remember turn", True)] if persist else [("nothing stored", False)]
                for kind, remember in kinds:
                    before = len(counter.calls) if counter else 0
                    gaps = measure(
                        url, kind, remember=remember, requests=args.requests, warmup=args.warmup, before=reset
                    )
                    calls = ((len(counter.calls) - before) / (args.requests + args.warmup)) if counter else float("nan")
                    rows.append((name, kind, gaps, calls))
                if store is not None and persist:
                    assert reset is not None
                    reset()
                    ops = operation_ms(store)

    load = os.getloadavg()
    print(
        f"\nClosing-chunk wait: last text byte -> end of stream, {args.requests} streamed turns per row (ms); "
        f"load average {load[0]:.1f} on {os.cpu_count()} CPUs\n"
    )
    print("| store | turn | p50 | p95 | added p50 vs nothing stored | store calls per turn |")
    print("|---|---|---:|---:|---:|---:|")
    base: dict[str, float] = {}
    for name, kind, gaps, calls in rows:
        p50 = statistics.median(gaps)
        if kind == "nothing stored":
            base[name] = p50
            added = "—"
        else:
            added = f"+{p50 - base[name]:.1f}"
        calls_cell = "—" if calls != calls else f"{calls:.1f}"
        print(f"| {name} | {kind} | {p50:.1f} | {pct(gaps, 95):.1f} | {added} | {calls_cell} |")
    print(
        "\nEach write alone against the moto server in this run, p50 (ms): "
        + ", ".join(f"{name} {ms:.1f}" for name, ms in ops.items())
    )


if __name__ == "__main__":
    main()
