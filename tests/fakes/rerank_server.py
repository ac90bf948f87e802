"""A scripted ``/v1/rerank`` server on loopback (tests only): the Cohere / Jina request and response shape.

Scores are deterministic: the share of the query's search tokens a document contains (so a document
that repeats the question's words ranks first). ``logits=True`` answers ``4 * share - 2`` instead (a
server that returns raw cross-encoder logits). Script failures with ``fail_next`` (status codes),
``slow_next`` (sleep before answering) and ``malformed_next`` (a body without ``results``).

    with FakeRerankServer() as server:
        HttpReranker(server.base_url, "bge-reranker-v2-m3")
"""

from __future__ import annotations

import json
import threading
import time
from collections import deque
from collections.abc import Mapping
from email.message import Message
from typing import Any

from engram.domain.text import tokenize

from tests.fakes.loopback import JSON, LoopbackServer


def fake_score(query: str, document: str) -> float:
    wanted = set(tokenize(query))
    if not wanted:
        return 0.0
    return len(wanted & set(tokenize(document))) / len(wanted)


class FakeRerankServer(LoopbackServer):
    def __init__(self, *, api_key: str | None = None, logits: bool = False, path: str = "/v1/rerank") -> None:
        super().__init__()
        self.api_key = api_key
        self.logits = logits
        self.path = path
        self.requests: list[dict[str, Any]] = []
        self._script: deque[tuple[str, float]] = deque()
        self._lock = threading.Lock()

    # -- scripting ------------------------------------------------------------------------
    def fail_next(self, status: int, times: int = 1) -> None:
        with self._lock:
            self._script.extend([("status", float(status))] * times)

    def slow_next(self, seconds: float, times: int = 1) -> None:
        with self._lock:
            self._script.extend([("slow", seconds)] * times)

    def malformed_next(self) -> None:
        with self._lock:
            self._script.append(("malformed", 0.0))

    def _next(self) -> tuple[str, float] | None:
        with self._lock:
            return self._script.popleft() if self._script else None

    @property
    def base_url(self) -> str:
        return self.root_url

    # -- serving --------------------------------------------------------------------------
    def answer(self, body: dict[str, Any]) -> dict[str, Any]:
        query, documents = str(body["query"]), [str(d) for d in body["documents"]]
        scores = [fake_score(query, d) for d in documents]
        if self.logits:
            scores = [4.0 * s - 2.0 for s in scores]
        order = sorted(range(len(documents)), key=lambda i: -scores[i])[: int(body.get("top_n") or len(documents))]
        return {
            "id": f"rerank-{len(self.requests)}",
            "results": [{"index": i, "relevance_score": scores[i]} for i in order],
            "meta": {"billed_units": {"search_units": 1}},
        }

    def respond(self, method: str, path: str, headers: Message, raw: bytes) -> tuple[int, bytes, Mapping[str, str]]:
        if path != self.path:
            return 404, b'{"message": "not found"}', JSON
        if self.api_key and headers.get("Authorization") != f"Bearer {self.api_key}":
            return 401, b'{"message": "invalid api key"}', JSON
        body = json.loads(raw or b"{}")
        self.requests.append(body)
        step = self._next()
        if step is not None and step[0] == "status":
            return int(step[1]), b'{"message": "scripted failure"}', JSON
        if step is not None and step[0] == "slow":
            time.sleep(step[1])
        if step is not None and step[0] == "malformed":
            return 200, b'{"data": []}', JSON
        return 200, json.dumps(self.answer(body)).encode(), JSON
