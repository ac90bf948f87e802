"""The ``MessageRows`` contract (messages; domain/ports.py): every store in ``STORE_FACTORIES``."""

from __future__ import annotations

import threading

import pytest
from engram.domain.errors import Conflict, NotFound
from engram.domain.ports import MemoryStore, MessageRows

from tests.contract.rows import (
    NS,
    OTHER,
    a_message,
    at,
    ids,
)


def test_the_store_implements_message_rows(store: MessageRows) -> None:
    assert isinstance(store, MessageRows)


def test_message_insert_is_idempotent_by_external_id(store: MessageRows) -> None:
    # Given a message stored with an external_id
    first, created = store.insert_message(a_message("msg1", external_id="turn-1", usage={"input_tokens": 5}))
    assert created is True
    assert first.usage == {"input_tokens": 5}
    # When a retry stores it again under a new id
    again, created_again = store.insert_message(a_message("msg2", minute=1, external_id="turn-1", content="retry"))
    # Then the original comes back, nothing new is stored
    assert (again, created_again) == (first, False)
    assert store.count_messages(NS) == 1
    # And the same external_id is new in another namespace
    assert store.insert_message(a_message("msg3", namespace=OTHER, external_id="turn-1"))[1] is True


def test_an_external_id_is_free_again_once_its_message_is_deleted(store: MessageRows) -> None:
    # Given a message stored with an external_id, then deleted by retention
    store.insert_message(a_message("msg1", external_id="turn-1"))
    assert store.delete_messages_before(NS, at(1)) == 1
    # When a message with the same external_id is stored again
    stored, created = store.insert_message(a_message("msg2", minute=2, external_id="turn-1", content="again"))
    # Then it is new, and from then on it is the one a retry finds
    assert created is True and stored.id == "msg2"
    assert store.insert_message(a_message("msg3", minute=3, external_id="turn-1"))[0].id == "msg2"
    assert ids(store.list_messages(NS)) == ["msg2"]


def test_messages_inserted_together_are_each_inserted_in_order(store: MemoryStore) -> None:
    # Given a message stored before, and a thread with one message
    first, _ = store.insert_message(a_message("msg0", external_id="turn-0-u", conversation_id="t1"))
    # When a batch stores a turn's two sides, a retry of the earlier message, and a repeat inside the batch
    results = store.insert_messages(
        [
            a_message("msg1", minute=1, external_id="turn-1-u", conversation_id="t1"),
            a_message("msg2", minute=2, external_id="turn-1-a", conversation_id="t1", role="assistant"),
            a_message("msg3", minute=3, external_id="turn-0-u", conversation_id="t1"),
            a_message("msg4", minute=4, external_id="turn-1-u", conversation_id="t1"),
        ]
    )
    # Then each result is what insert_message would have returned, in the batch's order
    assert [(m.id, new) for m, new in results] == [("msg1", True), ("msg2", True), ("msg0", False), ("msg1", False)]
    assert results[2][0] == first
    assert results[0][0].stored_at == results[0][0].created_at
    # And the new ones are stored once each, in order, and counted in their thread
    assert ids(store.list_messages(NS)) == ["msg0", "msg1", "msg2"]
    assert ids(store.list_messages_stored(NS)) == ["msg0", "msg1", "msg2"]
    assert store.get_thread(NS, "t1").message_count == 3
    assert store.insert_messages([]) == []


def test_a_batch_with_a_taken_id_conflicts(store: MessageRows) -> None:
    # Given a stored message
    store.insert_message(a_message("msg1"))
    # When a batch repeats its id (no external id: not a retry)
    with pytest.raises(Conflict):
        store.insert_messages([a_message("msg2", minute=1), a_message("msg1", minute=2)])
    # Then the conflict is reported and the first message is still the only one under its id
    assert [m.content for m in store.get_messages(NS, ["msg1"])] == ["message msg1"]


def test_a_message_keeps_its_error_note(store: MessageRows) -> None:
    # Given a turn the upstream never answered, stored with what went wrong, and an answered one
    store.insert_message(a_message("msg1", external_id="t1").model_copy(update={"error": "upstream_timeout: slow"}))
    store.insert_message(a_message("msg2", minute=1, external_id="t2"))
    # Then both read back as stored
    assert [(m.id, m.error) for m in store.list_messages(NS)] == [("msg1", "upstream_timeout: slow"), ("msg2", None)]


def test_message_without_external_id_is_always_stored(store: MessageRows) -> None:
    # Given / When two messages without an external_id are stored
    assert store.insert_message(a_message("msg1"))[1] is True
    assert store.insert_message(a_message("msg2"))[1] is True
    # Then both exist, and a duplicate id conflicts
    assert store.count_messages(NS) == 2
    with pytest.raises(Conflict):
        store.insert_message(a_message("msg1"))


def test_concurrent_retries_store_a_message_once(store: MessageRows) -> None:
    # Given eight threads storing the same turn at once
    results: list[bool] = []
    barrier = threading.Barrier(8)

    def ingest(n: int) -> None:
        barrier.wait()
        results.append(store.insert_message(a_message(f"msg{n}", external_id="turn-1"))[1])

    threads = [threading.Thread(target=ingest, args=(n,)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    # Then exactly one of them stored it
    assert sorted(results) == [False] * 7 + [True]
    assert store.count_messages(NS) == 1


def test_list_messages_bounds_order_and_continuation(store: MessageRows) -> None:
    # Given messages over time, two at the same instant, and one in another namespace
    for message_id, minute in [("a", 0), ("b", 10), ("d", 20), ("c", 20), ("e", 30), ("f", 40)]:
        store.insert_message(a_message(message_id, minute=minute))
    store.insert_message(a_message("x", namespace=OTHER, minute=20))
    # When listing between minute 10 (inclusive) and 40 (exclusive)
    window = store.list_messages(NS, since=at(10), until=at(40))
    # Then oldest first, ties by id, bounds respected
    assert ids(window) == ["b", "c", "d", "e"]
    assert ids(store.list_messages(NS)) == ["a", "b", "c", "d", "e", "f"]
    assert ids(store.list_messages(NS, limit=2)) == ["a", "b"]
    assert ids(store.list_messages(NS, until=at(10))) == ["a"]
    # And after_id continues after that message within the same bounds, including its time twin
    assert ids(store.list_messages(NS, since=at(10), until=at(40), after_id="c", limit=1)) == ["d"]
    assert ids(store.list_messages(NS, since=at(10), until=at(40), after_id="d")) == ["e"]
    assert ids(store.list_messages(NS, since=at(25), after_id="a")) == ["e", "f"]
    with pytest.raises(NotFound):
        store.list_messages(NS, after_id="x")


def test_count_and_delete_messages(store: MessageRows) -> None:
    # Given five messages a minute apart and one in another namespace
    for n in range(5):
        store.insert_message(a_message(f"msg{n}", minute=n))
    store.insert_message(a_message("other", namespace=OTHER))
    assert store.count_messages(NS) == 5
    assert store.count_messages(NS, since=at(3)) == 2
    # When messages before minute 2 are deleted
    deleted = store.delete_messages_before(NS, at(2))
    # Then two went, the rest (and the other namespace) stayed
    assert deleted == 2
    assert ids(store.list_messages(NS)) == ["msg2", "msg3", "msg4"]
    assert store.count_messages(OTHER) == 1
    assert store.delete_messages_before(NS, at(2)) == 0


def test_messages_list_in_the_order_they_were_stored(store: MessageRows) -> None:
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
