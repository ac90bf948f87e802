"""Adapters under contract: every store adapter runs the same suites (one per row protocol of ``MemoryStore``).

A new adapter (e.g. DynamoDB under moto) joins by adding a factory to ``STORE_FACTORIES``: a context
manager that takes a per-test temporary directory, yields a ready store and cleans up after it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path

import pytest
from engram.adapters.storage.inmemory import InMemoryMemoryStore
from engram.adapters.storage.sqlite import SqliteMemoryStore
from engram.domain.ports import MemoryStore


@contextmanager
def _inmemory_store(tmp_path: Path) -> Iterator[MemoryStore]:
    yield InMemoryMemoryStore()


@contextmanager
def _sqlite_store(tmp_path: Path) -> Iterator[MemoryStore]:
    store = SqliteMemoryStore(tmp_path / "engram.db")
    try:
        yield store
    finally:
        store.close()


def _dynamodb_store(tmp_path: Path) -> AbstractContextManager[MemoryStore]:
    # DynamoMemoryStore on a fresh moto table; the mock starts before any client exists.
    pytest.importorskip("moto")
    from tests.fakes.moto_aws import dynamo_store

    return dynamo_store(tmp_path)


STORE_FACTORIES: dict[str, Callable[[Path], AbstractContextManager[MemoryStore]]] = {
    "memory": _inmemory_store,
    "sqlite": _sqlite_store,
    "dynamodb": _dynamodb_store,
}


@pytest.fixture(params=list(STORE_FACTORIES))
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[MemoryStore]:
    with STORE_FACTORIES[request.param](tmp_path) as adapter:
        yield adapter
