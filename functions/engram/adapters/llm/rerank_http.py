"""A ``Reranker`` over any ``/v1/rerank``-compatible endpoint (the Cohere / Jina request and response shape
that hosted providers and local servers expose for bge-reranker-v2-m3 and similar; docs/recall.md,
"A reranker").

    POST {url}  {"model": ..., "query": ..., "documents": [...], "top_n": N, "return_documents": false}
    <- {"results": [{"index": i, "relevance_score": s}, ...]}

``url`` is the endpoint itself, or a base URL to which ``/v1/rerank`` (or ``/rerank`` after a ``/v1``)
is appended. Scores in [0, 1] are kept as they are (Cohere, Jina, most servers); a server that answers
raw logits (any score outside [0, 1]) has all of them mapped through the logistic function, so a score
always reads as a probability. ``timeout_s`` is the deadline of the whole call (connect, send, wait,
read); recall fails open on any error: the fused order and the estimated relevance stay.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any

import httpx

from engram.adapters.llm.http import JsonApiClient, status_error
from engram.domain.errors import InvalidInput, UpstreamRejected, UpstreamTimeout, UpstreamUnavailable

MAX_DOCUMENTS = 1000


def rerank_url(url: str) -> str:
    """The endpoint for a configured URL: itself when it ends in ``/rerank``, else ``/v1/rerank`` under it."""
    base = url.strip().rstrip("/")
    if not base:
        raise InvalidInput("the rerank URL is empty (ENGRAM_RERANK_URL)")
    if base.endswith("/rerank"):
        return base
    return base + ("/rerank" if base.endswith("/v1") else "/v1/rerank")


def as_probabilities(scores: Sequence[float]) -> list[float]:
    """Scores as they are when all lie in [0, 1], else every one through the logistic function."""
    if all(0.0 <= s <= 1.0 for s in scores):
        return list(scores)
    return [1.0 / (1.0 + math.exp(-max(-60.0, min(60.0, s)))) for s in scores]


class HttpReranker:
    def __init__(
        self,
        url: str,
        model: str,
        api_key: str | None = None,
        *,
        timeout_s: float = 2.0,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self._url = rerank_url(url)
        self._model = model
        self._timeout_s = timeout_s
        self._api = JsonApiClient(api_key, timeout_s, transport)
        self._executor: ThreadPoolExecutor | None = None
        self._lock = threading.Lock()

    @property
    def url(self) -> str:
        return self._url

    def close(self) -> None:
        self._api.close()
        with self._lock:
            if self._executor is not None:
                self._executor.shutdown(wait=False, cancel_futures=True)
                self._executor = None

    def rerank(self, query: str, documents: Sequence[str]) -> list[float]:
        """One relevance in [0, 1] per document, in the documents' order (0 for one the server left out)."""
        if not documents:
            return []
        if len(documents) > MAX_DOCUMENTS:
            raise InvalidInput(f"at most {MAX_DOCUMENTS} documents per rerank call")
        body: dict[str, Any] = {
            "query": query,
            "documents": [d if d.strip() else " " for d in documents],
            "top_n": len(documents),
            "return_documents": False,
        }
        if self._model:
            body["model"] = self._model
        # The deadline covers the whole exchange, not each read: the call runs on a helper thread and is
        # abandoned at the deadline (httpx's own per-phase timeout, the same value, ends it soon after).
        pending = self._pool().submit(self._api.get().post, self._url, json=body)
        try:
            resp = pending.result(timeout=self._timeout_s)
        except (httpx.TimeoutException, FutureTimeout) as exc:
            raise UpstreamTimeout(f"rerank request timed out after {self._timeout_s}s") from exc
        except httpx.HTTPError as exc:
            raise UpstreamUnavailable(f"rerank endpoint unreachable: {exc.__class__.__name__}") from exc
        return self._scores(resp, len(documents))

    def _pool(self) -> ThreadPoolExecutor:
        with self._lock:
            if self._executor is None:
                self._executor = ThreadPoolExecutor(max_workers=4, thread_name_prefix="rerank")
            return self._executor

    @staticmethod
    def _scores(resp: httpx.Response, n: int) -> list[float]:
        error = status_error(resp, "rerank endpoint")
        if error is not None:
            raise error
        raw: list[float | None] = [None] * n
        try:
            for item in resp.json()["results"]:
                index = int(item["index"])
                score = float(item["relevance_score"] if "relevance_score" in item else item["score"])
                if 0 <= index < n and not math.isnan(score):
                    raw[index] = score
        except (ValueError, KeyError, TypeError) as exc:
            raise UpstreamRejected("rerank endpoint sent a malformed response", status=502) from exc
        known = as_probabilities([s for s in raw if s is not None])
        it = iter(known)
        return [next(it) if s is not None else 0.0 for s in raw]
