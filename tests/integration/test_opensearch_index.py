"""``OpenSearchIndex``: request shapes and SigV4 signing on a recording transport, and the non-kNN calls
against a real OpenSearch-compatible server (osmem-server) on loopback."""

from __future__ import annotations

import hashlib
import json
import threading
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from typing import Any

import httpx
import pytest

pytest.importorskip("botocore")

from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials
from engram.adapters.search.opensearch import OpenSearchIndex, SigV4Signer, _inner_product_to_cosine
from engram.adapters.tls import tls_context
from engram.domain.errors import InvalidInput, UpstreamRateLimited, UpstreamRejected, UpstreamUnavailable
from engram.domain.models import IndexedDoc
from engram.domain.ports import SearchIndex
from engram.domain.text import tokenize

ENDPOINT = "https://abc123xyz.us-east-1.aoss.amazonaws.com"
CREDS = Credentials("AKIDEXAMPLE", "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY", "session-token")
T0 = datetime(2025, 1, 1, tzinfo=UTC)


def doc(
    mid: str, text: str, *, ns: str = "a", type_: str = "fact", vector: tuple[float, ...] | None = None
) -> IndexedDoc:
    return IndexedDoc(memory_id=mid, namespace=ns, text=text, type=type_, vector=vector, created_at=T0)


class Recorder:
    """A transport that records every request and answers from a routing function."""

    def __init__(self, route: Callable[[httpx.Request], httpx.Response]) -> None:
        self.requests: list[httpx.Request] = []
        self._route = route

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        return self._route(request)

    def calls(self) -> list[str]:
        return [f"{r.method} {r.url.path}" for r in self.requests]

    def bodies(self, method: str, suffix: str) -> list[dict[str, Any]]:
        return [json.loads(r.content) for r in self.requests if r.method == method and r.url.path.endswith(suffix)]


def serverless(
    dimension: int | None = 3, hits: list[dict[str, Any]] | None = None
) -> Callable[[httpx.Request], httpx.Response]:
    """Answers like a Serverless vector collection that holds an index with ``dimension``."""

    def route(request: httpx.Request) -> httpx.Response:
        path = request.url.path
        if request.method == "GET" and path.endswith("/_mapping"):
            if dimension is None:
                return httpx.Response(404, json={"error": {"type": "index_not_found_exception"}})
            meta = {"model_id": "amazon.titan-embed-text-v2:0", "dimension": dimension}
            return httpx.Response(200, json={"engram-memories": {"mappings": {"_meta": meta}}})
        if request.method == "POST" and path.endswith("/_doc"):
            return httpx.Response(201, json={"_id": "1%3A0%3AgeneratedId", "result": "created"})
        if request.method == "POST" and path.endswith("/_search"):
            return httpx.Response(200, json={"hits": {"hits": hits or []}})
        if request.method == "POST" and path.endswith("/_count"):
            return httpx.Response(200, json={"count": 7})
        return httpx.Response(200, json={"acknowledged": True})

    return route


def make_index(route: Callable[[httpx.Request], httpx.Response]) -> tuple[OpenSearchIndex, Recorder]:
    recorder = Recorder(route)
    client = httpx.Client(transport=httpx.MockTransport(recorder))
    index = OpenSearchIndex(ENDPOINT, signer=SigV4Signer("us-east-1", CREDS), http_client=client, retry_backoff=0)
    return index, recorder


# -- request shapes ----------------------------------------------------------------------------


def test_adapter_satisfies_the_port() -> None:
    index, _ = make_index(serverless())
    assert isinstance(index, SearchIndex)


