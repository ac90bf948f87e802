"""A chat never fails because the search index is asleep or unreachable (docs/aws.md, "Cold starts").

`engram serve` runs in a subprocess with ENGRAM_SEARCH=opensearch pointed at (a) a closed port and
(b) a loopback server that accepts connections but answers only after 20 s (an OpenSearch Serverless
collection waking up). Real: the CLI, uvicorn, the SQLite store, the OpenSearch adapter and its
guard. Faked: the chat model (tests/fakes/upstream.py) and the embedding model
(tests/fakes/embeddings_server.py), so that the embedding-model check against the index runs too.
"""

from __future__ import annotations

import os
import socket
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

import httpx
import pytest

from tests.conftest import OWNER_KEY, write_keys
from tests.fakes.embeddings_server import FakeEmbeddingsServer
from tests.fakes.upstream import FakeUpstream, Reply
from tests.servers import child_process, free_port

pytest.importorskip("botocore")

ROOT = Path(__file__).resolve().parents[2]
SLOW_SECONDS = 20.0


class SlowServer:
    """Accepts connections and reads requests, but answers only after ``delay`` seconds."""

    def __init__(self, delay: float = SLOW_SECONDS) -> None:
        self.delay = delay
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._sock.bind(("127.0.0.1", 0))
        self._sock.listen(64)
        self.port = int(self._sock.getsockname()[1])
        self._stop = threading.Event()
        self.connections = 0

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._sock.accept()
            except OSError:
                return
            self.connections += 1
            threading.Thread(target=self._answer_late, args=(conn,), daemon=True).start()

    def _answer_late(self, conn: socket.socket) -> None:
        with conn:
            conn.settimeout(1.0)
            with suppress(OSError):
                conn.recv(65536)
            if self._stop.wait(self.delay):
                return
            body = b'{"error": "late"}'
            head = f"HTTP/1.1 503 Service Unavailable\r\ncontent-length: {len(body)}\r\n\r\n".encode()
            with suppress(OSError):
                conn.sendall(head + body)

    def __enter__(self) -> SlowServer:
        threading.Thread(target=self._serve, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._sock.close()


@contextmanager
def engram_serve(tmp_path: Path, endpoint: str, upstream: FakeUpstream, embeddings: str) -> Iterator[str]:
    """`engram serve` in a subprocess with the OpenSearch index at ``endpoint``; yields its URL."""
    port = free_port()
    env = {
        **os.environ,
        "PYTHONPATH": f"{ROOT / 'functions'}{os.pathsep}{ROOT}",
        "ENGRAM_SEARCH": "opensearch",
        "ENGRAM_OPENSEARCH_ENDPOINT": endpoint,
        "ENGRAM_AWS_REGION": "us-east-1",
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "ENGRAM_EMBEDDER": "openai",
        "ENGRAM_EMBEDDING_BASE_URL": embeddings,
        "ENGRAM_EMBEDDING_MODEL": "fake-embed-64",
        "ENGRAM_UPSTREAM_BASE_URL": upstream.openai_base_url,
        "ENGRAM_UPSTREAM_API_KEY": "sk-test",
        "ENGRAM_CHAT_MODEL": "fake-model",
        "ENGRAM_SCHEDULER_ENABLED": "false",
        "ENGRAM_KEYS_FILE": str(write_keys(tmp_path / "keys.json")),
        "ENGRAM_DATA_DIR": str(tmp_path),
        "ENGRAM_PORT": str(port),
        "ENGRAM_LOG_LEVEL": "WARNING",
    }
    url = f"http://127.0.0.1:{port}"
    with child_process([sys.executable, "-m", "engram.entrypoints.cli", "serve"], env, f"{url}/health"):
        yield url


def _chat(client: httpx.Client, text: str) -> httpx.Response:
    return client.post(
        "/v1/chat/completions", json={"model": "companion", "messages": [{"role": "user", "content": text}]}
    )


def _closed_port() -> str:
    return f"http://127.0.0.1:{free_port()}"


@pytest.mark.parametrize("index", ["closed_port", "answers_after_20s"])
def test_serve_comes_up_chats_and_keeps_writes_while_the_index_is_away(tmp_path: Path, index: str) -> None:
    with (
        FakeUpstream() as upstream,
        FakeEmbeddingsServer(dimension=64) as embeddings,
        SlowServer() as slow,
    ):
        endpoint = _closed_port() if index == "closed_port" else f"http://127.0.0.1:{slow.port}"
        upstream.script(Reply(text="Hello while the index sleeps."), Reply(text="Still here."))
        # Given `engram serve` whose OpenSearch endpoint does not answer
        with (
            engram_serve(tmp_path, endpoint, upstream, embeddings.base_url) as url,
            httpx.Client(base_url=url, headers={"authorization": f"Bearer {OWNER_KEY}"}, timeout=60) as client,
        ):
            # Then it is ready (it became healthy above) and a REST write succeeds
            written = client.post("/v1/memories", json={"content": "I am allergic to peanuts", "pinned": True})
            assert written.status_code == 201, written.text
            # When a chat comes in
            started = time.monotonic()
            first = _chat(client, "what snacks should I avoid?")
            first_s = time.monotonic() - started
            # Then it answers before the index would have, says why recall had no index, and the
            # boot block (the pinned memory, read from the store) still reached the model
            assert first.status_code == 200, first.text
            assert first.json()["choices"][0]["message"]["content"] == "Hello while the index sleeps."
            assert first.headers["x-engram-reason"] == "index_unavailable"
            assert first_s < SLOW_SECONDS - 5, f"the chat waited {first_s:.1f} s for the index"
            sent = str(upstream.requests[-1].json["messages"])
            assert "allergic to peanuts" in sent
            # And the next chat does not wait on the index at all (it is known to be away)
            second = _chat(client, "and what about drinks?")
            assert second.status_code == 200 and second.headers["x-engram-reason"] == "index_unavailable"
            # And /health stays 200 (readiness) while saying the index is unavailable
            health = httpx.get(f"{url}/health", timeout=5)
            assert health.status_code == 200
            assert health.json()["status"] == "degraded"
            assert health.json()["checks"]["search"]["status"] == "unavailable"
            # And the write is kept in the store, recorded for the index repair
            listed = client.get("/v1/memories").json()["items"]
            assert [m["content"] for m in listed] == ["I am allergic to peanuts"]
            deep = client.get("/v1/admin/health")
            assert deep.status_code == 503
            assert deep.json()["checks"]["index_repair"]["status"] == "pending"
            assert deep.json()["checks"]["store"]["status"] == "ok"
