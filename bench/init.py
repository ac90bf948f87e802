"""Cold start of the HTTP functions: import + ``create_app()`` per ``ENGRAM_SURFACE``, beside a bare
``import fastapi``, each in a fresh interpreter, in the same run.

The functions' AWS settings as the stack sets them, with every AWS service on loopback: DynamoDB, SQS
and Secrets Manager on a local moto server (``AWS_ENDPOINT_URL``; building the app reads the secret
once), OpenSearch at a closed port (building the app must not call it), Bedrock embeddings (a client
is configured, never called). Surfaces: ``api`` (the API function), ``mcp`` (the MCP function) and
``all`` (the local default, for comparison).

    python bench/init.py [--runs 7]
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
REGION = "us-east-1"
# Issue #23 item 1: init of each function as a multiple of a bare `import fastapi`.
GOALS = {"api": 1.3, "mcp": 2.0}

PROBE = """
import json, sys, time
t0 = time.perf_counter()
from engram.entrypoints.http.app import create_app
t1 = time.perf_counter()
create_app()
t2 = time.perf_counter()
print(json.dumps({"import": t1 - t0, "create_app": t2 - t1, "modules": len(sys.modules)}))
"""
BARE = """
import json, sys, time
t0 = time.perf_counter()
import fastapi
t1 = time.perf_counter()
print(json.dumps({"import": t1 - t0, "create_app": 0.0, "modules": len(sys.modules)}))
"""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def aws_environment(endpoint: str) -> dict[str, str]:
    """Create the table, queue and secret on the moto server; the functions' environment for them."""
    import boto3
    from engram.adapters.storage.dynamodb import create_table

    for name, value in (("AWS_ACCESS_KEY_ID", "testing"), ("AWS_SECRET_ACCESS_KEY", "testing")):
        os.environ.setdefault(name, value)  # moto accepts any credentials
    clients = {name: boto3.client(name, region_name=REGION, endpoint_url=endpoint) for name in ("dynamodb", "sqs")}
    create_table(clients["dynamodb"], "engram-bench")
    queue_url = clients["sqs"].create_queue(QueueName="engram-bench-jobs")["QueueUrl"]
    secret = boto3.client("secretsmanager", region_name=REGION, endpoint_url=endpoint).create_secret(
        Name="engram-bench", SecretString=json.dumps({"api_key": "ek_bench_owner_key_000000001"})
    )
    return {
        "AWS_ENDPOINT_URL": endpoint,
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": REGION,
        "ENGRAM_AWS_REGION": REGION,
        "ENGRAM_STORE": "dynamodb",
        "ENGRAM_TABLE_NAME": "engram-bench",
        "ENGRAM_QUEUE": "sqs",
        "ENGRAM_CLEANUP_QUEUE_URL": queue_url,
        "ENGRAM_SECRET_ARN": secret["ARN"],
        "ENGRAM_SEARCH": "opensearch",
        "ENGRAM_OPENSEARCH_ENDPOINT": f"http://127.0.0.1:{free_port()}",
        "ENGRAM_EMBEDDER": "bedrock",
        "ENGRAM_RERANKER": "bedrock",
        "ENGRAM_EXTRACT_MODEL": "bedrock/amazon.nova-lite-v1:0",
        "ENGRAM_SCHEDULER_ENABLED": "false",
        "ENGRAM_MCP_ALLOWED_HOSTS": "*",
    }


def measure(code: str, env: dict[str, str]) -> dict[str, Any]:
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    if done.returncode != 0:
        raise RuntimeError(done.stderr[-2000:])
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7, help="fresh interpreters per row (default 7)")
    args = parser.parse_args()

    import logging

    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # no access log line per AWS call
    port = free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    try:
        base = {
            **os.environ,
            "PYTHONPATH": f"{REPO / 'functions'}{os.pathsep}{REPO}",
            **aws_environment(f"http://127.0.0.1:{port}"),
        }
        rows: dict[str, list[dict[str, Any]]] = {"import fastapi": [], "api": [], "mcp": [], "all": []}
        for _ in range(args.runs):  # interleaved, so drift in the machine's load hits every row alike
            for name in rows:
                if name == "import fastapi":
                    rows[name].append(measure(BARE, base))
                else:
                    rows[name].append(measure(PROBE, {**base, "ENGRAM_SURFACE": name}))
    finally:
        server.stop()

    def median_ms(samples: list[dict[str, Any]], key: str) -> float:
        return float(statistics.median(s[key] for s in samples)) * 1000

    bare = median_ms(rows["import fastapi"], "import")
    ratios: dict[str, float] = {}
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"\nInit per HTTP function (median of {args.runs} fresh interpreters; load average {load:.1f})")
    print("| what | import (ms) | create_app (ms) | total (ms) | × bare `import fastapi` | modules loaded |")
    print("|---|---|---|---|---|---|")
    for name, samples in rows.items():
        imp, build = median_ms(samples, "import"), median_ms(samples, "create_app")
        total = statistics.median((s["import"] + s["create_app"]) for s in samples) * 1000
        label = f"`ENGRAM_SURFACE={name}`" if name != "import fastapi" else "bare `import fastapi`"
        modules = int(statistics.median(s["modules"] for s in samples))
        print(f"| {label} | {imp:.0f} | {build:.0f} | {total:.0f} | {total / bare:.1f} | {modules} |")
        ratios[name] = total / bare
    print("\n| goal (issue #23 item 1) | goal (× bare `import fastapi`) | measured | measured / goal |")
    print("|---|---:|---:|---:|")
    for name, goal in GOALS.items():
        verdict = "met" if ratios[name] <= goal else "not met"
        print(f"| `ENGRAM_SURFACE={name}` | {goal:.1f} | {ratios[name]:.2f} | {ratios[name] / goal:.2f} ({verdict}) |")


if __name__ == "__main__":
    main()