def test_reset_creates_a_faiss_hnsw_index_with_the_model_in_meta() -> None:
    # Given no index yet
    index, recorder = make_index(serverless(dimension=None))
    # When the bootstrap records the embedding model
    index.reset("amazon.titan-embed-text-v2:0", 1024)
    # Then the index is created with a faiss HNSW knn_vector of that size
    assert recorder.calls() == ["GET /engram-memories/_mapping", "PUT /engram-memories"]
    body = json.loads(recorder.requests[1].content)
    assert body["settings"]["index"]["knn"] is True
    assert body["mappings"]["_meta"] == {"model_id": "amazon.titan-embed-text-v2:0", "dimension": 1024}
    vector = body["mappings"]["properties"]["vector"]
    assert vector["type"] == "knn_vector" and vector["dimension"] == 1024
    assert vector["method"]["engine"] == "faiss" and vector["method"]["name"] == "hnsw"
    assert body["mappings"]["properties"]["memory_id"] == {"type": "keyword"}


def test_upsert_posts_without_id_or_refresh_and_returns_the_generated_id() -> None:
    # Given an index of 3 dimensions holding an older copy of the memory
    old = [{"_id": "old-doc", "_source": {"memory_id": "m1"}}]
    index, recorder = make_index(serverless(hits=old))
    # When the memory is upserted
    ref = index.upsert(doc("m1", "I love hiking", vector=(1.0, 0.0, 0.0)))
    # Then a new document is created (no custom _id, no refresh), the old one deleted by _id
    assert ref == "1%3A0%3AgeneratedId"
    assert recorder.calls() == [
        "GET /engram-memories/_mapping",
        "POST /engram-memories/_search",
        "POST /engram-memories/_doc",
        "DELETE /engram-memories/_doc/old-doc",
    ]
    assert all("refresh" not in str(r.url) for r in recorder.requests)
    lookup = recorder.bodies("POST", "/_search")[0]["query"]["bool"]["filter"]
    assert {"term": {"memory_id": "m1"}} in lookup and {"term": {"namespace": "a"}} in lookup
    written = recorder.bodies("POST", "/_doc")[0]
    assert written["memory_id"] == "m1" and written["namespace"] == "a" and written["vector"] == [1.0, 0.0, 0.0]
    assert written["terms"] == " ".join(tokenize("I love hiking"))


def test_reset_to_the_same_model_keeps_the_index() -> None:
    # Given an index built with Titan at 3 dimensions / When two cold starts reset to the same model
    index, recorder = make_index(serverless(dimension=3))
    index.reset("amazon.titan-embed-text-v2:0", 3)
    # Then nothing is dropped
    assert recorder.calls() == ["GET /engram-memories/_mapping"]


def test_reset_to_another_model_recreates_the_index() -> None:
    index, recorder = make_index(serverless(dimension=3))
    index.reset("cohere.embed-multilingual-v3", 1024)
    assert recorder.calls() == ["GET /engram-memories/_mapping", "DELETE /engram-memories", "PUT /engram-memories"]


def test_upsert_checks_the_dimension_before_writing() -> None:
    index, recorder = make_index(serverless(dimension=3))
    with pytest.raises(InvalidInput):
        index.upsert(doc("m1", "x", vector=(1.0, 0.0)))
    assert not recorder.bodies("POST", "/_doc")


def test_vector_search_is_a_filtered_knn_query_with_cosine_scores() -> None:
    # Given hits with OpenSearch inner-product scores, one memory twice (an old copy)
    hits = [
        {"_id": "d1", "_score": 1.8, "_source": {"memory_id": "m1"}},
        {"_id": "d0", "_score": 1.7, "_source": {"memory_id": "m1"}},
        {"_id": "d2", "_score": 0.5, "_source": {"memory_id": "m2"}},
    ]
    index, recorder = make_index(serverless(hits=hits))
    # When searching by vector for two types
    found = index.vector_search("a", (0.0, 1.0, 0.0), k=5, types=("fact", "event"))
    # Then the query is a knn query with the namespace/type filter, scores become cosine, ids unique
    knn = recorder.bodies("POST", "/_search")[0]["query"]["knn"]["vector"]
    assert knn["vector"] == [0.0, 1.0, 0.0]
    assert knn["filter"]["bool"]["filter"] == [{"term": {"namespace": "a"}}, {"terms": {"type": ["fact", "event"]}}]
    assert [h.memory_id for h in found] == ["m1", "m2"]
    assert found[0].score == pytest.approx(0.8)
    assert found[1].score == pytest.approx(-1.0)


