"""`engram serve` starts loading the local index's big namespaces (vectors and keyword postings) on a
helper thread at start, so its first queries do not load them on their own time (search/sqlite.py)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from engram.adapters.search.keyword_cache import KEYWORD_THRESHOLD
from engram.adapters.search.sqlite import PreparedDoc, SqliteSearchIndex
from engram.bootstrap import LOCAL_DB_NAME
from engram.entrypoints import cli


def test_serve_warms_big_namespaces_before_the_first_query(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Given a data dir whose index holds one namespace over the keyword-postings threshold and one under it
    index = SqliteSearchIndex(tmp_path / LOCAL_DB_NAME)
    rng = np.random.default_rng(1)
    vectors = rng.standard_normal((KEYWORD_THRESHOLD, 8)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    words = ["harbour", "crane", "kite", "garden", "piano"]
    index.write_prepared(
        [PreparedDoc("big", f"m{i}", "fact", f"{words[i % 5]} {words[i % 3]} note", v) for i, v in enumerate(vectors)]
    )
    index.write_prepared([PreparedDoc("small", "s1", "fact", "harbour note", vectors[0])])
    index.close()
    monkeypatch.setenv("ENGRAM_EMBEDDER", "none")
    monkeypatch.setenv("ENGRAM_API_KEY", "ek_serve_warm_key_00001")
    seen: dict[str, Any] = {}

    def run(app: Any, **options: Any) -> None:  # uvicorn.run: the server would start serving here
        served = app.state.container.index.inner
        for _ in range(200):
            if "big" in served._keywords and "big" in served._caches:
                break
            time.sleep(0.05)
        seen.update(keywords=set(served._keywords), vectors=set(served._caches))

    import uvicorn

    monkeypatch.setattr(uvicorn, "run", run)
    # When `engram serve` starts
    assert cli.main(["serve", "--data-dir", str(tmp_path), "--port", "8799"]) == 0
    # Then the big namespace's postings and vectors were loaded without any query; the small one waits for one
    assert seen == {"keywords": {"big"}, "vectors": {"big"}}
