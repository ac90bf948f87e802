"""The change journal and its undo on every store (services/library/journal.py, docs/journal.md): each kind of
change a run makes is recorded with the run, reverted by its undo (a row changed since is a conflict,
left alone), and redone by the undo of the undo; erasing a memory for good erases its journal content."""

from __future__ import annotations

from typing import Any

import pytest
from engram.domain.models import DailyLog, Digest, Memory, Reminder
from engram.domain.ports import MemoryStore
from engram.services.library.journal import Journal
from engram.services.library.journaled_store import JournaledStore, journaled

from tests.contract.rows import NS, T0, a_candidate, a_memory, a_message, a_precious, a_term, at
from tests.fakes.clock import ManualClock


@pytest.fixture
def pair(store: MemoryStore, clock: ManualClock) -> tuple[Journal, JournaledStore]:
    return journaled(store, clock, cursor_prefixes=("history:",))


@pytest.fixture
def journal(pair: tuple[Journal, JournaledStore]) -> Journal:
    return pair[0]


@pytest.fixture
def rows(pair: tuple[Journal, JournaledStore]) -> JournaledStore:
    return pair[1]


def _state(memory: Memory) -> tuple[str, str]:
    return memory.status, memory.content


def _changes(journal: Journal, run_id: str) -> list[tuple[str, str, str]]:
    page = journal.changes(NS, run_id, limit=500)
    return [(c.detail["row"], c.detail["op"], c.detail["id"]) for c in page.items]


def _retire(memory: Memory, status: str) -> Memory:
    return memory.model_copy(update={"status": status, "status_changed_at": at(5)})


def test_every_kind_of_memory_change_is_undone_and_redone(
    store: MemoryStore, rows: JournaledStore, journal: Journal, clock: ManualClock
) -> None:
    # Given six memories stored before the run
    before = {f"m{n}": store.insert_memory(a_memory(f"m{n}", fact_key=f"k:{n}")) for n in range(1, 7)}
    # When a run creates one, updates one, supersedes one, and archives, expires and deletes three
    with journal.run("job.dream", source="test") as run, journal.because("the model merged them"):
        rows.insert_memory(a_memory("new", content="a new fact"))
        rows.update_memory(before["m1"].model_copy(update={"content": "m1 rewritten"}))
        rows.supersede(
            _retire(before["m2"], "superseded").model_copy(update={"superseded_by_id": "m2b"}),
            a_memory("m2b", content="m2 superseded", fact_key="k:2", supersedes_id="m2", minute=1),
        )
        rows.update_memory(_retire(before["m3"], "archived"))
        rows.update_memory(_retire(before["m4"], "expired"))
        rows.update_memory(_retire(before["m5"], "deleted"))
    # Then each change is recorded with the run, in order, with the model's reason and both rows
    assert _changes(journal, run.id) == [
        ("memory", "create", "new"),
        ("memory", "update", "m1"),
        ("memory", "supersede", "m2"),
        ("memory", "create", "m2b"),
        ("memory", "archive", "m3"),
        ("memory", "expire", "m4"),
        ("memory", "delete", "m5"),
    ]
    first = journal.changes(NS, run.id).items[1]
    assert first.detail["reason"] == "the model merged them"
    assert first.detail["before"]["content"] == "content of m1"
    assert first.detail["after"]["content"] == "m1 rewritten"
    assert first.memory_id == "m1"
    record = journal.get_run(NS, run.id)
    assert record.kind == "job.dream"
    assert record.detail["changed"] == 7
    assert record.detail["changes"]["memory.create"] == 2
    assert [r.id for r in journal.runs(NS).items] == [run.id]
    # When the run is undone
    undo = journal.undo(NS, run.id, source="test")
    # Then every row is as before the run (the created ones deleted, restorable), nothing conflicts
    assert undo["reverted"] == 7
    assert undo["conflicts"] == []
    assert store.get_memory(NS, "new").status == "deleted"
    assert store.get_memory(NS, "m2b").status == "deleted"
    for memory_id, memory in before.items():
        assert _state(store.get_memory(NS, memory_id)) == _state(memory), memory_id
    assert store.find_active_by_fact_key(NS, "k:2") is not None
    assert store.find_active_by_fact_key(NS, "k:2").id == "m2"  # type: ignore[union-attr]
    # And the undo is a run of its own, listed first
    assert [r.id for r in journal.runs(NS).items] == [undo["run_id"], run.id]
    assert journal.get_run(NS, undo["run_id"]).detail["undoes"] == run.id
    # When the undo is undone / Then the run's changes are back (a redo)
    redo = journal.undo(NS, undo["run_id"])
    assert redo["reverted"] == 7
    assert redo["conflicts"] == []
    assert _state(store.get_memory(NS, "new")) == ("active", "a new fact")
    assert _state(store.get_memory(NS, "m1")) == ("active", "m1 rewritten")
    assert store.get_memory(NS, "m2").status == "superseded"
    assert _state(store.get_memory(NS, "m2b")) == ("active", "m2 superseded")
    assert [store.get_memory(NS, f"m{n}").status for n in (3, 4, 5, 6)] == ["archived", "expired", "deleted", "active"]