def test_inner_product_scores_map_back_to_cosine() -> None:
    assert _inner_product_to_cosine(2.0) == pytest.approx(1.0)
    assert _inner_product_to_cosine(1.0) == pytest.approx(0.0)
    assert _inner_product_to_cosine(0.5) == pytest.approx(-1.0)
    assert _inner_product_to_cosine(2 / 3) == pytest.approx(-0.5)


def test_delete_by_stored_reference() -> None:
    index, recorder = make_index(serverless())
    index.delete("a", "m1", ref="stored-id")
    assert recorder.calls()[-1] == "DELETE /engram-memories/_doc/stored-id"


def test_info_reads_meta_and_counts() -> None:
    index, _ = make_index(serverless(dimension=3))
    info = index.info()
    assert (info.model_id, info.dimension, info.documents, info.vectors) == ("amazon.titan-embed-text-v2:0", 3, 7, 7)


def test_info_of_one_namespace_counts_only_its_documents() -> None:
    index, recorder = make_index(serverless(dimension=3))
    index.info("alice")
    scope = {"term": {"namespace": "alice"}}
    assert recorder.bodies("POST", "/_count") == [
        {"query": {"bool": {"filter": [scope]}}},
        {"query": {"bool": {"filter": [scope, {"exists": {"field": "vector"}}]}}},
    ]


def test_missing_index_reads_as_empty() -> None:
    index, recorder = make_index(serverless(dimension=None))
    assert index.info().model_id is None
    assert index.vector_search("a", (1.0, 0.0, 0.0)) == []
    index.delete("a", "m1", ref="x")  # nothing to delete, no error
    assert "DELETE /engram-memories/_doc/x" not in recorder.calls()


@pytest.mark.parametrize(
    ("status", "error"),
    [(429, UpstreamRateLimited), (403, UpstreamRejected), (503, UpstreamUnavailable), (400, InvalidInput)],
)
def test_http_errors_become_engram_errors(status: int, error: type[Exception]) -> None:
    index, _ = make_index(lambda request: httpx.Response(status, json={"error": {"reason": "nope"}}))
    with pytest.raises(error):
        index.keyword_search("a", "hiking")


def test_access_denied_is_403_like_every_aws_adapter() -> None:
    # Given a collection whose data access policy does not grant the role
    index, _ = make_index(lambda request: httpx.Response(403, json={"message": "User does not have permissions"}))
    # When it is searched / Then a 403 comes out (the owner can grant it), as adapters/aws_errors.py maps
    with pytest.raises(UpstreamRejected) as denied:
        index.keyword_search("a", "hiking")
    assert denied.value.status == 403


def test_throttled_requests_are_retried_then_reported() -> None:
    # Given a collection that throttles twice, then answers
    answers = iter([429, 429, 200])

    def throttle(request: httpx.Request) -> httpx.Response:
        status = next(answers, 429)
        return httpx.Response(status, json={"hits": {"hits": []}} if status == 200 else {"error": "throttled"})

    index, recorder = make_index(throttle)
    # When it is searched / Then the third attempt answers, each attempt signed
    assert index.keyword_search("a", "hiking") == []
    assert recorder.calls() == ["POST /engram-memories/_search"] * 3
    assert all("authorization" in r.headers for r in recorder.requests)
    # And a collection that keeps throttling is reported as rate limited after three attempts
    recorder.requests.clear()
    with pytest.raises(UpstreamRateLimited):
        index.keyword_search("a", "hiking")
    assert len(recorder.requests) == 3


def test_connection_failure_is_upstream_unavailable() -> None:
    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("refused", request=request)

    index, _ = make_index(refuse)
    with pytest.raises(UpstreamUnavailable):
        index.ping()


