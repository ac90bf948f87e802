"""The ``AuditRows`` contract (events and usage; domain/ports.py): every store in ``STORE_FACTORIES``."""

from __future__ import annotations

import pytest
from engram.domain.errors import Conflict
from engram.domain.ports import AuditRows

from tests.contract.rows import (
    NS,
    OTHER,
    a_usage,
    an_event,
    at,
    ids,
)


def test_the_store_implements_audit_rows(store: AuditRows) -> None:
    assert isinstance(store, AuditRows)


def test_events(store: AuditRows) -> None:
    # Given events for two memories, of two kinds, and one in another namespace
    store.append_event(an_event("e1", minute=1, memory_id="m1", detail={"reason": "new", "scores": [0.5, 1]}))
    store.append_event(an_event("e2", minute=2, memory_id="m2"))
    store.append_event(an_event("e3", minute=3, memory_id="m1", kind="superseded"))
    store.append_event(an_event("e4", minute=4, kind="job", detail={"job": "cleanup"}))
    store.append_event(an_event("ex", namespace=OTHER, memory_id="m1"))
    # Then listings are newest first, filtered, limited, and round-trip the detail
    assert ids(store.list_events(NS)) == ["e4", "e3", "e2", "e1"]
    assert ids(store.list_events(NS, memory_id="m1")) == ["e3", "e1"]
    assert ids(store.list_events(NS, kind="created")) == ["e2", "e1"]
    assert ids(store.list_events(NS, memory_id="m1", kind="created")) == ["e1"]
    assert ids(store.list_events(NS, limit=1)) == ["e4"]
    assert store.list_events(NS, memory_id="m1")[-1].detail == {"reason": "new", "scores": [0.5, 1]}
    with pytest.raises(Conflict):
        store.append_event(an_event("e1"))
    # When events before minute 3 are deleted / Then two go, the rest stay
    assert store.delete_events_before(NS, at(3)) == 2
    assert ids(store.list_events(NS)) == ["e4", "e3"]
    assert ids(store.list_events(OTHER)) == ["ex"]


def test_usage_keeps_its_thread_or_none(store: AuditRows) -> None:
    # Given a usage row of a thread and one from before threads were kept with usage
    store.append_usage(a_usage("u1", minute=1))
    store.append_usage(a_usage("u2", minute=2, thread=None))
    # Then both read back as written
    assert store.list_usage(NS) == [a_usage("u1", minute=1), a_usage("u2", minute=2, thread=None)]


def test_usage(store: AuditRows) -> None:
    # Given three usage records and one in another namespace
    for n in (2, 0, 1):
        store.append_usage(a_usage(f"u{n}", minute=n))
    store.append_usage(a_usage("ux", namespace=OTHER))
    # Then they list oldest first, from ``since`` on, round-tripped
    assert ids(store.list_usage(NS)) == ["u0", "u1", "u2"]
    assert ids(store.list_usage(NS, since=at(1))) == ["u1", "u2"]
    assert store.list_usage(NS)[0] == a_usage("u0")
    with pytest.raises(Conflict):
        store.append_usage(a_usage("u0"))
    # When records before minute 2 are deleted / Then two go
    assert store.delete_usage_before(NS, at(2)) == 2
    assert ids(store.list_usage(NS)) == ["u2"]
    assert ids(store.list_usage(OTHER)) == ["ux"]
