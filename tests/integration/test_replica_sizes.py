"""The replica at the sizes the README names (bench/replica.py, 1024-dim like Titan v2): hydrate and
snapshot of 50k and 100k memories fit what infra/replica_sizing.py gives the functions. Slow: minutes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
@pytest.mark.parametrize("size", [50_000, 100_000])
def test_hydrate_and_snapshot_fit_the_sized_function(size: int) -> None:
    from infra.replica_sizing import ephemeral_mb, index_bytes, memory_mb

    env = {**os.environ, "ENGRAM_BENCH_DIM": "1024"}
    script = ROOT / "bench" / "replica.py"
    with tempfile.TemporaryDirectory(prefix="engram-replica-size-") as tmp:
        work = Path(tmp)
        fill = (
            "import sys; sys.argv=['x']; from pathlib import Path; import bench.replica as b;"
            f"from engram.adapters.search.replica_log import SqliteSearchLog; t,v=b.corpus({size},{size});"
            f"log=SqliteSearchLog(Path({str(work)!r})/'log.sqlite3'); b.fill(log,t,v,'m',history=True); log.close()"
        )
        subprocess.run(
            [sys.executable, "-c", fill], env={**env, "PYTHONPATH": f"{ROOT}:{ROOT / 'functions'}"}, check=True
        )
        out = {}
        for mode in ("full", "snapshot-write"):
            cmd = [sys.executable, str(script), "--child", "--work", str(work), "--mode", mode, "--queries", "0"]
            done = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True)
            out[mode] = json.loads(done.stdout.strip().splitlines()[-1])
    index_mb = index_bytes(size, 1024) / 1e6
    measured = {k: v for mode in out.values() for k, v in mode.items() if isinstance(v, int | float)}
    sized = {"index_mb": round(index_mb), "memory_mb": memory_mb(size, 1024), "tmp_mb": ephemeral_mb(size, 1024)}
    print(f"replica size {size}: {json.dumps({**measured, **sized})}")  # the numbers bench/README.md records
    # Then the snapshot streams: writing it adds far less than the index to the process
    assert out["snapshot-write"]["snapshot_peak_mb"] < 0.5 * index_mb
    # And the process and its /tmp (index + snapshot copy) fit what the stack gives a function for this size
    assert out["full"]["rss_mb"] < memory_mb(size, 1024)
    assert 2 * out["snapshot-write"]["snapshot_mb"] < ephemeral_mb(size, 1024)