def test_region_comes_from_the_endpoint() -> None:
    index = OpenSearchIndex(ENDPOINT, http_client=httpx.Client())
    assert index._signer is not None and index._signer.region == "us-east-1"
    with pytest.raises(InvalidInput):
        OpenSearchIndex("http://localhost:9200")


def test_the_http_client_is_built_by_the_first_call_once(monkeypatch: pytest.MonkeyPatch) -> None:
    # Given an index built as bootstrap builds it (no client given): building it made no HTTP client, so
    # no TLS context (docs/aws.md, "Cold starts")
    made: list[dict[str, Any]] = []
    real_client = httpx.Client
    started = threading.Barrier(8)

    def counted(**kwargs: Any) -> httpx.Client:
        made.append(kwargs)
        time.sleep(0.05)  # a slow build: the other first calls arrive meanwhile
        return real_client(transport=httpx.MockTransport(serverless()))

    monkeypatch.setattr(httpx, "Client", counted)
    index = OpenSearchIndex(ENDPOINT, signer=SigV4Signer("us-east-1", CREDS), timeout=3.0)
    assert made == []
    # When eight threads make the first calls at once
    errors: list[BaseException] = []

    def first_call() -> None:
        started.wait(5)
        try:
            index.ping()
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=first_call) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
    # Then one client was built, with the index's timeout and the process's one TLS context
    assert errors == [] and len(made) == 1
    assert made[0]["timeout"] == 3.0 and made[0]["verify"] is tls_context()
    # And closing it closes that client; a closed index sends nothing
    client = index._http.get()
    index.close()
    assert client.is_closed


def test_an_index_never_called_closes_without_building_a_client(monkeypatch: pytest.MonkeyPatch) -> None:
    made: list[object] = []
    monkeypatch.setattr(httpx, "Client", lambda **kwargs: made.append(kwargs))
    index = OpenSearchIndex(ENDPOINT, signer=SigV4Signer("us-east-1", CREDS))
    index.close()
    assert made == []
    with pytest.raises(RuntimeError, match="closed"):
        index.ping()


# -- SigV4 ------------------------------------------------------------------------------------


def test_requests_are_sigv4_signed_for_aoss() -> None:
    # Given a signed upsert
    index, recorder = make_index(serverless())
    index.upsert(doc("m1", "hello", vector=(1.0, 0.0, 0.0)))
    post = next(r for r in recorder.requests if r.method == "POST" and r.url.path.endswith("/_doc"))
    # Then the request carries the payload hash, the session token and an aoss signature
    assert post.headers["x-amz-content-sha256"] == hashlib.sha256(post.content).hexdigest()
    assert post.headers["x-amz-security-token"] == "session-token"
    authorization = post.headers["authorization"]
    assert authorization.startswith("AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/")
    assert "/us-east-1/aoss/aws4_request" in authorization
    signed = authorization.split("SignedHeaders=")[1].split(",")[0].split(";")
    assert {"host", "x-amz-content-sha256", "x-amz-date", "x-amz-security-token"} <= set(signed)
    # And the signature is the one SigV4 derives from exactly this method, URL, headers and body
    headers = {name: post.headers[name] for name in signed}
    aws_request = AWSRequest(method="POST", url=str(post.url), data=post.content, headers=headers)
    aws_request.context["timestamp"] = post.headers["x-amz-date"]
    auth = SigV4Auth(CREDS.get_frozen_credentials(), "aoss", "us-east-1")
    expected = auth.signature(auth.string_to_sign(aws_request, auth.canonical_request(aws_request)), aws_request)
    assert authorization.endswith(f"Signature={expected}")


