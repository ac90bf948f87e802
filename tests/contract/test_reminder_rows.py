"""The ``ReminderRows`` contract (domain/ports.py): every store in ``STORE_FACTORIES``."""

from __future__ import annotations

import threading

from engram.domain.models import Reminder
from engram.domain.ports import ReminderRows

from tests.contract.rows import NS, OTHER, at


def a_reminder(memory_id: str, minute: float, *, namespace: str = NS, **fields: object) -> Reminder:
    return Reminder(namespace=namespace, memory_id=memory_id, remind_at=at(minute), **fields)


def _ids(rows: list[Reminder]) -> list[str]:
    return [r.memory_id for r in rows]


def test_put_find_and_replace(store: ReminderRows) -> None:
    store.put_reminder(a_reminder("m1", 10))
    assert store.find_reminder(NS, "m1") == a_reminder("m1", 10)
    store.put_reminder(a_reminder("m1", 20))
    assert store.find_reminder(NS, "m1") == a_reminder("m1", 20)
    assert store.find_reminder(NS, "nope") is None
    assert store.find_reminder(OTHER, "m1") is None


def test_list_by_status_and_window_soonest_first(store: ReminderRows) -> None:
    # Given pending reminders at minutes 30, 10, 20 (+ a twin at 20), a delivered one and another namespace's
    for memory_id, minute in [("c", 30), ("a", 10), ("b2", 20), ("b1", 20)]:
        store.put_reminder(a_reminder(memory_id, minute))
    store.put_reminder(a_reminder("d", 15, status="delivered", delivered_at=at(16)))
    store.put_reminder(a_reminder("x", 15, namespace=OTHER))
    # Then the listings filter by status and window, soonest first
    assert _ids(store.list_reminders(NS, "pending")) == ["a", "b1", "b2", "c"]
    assert _ids(store.list_reminders(NS, "pending", due_before=at(20))) == ["a", "b1", "b2"]
    assert _ids(store.list_reminders(NS, "pending", due_after=at(20))) == ["b1", "b2", "c"]
    assert _ids(store.list_reminders(NS, "pending", due_after=at(11), due_before=at(29))) == ["b1", "b2"]
    assert _ids(store.list_reminders(NS, "pending", limit=2)) == ["a", "b1"]
    assert _ids(store.list_reminders(NS, "delivered")) == ["d"]


def test_claim_then_deliver(store: ReminderRows) -> None:
    store.put_reminder(a_reminder("m1", 0))
    # When a turn claims it, another turn cannot while the lease runs
    assert store.claim_reminder(NS, "m1", "turn-1", now=at(1), until=at(11)) is True
    assert store.claim_reminder(NS, "m1", "turn-2", now=at(2), until=at(12)) is False
    # And only the holder settles it
    assert store.settle_reminder(NS, "m1", "turn-2", delivered_at=at(3)) is False
    assert store.settle_reminder(NS, "m1", "turn-1", delivered_at=at(3)) is True
    row = store.find_reminder(NS, "m1")
    assert row is not None and (row.status, row.delivered_at, row.lease_owner) == ("delivered", at(3), None)
    # Then it is delivered for good: no claim takes it again, it lists as delivered
    assert store.claim_reminder(NS, "m1", "turn-3", now=at(60), until=at(70)) is False
    assert _ids(store.list_reminders(NS, "delivered")) == ["m1"]
    assert store.list_reminders(NS, "pending") == []


def test_a_released_or_expired_lease_can_be_claimed_again(store: ReminderRows) -> None:
    store.put_reminder(a_reminder("m1", 0))
    assert store.claim_reminder(NS, "m1", "turn-1", now=at(1), until=at(11))
    # A failed turn releases it: the next turn takes it
    assert store.settle_reminder(NS, "m1", "turn-1", delivered_at=None) is True
    assert store.find_reminder(NS, "m1") == a_reminder("m1", 0)
    assert store.claim_reminder(NS, "m1", "turn-2", now=at(2), until=at(12))
    # A turn that never came back: its lease runs out and another turn takes it
    assert store.claim_reminder(NS, "m1", "turn-3", now=at(12.5), until=at(22))
    assert store.settle_reminder(NS, "m1", "turn-2", delivered_at=at(13)) is False
    assert store.claim_reminder(NS, "nope", "turn-1", now=at(1), until=at(2)) is False
    assert store.claim_reminder(OTHER, "m1", "turn-1", now=at(30), until=at(40)) is False


def test_concurrent_claims_take_a_reminder_once(store: ReminderRows) -> None:
    # Given eight turns claiming the same due reminder at once
    store.put_reminder(a_reminder("m1", 0))
    results: list[bool] = []
    barrier = threading.Barrier(8)

    def claim(n: int) -> None:
        barrier.wait()
        results.append(store.claim_reminder(NS, "m1", f"turn-{n}", now=at(1), until=at(11)))

    workers = [threading.Thread(target=claim, args=(n,)) for n in range(8)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    # Then exactly one got it
    assert sorted(results) == [False] * 7 + [True]
