"""The real Engram ASGI app under uvicorn on a free loopback port, wired to the fake upstream."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from typing import Any

import pytest
from anthropic.types import TextBlock, ToolUseBlock
from engram.bootstrap import Container, Overrides, build_container
from engram.domain.ports import MemoryStore
from engram.entrypoints.http.app import create_app
from engram.settings import Settings

from tests.fakes.recall import SpyRecall
from tests.fakes.upstream import FakeUpstream
from tests.servers import serve_app

OWNER_KEY = "ek-test-owner-key"
UPSTREAM_KEY = "sk-upstream-secret-0001"
ANTHROPIC_KEY = "sk-ant-secret-0002"


@dataclass
class Gateway:
    url: str
    container: Container
    upstream: FakeUpstream
    recall: SpyRecall
    app: Any = None

    @property
    def store(self) -> MemoryStore:
        return self.container.store

    def wait_for(self, predicate: Callable[[], Any], timeout: float = 3.0) -> Any:
        """Poll until ``predicate()`` is truthy (background writes land after the response)."""
        deadline = time.monotonic() + timeout
        while True:
            value = predicate()
            if value or time.monotonic() > deadline:
                return value
            time.sleep(0.01)


MakeGateway = Callable[..., Gateway]


def block_text(block: object) -> str:
    """The text of an Anthropic SDK content block that must be a text block."""
    assert isinstance(block, TextBlock), block
    return block.text


def block_input(block: object) -> object:
    """The input of an Anthropic SDK content block that must be a tool call."""
    assert isinstance(block, ToolUseBlock), block
    return block.input  # the make_gateway fixture: start_gateway's keyword arguments


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
        # One key sends whole matrices of chats: these tests are about the gateway; the per-key limit has
        # its own (tests/integration/test_rate_limits.py).
        "rate_limit_chat_per_minute": 0,
        "rate_limit_requests_per_minute": 0,
    }
    values.update(overrides)
    return Settings(**values)


@pytest.fixture(scope="module")
def upstream() -> Iterator[FakeUpstream]:
    with FakeUpstream() as up:
        yield up


def start_gateway(
    stack: ExitStack,
    upstream: FakeUpstream,
    *,
    recall_fails: bool = False,
    queue: Any = None,
    bedrock_runtime: Any = None,
    clock: Any = None,
    **overrides: Any,
) -> Gateway:
    """A real gateway (in-memory store and index, keyword recall) against ``upstream``, stopped with ``stack``."""
    from engram.adapters.clock import SystemClock
    from engram.adapters.search.inmemory import InMemorySearchIndex
    from engram.adapters.storage.inmemory import InMemoryMemoryStore

    settings = gateway_settings(upstream, **overrides)
    clock = clock or SystemClock()  # the gateway runs over HTTP on the real clock unless given one; the store shares it
    store, index = InMemoryMemoryStore(clock=clock), InMemorySearchIndex()
    real = build_container(
        settings, Overrides(store=store, index=index, embedder=None, bedrock_runtime=bedrock_runtime, clock=clock)
    ).recall
    spy = SpyRecall(real, fail=recall_fails)
    container = build_container(
        settings,
        Overrides(
            store=store,
            index=index,
            embedder=None,
            recall=spy,
            queue=queue,
            bedrock_runtime=bedrock_runtime,
            clock=clock,
        ),
    )
    stack.callback(container.close)
    app = create_app(container)
    url = stack.enter_context(serve_app(app))
    return Gateway(url, container, upstream, spy, app)


@pytest.fixture
def make_gateway(upstream: FakeUpstream) -> Iterator[MakeGateway]:
    """Start real gateways (in-memory store and index, keyword recall) against the fake upstream."""
    stack = ExitStack()
    upstream.reset()

    def make(**overrides: Any) -> Gateway:
        return start_gateway(stack, upstream, **overrides)

    yield make
    stack.close()
