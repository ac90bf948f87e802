"""Concurrent writers of one fact_key: every write lands (as a version or a sighting), nobody gets a
raw storage error. The real memory service on SQLite and on DynamoDB (moto), over real threads; and
the REST door over loopback with SQLite.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

import httpx
import pytest
from engram.adapters.clock import SystemClock
from engram.adapters.search.inmemory import InMemorySearchIndex
from engram.domain.errors import Conflict
from engram.domain.models import Memory
from engram.domain.ports import Clock, MemoryStore
from engram.services.library.memories import MemoryRules, MemoryService, MemoryWrite, WriteResult

from tests.configs import config
from tests.conftest import EngramServer
from tests.contract.conftest import STORE_FACTORIES

NS = "alice"
KEY = "person:wife_job"
WRITERS = 8


@pytest.fixture(params=["sqlite", "dynamodb"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[MemoryStore]:
    factory: Callable[[Path, Clock], AbstractContextManager[MemoryStore]] = STORE_FACTORIES[request.param]
    with factory(tmp_path, SystemClock()) as adapter:  # the services below run on the real clock too
        yield adapter


def _at_once(count: int, write: Callable[[int], Any]) -> list[Any]:
    """Run ``write(i)`` on ``count`` threads released together; exceptions are returned, not raised."""
    gate = threading.Barrier(count)

    def run(i: int) -> Any:
        gate.wait()
        try:
            return write(i)
        except Exception as exc:  # the test inspects what each writer got
            return exc

    with ThreadPoolExecutor(count) as pool:
        return list(pool.map(run, range(count)))


def _chain(store: MemoryStore) -> list[Memory]:
    return [m for m in store.iter_memories(NS) if m.fact_key == KEY]


def test_concurrent_writers_of_one_key_all_land_as_versions(store: MemoryStore) -> None:
    # Given the memory service on a real store
    service = MemoryService(store, InMemorySearchIndex(), None, SystemClock(), config(MemoryRules))
    texts = [f"The user's wife teaches English at school number {i}." for i in range(WRITERS)]
    # When eight threads write different texts under the same key at the same moment
    results = _at_once(WRITERS, lambda i: service.write(NS, MemoryWrite(content=texts[i], fact_key=KEY)))
    # Then every writer got an answer (no storage error), each text is one version of the chain
    assert all(isinstance(r, WriteResult) for r in results), [r for r in results if not isinstance(r, WriteResult)]
    assert sorted(r.action for r in results) == ["created"] + ["superseded"] * (WRITERS - 1)
    chain = _chain(store)
    assert sorted(m.content for m in chain) == sorted(texts)
    active = [m for m in chain if m.status == "active"]
    assert len(active) == 1 and store.find_active_by_fact_key(NS, KEY) == active[0]
    # and the versions form one line: each superseded row points at the row that replaced it
    by_id = {m.id: m for m in chain}
    for memory in chain:
        if memory.status == "superseded":
            assert by_id[memory.superseded_by_id or ""].supersedes_id == memory.id


def test_concurrent_writers_of_the_same_text_make_one_memory_seen_by_the_rest(store: MemoryStore) -> None:
    service = MemoryService(store, InMemorySearchIndex(), None, SystemClock(), config(MemoryRules))
    results = _at_once(
        WRITERS, lambda i: service.write(NS, MemoryWrite(content="The user's wife teaches English.", fact_key=KEY))
    )
    assert all(isinstance(r, WriteResult) for r in results), results
    assert sorted(r.action for r in results) == ["created"] + ["seen"] * (WRITERS - 1)
    assert len(_chain(store)) == 1


class _AlwaysRaced:
    """A store on which another writer always wins the key between the read and the write."""

    def __init__(self, inner: MemoryStore) -> None:
        self._inner = inner

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def supersede(self, old: Memory, new: Memory) -> tuple[Memory, Memory]:
        raise Conflict("conflicts with an existing row (UNIQUE constraint failed: memories.namespace)")


def test_a_writer_that_keeps_losing_gets_a_clean_conflict(store: MemoryStore) -> None:
    # Given a key that another writer keeps changing under us
    MemoryService(store, InMemorySearchIndex(), None, SystemClock(), config(MemoryRules)).write(
        NS, MemoryWrite(content="first", fact_key=KEY)
    )
    service = MemoryService(_AlwaysRaced(store), InMemorySearchIndex(), None, SystemClock(), config(MemoryRules))
    # When the write loses every retry
    with pytest.raises(Conflict) as err:
        service.write(NS, MemoryWrite(content="second", fact_key=KEY))
    # Then the error names the key and says to try again, without storage internals
    assert err.value.code == "fact_key_conflict"
    assert KEY in err.value.message and "try again" in err.value.message
    assert "UNIQUE" not in err.value.message
    assert [m.content for m in _chain(store)] == ["first"]


def test_concurrent_rest_upserts_all_succeed(owner: httpx.Client, server: EngramServer) -> None:
    # Given the REST door on SQLite, When eight clients upsert one key at once
    def post(i: int) -> httpx.Response:
        with server.client() as client:
            return client.post("/v1/memories", json={"content": f"Job number {i}", "fact_key": KEY})

    responses = _at_once(WRITERS, post)
    # Then every request succeeds, and every text is a version of the key
    assert [r.status_code for r in responses if r.status_code not in (200, 201)] == []
    listed = owner.get("/v1/memories", params={"fact_key": KEY, "status": "all", "limit": 50}).json()["items"]
    assert sorted(m["content"] for m in listed) == sorted(f"Job number {i}" for i in range(WRITERS))
    assert [m["status"] for m in listed].count("active") == 1
