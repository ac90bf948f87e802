"""Shared fixtures: an Engram server on loopback with owner and limited keys."""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.servers import serve_app

OWNER_KEY = "ek_test_owner_key_0001"
OTHER_KEY = "ek_test_other_ns_key_0002"
READONLY_KEY = "ek_test_readonly_key_0003"
CHAT_ONLY_KEY = "ek_test_chat_only_key_0004"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # Under libfaketime (scripts/test-at-fixed-times.sh) CLOCK_MONOTONIC is shifted for clock_gettime
    # but not for sem_clockwait, so a lock, event or future wait never times out: a test whose point
    # is such a timeout (not a date) cannot run there.
    if "FAKETIME" not in os.environ:
        return
    skip = pytest.mark.skip(reason="a lock wait's timeout does not fire under libfaketime")
    for item in items:
        if item.get_closest_marker("real_monotonic"):
            item.add_marker(skip)


@pytest.fixture(autouse=True)
def _restore_logging() -> Iterator[None]:
    """A test that runs an entry point in process (``cli.main``) configures logging; undo it after."""
    import logging

    root, engram = logging.getLogger(), logging.getLogger("engram")
    handlers, level = list(root.handlers), engram.level
    yield
    for handler in root.handlers[:]:
        if handler not in handlers:
            root.removeHandler(handler)
    engram.setLevel(level)


@dataclass
class EngramServer:
    url: str
    container: Any
    data_dir: Path

    def client(self, key: str | None = OWNER_KEY, **kwargs: Any) -> httpx.Client:
        headers = {"authorization": f"Bearer {key}"} if key else {}
        return httpx.Client(base_url=self.url, headers=headers, timeout=30, **kwargs)


def write_keys(path: Path) -> Path:
    path.write_text(
        json.dumps(
            [
                {"name": "owner", "key": OWNER_KEY, "namespace": "alice", "scopes": ["*"]},
                {"name": "bob", "key": OTHER_KEY, "namespace": "bob", "scopes": ["*"]},
                {"name": "reader", "key": READONLY_KEY, "namespace": "alice", "scopes": ["memory:read"]},
                {"name": "chat", "key": CHAT_ONLY_KEY, "namespace": "alice", "scopes": ["chat:proxy"]},
            ]
        )
    )
    return path


@pytest.fixture
def make_server(tmp_path: Path) -> Iterator[Callable[..., EngramServer]]:
    """Start real Engram servers (SQLite + local embedder by default); all stop at teardown."""
    from contextlib import ExitStack

    from engram.bootstrap import Overrides, build_container
    from engram.entrypoints.http.app import create_app
    from engram.settings import Settings

    stack = ExitStack()
    counter = 0

    def start(**settings: Any) -> EngramServer:
        nonlocal counter
        counter += 1
        data_dir = tmp_path / f"server{counter}"
        data_dir.mkdir()
        overrides = settings.pop("overrides", {})
        settings.setdefault("store", os.environ.get("ENGRAM_TEST_STORE", "sqlite"))
        settings.setdefault("search", os.environ.get("ENGRAM_TEST_SEARCH", "local"))
        settings.setdefault("scheduler_enabled", False)  # jobs run only when a test asks for them
        config = Settings(data_dir=data_dir, keys_file=write_keys(data_dir / "keys.json"), **settings)
        container = build_container(config, Overrides(**overrides))
        stack.callback(container.close)
        url = stack.enter_context(serve_app(create_app(container)))
        return EngramServer(url=url, container=container, data_dir=data_dir)

    yield start
    stack.close()


@pytest.fixture
def server(make_server: Callable[..., EngramServer]) -> EngramServer:
    return make_server()


@pytest.fixture
def owner(server: EngramServer) -> Iterator[httpx.Client]:
    with server.client() as client:
        yield client


@pytest.fixture(scope="session")
def osmem_base() -> Iterator[Any]:
    """osmem-server (OpenSearch-compatible, no kNN); tests take a fresh ``clone()`` each."""
    osmem_server = pytest.importorskip("osmem_server")
    try:
        server = osmem_server.OsmemServer.start(seed=[], freeze=False)
    except osmem_server.OsmemError as exc:  # no binary for this platform
        pytest.skip(str(exc))
    yield server
    server.close()
