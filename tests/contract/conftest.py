"""Adapters under contract: every store adapter runs the same suites (one per row protocol of ``MemoryStore``).

A new adapter (e.g. DynamoDB under moto) joins by adding a factory to ``STORE_FACTORIES``: a context
manager that takes a per-test temporary directory and the clock, yields a ready store and cleans up
after it. Every store runs on a manual clock (the ``clock`` fixture): expiry is tested by moving it,
never by sleeping or by the wall clock (docs/ARCHITECTURE.md, "One clock").
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path

import pytest
from engram.adapters.storage.inmemory import InMemoryMemoryStore
from engram.adapters.storage.sqlite import SqliteMemoryStore
from engram.domain.ports import Clock, MemoryStore

from tests.contract.rows import T0
from tests.fakes.clock import ManualClock


@contextmanager
def _inmemory_store(tmp_path: Path, clock: Clock) -> Iterator[MemoryStore]:
    yield InMemoryMemoryStore(clock=clock)


@contextmanager
def _sqlite_store(tmp_path: Path, clock: Clock) -> Iterator[MemoryStore]:
    store = SqliteMemoryStore(tmp_path / "engram.db", clock=clock)
    try:
        yield store
    finally:
        store.close()


def _dynamodb_store(tmp_path: Path, clock: Clock) -> AbstractContextManager[MemoryStore]:
    # DynamoMemoryStore on a fresh moto table; the mock starts before any client exists.
    pytest.importorskip("moto")
    from tests.fakes.moto_aws import dynamo_store

    return dynamo_store(tmp_path, clock=clock)


STORE_FACTORIES: dict[str, Callable[[Path, Clock], AbstractContextManager[MemoryStore]]] = {
    "memory": _inmemory_store,
    "sqlite": _sqlite_store,
    "dynamodb": _dynamodb_store,
}


@pytest.fixture
def clock() -> ManualClock:
    """The store's clock, at the suites' ``T0``; a test moves it to cross an expiry."""
    return ManualClock(T0)


@pytest.fixture(params=list(STORE_FACTORIES))
def store(request: pytest.FixtureRequest, tmp_path: Path, clock: ManualClock) -> Iterator[MemoryStore]:
    with STORE_FACTORIES[request.param](tmp_path, clock) as adapter:
        yield adapter