def test_a_row_changed_after_the_run_is_a_conflict_and_left_alone(
    store: MemoryStore, rows: JournaledStore, journal: Journal
) -> None:
    # Given a run that rewrote two memories
    one = store.insert_memory(a_memory("one"))
    two = store.insert_memory(a_memory("two"))
    with journal.run("job.dream") as run:
        one = rows.update_memory(one.model_copy(update={"content": "one by the run"}))
        rows.update_memory(two.model_copy(update={"content": "two by the run"}))
    # And a person edited the first one afterwards
    edited = store.update_memory(one.model_copy(update={"content": "one by hand"}))
    # When the run is undone
    undo = journal.undo(NS, run.id)
    # Then the edited memory is reported, not overwritten; the other is reverted
    assert undo["reverted"] == 1
    assert [(c["row"], c["id"], c["error"]) for c in undo["conflicts"]] == [("memory", "one", "version_conflict")]
    assert store.get_memory(NS, "one") == edited
    assert store.get_memory(NS, "two").content == "content of two"
    # And undoing the same run again reverts nothing more: every row is now a conflict
    again = journal.undo(NS, run.id)
    assert again["reverted"] == 0
    assert len(again["conflicts"]) == 2


def test_bookkeeping_after_the_run_is_not_a_conflict(
    store: MemoryStore, rows: JournaledStore, journal: Journal
) -> None:
    # Given a run's rewrite, then the index's reference and a sighting written since (not changes)
    memory = store.insert_memory(a_memory("m"))
    with journal.run("job.dream") as run:
        memory = rows.update_memory(memory.model_copy(update={"content": "rewritten"}))
        rows.update_memory(memory.model_copy(update={"index_ref": "doc-7"}))  # not journaled: bookkeeping
    store.record_seen(NS, "m", at(9))
    assert _changes(journal, run.id) == [("memory", "update", "m")]
    # When the run is undone / Then the rewrite is reverted, keeping the current index reference
    assert journal.undo(NS, run.id)["reverted"] == 1
    now = store.get_memory(NS, "m")
    assert (now.content, now.index_ref) == ("content of m", "doc-7")


def test_notes_candidates_threads_reminders_and_summaries_are_undone_and_redone(
    store: MemoryStore, rows: JournaledStore, journal: Journal, clock: ManualClock
) -> None:
    # Given notes, a candidate, a thread, a reminder and a kept summary before the run
    store.insert_precious(a_precious("p1"))
    store.put_glossary_term(a_term("g1", "Mochi"))
    store.put_glossary_term(a_term("g2", "Kiki"))
    store.put_digest(Digest(namespace=NS, content="old digest", updated_at=T0))
    store.put_daily_log(DailyLog(namespace=NS, date="2025-03-01", summary="old day", created_at=T0))
    store.insert_candidate(a_candidate("c1"))
    store.insert_message(a_message("msg1", conversation_id="trip"))
    store.insert_memory(a_memory("rm", remind_at=at(60)))
    store.put_reminder(Reminder(namespace=NS, memory_id="rm", remind_at=at(60)))
    store.set_cursor(NS, "history:trip", '{"summary": "old"}')
    start = _snapshot(store)
    # When a run changes each of them
    with journal.run("job.extract") as run:
        rows.insert_precious(a_precious("p2", minute=1))
        rows.delete_precious(NS, "p1")
        rows.put_glossary_term(a_term("g3", "Rex"))
        rows.put_glossary_term(a_term("g1", "Mochi").model_copy(update={"definition": "the cat"}))
        rows.delete_glossary_term(NS, "g2")
        rows.put_digest(Digest(namespace=NS, content="new digest", updated_at=at(1)))
        rows.put_daily_log(DailyLog(namespace=NS, date="2025-03-01", summary="new day", created_at=at(1)))
        rows.put_daily_log(DailyLog(namespace=NS, date="2025-03-02", summary="next day", created_at=at(1)))
        rows.insert_candidate(a_candidate("c2", minute=1))
        rows.update_candidate(a_candidate("c1").model_copy(update={"status": "approved", "decided_at": at(1)}))
        rows.update_thread(NS, "trip", title="Trip to Rome", deleted_at=None)
        rows.put_reminder(Reminder(namespace=NS, memory_id="rm", remind_at=at(120)))
        rows.set_cursor(NS, "history:trip", '{"summary": "new"}')
        rows.set_cursor(NS, "extract:cursor", "not journaled")
    changed = _snapshot(store)
    assert {row for row, _op, _id in _changes(journal, run.id)} == {
        "precious",
        "glossary",
        "digest",
        "daily_log",
        "candidate",
        "thread",
        "reminder",
        "summary",
    }
    # When the run is undone / Then every row is as it was (created ones retired)
    undo = journal.undo(NS, run.id)
    assert undo["conflicts"] == [] and undo["skipped"] == []
    after_undo = _snapshot(store)
    assert after_undo | {"candidates": None, "days": None} == start | {"candidates": None, "days": None}
    assert after_undo["candidates"] == {"c1": "pending", "c2": "discarded"}
    assert after_undo["days"] == {"2025-03-01": "old day", "2025-03-02": ""}
    # When the undo is undone / Then the run's state is back
    redo = journal.undo(NS, undo["run_id"])
    assert redo["conflicts"] == []
    assert _snapshot(store) == changed


