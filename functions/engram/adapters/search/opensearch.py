"""``SearchIndex`` on an OpenSearch Serverless VECTORSEARCH collection (the AWS deployment's mirror).

Serverless vector collections differ from a cluster, and the adapter is shaped by that:

- Requests are SigV4-signed for service ``aoss`` (botocore's signer over the httpx transport; opensearch-py
  was measured and not taken: docs/aws.md, "The OpenSearch client"). A throttled request (429) is
  retried twice with a short backoff, as opensearch-py's transport would, then reported.
- Documents cannot be written under a chosen ``_id`` and cannot be upserted: each write creates a new
  document, whose ``_id`` ``upsert`` returns for the store to keep (``Memory.index_ref``); the memory
  id is a field. Replacing a memory deletes its earlier documents by ``_id`` first.
- There is no refresh and a write takes ~60 s to become searchable: recall merges recent rows from
  the store, and searches drop repeated memory ids (an older copy not yet deleted).
- kNN uses the faiss HNSW engine with inner product on unit vectors, so scores map back to cosine.
- The index is created by the app at first use (the deployer role needs no data access); its mapping
  ``_meta`` records the embedding model and dimension. Resetting to another model recreates it:
  keyword documents go too, so that reset must be followed by a reindex from the store.

Keyword search indexes ``engram.domain.text.tokenize`` tokens with the whitespace analyzer, so
CJK text and stemming behave exactly as in the local index.
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
from collections.abc import Sequence
from typing import Any
from urllib.parse import urlsplit

import httpx

from engram.adapters.tls import tls_context
from engram.domain.errors import InvalidInput, UpstreamRateLimited, UpstreamRejected, UpstreamUnavailable
from engram.domain.models import IndexedDoc, IndexInfo, SearchHit
from engram.domain.once import Once
from engram.domain.text import tokenize

SERVICE = "aoss"
MAX_QUERY_TERMS = 128
RETRIES_ON_429 = 2
HNSW = {
    "name": "hnsw",
    "engine": "faiss",
    "space_type": "innerproduct",
    "parameters": {"m": 16, "ef_construction": 128},
}


def _inner_product_to_cosine(score: float) -> float:
    """Undo OpenSearch's score translation for faiss inner product (vectors are unit length)."""
    cosine = score - 1.0 if score >= 1.0 else 1.0 - 1.0 / score if score > 0 else -1.0
    return max(-1.0, min(1.0, cosine))


def _credential_chain() -> Any:
    import botocore.session

    credentials = botocore.session.get_session().get_credentials()
    if credentials is None:
        raise UpstreamRejected("no AWS credentials to sign OpenSearch requests", status=502)
    return credentials


class SigV4Signer:
    """Signs httpx requests with botocore's SigV4 for one service and region."""

    def __init__(self, region: str, credentials: Any | None = None, service: str = SERVICE) -> None:
        self.region = region
        self.service = service
        # The credential chain is looked up by the first request (once, whichever thread signs first), never
        # when the index is built; none found is an error of that request, and the next one looks again.
        self._credentials: Once[Any] = Once(_credential_chain) if credentials is None else Once.of(credentials)

    def _frozen(self) -> Any:
        credentials = self._credentials.get()
        get_frozen = getattr(credentials, "get_frozen_credentials", None)
        return get_frozen() if callable(get_frozen) else credentials

    def sign(self, request: httpx.Request) -> None:
        from botocore.auth import SigV4Auth
        from botocore.awsrequest import AWSRequest

        body = request.content or b""
        # aoss needs the payload hash as a signed header.
        request.headers["x-amz-content-sha256"] = hashlib.sha256(body).hexdigest()
        headers = {k: v for k, v in request.headers.items() if k.lower() not in ("connection", "user-agent")}
        aws_request = AWSRequest(method=request.method, url=str(request.url), data=body, headers=headers)
        SigV4Auth(self._frozen(), self.service, self.region).add_auth(aws_request)
        for name in ("Authorization", "X-Amz-Date", "X-Amz-Security-Token"):
            if name in aws_request.headers:
                request.headers[name] = aws_request.headers[name]


