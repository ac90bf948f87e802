"""The ``ThreadRows`` contract (domain/ports.py): every store in ``STORE_FACTORIES``."""

from __future__ import annotations

from typing import Protocol

import pytest
from engram.domain.errors import InvalidInput, NotFound
from engram.domain.ports import MemoryStore, MessageRows, ThreadRows

from tests.contract.rows import NS, OTHER, a_message, all_pages, at, ids


class Rows(ThreadRows, MessageRows, Protocol):
    """Threads, and the messages that make them (``insert_message`` keeps the thread)."""


def _say(store: Rows, message_id: str, thread: str, minute: float, namespace: str = NS) -> None:
    store.insert_message(a_message(message_id, namespace=namespace, minute=minute, conversation_id=thread))


def test_a_thread_appears_with_its_first_message_and_counts_the_rest(store: Rows) -> None:
    # Given two messages in thread "trip" and one in "work"
    _say(store, "m1", "trip", 0)
    _say(store, "m2", "trip", 5)
    _say(store, "m3", "work", 3)
    # Then each thread has its count, creation and last message times
    trip = store.get_thread(NS, "trip")
    assert (trip.message_count, trip.created_at, trip.last_message_at, trip.title) == (2, at(0), at(5), None)
    assert store.get_thread(NS, "work").message_count == 1
    # And an idempotent retry counts nothing
    store.insert_message(a_message("m4", minute=6, conversation_id="trip", external_id="x"))
    store.insert_message(a_message("m5", minute=7, conversation_id="trip", external_id="x"))
    assert store.get_thread(NS, "trip").message_count == 3
    with pytest.raises(NotFound):
        store.get_thread(NS, "nope")
    with pytest.raises(NotFound):
        store.get_thread(OTHER, "trip")


def test_list_threads_most_recently_active_first_with_pages(store: Rows) -> None:
    # Given four threads last active at minutes 10, 40, 20, 30 and one in another namespace
    for n, minute in enumerate([10, 40, 20, 30]):
        _say(store, f"m{n}", f"t{n}", minute)
    _say(store, "x", "t9", 50, namespace=OTHER)
    # Then they list newest activity first, page by page, without the other namespace's
    assert ids(store.list_threads(NS).items) == ["t1", "t3", "t2", "t0"]
    assert all_pages(lambda c: store.list_threads(NS, limit=3, cursor=c)) == [["t1", "t3", "t2"], ["t0"]]
    with pytest.raises(InvalidInput):
        store.list_threads(NS, cursor="not-a-cursor")


def test_rename_and_recycle_bin(store: Rows) -> None:
    # Given two threads
    _say(store, "m1", "a", 0)
    _say(store, "m2", "b", 1)
    # When one is renamed and the other put in the recycle bin
    renamed = store.update_thread(NS, "a", title="Trip to Kyoto", deleted_at=None)
    binned = store.update_thread(NS, "b", title=None, deleted_at=at(60))
    # Then the listings split them, and the rows say so
    assert renamed.title == "Trip to Kyoto"
    assert binned.deleted_at == at(60)
    assert ids(store.list_threads(NS).items) == ["a"]
    assert ids(store.list_threads(NS, deleted=True).items) == ["b"]
    # And restoring clears the mark (the title stays what it was set to)
    store.update_thread(NS, "b", title="kept", deleted_at=None)
    assert ids(store.list_threads(NS).items) == ["b", "a"]
    assert store.get_thread(NS, "a").title == "Trip to Kyoto"
    with pytest.raises(NotFound):
        store.update_thread(NS, "nope", title="x", deleted_at=None)
    with pytest.raises(NotFound):
        store.update_thread(OTHER, "a", title="x", deleted_at=None)


def test_a_new_message_takes_a_thread_out_of_the_recycle_bin(store: Rows) -> None:
    _say(store, "m1", "a", 0)
    store.update_thread(NS, "a", title="t", deleted_at=at(1))
    _say(store, "m2", "a", 2)
    thread = store.get_thread(NS, "a")
    assert (thread.deleted_at, thread.message_count, thread.title) == (None, 2, "t")


