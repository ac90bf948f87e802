"""The Reranker contract: the ``/v1/rerank`` client against a fake rerank server on loopback, and Bedrock's
Rerank API under botocore's Stubber. Each adapter returns one score in [0, 1] per document, in the
documents' order, and turns a provider failure into an ``Upstream*`` error (recall then fails open)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any, Protocol

import pytest
from engram.adapters.llm.rerank_http import HttpReranker, as_probabilities, rerank_url
from engram.domain.errors import InvalidInput, UpstreamRejected, UpstreamTimeout, UpstreamUnavailable
from engram.domain.ports import Reranker

from tests.fakes.rerank_server import FakeRerankServer, fake_score

QUERY = "which code editor does the user use"
DOCS = ["The user moved from Helix to the Zed code editor", "The user's bike is a blue Brompton", "", "user"]


class Harness(Protocol):
    reranker: Reranker

    def expect(self, query: str, documents: list[str]) -> None: ...

    def fail_next(self) -> None: ...


class HttpHarness:
    def __init__(self, server: FakeRerankServer) -> None:
        self.server = server
        self.reranker: Reranker = HttpReranker(server.base_url, "bge-reranker-v2-m3", "rk-test", timeout_s=2.0)

    def expect(self, query: str, documents: list[str]) -> None:
        return  # the fake server scores whatever it is sent

    def fail_next(self) -> None:
        self.server.fail_next(503)


class BedrockHarness:
    def __init__(self) -> None:
        boto3 = pytest.importorskip("boto3")
        from botocore.stub import ANY, Stubber
        from engram.adapters.llm.bedrock import BedrockReranker

        self.any = ANY
        self.client = boto3.client(
            "bedrock-agent-runtime", region_name="us-west-2", aws_access_key_id="x", aws_secret_access_key="x"
        )
        self.stub = Stubber(self.client)
        self.stub.activate()
        self.reranker: Reranker = BedrockReranker("cohere.rerank-v3-5:0", region="us-west-2", client=self.client)

    def expect(self, query: str, documents: list[str]) -> None:
        if not documents:
            return
        scores = [fake_score(query, d) for d in documents]
        order = sorted(range(len(documents)), key=lambda i: -scores[i])
        results = [{"index": i, "relevanceScore": scores[i]} for i in order]
        self.stub.add_response(
            "rerank",
            {"results": results},
            {"queries": self.any, "sources": self.any, "rerankingConfiguration": self.any},
        )

    def fail_next(self) -> None:
        self.stub.add_client_error("rerank", service_error_code="ServiceUnavailableException", http_status_code=503)


@pytest.fixture(scope="module")
def server() -> Iterator[FakeRerankServer]:
    with FakeRerankServer(api_key="rk-test") as fake:
        yield fake


@pytest.fixture(params=["http", "bedrock"])
def harness(request: pytest.FixtureRequest, server: FakeRerankServer) -> Iterator[Harness]:
    if request.param == "http":
        yield HttpHarness(server)
    else:
        bedrock = BedrockHarness()
        yield bedrock
        bedrock.stub.deactivate()


def test_adapter_satisfies_the_port(harness: Harness) -> None:
    assert isinstance(harness.reranker, Reranker)


def test_one_score_per_document_in_document_order(harness: Harness) -> None:
    # Given four documents, one of which repeats the question's words and one empty
    harness.expect(QUERY, DOCS)
    # When reranked
    scores = harness.reranker.rerank(QUERY, DOCS)
    # Then one score in [0, 1] per document, in the documents' order (not the server's ranking order)
    assert len(scores) == len(DOCS)
    assert all(0.0 <= s <= 1.0 for s in scores)
    assert scores == pytest.approx([fake_score(QUERY, d) for d in DOCS], abs=1e-6)
    assert scores[0] == max(scores)


def test_no_documents_is_no_call(harness: Harness) -> None:
    assert harness.reranker.rerank(QUERY, []) == []


def test_a_provider_failure_is_an_upstream_error(harness: Harness) -> None:
    # Given a provider that fails the next call
    harness.fail_next()
    # When reranking / Then an Upstream* error (recall catches it and keeps the fused order)
    with pytest.raises(UpstreamUnavailable):
        harness.reranker.rerank(QUERY, DOCS)


def test_too_many_documents_are_refused(harness: Harness) -> None:
    with pytest.raises(InvalidInput):
        harness.reranker.rerank(QUERY, ["x"] * 1001)


# -- the /v1/rerank client's own edges ------------------------------------------------------------


def test_request_has_the_cohere_jina_shape_and_the_key(server: FakeRerankServer) -> None:
    reranker = HttpReranker(server.base_url + "/v1", "bge-reranker-v2-m3", "rk-test")
    reranker.rerank("tea or coffee", ["likes tea", " "])
    sent = server.requests[-1]
    assert sent == {
        "model": "bge-reranker-v2-m3",
        "query": "tea or coffee",
        "documents": ["likes tea", " "],
        "top_n": 2,
        "return_documents": False,
    }


def test_a_wrong_key_is_rejected_not_retried(server: FakeRerankServer) -> None:
    reranker = HttpReranker(server.base_url, "m", "wrong-key")
    with pytest.raises(UpstreamRejected) as info:
        reranker.rerank(QUERY, DOCS)
    assert info.value.status == 401


def test_the_deadline_covers_the_whole_call(server: FakeRerankServer) -> None:
    # Given a server that answers after 1.5 s and a deadline of 0.3 s
    server.slow_next(1.5)
    reranker = HttpReranker(server.base_url, "m", "rk-test", timeout_s=0.3)
    started = time.perf_counter()
    # When reranking / Then it gives up at the deadline
    with pytest.raises(UpstreamTimeout):
        reranker.rerank(QUERY, DOCS)
    assert time.perf_counter() - started < 1.2


def test_a_malformed_answer_is_rejected(server: FakeRerankServer) -> None:
    server.malformed_next()
    with pytest.raises(UpstreamRejected):
        HttpReranker(server.base_url, "m", "rk-test").rerank(QUERY, DOCS)


def test_raw_logits_are_read_as_probabilities() -> None:
    # Given a server answering raw cross-encoder logits (llama.cpp-style)
    with FakeRerankServer(logits=True) as raw:
        scores = HttpReranker(raw.base_url, "m").rerank(QUERY, DOCS)
    # Then every score is in [0, 1] and the order is kept
    assert all(0.0 < s < 1.0 for s in scores)
    assert scores[0] == max(scores) and scores[0] > 0.5 > scores[1]
    assert as_probabilities([0.2, 0.9]) == [0.2, 0.9]


def test_the_url_may_be_the_endpoint_or_a_base() -> None:
    assert rerank_url("http://h:8080") == "http://h:8080/v1/rerank"
    assert rerank_url("http://h:8080/v1/") == "http://h:8080/v1/rerank"
    assert rerank_url("https://api.jina.ai/v1/rerank") == "https://api.jina.ai/v1/rerank"
    with pytest.raises(InvalidInput):
        rerank_url(" ")


def test_bedrock_reads_within_the_deadline() -> None:
    pytest.importorskip("boto3")
    from engram.adapters.llm.bedrock import BedrockReranker

    reranker = BedrockReranker("cohere.rerank-v3-5:0", region="us-west-2", timeout_s=2.0)
    config: Any = reranker._client.meta.config
    assert config.read_timeout == 2