class OpenSearchIndex:
    """The ``SearchIndex`` port on OpenSearch Serverless (or any OpenSearch with ``refresh=False``).

    ``http_client`` is an ``httpx.Client`` (tests pass one with a recording transport); ``signer``
    signs each request (``None`` sends unsigned requests, for a local OpenSearch).
    """

    def __init__(
        self,
        endpoint: str,
        index: str = "engram-memories",
        *,
        region: str | None = None,
        signer: SigV4Signer | None = None,
        http_client: httpx.Client | None = None,
        sign: bool = True,
        timeout: float = 10.0,
        retry_backoff: float = 0.1,
    ) -> None:
        if not endpoint:
            raise InvalidInput("OpenSearchIndex needs the collection endpoint (ENGRAM_OPENSEARCH_ENDPOINT)")
        endpoint = endpoint.rstrip("/")
        if signer is None and sign:
            signer = SigV4Signer(region or _region_from_endpoint(endpoint))
        self._signer = signer
        # The HTTP client is built by the first index call (``_client``), not here: its TLS context (the CA
        # bundle, ~40 ms of CPU the first time in a process) and httpx's transport (~25 ms) are init work of
        # every function that builds the index, and many cold starts never call it (docs/aws.md, "Cold
        # starts"). The signer reads the credentials and imports botocore's SigV4 on its first request.
        self._http: Once[httpx.Client] = Once(self._new_client) if http_client is None else Once.of(http_client)
        self._timeout = timeout
        self._endpoint = endpoint
        self._retry_backoff = retry_backoff
        self._index = index
        self._lock = threading.Lock()
        self._ready = False  # the index is known to exist
        self._model_id: str | None = None
        self._dimension: int | None = None
        self._meta_loaded = False
        # Documents this process wrote, per (namespace, memory id): deleted on the next upsert even
        # before a search could find them.
        self._recent: dict[tuple[str, str], list[str]] = {}

    # -- HTTP ---------------------------------------------------------------------------------
    def _request(self, method: str, path: str, body: Any = None, *, ok: tuple[int, ...] = ()) -> httpx.Response:
        content = b"" if body is None else json.dumps(body, ensure_ascii=False).encode()
        headers = {"content-type": "application/json"} if body is not None else {}
        for attempt in range(RETRIES_ON_429 + 1):
            response = self._send(method, path, content, headers)
            if response.status_code != 429 or attempt == RETRIES_ON_429:
                break
            time.sleep(self._retry_backoff * 2**attempt)  # signed anew on the next attempt (x-amz-date)
        if response.status_code < 300 or response.status_code in ok:
            return response
        reason = _reason(response)
        if response.status_code == 429:
            raise UpstreamRateLimited(f"OpenSearch throttled {method} {path}")
        if response.status_code >= 500:
            raise UpstreamUnavailable(f"OpenSearch {method} {path}: {response.status_code} {reason}")
        if response.status_code == 400:
            raise InvalidInput(f"OpenSearch rejected {method} {path}: {reason}")
        if response.status_code == 403:  # the role lacks a data access grant: 403, as adapters/aws_errors.py
            raise UpstreamRejected(f"OpenSearch {method} {path}: access denied: {reason}", status=403)
        raise UpstreamRejected(
            f"OpenSearch {method} {path}: {response.status_code} {reason}", status=502, body=response.content
        )

    def _new_client(self) -> httpx.Client:
        # The process's one TLS context: a client of its own would load the CA bundle again (adapters/tls.py).
        return httpx.Client(timeout=self._timeout, verify=tls_context())

    def _send(self, method: str, path: str, content: bytes, headers: dict[str, str]) -> httpx.Response:
        http = self._http.get()  # built by the first call; after close, as a closed httpx client, refuses
        request = http.build_request(method, f"{self._endpoint}{path}", content=content, headers=headers)
        if self._signer is not None:
            self._signer.sign(request)
        try:
            return http.send(request)
        except httpx.TimeoutException as exc:
            raise UpstreamUnavailable(f"OpenSearch {method} {path} timed out") from exc
        except httpx.HTTPError as exc:
            raise UpstreamUnavailable(f"OpenSearch {method} {path} failed: {type(exc).__name__}") from exc

    # -- index lifecycle ----------------------------------------------------------------------
    def _mapping(self, model_id: str | None, dimension: int | None) -> dict[str, Any]:
        properties: dict[str, Any] = {
            "memory_id": {"type": "keyword"},
            "namespace": {"type": "keyword"},
            "type": {"type": "keyword"},
            "terms": {"type": "text", "analyzer": "whitespace"},
            "text": {"type": "text", "index": False},
            "importance": {"type": "float"},
            "pinned": {"type": "boolean"},
            "created_at": {"type": "date"},
        }
        if dimension:
            properties["vector"] = {"type": "knn_vector", "dimension": dimension, "method": HNSW}
        return {
            "settings": {"index": {"knn": True}},
            "mappings": {"_meta": {"model_id": model_id, "dimension": dimension}, "properties": properties},
        }

    def _load_meta(self) -> bool:
        """Read the recorded model from the mapping; ``False`` if the index does not exist."""
        response = self._request("GET", f"/{self._index}/_mapping", ok=(404,))
        if response.status_code == 404:
            self._ready, self._meta_loaded = False, True
            return False
        found: dict[str, dict[str, Any]] = response.json()
        mappings = next(iter(found.values()), {}).get("mappings", {})
        meta = mappings.get("_meta") or {}
        self._model_id = meta.get("model_id")
        self._dimension = meta.get("dimension")
        self._ready = self._meta_loaded = True
        return True

    def _ensure_index(self) -> None:
        with self._lock:
            if self._ready:
                return
            if not self._meta_loaded and self._load_meta():
                return
            self._create(self._model_id, self._dimension)

    def _create(self, model_id: str | None, dimension: int | None) -> None:
        response = self._request("PUT", f"/{self._index}", self._mapping(model_id, dimension), ok=(400,))
        if response.status_code == 400 and "already_exists" not in response.text:
            raise InvalidInput(f"OpenSearch refused to create index {self._index}: {_reason(response)}")
        self._model_id, self._dimension = model_id, dimension
        self._ready = self._meta_loaded = True

    # -- port ---------------------------------------------------------------------------------
    def upsert(self, doc: IndexedDoc) -> str:
        self._ensure_index()
        body: dict[str, Any] = {
            "memory_id": doc.memory_id,
            "namespace": doc.namespace,
            "type": doc.type,
            "text": doc.text,
            "terms": " ".join(tokenize(doc.text)),
            "importance": doc.importance,
            "pinned": doc.pinned,
            "created_at": doc.created_at.isoformat(),
        }
        if doc.vector is not None:
            if self._dimension is None:
                raise InvalidInput("the index has no embedding model recorded; reset it first", code="no_model")
            if len(doc.vector) != self._dimension:
                raise InvalidInput(
                    f"vector has {len(doc.vector)} dimensions; the index holds {self._dimension}",
                    code="dimension_mismatch",
                )
            body["vector"] = list(doc.vector)
        old = self._document_ids(doc.namespace, doc.memory_id)
        response = self._request("POST", f"/{self._index}/_doc", body)
        ref = str(response.json()["_id"])
        for stale in old:
            self._request("DELETE", f"/{self._index}/_doc/{stale}", ok=(404,))
        with self._lock:
            self._recent[(doc.namespace, doc.memory_id)] = [ref]
        return ref

    def upsert_many(self, docs: Sequence[IndexedDoc]) -> None:
        """One by one: each upsert also deletes the memory's older documents it finds (``upsert``)."""
        for doc in docs:
            self.upsert(doc)

    def _document_ids(self, namespace: str, memory_id: str) -> list[str]:
        """Known ``_id``s of a memory: written by this process, or found by a (lagging) search."""
        with self._lock:
            ids = list(self._recent.get((namespace, memory_id), []))
        query = {
            "size": 20,
            "_source": False,
            "query": {"bool": {"filter": [{"term": {"namespace": namespace}}, {"term": {"memory_id": memory_id}}]}},
        }
        for hit in self._search(query):
            if hit["_id"] not in ids:
                ids.append(hit["_id"])
        return ids

    def delete(self, namespace: str, memory_id: str, ref: str | None = None) -> None:
        if not self._ready and not self._load_meta():
            return
        ids = self._document_ids(namespace, memory_id)
        if ref is not None and ref not in ids:
            ids.insert(0, ref)
        for doc_id in ids:
            self._request("DELETE", f"/{self._index}/_doc/{doc_id}", ok=(404,))
        with self._lock:
            self._recent.pop((namespace, memory_id), None)

    def _filters(self, namespace: str, types: Sequence[str]) -> list[dict[str, Any]]:
        filters: list[dict[str, Any]] = [{"term": {"namespace": namespace}}]
        if types:
            filters.append({"terms": {"type": list(types)}})
        return filters

    def _search(self, body: dict[str, Any]) -> list[dict[str, Any]]:
        response = self._request("POST", f"/{self._index}/_search", body, ok=(404,))
        if response.status_code == 404:
            return []
        return list(response.json().get("hits", {}).get("hits", []))

    @staticmethod
    def _hits(raw: list[dict[str, Any]], k: int, score: Any = float) -> list[SearchHit]:
        hits: list[SearchHit] = []
        seen: set[str] = set()
        for hit in raw:
            memory_id = (hit.get("_source") or {}).get("memory_id")
            if not memory_id or memory_id in seen:
                continue
            seen.add(memory_id)
            hits.append(SearchHit(memory_id=memory_id, score=score(hit.get("_score") or 0.0)))
            if len(hits) >= k:
                break
        return hits

    def keyword_search(self, namespace: str, query: str, *, k: int = 50, types: Sequence[str] = ()) -> list[SearchHit]:
        terms = list(dict.fromkeys(tokenize(query)))[:MAX_QUERY_TERMS]
        if not terms or k <= 0:
            return []
        body = {
            "size": k * 2,  # room for duplicates of a memory not yet cleaned up
            "_source": ["memory_id"],
            "query": {
                "bool": {
                    "must": [{"match": {"terms": {"query": " ".join(terms), "operator": "or"}}}],
                    "filter": self._filters(namespace, types),
                }
            },
        }
        return [h for h in self._hits(self._search(body), k) if h.score > 0]

    def vector_search(
        self, namespace: str, vector: Sequence[float], *, k: int = 50, types: Sequence[str] = ()
    ) -> list[SearchHit]:
        if k <= 0:
            return []
        if not self._meta_loaded:
            self._load_meta()
        if self._dimension is None:
            return []
        if len(vector) != self._dimension:
            raise InvalidInput(
                f"query vector has {len(vector)} dimensions; the index holds {self._dimension}",
                code="dimension_mismatch",
            )
        body = {
            "size": k * 2,
            "_source": ["memory_id"],
            "query": {
                "knn": {
                    "vector": {
                        "vector": list(vector),
                        "k": k * 2,
                        "filter": {"bool": {"filter": self._filters(namespace, types)}},
                    }
                }
            },
        }
        return self._hits(self._search(body), k, _inner_product_to_cosine)

    def info(self, namespace: str | None = None) -> IndexInfo:
        if not self._load_meta():
            return IndexInfo()
        scope = [] if namespace is None else self._filters(namespace, ())
        documents = self._count({"bool": {"filter": scope}} if scope else {"match_all": {}})
        has_vector = [*scope, {"exists": {"field": "vector"}}]
        vectors = self._count({"bool": {"filter": has_vector}}) if self._dimension else 0
        return IndexInfo(model_id=self._model_id, dimension=self._dimension, documents=documents, vectors=vectors)

    def _count(self, query: dict[str, Any]) -> int:
        response = self._request("POST", f"/{self._index}/_count", {"query": query}, ok=(404,))
        return int(response.json().get("count", 0)) if response.status_code != 404 else 0

    def reset(self, model_id: str, dimension: int) -> None:
        """Record ``model_id``/``dimension``. No index: create it. An index without vectors yet: add the
        vector field in place (keyword documents stay). The same model already: nothing (two cold starts
        may both get here). Another model: drop and recreate, so every document must be reindexed."""
        if dimension <= 0:
            raise InvalidInput("dimension must be positive")
        with self._lock:
            exists = self._load_meta()
            if exists and (self._model_id, self._dimension) == (model_id, dimension):
                return
            if exists and self._dimension is None:
                mapping = self._mapping(model_id, dimension)["mappings"]
                body = {"_meta": mapping["_meta"], "properties": {"vector": mapping["properties"]["vector"]}}
                self._request("PUT", f"/{self._index}/_mapping", body)
                self._model_id, self._dimension = model_id, dimension
                return
            if exists:
                self._request("DELETE", f"/{self._index}", ok=(404,))
            self._recent.clear()
            self._create(model_id, dimension)

    def ping(self) -> None:
        self._request("GET", f"/{self._index}/_mapping", ok=(404,))

    def close(self) -> None:
        client = self._http.seal("the OpenSearch index is closed")
        if client is not None:  # never built: nothing to close
            client.close()


def _region_from_endpoint(endpoint: str) -> str:
    """``https://<id>.<region>.aoss.amazonaws.com`` -> ``<region>``."""
    host = urlsplit(endpoint).hostname or ""
    parts = host.split(".")
    if len(parts) >= 4 and parts[2] == SERVICE:
        return parts[1]
    raise InvalidInput(f"cannot tell the region from {endpoint!r}; set ENGRAM_AWS_REGION")


def _reason(response: httpx.Response) -> str:
    try:
        error = response.json().get("error")
    except ValueError:
        return response.text[:200]
    if isinstance(error, dict):
        return str(error.get("reason") or error.get("type") or error)[:200]
    return str(error)[:200]