def _snapshot(store: MemoryStore) -> dict[str, Any]:
    return {
        "precious": sorted(p.id for p in store.list_precious(NS)),
        "glossary": sorted((g.id, g.definition) for g in store.list_glossary(NS)),
        "digest": store.get_digest(NS).content,  # type: ignore[union-attr]
        "days": {d.date: d.summary for d in store.list_daily_logs(NS)},
        "candidates": {c.id: c.status for c in store.list_candidates(NS, status=None).items},
        "thread": store.get_thread(NS, "trip").title,
        "reminder": (store.find_reminder(NS, "rm").remind_at, store.find_reminder(NS, "rm").status),  # type: ignore[union-attr]
        "summary": store.get_cursor(NS, "history:trip"),
    }


def test_erasing_a_memory_for_good_erases_its_journal_content(
    store: MemoryStore, rows: JournaledStore, journal: Journal
) -> None:
    # Given a run that rewrote a memory, whose history lists the change with both texts
    memory = store.insert_memory(a_memory("secret", content="my secret"))
    with journal.run("job.dream") as run:
        memory = rows.update_memory(memory.model_copy(update={"content": "my secret, rewritten"}))
    assert [e.kind for e in store.list_events(NS, memory_id="secret")] == ["change"]
    # When the memory is erased for good (cleanup's hard delete) in a later run
    with journal.run("job.cleanup") as cleanup:
        assert rows.delete_memory_row(NS, "secret", version=memory.version)
    # Then no event keeps its text; the erasure is recorded without it, and cannot be undone
    assert store.list_events(NS, memory_id="secret") == []
    assert journal.changes(NS, run.id).items == []
    erased = journal.changes(NS, cleanup.id).items
    assert [(e.detail["op"], e.detail["before"], e.detail["after"], e.memory_id) for e in erased] == [
        ("erase", None, None, None)
    ]
    undo = journal.undo(NS, cleanup.id)
    assert undo["reverted"] == 0 and [s["op"] for s in undo["skipped"]] == ["erase"]


def test_outside_a_run_nothing_is_recorded(store: MemoryStore, rows: JournaledStore, journal: Journal) -> None:
    rows.insert_memory(a_memory("m"))
    rows.put_digest(Digest(namespace=NS, content="d", updated_at=T0))
    assert journal.runs(NS).items == []
    assert store.list_events(NS) == []


def test_a_run_that_changed_nothing_is_recorded_only_when_asked(
    store: MemoryStore, journal: Journal, clock: ManualClock
) -> None:
    with journal.run("edit", always_record=False):
        pass
    with journal.run("import", detail={"namespace": NS}) as kept:
        clock.advance(seconds=1)
    assert [r.id for r in journal.runs(NS).items] == [kept.id]


def test_a_merge_is_recorded_and_its_undo_puts_the_sources_back(
    store: MemoryStore, rows: JournaledStore, journal: Journal
) -> None:
    # Given two memories merged into one in a run (supersede_many: the panel's merge by hand)
    one = store.insert_memory(a_memory("one", content="tea at 7"))
    two = store.insert_memory(a_memory("two", content="green tea"))
    retire = {"status": "superseded", "superseded_by_id": "both", "status_changed_at": at(1)}
    with journal.run("merge", source="test") as run:
        rows.supersede_many(
            [one.model_copy(update=retire), two.model_copy(update=retire)],
            a_memory("both", content="green tea at 7", supersedes_id="one", minute=1),
        )
    assert _changes(journal, run.id) == [
        ("memory", "supersede", "one"),
        ("memory", "supersede", "two"),
        ("memory", "create", "both"),
    ]
    # When the run is undone / Then the sources are active as they were, the merged memory deleted
    assert journal.undo(NS, run.id)["reverted"] == 3
    states = [_state(store.get_memory(NS, m)) for m in ("one", "two")]
    assert states == [("active", "tea at 7"), ("active", "green tea")]
    assert store.get_memory(NS, "both").status == "deleted"
