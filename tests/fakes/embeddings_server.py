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

import hashlib
import json
import math
import re
import threading
import time
from collections import deque
from collections.abc import Mapping
from email.message import Message
from typing import Any
from urllib.parse import unquote

from engram.domain.text import tokenize

from tests.fakes.loopback import JSON, LoopbackServer

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


class FakeEmbeddingsServer(LoopbackServer):
    def __init__(self, dimension: int = 64, api_key: str | None = None) -> None:
        super().__init__()
        self.dimension = dimension
        self.api_key = api_key
        self.requests: list[dict[str, Any]] = []
        self._script: deque[tuple[str, float]] = deque()
        self._lock = threading.Lock()

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

    @property
    def base_url(self) -> str:
        return f"{self.root_url}/v1"

    # ``root_url`` (LoopbackServer), without ``/v1``: the endpoint URL for boto3's ``bedrock-runtime`` client.

    # -- serving --------------------------------------------------------------------------
    def respond(self, method: str, path: str, headers: Message, body: bytes) -> tuple[int, bytes, Mapping[str, str]]:
        status, payload = self._answer(path, headers, body)
        return status, json.dumps(payload).encode(), JSON

    def _titan(self, model_id: str, raw: bytes) -> dict[str, Any]:
        body = json.loads(raw)
        self.requests.append({"model": model_id, **body})
        text = str(body.get("inputText") or "")
        dim = int(body.get("dimensions") or 1024)
        return {"embedding": fake_vector(text, dim), "inputTextTokenCount": len(tokenize(text))}

    def _answer(self, path: str, headers: Message, raw: bytes) -> tuple[int, dict[str, Any]]:
        titan = TITAN_INVOKE.match(path)
        if titan is not None:
            return 200, self._titan(unquote(titan.group(1)), raw)
        if path.rstrip("/") != "/v1/embeddings":
            return 404, {"error": {"message": "not found"}}
        if self.api_key and headers.get("Authorization") != f"Bearer {self.api_key}":
            return 401, {"error": {"message": "bad key", "type": "invalid_request_error"}}
        try:
            body = json.loads(raw)
        except ValueError:
            return 400, {"error": {"message": "invalid json"}}
        self.requests.append(body)
        action = self._next_action()
        if action is not None:
            kind, value = action
            if kind == "status":
                return int(value), {"error": {"message": f"scripted {int(value)}"}}
            time.sleep(value)
        inputs = body.get("input")
        texts = [inputs] if isinstance(inputs, str) else list(inputs or [])
        dim = int(body.get("dimensions") or self.dimension)
        data = [{"object": "embedding", "index": i, "embedding": fake_vector(t, dim)} for i, t in enumerate(texts)]
        # Answer out of order: clients must sort by "index".
        data.reverse()
        return 200, {"object": "list", "data": data, "model": body.get("model"), "usage": {"prompt_tokens": 0}}
