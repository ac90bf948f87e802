"""A scripted OpenAI-compatible embeddings server on loopback (tests only), which also answers
Bedrock's ``InvokeModel`` for Titan Text Embeddings v2 (``POST /model/<id>/invoke``), so a process
whose boto3 ``bedrock-runtime`` client points here (``AWS_ENDPOINT_URL_BEDROCK_RUNTIME``) embeds
without AWS. Requests are not authenticated (boto3 signs them; nothing checks the signature).

Vectors are deterministic: a hashed bag of the text's search tokens, L2-normalized, so texts that
share words get similar vectors. Script failures with ``fail_next`` (status codes such as 500 or
429) and ``slow_next`` (sleep before answering).

    with FakeEmbeddingsServer(dimension=64) as server:
        OpenAIEmbedder(server.base_url, "key", "fake-embed")
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import re
import threading
import time
from collections import deque
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import unquote

from engram.domain.text import tokenize

TITAN_INVOKE = re.compile(r"^/model/([^/]+)/invoke$")


def fake_vector(text: str, dimension: int) -> list[float]:
    vec = [0.0] * dimension
    tokens = tokenize(text) or [text]
    for token in tokens:
        digest = hashlib.sha256(token.encode("utf-8")).digest()
        slot = int.from_bytes(digest[:4], "big") % dimension
        vec[slot] += 1.0 if digest[4] % 2 else -1.0
    norm = math.sqrt(sum(x * x for x in vec)) or 1.0
    return [x / norm for x in vec]


class FakeEmbeddingsServer:
    def __init__(self, dimension: int = 64, api_key: str | None = None) -> None:
        self.dimension = dimension
        self.api_key = api_key
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
            self._script.extend([("sleep", seconds)] * times)

    def _next_action(self) -> tuple[str, float] | None:
        with self._lock:
            return self._script.popleft() if self._script else None

    # -- lifecycle ------------------------------------------------------------------------
    @property
    def base_url(self) -> str:
        return f"{self.root_url}/v1"

    @property
    def root_url(self) -> str:
        """Without ``/v1``: the endpoint URL for boto3's ``bedrock-runtime`` client."""
        assert self._server is not None
        return f"http://127.0.0.1:{self._server.server_port}"

    def start(self) -> FakeEmbeddingsServer:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                return None

            def _titan(self, model_id: str, raw: bytes) -> None:
                body = json.loads(raw)
                fake.requests.append({"model": model_id, **body})
                text = str(body.get("inputText") or "")
                dim = int(body.get("dimensions") or 1024)
                self._send(200, {"embedding": fake_vector(text, dim), "inputTextTokenCount": len(tokenize(text))})

            def _send(self, status: int, payload: dict[str, Any]) -> None:
                body = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                    self.wfile.write(body)

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length)
                titan = TITAN_INVOKE.match(self.path)
                if titan is not None:
                    self._titan(unquote(titan.group(1)), raw)
                    return
                if self.path.rstrip("/") != "/v1/embeddings":
                    self._send(404, {"error": {"message": "not found"}})
                    return
                if fake.api_key and self.headers.get("Authorization") != f"Bearer {fake.api_key}":
                    self._send(401, {"error": {"message": "bad key", "type": "invalid_request_error"}})
                    return
                try:
                    body = json.loads(raw)
                except ValueError:
                    self._send(400, {"error": {"message": "invalid json"}})
                    return
                fake.requests.append(body)
                action = fake._next_action()
                if action is not None:
                    kind, value = action
                    if kind == "status":
                        self._send(int(value), {"error": {"message": f"scripted {int(value)}"}})
                        return
                    time.sleep(value)
                inputs = body.get("input")
                texts = [inputs] if isinstance(inputs, str) else list(inputs or [])
                dim = int(body.get("dimensions") or fake.dimension)
                data = [
                    {"object": "embedding", "index": i, "embedding": fake_vector(t, dim)} for i, t in enumerate(texts)
                ]
                # Answer out of order: clients must sort by "index".
                data.reverse()
                self._send(
                    200,
                    {"object": "list", "data": data, "model": body.get("model"), "usage": {"prompt_tokens": 0}},
                )

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def __enter__(self) -> FakeEmbeddingsServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
