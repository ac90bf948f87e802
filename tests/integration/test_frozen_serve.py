"""Nothing after the last byte, seen from outside: an `engram serve` process is frozen (SIGSTOP) the
moment a chat response body ends — as Lambda freezes an environment — and its SQLite file, read
directly while it is stopped, already holds the exchange and the "remember ..." fact. Both doors,
streaming and not (issue 11, docs/aws.md "How Lambda runs it")."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from engram.bootstrap import LOCAL_DB_NAME

from tests.fakes.upstream import FakeUpstream, Reply
from tests.servers import free_port

KEY = "ek_frozen_serve_key_0001"
ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.skipif(not hasattr(signal, "SIGSTOP"), reason="needs POSIX job control signals")


class Serve:
    def __init__(self, process: subprocess.Popen[bytes], url: str, db: Path) -> None:
        self.process, self.url, self.db = process, url, db

    def freeze(self) -> None:
        os.kill(self.process.pid, signal.SIGSTOP)

    def thaw(self) -> None:
        os.kill(self.process.pid, signal.SIGCONT)

    def rows(self, sql: str, *params: object) -> list[tuple[object, ...]]:
        """Read the store's file from this process (the server may be stopped)."""
        with sqlite3.connect(f"file:{self.db}?mode=ro", uri=True, timeout=1) as db:
            return db.execute(sql, params).fetchall()


@pytest.fixture(scope="module")
def upstream() -> Iterator[FakeUpstream]:
    with FakeUpstream(default=Reply(text="Noted, I will keep that in mind.", chunks=4)) as up:
        yield up


@pytest.fixture(scope="module")
def serve(upstream: FakeUpstream, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Serve]:
    data = tmp_path_factory.mktemp("frozen")
    port = free_port()
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(data),
        "PYTHONPATH": os.pathsep.join([str(ROOT / "functions"), str(ROOT)]),
        "ENGRAM_API_KEY": KEY,
        "ENGRAM_EMBEDDER": "none",
        "ENGRAM_SCHEDULER_ENABLED": "false",
        "ENGRAM_UPSTREAM_BASE_URL": upstream.openai_base_url,
        "ENGRAM_UPSTREAM_API_KEY": "sk-upstream-secret-0001",
        "ENGRAM_ANTHROPIC_BASE_URL": upstream.base_url,
        "ENGRAM_ANTHROPIC_API_KEY": "sk-ant-secret-0002",
        "ENGRAM_CHAT_MODEL": "fake-chat",
        "ENGRAM_LOG_LEVEL": "WARNING",
    }
    cmd = [sys.executable, "-m", "engram.entrypoints.cli", "serve", "--port", str(port), "--data-dir", str(data)]
    process = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            assert process.poll() is None, process.stderr.read().decode(errors="replace")[-2000:]  # type: ignore[union-attr]
            try:
                if httpx.get(url + "/health", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, "engram serve did not come up"
            time.sleep(0.1)
        yield Serve(process, url, data / LOCAL_DB_NAME)
    finally:
        os.kill(process.pid, signal.SIGCONT)
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()


DOORS = {
    "openai": ("/v1/chat/completions", {}),
    "anthropic": ("/v1/messages", {"max_tokens": 64}),
}


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
@pytest.mark.parametrize("door", list(DOORS))
def test_a_process_frozen_at_the_last_byte_has_already_stored_everything(serve: Serve, door: str, stream: bool) -> None:
    path, extra = DOORS[door]
    tag = f"{door}-{'stream' if stream else 'whole'}"
    for n in range(3):
        # Given a chat turn (the first asks the gateway to remember a fact) in its own conversation
        said = f"please remember: my locker code for {tag} is {n}{n}{n}-{tag}" if n == 0 else f"hello {tag} #{n}"
        body = {"model": "companion", "stream": stream, "messages": [{"role": "user", "content": said}], **extra}
        headers = {"authorization": f"Bearer {KEY}", "x-engram-conversation": f"{tag}-{n}"}
        # When the response body ends, the process is frozen at once
        with httpx.stream("POST", serve.url + path, json=body, headers=headers, timeout=30) as resp:
            received = b"".join(resp.iter_raw())
            serve.freeze()
        try:
            assert resp.status_code == 200, received[:500]
            if stream:
                assert received.rstrip().endswith(b"data: [DONE]" if door == "openai" else b'{"type":"message_stop"}')
            # Then, read while it is stopped, the store holds the exchange of this turn...
            stored = serve.rows(
                "SELECT role, content FROM messages WHERE conversation_id = ? ORDER BY created_at, role DESC",
                f"{tag}-{n}",
            )
            assert stored == [("user", said), ("assistant", "Noted, I will keep that in mind.")], (tag, n)
            # ...and the remembered fact
            if n == 0:
                facts = serve.rows("SELECT content FROM memories WHERE content LIKE ?", f"%locker code for {tag} %")
                assert facts == [(f"my locker code for {tag} is 000-{tag}",)]
        finally:
            serve.thaw()


def test_usage_is_stored_before_the_last_byte_too(serve: Serve) -> None:
    before = serve.rows("SELECT COUNT(*) FROM usage")[0][0]
    body = {"model": "companion", "stream": True, "messages": [{"role": "user", "content": "count me"}]}
    with httpx.stream(
        "POST", serve.url + "/v1/chat/completions", json=body, headers={"authorization": f"Bearer {KEY}"}, timeout=30
    ) as resp:
        b"".join(resp.iter_raw())
        serve.freeze()
    try:
        assert serve.rows("SELECT COUNT(*) FROM usage")[0][0] == before + 1  # type: ignore[operator]
    finally:
        serve.thaw()


@pytest.mark.parametrize("door", list(DOORS))
def test_a_failed_turn_is_in_the_store_when_the_error_reaches_the_client(
    serve: Serve, upstream: FakeUpstream, door: str
) -> None:
    # Given an upstream that fails the turn
    upstream.script(Reply(status=500, error_body={"error": {"message": "overloaded"}}))
    path, extra = DOORS[door]
    said = f"my train leaves at 7:40 ({door})"
    body = {"model": "companion", "messages": [{"role": "user", "content": said}], **extra}
    # When the error response ends, the process is frozen at once
    with httpx.stream(
        "POST", serve.url + path, json=body, headers={"authorization": f"Bearer {KEY}"}, timeout=30
    ) as resp:
        b"".join(resp.iter_raw())
        serve.freeze()
    try:
        # Then the client got the upstream's status, and the user's turn is stored with the error noted
        assert resp.status_code == 500
        stored = serve.rows("SELECT role, error FROM messages WHERE content = ?", said)
        assert stored == [("user", "upstream_rejected: OpenAI-compatible upstream answered 500")]
    finally:
        serve.thaw()
