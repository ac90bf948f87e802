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
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from engram.domain.text import tokenize


def fake_score(query: str, document: str) -> float:
    wanted = set(tokenize(query))
    if not wanted:
        return 0.0
    return len(wanted & set(tokenize(document))) / len(wanted)


class FakeRerankServer:
    def __init__(self, *, api_key: str | None = None, logits: bool = False, path: str = "/v1/rerank") -> None:
        self.api_key = api_key
        self.logits = logits
        self.path = path
        self.requests: list[dict[str, Any]] = []
        self._script: deque[tuple[str, float]] = deque()
        self._lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

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

    def __enter__(self) -> FakeRerankServer:
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:  # quiet
                return

            def _send(self, status: int, payload: bytes) -> None:
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(payload)))
                    self.end_headers()
                    self.wfile.write(payload)
                except (BrokenPipeError, ConnectionResetError):
                    return  # the client gave up at its deadline

            def do_POST(self) -> None:
                raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                if self.path != server.path:
                    self._send(404, b'{"message": "not found"}')
                    return
                if server.api_key and self.headers.get("Authorization") != f"Bearer {server.api_key}":
                    self._send(401, b'{"message": "invalid api key"}')
                    return
                body = json.loads(raw or b"{}")
                server.requests.append(body)
                step = server._next()
                if step is not None and step[0] == "status":
                    self._send(int(step[1]), b'{"message": "scripted failure"}')
                    return
                if step is not None and step[0] == "slow":
                    time.sleep(step[1])
                if step is not None and step[0] == "malformed":
                    self._send(200, b'{"data": []}')
                    return
                self._send(200, json.dumps(server.answer(body)).encode())

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()

    @property
    def base_url(self) -> str:
        assert self._server is not None
        return f"http://127.0.0.1:{self._server.server_port}"
