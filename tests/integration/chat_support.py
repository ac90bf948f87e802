"""The real Engram ASGI app under uvicorn on a free loopback port, wired to the fake upstream."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest
import uvicorn
from engram.bootstrap import Container, build_container
from engram.entrypoints.http.app import create_app
from engram.settings import Settings

from tests.fakes.recall import KeywordRecall
from tests.fakes.upstream import FakeUpstream

OWNER_KEY = "ek-test-owner-key"
UPSTREAM_KEY = "sk-upstream-secret-0001"
ANTHROPIC_KEY = "sk-ant-secret-0002"


class ServerThread:
    def __init__(self, app: Any) -> None:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", 0))
        self.port = sock.getsockname()[1]
        config = uvicorn.Config(app, log_level="warning", access_log=False, lifespan="on", timeout_graceful_shutdown=2)
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [sock]}, daemon=True)
        self.thread.start()
        deadline = time.monotonic() + 10
        while not self.server.started:
            if time.monotonic() > deadline or not self.thread.is_alive():
                raise RuntimeError("server did not start")
            time.sleep(0.005)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=10)


@dataclass
class Gateway:
    url: str
    container: Container
    upstream: FakeUpstream
    recall: KeywordRecall

    @property
    def store(self) -> Any:
        return self.container.store

    def wait_for(self, predicate: Callable[[], Any], timeout: float = 3.0) -> Any:
        """Poll until ``predicate()`` is truthy (background writes land after the response)."""
        deadline = time.monotonic() + timeout
        while True:
            value = predicate()
            if value or time.monotonic() > deadline:
                return value
            time.sleep(0.01)


def gateway_settings(upstream: FakeUpstream, **overrides: Any) -> Settings:
    values: dict[str, Any] = {
        "store": "memory",
        "search": "memory",
        "embedder": "none",
        "api_key": OWNER_KEY,
        "upstream_base_url": upstream.openai_base_url,
        "upstream_api_key": UPSTREAM_KEY,
        "anthropic_base_url": upstream.base_url,
        "anthropic_api_key": ANTHROPIC_KEY,
        "chat_model": "fake-chat",
        "vision_model": "fake-vision",
        "scheduler_enabled": False,
    }
    values.update(overrides)
    return Settings(**values)


@pytest.fixture(scope="module")
def upstream() -> Iterator[FakeUpstream]:
    with FakeUpstream() as up:
        yield up


@pytest.fixture
def make_gateway(upstream: FakeUpstream) -> Iterator[Callable[..., Gateway]]:
    started: list[tuple[ServerThread, Container]] = []
    upstream.reset()

    def make(*, recall_fails: bool = False, queue: Any = None, **overrides: Any) -> Gateway:
        settings = gateway_settings(upstream, **overrides)
        holder: dict[str, KeywordRecall] = {}

        def build() -> Container:
            from engram.adapters.search.inmemory import InMemorySearchIndex
            from engram.adapters.storage.inmemory import InMemoryMemoryStore

            store, index = InMemoryMemoryStore(), InMemorySearchIndex()
            holder["recall"] = KeywordRecall(store, index, fail=recall_fails)
            return build_container(
                settings, store=store, index=index, embedder=None, recall=holder["recall"], queue=queue
            )

        container = build()
        server = ServerThread(create_app(container))
        started.append((server, container))
        return Gateway(server.url, container, upstream, holder["recall"])

    yield make
    for server, container in started:
        server.stop()
        container.close()
