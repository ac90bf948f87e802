"""``list_messages_stored`` (domain/ports.py): the order messages were stored in, on every adapter."""

from __future__ import annotations

from engram.domain.ports import MemoryStore

from tests.contract.test_memory_store import NS, OTHER, a_message, at, ids


def test_messages_list_in_the_order_they_were_stored(store: MemoryStore) -> None:
    # Given messages stored at minutes 0..3 whose created_at go back in time (an import of history),
    # one without stored_at (it takes its created_at) and one in another namespace
    for n in range(4):
        store.insert_message(a_message(f"m{n}", minute=-1000 * n, stored_at=at(n)))
    store.insert_message(a_message("old", minute=1.5))
    store.insert_message(a_message("x", namespace=OTHER, stored_at=at(2)))
    # Then they list in stored order, within bounds, after a position
    assert ids(store.list_messages_stored(NS)) == ["m0", "m1", "old", "m2", "m3"]
    assert ids(store.list_messages_stored(NS, since=at(1), until=at(3))) == ["m1", "old", "m2"]
    assert ids(store.list_messages_stored(NS, after=(at(1), "m1"), limit=2)) == ["old", "m2"]
    assert ids(store.list_messages_stored(NS, after=(at(3), "m3"))) == []
    assert store.list_messages_stored(NS)[0].stored_at == at(0)
