"""Which client the OpenSearch adapter uses: its own transport (httpx + botocore's SigV4 signer) vs
opensearch-py, on what a Lambda function pays for each (docs/aws.md, "The OpenSearch client").

    python bench/opensearch_client.py [--runs 7] [--requests 300] [--versions 3.2.0,2.8.0]

- **layer**: the bytes each opensearch-py version adds to the dependency layer: ``layers/requirements.txt``
  installed with ``pip install --target`` with and without it, sizes on disk (unzipped, as Lambda counts);
- **import**: in a fresh interpreter that has already imported what the functions import anyway (boto3,
  httpx, pydantic, Engram's domain), the time to import the adapter's client:
  ``engram.adapters.search.opensearch`` today, ``opensearchpy`` + its SigV4 auth for the other; median
  of ``--runs``;
- **latency**: p50/p95 per request against osmem-server on loopback, SigV4-signed for ``aoss`` with fixed
  credentials, the same bodies through each client: index a document (no refresh), a keyword search,
  a count. opensearch-py is measured with its urllib3 connection (``Urllib3AWSV4SignerAuth``) and its
  requests connection (``AWSV4SignerAuth``, the documented pairing).

It needs the package index (pip) and osmem-server; the opensearch-py copies live in a temporary
directory, never in the venv.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "functions"), str(ROOT)]

REGION = "us-east-1"
KEYS = ("AKIDEXAMPLE", "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY", "session-token")
# What a function that serves search has imported before it builds the index adapter.
ALREADY_IMPORTED = (
    "import boto3, httpx, pydantic, botocore.session, engram.domain.models, engram.domain.text, engram.domain.errors"
)


def _size(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def _pip_target(target: Path, *requirements: str) -> None:
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "--quiet", "--no-compile", "--target", str(target), *requirements],
        check=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def layer_sizes(work: Path, versions: list[str]) -> dict[str, tuple[int, list[str]]]:
    """Bytes each version adds to the dependency layer, and the top-level packages it brings."""
    requirements = ["-r", str(ROOT / "layers" / "requirements.txt")]
    base = work / "layer-base"
    _pip_target(base, *requirements)
    before = {p.name for p in base.iterdir()}
    out: dict[str, tuple[int, list[str]]] = {}
    for version in versions:
        target = work / f"layer-{version}"
        _pip_target(target, *requirements, f"opensearch-py=={version}")
        added = sorted(p.name for p in target.iterdir() if p.name not in before and not p.name.endswith("-info"))
        out[version] = (_size(target) - _size(base), added)
    return out


def _import_seconds(code: str, extra_path: Path | None, runs: int) -> float:
    probe = f"{ALREADY_IMPORTED}\nimport time\nt0 = time.perf_counter()\n{code}\nprint(time.perf_counter() - t0)"
    env = dict(os.environ)
    paths = [str(ROOT / "functions"), str(ROOT)] + ([str(extra_path)] if extra_path else [])
    env["PYTHONPATH"] = os.pathsep.join(paths)
    samples = []
    for _ in range(runs):
        result = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, check=True)
        samples.append(float(result.stdout.strip().splitlines()[-1]))
    return statistics.median(samples)


def import_times(work: Path, versions: list[str], runs: int) -> dict[str, float]:
    out = {"httpx + botocore signer (today)": _import_seconds("import engram.adapters.search.opensearch", None, runs)}
    for version in versions:
        code = "import opensearchpy\nfrom opensearchpy import OpenSearch, Urllib3AWSV4SignerAuth, helpers"
        out[f"opensearch-py {version}"] = _import_seconds(code, work / f"layer-{version}", runs)
    return out


def _document(n: int) -> dict[str, Any]:
    return {
        "memory_id": f"m{n}",
        "namespace": "bench",
        "type": "fact",
        "terms": f"hike alp lake note{n % 50} walk",
        "text": f"hiking in the Alps, note {n}",
        "importance": 0.5,
        "pinned": False,
        "created_at": "2025-01-01T00:00:00+00:00",
    }


SEARCH = {
    "size": 20,
    "_source": ["memory_id"],
    "query": {"bool": {"must": [{"match": {"terms": "hike lake"}}], "filter": [{"term": {"namespace": "bench"}}]}},
}
COUNT = {"query": {"bool": {"filter": [{"term": {"namespace": "bench"}}]}}}


def _timed(call: Callable[[], Any], requests: int) -> tuple[float, float]:
    samples = []
    for _ in range(requests):
        t0 = time.perf_counter()
        call()
        samples.append(time.perf_counter() - t0)
    samples.sort()
    return statistics.median(samples), samples[int(len(samples) * 0.95) - 1]


def latency_child(url: str, client: str, requests: int) -> dict[str, tuple[float, float]]:
    """Run in a fresh process (``--child``): p50/p95 of each request kind through one client."""
    from botocore.credentials import Credentials

    credentials = Credentials(*KEYS)
    index = f"bench-{client.replace(' ', '-').replace('+', '').lower()}"
    counter = iter(range(10**9))
    if client == "httpx":
        from engram.adapters.search.opensearch import OpenSearchIndex, SigV4Signer

        adapter = OpenSearchIndex(url, index, signer=SigV4Signer(REGION, credentials))

        def send(method: str, path: str, body: Any) -> Any:
            return adapter._request(method, path, body).json()

    else:
        from opensearchpy import (
            AWSV4SignerAuth,
            OpenSearch,
            RequestsHttpConnection,
            Urllib3AWSV4SignerAuth,
            Urllib3HttpConnection,
        )

        if client == "urllib3":
            auth: Any = Urllib3AWSV4SignerAuth(credentials, REGION, "aoss")
            connection: Any = Urllib3HttpConnection
        else:
            auth, connection = AWSV4SignerAuth(credentials, REGION, "aoss"), RequestsHttpConnection
        opensearch = OpenSearch(hosts=[url], http_auth=auth, connection_class=connection, timeout=10)

        def send(method: str, path: str, body: Any) -> Any:
            return opensearch.transport.perform_request(method, path, body=body)

    for _ in range(20):  # warm the connection and create the index
        send("POST", f"/{index}/_doc", _document(next(counter)))
    return {
        "index a document": _timed(lambda: send("POST", f"/{index}/_doc", _document(next(counter))), requests),
        "keyword search": _timed(lambda: send("POST", f"/{index}/_search", SEARCH), requests),
        "count": _timed(lambda: send("POST", f"/{index}/_count", COUNT), requests),
    }


def latencies(work: Path, version: str, requests: int) -> dict[str, dict[str, tuple[float, float]]]:
    import osmem_server

    server = osmem_server.OsmemServer.start(seed=[], freeze=False)
    try:
        out = {}
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "functions"), str(ROOT), str(work / f"layer-{version}")])
        for client in ("httpx", "urllib3", "requests"):
            args = [sys.executable, __file__, "--child", server.url, client, str(requests)]
            result = subprocess.run(args, env=env, capture_output=True, text=True, check=True)
            out[client] = json.loads(result.stdout.strip().splitlines()[-1])
        return out
    finally:
        server.close()


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        print(json.dumps(latency_child(sys.argv[2], sys.argv[3], int(sys.argv[4]))))
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--requests", type=int, default=300)
    parser.add_argument("--versions", default="3.2.0,2.8.0")
    args = parser.parse_args()
    versions = [v for v in args.versions.split(",") if v]
    with tempfile.TemporaryDirectory(prefix="engram-os-client-") as tmp:
        work = Path(tmp)
        sizes = layer_sizes(work, versions)
        print("\nDependency layer (unzipped), added by opensearch-py\n")
        print("| version | added | new top-level packages |\n|---|---|---|")
        for version, (size, added) in sizes.items():
            print(f"| {version} | {size / 1e6:.1f} MB | {', '.join(added)} |")
        imports = import_times(work, versions, args.runs)
        print(f"\nImport on a cold start, after boto3 + httpx (median of {args.runs} fresh interpreters)\n")
        print("| client | import |\n|---|---|")
        for name, seconds in imports.items():
            print(f"| {name} | {seconds * 1000:.0f} ms |")
        rows = latencies(work, versions[0], args.requests)
        print(f"\nRequests to osmem-server on loopback, SigV4 for aoss ({args.requests} each; p50 / p95 ms)\n")
        kinds = list(next(iter(rows.values())))
        print("| client | " + " | ".join(kinds) + " |\n|---|" + "---|" * len(kinds))
        names = {"httpx": "httpx + botocore signer (today)", "urllib3": f"opensearch-py {versions[0]} urllib3"}
        names["requests"] = f"opensearch-py {versions[0]} requests"
        for client, row in rows.items():
            cells = [f"{row[k][0] * 1000:.2f} / {row[k][1] * 1000:.2f}" for k in kinds]
            print(f"| {names[client]} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