def test_a_changed_body_breaks_the_signature() -> None:
    # Given a signed request whose body is swapped afterwards / Then the signature no longer matches
    index, recorder = make_index(serverless())
    index.upsert(doc("m1", "hello"))
    post = next(r for r in recorder.requests if r.method == "POST" and r.url.path.endswith("/_doc"))
    signed = post.headers["authorization"].split("SignedHeaders=")[1].split(",")[0].split(";")
    headers = {name: post.headers[name] for name in signed}
    headers["x-amz-content-sha256"] = hashlib.sha256(b"{}").hexdigest()
    aws_request = AWSRequest(method="POST", url=str(post.url), data=b"{}", headers=headers)
    aws_request.context["timestamp"] = post.headers["x-amz-date"]
    auth = SigV4Auth(CREDS.get_frozen_credentials(), "aoss", "us-east-1")
    forged = auth.signature(auth.string_to_sign(aws_request, auth.canonical_request(aws_request)), aws_request)
    assert not post.headers["authorization"].endswith(f"Signature={forged}")


# -- against osmem-server (an OpenSearch-compatible server without kNN) -------------------------


@pytest.fixture
def live(osmem_base: Any) -> Iterator[OpenSearchIndex]:
    clone = osmem_base.clone()
    index = OpenSearchIndex(clone.url, signer=SigV4Signer("us-east-1", CREDS))
    index.reset("test-model", 3)
    yield index
    index.close()
    clone.close()


def ids(hits: Any) -> list[str]:
    return [h.memory_id for h in hits]


def test_live_keyword_search_stems_and_handles_chinese(live: OpenSearchIndex) -> None:
    # Given English and Chinese memories written without refresh
    live.upsert(doc("m1", "I love hiking in the Alps"))
    live.upsert(doc("m2", "My cat is called Miso"))
    live.upsert(doc("zh", "我对花生过敏"))
    # When searching with another form of the word, and in Chinese
    # Then the same tokenizer as the local index finds them
    assert ids(live.keyword_search("a", "hikes in Switzerland")) == ["m1"]
    assert ids(live.keyword_search("a", "花生")) == ["zh"]
    assert all(h.score > 0 for h in live.keyword_search("a", "cat Miso"))


def test_live_namespaces_types_and_replacement(live: OpenSearchIndex) -> None:
    # Given the same words in two namespaces and two types
    live.upsert(doc("m1", "tea with lemon", type_="preference"))
    live.upsert(doc("m2", "tea at five", type_="event"))
    live.upsert(doc("b1", "tea forever", ns="b"))
    # Then each namespace sees only its own, and types filter
    assert sorted(ids(live.keyword_search("a", "tea"))) == ["m1", "m2"]
    assert ids(live.keyword_search("b", "tea")) == ["b1"]
    assert ids(live.keyword_search("a", "tea", types=("event",))) == ["m2"]
    # When a memory is upserted again with new text / Then only the new text matches, once
    live.upsert(doc("m1", "coffee with milk", type_="preference"))
    assert ids(live.keyword_search("a", "tea")) == ["m2"]
    assert ids(live.keyword_search("a", "coffee")) == ["m1"]
    assert live.info().documents == 3


def test_live_first_model_keeps_keyword_documents(osmem_base: Any) -> None:
    # Given an index created by a keyword-only deployment (no embedder yet)
    clone = osmem_base.clone()
    index = OpenSearchIndex(clone.url, signer=SigV4Signer("us-east-1", CREDS))
    try:
        index.upsert(doc("m1", "remember the milk"))
        assert index.info().model_id is None
        # When an embedding model is recorded for the first time
        index.reset("test-model", 3)
        # Then the keyword documents are still there and the model is recorded
        assert ids(index.keyword_search("a", "milk")) == ["m1"]
        assert (index.info().model_id, index.info().dimension) == ("test-model", 3)
    finally:
        index.close()
        clone.close()


def test_live_delete_by_reference_and_unknown(live: OpenSearchIndex) -> None:
    # Given a memory whose reference the store kept
    ref = live.upsert(doc("m1", "remember the milk"))
    # When it is deleted by that reference, and an unknown one too
    live.delete("a", "m1", ref=ref)
    live.delete("a", "nope", ref="nope")
    # Then it is gone and nothing failed
    assert live.keyword_search("a", "milk") == []
    assert live.info().documents == 0
