"""The ``KeyValueRows`` contract (idempotency, cursors, cache; domain/ports.py): every store in ``STORE_FACTORIES``."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from engram.domain.errors import InvalidInput
from engram.domain.models import (
    IdempotencyRecord,
)
from engram.domain.ports import KeyValueRows

from tests.contract.rows import (
    NS,
    OTHER,
    T0,
    at,
)
from tests.fakes.clock import ManualClock


def test_the_store_implements_key_value_rows(store: KeyValueRows) -> None:
    assert isinstance(store, KeyValueRows)


def test_idempotency_keys_are_put_once(store: KeyValueRows) -> None:
    # Given a stored idempotency record
    first = IdempotencyRecord(namespace=NS, key="req-1", value={"memory_id": "m1", "n": 1}, created_at=T0)
    assert store.put_idempotency(first) is True
    # When the same key is put again / Then it is refused and the first value stays
    assert store.put_idempotency(first.model_copy(update={"value": {"memory_id": "m2"}})) is False
    assert store.get_idempotency(NS, "req-1") == first
    # And keys are per namespace
    assert store.get_idempotency(OTHER, "req-1") is None
    assert store.put_idempotency(first.model_copy(update={"namespace": OTHER})) is True
    assert store.get_idempotency(NS, "unknown") is None


def test_a_deleted_idempotency_key_can_be_put_again(store: KeyValueRows) -> None:
    # Given a stored key
    store.put_idempotency(IdempotencyRecord(namespace=NS, key="claim", value={"n": 1}, created_at=T0))
    # When it is deleted (and an unknown key too: no error)
    store.delete_idempotency(NS, "claim")
    store.delete_idempotency(NS, "never-stored")
    # Then it is gone and the next put of it wins
    assert store.get_idempotency(NS, "claim") is None
    assert store.put_idempotency(IdempotencyRecord(namespace=NS, key="claim", value={"n": 2}, created_at=T0)) is True
    assert store.get_idempotency(NS, "claim") is not None


def test_delete_idempotency_before(store: KeyValueRows) -> None:
    # Given an old and a new key, and an old one in another namespace
    store.put_idempotency(IdempotencyRecord(namespace=NS, key="old", created_at=at(0)))
    store.put_idempotency(IdempotencyRecord(namespace=NS, key="new", created_at=at(10)))
    store.put_idempotency(IdempotencyRecord(namespace=OTHER, key="old", created_at=at(0)))
    # When keys before minute 5 are deleted
    assert store.delete_idempotency_before(NS, at(5)) == 1
    # Then the old key is free again, the rest stay
    assert store.get_idempotency(NS, "old") is None
    assert store.get_idempotency(NS, "new") is not None
    assert store.get_idempotency(OTHER, "old") is not None


def test_cursors(store: KeyValueRows) -> None:
    # Given no cursor
    assert store.get_cursor(NS, "extraction") is None
    # When it is set, then moved
    store.set_cursor(NS, "extraction", "msg1")
    store.set_cursor(NS, "extraction", "msg9")
    store.set_cursor(NS, "dreaming", "2025-03-01")
    # Then the latest value is read, per name and per namespace
    assert store.get_cursor(NS, "extraction") == "msg9"
    assert store.get_cursor(NS, "dreaming") == "2025-03-01"
    assert store.get_cursor(OTHER, "extraction") is None


def test_a_cursor_is_replaced_only_from_the_value_read(store: KeyValueRows) -> None:
    # Given no cursor: a replace expecting one fails, expecting none creates it once
    assert not store.replace_cursor(NS, "history:t", "v1", expected="v0")
    assert store.replace_cursor(NS, "history:t", "v1", expected=None)
    assert not store.replace_cursor(NS, "history:t", "other", expected=None)
    # When two writers read v1 and both replace it
    first = store.replace_cursor(NS, "history:t", "from writer A", expected="v1")
    second = store.replace_cursor(NS, "history:t", "from writer B", expected="v1")
    # Then only the first lands; the other is told, and nothing of it is written
    assert (first, second) == (True, False)
    assert store.get_cursor(NS, "history:t") == "from writer A"
    assert store.get_cursor(OTHER, "history:t") is None
    assert store.replace_cursor(OTHER, "history:t", "own", expected=None)


def test_cache(store: KeyValueRows, clock: ManualClock) -> None:
    # Given a JSON value cached without expiry, one expiring later and one already expired (the
    # store's clock decides, never the wall clock)
    value = {"answer": [1, 2.5, "三"], "nested": {"ok": True, "none": None}}
    store.put_cache(NS, "forever", value)
    store.put_cache(NS, "later", "soon", expires_at=clock.now() + timedelta(hours=1))
    store.put_cache(NS, "stale", "old", expires_at=clock.now() - timedelta(seconds=1))
    # Then live entries read back equal, the expired one is absent
    assert store.get_cache(NS, "forever") == value
    assert store.get_cache(NS, "later") == "soon"
    assert store.get_cache(NS, "stale") is None
    assert store.get_cache(NS, "unknown") is None
    assert store.get_cache(OTHER, "forever") is None
    # When an entry is overwritten, or an expired one refreshed / Then the new value is read
    store.put_cache(NS, "forever", 42)
    store.put_cache(NS, "stale", "fresh")
    assert store.get_cache(NS, "forever") == 42
    assert store.get_cache(NS, "stale") == "fresh"
    # When entries are deleted (unknown keys too) / Then they are absent
    store.delete_cache(NS, "forever")
    store.delete_cache(NS, "unknown")
    store.delete_cache(OTHER, "later")
    assert store.get_cache(NS, "forever") is None
    assert store.get_cache(NS, "later") == "soon"


def test_cache_expiry_follows_the_store_clock_not_the_wall_clock(store: KeyValueRows, clock: ManualClock) -> None:
    # Given a clock far from the wall clock (years before or after it) and an entry that lives two hours
    for start in (datetime(2001, 1, 1, 23, 30, tzinfo=UTC), datetime(2099, 12, 31, 23, 30, tzinfo=UTC)):
        clock.set(start)
        store.put_cache(NS, "seen", ["m1"], expires_at=start + timedelta(hours=2))
        # When the clock has moved less than two hours / Then it is there
        clock.advance(hours=1, minutes=59)
        assert store.get_cache(NS, "seen") == ["m1"], start
        # When the clock reaches the expiry (across midnight, a month's and a year's end) / Then it is gone
        clock.advance(minutes=1)
        assert store.get_cache(NS, "seen") is None, start
        # And putting it again makes it live again, stamped by the same clock
        store.put_cache(NS, "seen", ["m2"], expires_at=clock.now() + timedelta(minutes=5))
        assert store.get_cache(NS, "seen") == ["m2"]
        store.delete_cache(NS, "seen")


def test_cache_rejects_values_that_are_not_json(store: KeyValueRows) -> None:
    # Given a value JSON cannot hold / When it is cached / Then InvalidInput and nothing is stored
    with pytest.raises(InvalidInput):
        store.put_cache(NS, "bad", object())
    assert store.get_cache(NS, "bad") is None


def test_add_cache_stores_only_where_no_live_value_is_held(store: KeyValueRows, clock: ManualClock) -> None:
    # Given nothing under the key / When a value is added / Then this call stored it
    note = {"turn": "t1", "at": "2026-03-10T12:00:00+00:00"}
    assert store.add_cache(NS, "mark", note, expires_at=clock.now() + timedelta(minutes=10)) == (True, None)
    assert store.get_cache(NS, "mark") == note
    # When another value is added under the live key / Then nothing is written and the held value comes back
    other = {"turn": "t2", "at": "2026-03-10T12:01:00+00:00"}
    assert store.add_cache(NS, "mark", other, expires_at=clock.now() + timedelta(minutes=10)) == (False, note)
    assert store.get_cache(NS, "mark") == note
    # And keys are per namespace
    assert store.add_cache(OTHER, "mark", other) == (True, None)
    assert store.get_cache(OTHER, "mark") == other
    # When the held value has expired by the store's clock (still in the table: TTL deletes lazily) /
    # Then the add writes over it
    clock.advance(minutes=10)
    assert store.add_cache(NS, "mark", other, expires_at=clock.now() + timedelta(minutes=10)) == (True, None)
    assert store.get_cache(NS, "mark") == other
    # And a value without expiry is held for good, a falsy one too (the flag tells, not the value)
    assert store.add_cache(NS, "flag", 0) == (True, None)
    clock.advance(days=400)
    assert store.add_cache(NS, "flag", 1, expires_at=clock.now() + timedelta(minutes=1)) == (False, 0)
    assert store.get_cache(NS, "flag") == 0
    # And a deleted value can be added again; a value JSON cannot hold is refused, nothing stored
    store.delete_cache(NS, "flag")
    assert store.add_cache(NS, "flag", [1]) == (True, None)
    with pytest.raises(InvalidInput):
        store.add_cache(NS, "bad", object())
    assert store.get_cache(NS, "bad") is None


def test_add_cache_names_one_winner_among_concurrent_adds(store: KeyValueRows, clock: ManualClock) -> None:
    # Given eight threads adding their own value under one key at once
    from concurrent.futures import ThreadPoolExecutor
    from threading import Barrier

    barrier = Barrier(8)

    def add(i: int) -> tuple[bool, object]:
        barrier.wait()
        return store.add_cache(NS, "race", {"by": i}, expires_at=clock.now() + timedelta(minutes=5))

    with ThreadPoolExecutor(8) as pool:
        results = list(pool.map(add, range(8)))
    # Then exactly one stored its value, and every other saw that value
    winners = [i for i, (stored, _) in enumerate(results) if stored]
    assert len(winners) == 1
    assert all(held == {"by": winners[0]} for stored, held in results if not stored)
    assert store.get_cache(NS, "race") == {"by": winners[0]}
