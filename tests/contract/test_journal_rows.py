"""The ``JournalRows`` contract (the change journal in the event log; domain/ports.py, docs/journal.md):
every store in ``STORE_FACTORIES``."""

from __future__ import annotations

from typing import Any

import pytest
from engram.domain.errors import InvalidInput
from engram.domain.ports import AuditRows, JournalRows

from tests.contract.rows import NS, OTHER, all_pages, an_event, at, ids


class Journal(AuditRows, JournalRows):
    """What these tests use of a store."""


def a_run(run_id: str, *, minute: float = 0, namespace: str = NS, kind: str = "job.dream") -> Any:
    return an_event(run_id, run_id=run_id, minute=minute, namespace=namespace, kind=kind, detail={"changes": 2})


def a_change(event_id: str, run_id: str, *, minute: float = 0, **fields: Any) -> Any:
    detail = {"row": "memory", "op": "update", "before": {"content": "old"}, "after": {"content": "new"}}
    return an_event(event_id, run_id=run_id, minute=minute, kind="change", detail=detail, **fields)


def test_the_store_implements_journal_rows(store: JournalRows) -> None:
    assert isinstance(store, JournalRows)


def test_runs_list_newest_first_and_page(store: Journal) -> None:
    # Given three run records, a change of one, a plain event, and a run of another namespace
    for n in (1, 3, 2):
        store.append_event(a_run(f"run{n}", minute=n))
    store.append_event(a_change("evt_a", "run1", minute=1))
    store.append_event(an_event("plain", minute=5))
    store.append_event(a_run("runx", namespace=OTHER))
    # Then the runs list holds the records only, newest first, paged, round-tripped
    assert ids(store.list_runs(NS).items) == ["run3", "run2", "run1"]
    assert all_pages(lambda c: store.list_runs(NS, limit=2, cursor=c)) == [["run3", "run2"], ["run1"]]
    assert store.list_runs(NS).items[0] == a_run("run3", minute=3)
    assert ids(store.list_runs(OTHER).items) == ["runx"]
    # And a run is found by id in its own namespace only; a change is not a run
    assert store.get_run(NS, "run2") == a_run("run2", minute=2)
    assert store.get_run(OTHER, "run2") is None
    assert store.get_run(NS, "evt_a") is None
    assert store.get_run(NS, "nope") is None
    with pytest.raises(InvalidInput):
        store.list_runs(NS, cursor="garbage!")


def test_run_changes_in_the_order_written_and_page(store: Journal) -> None:
    # Given a run with five changes written out of time order (ids order them), and another run's change
    store.append_event(a_run("run1", minute=9))
    for n, minute in ((1, 5), (2, 1), (3, 1), (4, 0), (5, 7)):
        store.append_event(a_change(f"evt_{n}", "run1", minute=minute, memory_id=f"m{n}"))
    store.append_event(a_change("evt_0", "run2"))
    # Then the run's changes list in id order, without the run's record, paged
    assert ids(store.list_run_changes(NS, "run1").items) == ["evt_1", "evt_2", "evt_3", "evt_4", "evt_5"]
    pages = all_pages(lambda c: store.list_run_changes(NS, "run1", limit=2, cursor=c))
    assert pages == [["evt_1", "evt_2"], ["evt_3", "evt_4"], ["evt_5"]]
    assert store.list_run_changes(NS, "run1").items[0] == a_change("evt_1", "run1", minute=5, memory_id="m1")
    assert ids(store.list_run_changes(OTHER, "run1").items) == []
    # And a memory's history lists its journal changes with its other events
    store.append_event(an_event("evt_6", memory_id="m1", kind="updated", minute=6))
    assert ids(store.list_events(NS, memory_id="m1")) == ["evt_6", "evt_1"]


def test_event_retention_leaves_the_journal_and_journal_retention_takes_it(store: Journal) -> None:
    # Given old plain events, an old run with a change, and a new run with a change
    store.append_event(an_event("old", minute=1))
    store.append_event(a_run("run_old", minute=1))
    store.append_event(a_change("evt_old", "run_old", minute=1))
    store.append_event(a_run("run_new", minute=10))
    store.append_event(a_change("evt_new", "run_new", minute=10))
    # When the event log's retention runs / Then only the plain event goes
    assert store.delete_events_before(NS, at(5)) == 1
    assert ids(store.list_runs(NS).items) == ["run_new", "run_old"]
    # When the journal's retention runs / Then the old run and its change go, the new one stays
    assert store.delete_journal_before(NS, at(5)) == 2
    assert ids(store.list_runs(NS).items) == ["run_new"]
    assert ids(store.list_run_changes(NS, "run_old").items) == []
    assert ids(store.list_run_changes(NS, "run_new").items) == ["evt_new"]


def test_erasing_a_memory_deletes_its_events_and_journal_changes(store: Journal) -> None:
    # Given a run that changed two memories, and an event of the first memory outside the journal
    store.append_event(a_run("run1"))
    store.append_event(a_change("evt_1", "run1", memory_id="m1"))
    store.append_event(a_change("evt_2", "run1", memory_id="m2"))
    store.append_event(an_event("evt_3", memory_id="m1"))
    store.append_event(an_event("evt_x", memory_id="m1", namespace=OTHER))
    # When the first memory's events are deleted
    assert store.delete_memory_events(NS, "m1") == 2
    # Then nothing of it is left in the journal or the log; the rest stays
    assert ids(store.list_events(NS, memory_id="m1")) == []
    assert ids(store.list_run_changes(NS, "run1").items) == ["evt_2"]
    assert ids(store.list_runs(NS).items) == ["run1"]
    assert ids(store.list_events(OTHER, memory_id="m1")) == ["evt_x"]
