"""The ``StoreAdmin`` contract (namespaces, health; domain/ports.py) and the whole ``MemoryStore`` union,
run against every store in ``STORE_FACTORIES``."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from engram.domain.models import Digest
from engram.domain.ports import MemoryStore, StoreAdmin

from tests.contract.rows import NS, OTHER, T0, a_candidate, a_memory, a_message, a_precious, a_term


def test_adapter_implements_every_row_protocol(store: MemoryStore) -> None:
    # Given an adapter from the registry / Then it satisfies the runtime-checkable union of the row protocols
    assert isinstance(store, MemoryStore)


def test_ping_succeeds_on_a_working_store(store: StoreAdmin) -> None:
    # Given a fresh store / When it is pinged / Then nothing is raised
    store.ping()


ROW_WRITERS: dict[str, Callable[[MemoryStore, str], object]] = {
    "memory": lambda store, ns: store.insert_memory(a_memory("m1", namespace=ns)),
    "message": lambda store, ns: store.insert_message(a_message("msg1", namespace=ns)),
    "candidate": lambda store, ns: store.insert_candidate(a_candidate("c1", namespace=ns)),
    "precious": lambda store, ns: store.insert_precious(a_precious("p1", namespace=ns)),
    "glossary": lambda store, ns: store.put_glossary_term(a_term("g1", "term", namespace=ns)),
    "digest": lambda store, ns: store.put_digest(Digest(namespace=ns, content="d", updated_at=T0)),
}


@pytest.mark.parametrize("kind", list(ROW_WRITERS))
def test_list_namespaces_sees_every_row_kind(store: MemoryStore, kind: str) -> None:
    # Given an empty store
    assert store.list_namespaces() == []
    # When one row of this kind is written in two namespaces
    ROW_WRITERS[kind](store, "zed")
    ROW_WRITERS[kind](store, "amy")
    # Then both namespaces are listed, sorted
    assert store.list_namespaces() == ["amy", "zed"]


def test_list_namespaces_is_distinct_across_row_kinds(store: MemoryStore) -> None:
    # Given rows of every kind in one namespace and a memory in another
    for write in ROW_WRITERS.values():
        write(store, NS)
    ROW_WRITERS["memory"](store, OTHER)
    # When namespaces are listed / Then each appears once
    assert store.list_namespaces() == [NS, OTHER]