def test_thread_messages_oldest_first_with_pages(store: Rows) -> None:
    # Given a thread with five messages (two at the same instant), interleaved with another thread
    for message_id, minute in [("a", 0), ("c", 10), ("b", 10), ("d", 20), ("e", 30)]:
        _say(store, message_id, "t", minute)
    _say(store, "z", "u", 5)
    _say(store, "y", "t", 5, namespace=OTHER)
    # Then the thread's messages come oldest first (ties by id), page by page
    assert ids(store.list_thread_messages(NS, "t").items) == ["a", "b", "c", "d", "e"]
    assert all_pages(lambda c: store.list_thread_messages(NS, "t", limit=2, cursor=c)) == [
        ["a", "b"],
        ["c", "d"],
        ["e"],
    ]
    assert store.list_thread_messages(NS, "nope").items == []


def test_move_thread_merges_messages_counts_and_times(store: Rows) -> None:
    # Given thread "a" (minutes 0, 30) and thread "b" (minute 10)
    _say(store, "m1", "a", 0)
    _say(store, "m2", "a", 30)
    _say(store, "m3", "b", 10)
    # When "a" is merged into "b"
    moved = store.move_thread(NS, "a", "b")
    # Then "b" holds all three in order, with the count and the later time; "a" is gone
    assert moved == 2
    assert ids(store.list_thread_messages(NS, "b").items) == ["m1", "m3", "m2"]
    assert [m.conversation_id for m in store.list_messages(NS)] == ["b", "b", "b"]
    merged = store.get_thread(NS, "b")
    assert (merged.message_count, merged.last_message_at) == (3, at(30))
    with pytest.raises(NotFound):
        store.get_thread(NS, "a")
    # And repeating it moves nothing; an unknown target is refused
    assert store.move_thread(NS, "a", "b") == 0
    with pytest.raises(NotFound):
        store.move_thread(NS, "b", "nope")


def test_purge_thread_deletes_it_and_its_messages_only(store: Rows) -> None:
    _say(store, "m1", "a", 0)
    _say(store, "m2", "a", 1)
    _say(store, "m3", "b", 2)
    _say(store, "m4", "a", 3, namespace=OTHER)
    assert store.purge_thread(NS, "a") == 2
    assert ids(store.list_messages(NS)) == ["m3"]
    assert ids(store.list_threads(NS).items) == ["b"]
    assert store.get_thread(OTHER, "a").message_count == 1
    assert store.purge_thread(NS, "a") == 0


def test_retention_uncounts_deleted_messages(store: Rows) -> None:
    _say(store, "m1", "a", 0)
    _say(store, "m2", "a", 10)
    store.delete_messages_before(NS, at(5))
    assert store.get_thread(NS, "a").message_count == 1


def test_messages_by_id_and_their_neighbours_in_the_thread(store: MemoryStore) -> None:
    # Given a thread of five messages, another thread between them in time, and another namespace
    for n in range(5):
        _say(store, f"t{n}", "trip", n * 2)
    _say(store, "w1", "work", 3)
    _say(store, "t2", "trip", 4, namespace=OTHER)
    # When messages are fetched by id (one unknown, one of the other namespace's ids)
    found = store.get_messages(NS, ["t3", "nope", "t1", "w1"])
    # Then they come in the asked order, only this namespace's
    assert ids(found) == ["t3", "t1", "w1"]
    assert store.get_messages(OTHER, ["t3"]) == []
    middle = store.get_messages(NS, ["t2"])[0]
    # And the neighbours of a message are its own thread's, oldest first, as many as asked
    assert ids(store.messages_around(NS, middle, before=1, after=1)) == ["t1", "t2", "t3"]
    assert ids(store.messages_around(NS, middle, before=5, after=0)) == ["t0", "t1", "t2"]
    first = store.get_messages(NS, ["t0"])[0]
    assert ids(store.messages_around(NS, first, before=2, after=2)) == ["t0", "t1", "t2"]
    last = store.get_messages(NS, ["t4"])[0]
    assert ids(store.messages_around(NS, last, before=0, after=3)) == ["t4"]
