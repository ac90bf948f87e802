"""The ``MemoryStore`` contract (domain/ports.py), run against every adapter in ``STORE_FACTORIES``."""

from __future__ import annotations

import threading
from collections.abc import Callable
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest
from engram.domain.errors import Conflict, InvalidInput, NotFound
from engram.domain.models import (
    Candidate,
    DailyLog,
    Digest,
    GlossaryTerm,
    IdempotencyRecord,
    Memory,
    MemoryEvent,
    MemoryFilter,
    Message,
    Precious,
    UsageRecord,
)
from engram.domain.ports import MemoryStore

NS = "alice"
OTHER = "bob"
T0 = datetime(2025, 3, 1, 12, 0, tzinfo=UTC)


def at(minutes: float) -> datetime:
    return T0 + timedelta(minutes=minutes)


def a_memory(memory_id: str, *, namespace: str = NS, minute: float = 0, **fields: Any) -> Memory:
    defaults = {"content": f"content of {memory_id}", "created_at": at(minute), "updated_at": at(minute)}
    return Memory(id=memory_id, namespace=namespace, **{**defaults, **fields})


def a_candidate(candidate_id: str, *, namespace: str = NS, minute: float = 0, **fields: Any) -> Candidate:
    defaults = {"content": f"candidate {candidate_id}", "created_at": at(minute)}
    return Candidate(id=candidate_id, namespace=namespace, **{**defaults, **fields})


def a_message(message_id: str, *, namespace: str = NS, minute: float = 0, **fields: Any) -> Message:
    defaults = {"role": "user", "content": f"message {message_id}", "created_at": at(minute)}
    return Message(id=message_id, namespace=namespace, **{**defaults, **fields})


def a_precious(precious_id: str, *, namespace: str = NS, minute: float = 0) -> Precious:
    return Precious(id=precious_id, namespace=namespace, content=f"verbatim {precious_id}", created_at=at(minute))


def a_term(term_id: str, term: str, *, namespace: str = NS) -> GlossaryTerm:
    return GlossaryTerm(
        id=term_id, namespace=namespace, term=term, definition=f"{term} means", created_at=T0, updated_at=T0
    )


def an_event(event_id: str, *, namespace: str = NS, minute: float = 0, **fields: Any) -> MemoryEvent:
    defaults = {"kind": "created", "created_at": at(minute)}
    return MemoryEvent(id=event_id, namespace=namespace, **{**defaults, **fields})


def a_usage(usage_id: str, *, namespace: str = NS, minute: float = 0) -> UsageRecord:
    return UsageRecord(id=usage_id, namespace=namespace, model="gpt-x", input_tokens=10, created_at=at(minute))


def ids(rows: Any) -> list[str]:
    return [row.id for row in rows]


def all_pages(fetch: Callable[[str | None], Any], *, max_pages: int = 20) -> list[list[str]]:
    """Follow cursors from the first page to the last; the ids of each page (a cursor loop fails)."""
    pages: list[list[str]] = []
    cursor: str | None = None
    for _ in range(max_pages):
        page = fetch(cursor)
        pages.append(ids(page.items))
        cursor = page.next_cursor
        if cursor is None:
            return pages
    pytest.fail(f"no last page after {max_pages} pages: {pages}")


def test_adapter_implements_the_port(store: MemoryStore) -> None:
    # Given an adapter from the registry / Then it satisfies the runtime-checkable port
    assert isinstance(store, MemoryStore)


def test_ping_succeeds_on_a_working_store(store: MemoryStore) -> None:
    # Given a fresh store / When it is pinged / Then nothing is raised
    store.ping()


# -- memories ---------------------------------------------------------------------------------


def test_memory_round_trips_every_field(store: MemoryStore) -> None:
    # Given a memory with every field set, one timestamp in a non-UTC zone
    memory = Memory(
        id="m1",
        namespace=NS,
        content="Alice lives in Lyon 🇫🇷 (里昂)",
        type="identity",
        fact_key="identity:city",
        layer="core",
        importance=0.9,
        confidence=0.7,
        pinned=True,
        tags=("home", "city"),
        status="active",
        supersedes_id="m0",
        superseded_by_id=None,
        source="extraction",
        source_message_ids=("msg1", "msg2"),
        external_id="ext-1",
        remind_at=datetime(2025, 4, 1, 9, 30, 15, 123456, tzinfo=timezone(timedelta(hours=2))),
        seen_count=3,
        last_seen_at=at(5),
        last_injected_at=at(6),
        recall_count=2,
        created_at=at(1),
        updated_at=at(2),
        status_changed_at=at(3),
        expires_at=at(60 * 24 * 180),
        index_ref="doc-1",
    )
    # When it is inserted and read back
    returned = store.insert_memory(memory)
    stored = store.get_memory(NS, "m1")
    # Then the stored row equals the original, with aware timestamps
    assert returned == memory
    assert stored == memory
    assert stored.remind_at is not None and stored.remind_at.utcoffset() is not None
    assert stored.created_at.utcoffset() == timedelta(0)


def test_get_unknown_memory_raises_not_found(store: MemoryStore) -> None:
    # Given an empty store / When an unknown id is read / Then NotFound
    with pytest.raises(NotFound):
        store.get_memory(NS, "nope")


def test_insert_memory_with_existing_id_conflicts(store: MemoryStore) -> None:
    # Given a stored memory
    store.insert_memory(a_memory("m1"))
    # When another memory with the same id is inserted / Then Conflict, and the first row stays
    with pytest.raises(Conflict):
        store.insert_memory(a_memory("m1", content="other"))
    assert store.get_memory(NS, "m1").content == "content of m1"


def test_update_memory_replaces_the_row(store: MemoryStore) -> None:
    # Given a stored memory
    original = store.insert_memory(a_memory("m1", tags=("a",)))
    # When it is updated
    changed = original.model_copy(update={"content": "new", "tags": ("b", "c"), "seen_count": 4})
    store.update_memory(changed)
    # Then the next read sees the change
    assert store.get_memory(NS, "m1") == changed


def test_update_unknown_memory_raises_not_found(store: MemoryStore) -> None:
    # Given an empty store / When a memory that was never inserted is updated / Then NotFound, nothing stored
    with pytest.raises(NotFound):
        store.update_memory(a_memory("ghost"))
    assert store.get_memories(NS, ["ghost"]) == []


def test_update_cannot_make_a_second_active_memory_for_a_fact_key(store: MemoryStore) -> None:
    # Given an active memory and an archived one with the same fact_key
    store.insert_memory(a_memory("m1", fact_key="pref:tea"))
    archived = store.insert_memory(a_memory("m2", fact_key="pref:tea", status="archived"))
    # When the archived one is restored to active
    with pytest.raises(Conflict):
        store.update_memory(archived.model_copy(update={"status": "active"}))
    # Then it is still archived
    assert store.get_memory(NS, "m2").status == "archived"


def test_get_memories_keeps_requested_order_and_skips_unknown(store: MemoryStore) -> None:
    # Given three memories
    for n in (1, 2, 3):
        store.insert_memory(a_memory(f"m{n}", minute=n))
    # When they are fetched in a chosen order with an unknown id mixed in
    found = store.get_memories(NS, ["m3", "nope", "m1", "m2"])
    # Then they come back in that order without the unknown one
    assert ids(found) == ["m3", "m1", "m2"]
    assert store.get_memories(NS, []) == []


def test_at_most_one_active_memory_per_fact_key(store: MemoryStore) -> None:
    # Given an active memory with a fact_key
    store.insert_memory(a_memory("m1", fact_key="pref:tea"))
    # When a second active memory takes the same key / Then Conflict
    with pytest.raises(Conflict):
        store.insert_memory(a_memory("m2", fact_key="pref:tea"))
    # And a non-active one with that key, or an active one in another namespace, is fine
    store.insert_memory(a_memory("m3", fact_key="pref:tea", status="superseded"))
    store.insert_memory(a_memory("m4", namespace=OTHER, fact_key="pref:tea"))
    # And memories without a key never collide
    store.insert_memory(a_memory("m5"))
    store.insert_memory(a_memory("m6"))
    assert store.find_active_by_fact_key(NS, "pref:tea") == store.get_memory(NS, "m1")
    assert store.get_memories(NS, ["m2"]) == []


def test_find_active_by_fact_key_ignores_inactive_rows(store: MemoryStore) -> None:
    # Given only a superseded memory for a key
    store.insert_memory(a_memory("m1", fact_key="pref:tea", status="superseded"))
    # When the active memory for the key is looked up / Then there is none
    assert store.find_active_by_fact_key(NS, "pref:tea") is None
    assert store.find_active_by_fact_key(NS, "unknown:key") is None


def test_external_id_is_unique_per_namespace(store: MemoryStore) -> None:
    # Given a memory with an external_id
    store.insert_memory(a_memory("m1", external_id="ext-1"))
    # When another memory with the same external_id is inserted / Then Conflict
    with pytest.raises(Conflict):
        store.insert_memory(a_memory("m2", external_id="ext-1"))
    # And the same external_id in another namespace is a different key
    store.insert_memory(a_memory("m3", namespace=OTHER, external_id="ext-1"))
    assert ids([store.find_by_external_id(NS, "ext-1")]) == ["m1"]
    assert ids([store.find_by_external_id(OTHER, "ext-1")]) == ["m3"]
    assert store.find_by_external_id(NS, "ext-2") is None


def test_supersede_swaps_the_active_row(store: MemoryStore) -> None:
    # Given an active memory for a key
    old = store.insert_memory(a_memory("m1", fact_key="city", content="Paris"))
    # When it is superseded by a new version
    retired = old.model_copy(update={"status": "superseded", "superseded_by_id": "m2", "status_changed_at": at(5)})
    new = a_memory("m2", fact_key="city", minute=5, content="Lyon", supersedes_id="m1")
    result = store.supersede(retired, new)
    # Then both rows are stored and the new one is the active memory for the key
    assert result == (retired, new)
    assert store.get_memory(NS, "m1") == retired
    assert store.get_memory(NS, "m2") == new
    assert store.find_active_by_fact_key(NS, "city") == new


def test_supersede_changes_nothing_when_the_new_key_is_taken(store: MemoryStore) -> None:
    # Given the memory to supersede and a third active memory holding another key
    old = store.insert_memory(a_memory("m1", fact_key="city"))
    store.insert_memory(a_memory("m3", fact_key="home"))
    # When the new version would take the third memory's key
    retired = old.model_copy(update={"status": "superseded", "superseded_by_id": "m2"})
    with pytest.raises(Conflict):
        store.supersede(retired, a_memory("m2", fact_key="home"))
    # Then the old row is unchanged and the new row was not stored
    assert store.get_memory(NS, "m1") == old
    assert store.get_memories(NS, ["m2"]) == []


def test_supersede_changes_nothing_when_the_new_id_exists(store: MemoryStore) -> None:
    # Given the memory to supersede and another memory using the new version's id
    old = store.insert_memory(a_memory("m1", fact_key="city"))
    existing = store.insert_memory(a_memory("m2", content="unrelated"))
    # When the supersede runs
    retired = old.model_copy(update={"status": "superseded", "superseded_by_id": "m2"})
    with pytest.raises(Conflict):
        store.supersede(retired, a_memory("m2", fact_key="city", content="Lyon"))
    # Then both rows are as they were
    assert store.get_memory(NS, "m1") == old
    assert store.get_memory(NS, "m2") == existing


def test_supersede_changes_nothing_when_the_old_row_stays_active(store: MemoryStore) -> None:
    # Given an active memory for a key
    old = store.insert_memory(a_memory("m1", fact_key="city"))
    # When a new active version is stored while the old one is still marked active
    with pytest.raises(Conflict):
        store.supersede(old.model_copy(update={"content": "edited"}), a_memory("m2", fact_key="city"))
    # Then nothing changed
    assert store.get_memory(NS, "m1") == old
    assert store.get_memories(NS, ["m2"]) == []


def test_supersede_of_unknown_memory_raises_not_found(store: MemoryStore) -> None:
    # Given an empty store / When a memory that was never stored is superseded
    with pytest.raises(NotFound):
        store.supersede(a_memory("m1", status="superseded"), a_memory("m2"))
    # Then the new version was not stored either
    assert store.get_memories(NS, ["m1", "m2"]) == []


def test_delete_memory_row_removes_it_and_ignores_unknown_ids(store: MemoryStore) -> None:
    # Given two memories
    store.insert_memory(a_memory("m1"))
    store.insert_memory(a_memory("m2"))
    # When one is hard-deleted, and an unknown id too
    store.delete_memory_row(NS, "m1")
    store.delete_memory_row(NS, "nope")
    # Then only the other one remains
    with pytest.raises(NotFound):
        store.get_memory(NS, "m1")
    assert ids(store.iter_memories(NS)) == ["m2"]


def test_list_memories_pages_newest_first(store: MemoryStore) -> None:
    # Given five memories, two of them created at the same instant
    for memory_id, minute in [("m1", 1), ("m2", 2), ("m3", 3), ("m4", 3), ("m5", 5)]:
        store.insert_memory(a_memory(memory_id, minute=minute))
    # When every page of two is fetched
    pages = all_pages(lambda cursor: store.list_memories(NS, MemoryFilter(), limit=2, cursor=cursor))
    # Then rows come newest first, ties by id descending, with no gap or repeat
    assert pages == [["m5", "m4"], ["m3", "m2"], ["m1"]]


def test_list_memories_last_full_page_has_no_cursor(store: MemoryStore) -> None:
    # Given exactly two memories / When a page of two is fetched / Then there is no next page
    store.insert_memory(a_memory("m1", minute=1))
    store.insert_memory(a_memory("m2", minute=2))
    page = store.list_memories(NS, MemoryFilter(), limit=2)
    assert ids(page.items) == ["m2", "m1"]
    assert page.next_cursor is None


def test_list_memories_cursor_is_stable_under_inserts(store: MemoryStore) -> None:
    # Given four memories and the first page of two
    for n in (1, 2, 3, 4):
        store.insert_memory(a_memory(f"m{n}", minute=n))
    first = store.list_memories(NS, MemoryFilter(), limit=2)
    # When a newer memory arrives before the next page is read
    store.insert_memory(a_memory("m9", minute=9))
    second = store.list_memories(NS, MemoryFilter(), limit=2, cursor=first.next_cursor)
    # Then the next page continues where the first stopped
    assert ids(first.items) == ["m4", "m3"]
    assert ids(second.items) == ["m2", "m1"]
    assert second.next_cursor is None


def test_list_memories_rejects_a_malformed_cursor(store: MemoryStore) -> None:
    # Given any store / When a cursor it did not make is passed / Then InvalidInput
    for cursor in ("not-a-cursor", "", "W10"):
        with pytest.raises(InvalidInput):
            store.list_memories(NS, MemoryFilter(), cursor=cursor)


def test_list_memories_filters(store: MemoryStore) -> None:
    # Given memories that differ in type, status, layer, tags, pin and key
    store.insert_memory(a_memory("fact", minute=1, tags=("work",)))
    store.insert_memory(a_memory("pref", minute=2, type="preference", tags=("food", "work")))
    store.insert_memory(a_memory("core", minute=3, layer="core", pinned=True, fact_key="id:name"))
    store.insert_memory(a_memory("old", minute=4, type="note", status="superseded", fact_key="id:name", tags=("work",)))
    store.insert_memory(a_memory("gone", minute=5, status="archived"))

    def listed(**filters: Any) -> list[str]:
        return ids(store.list_memories(NS, MemoryFilter(**filters)).items)

    # When each filter is applied / Then only matching rows come back, newest first
    assert listed() == ["core", "pref", "fact"]
    assert listed(statuses=()) == ["gone", "old", "core", "pref", "fact"]  # empty: every status ("all")
    assert listed(statuses=("superseded", "archived")) == ["gone", "old"]
    assert listed(types=("preference", "identity")) == ["pref"]
    assert listed(layer="core") == ["core"]
    assert listed(tag="work") == ["pref", "fact"]
    assert listed(tag="wor") == []
    assert listed(pinned=True) == ["core"]
    assert listed(pinned=False) == ["pref", "fact"]
    assert listed(fact_key="id:name", statuses=("active", "superseded")) == ["old", "core"]
    assert listed(tag="work", statuses=("active", "superseded"), types=("fact",)) == ["fact"]


def test_list_memories_of_every_status_pages_across_statuses(store: MemoryStore) -> None:
    # Given one memory in each status, interleaved in time, and one in another namespace
    statuses = ["active", "superseded", "archived", "deleted", "expired", "active", "archived"]
    for n, status in enumerate(statuses):
        store.insert_memory(a_memory(f"m{n}", minute=n, status=status))
    store.insert_memory(a_memory("other", namespace=OTHER, status="archived"))
    # When every status is listed ("all" is the empty filter), two at a time
    pages = all_pages(lambda cursor: store.list_memories(NS, MemoryFilter(statuses=()), limit=2, cursor=cursor))
    # Then every row of the namespace comes back once, newest first, whatever its status
    assert pages == [["m6", "m5"], ["m4", "m3"], ["m2", "m1"], ["m0"]]


def test_list_memories_cursor_continues_with_filters(store: MemoryStore) -> None:
    # Given tagged and untagged memories interleaved in time
    for n in range(1, 8):
        store.insert_memory(a_memory(f"m{n}", minute=n, tags=("even",) if n % 2 == 0 else ()))
    # When the tagged ones are paged one at a time
    pages = all_pages(lambda cursor: store.list_memories(NS, MemoryFilter(tag="even"), limit=1, cursor=cursor))
    # Then each page holds the next tagged memory and nothing else
    assert pages == [["m6"], ["m4"], ["m2"]]


def test_iter_memories_is_oldest_first_and_filters_by_status(store: MemoryStore) -> None:
    # Given memories in several statuses, inserted out of time order
    store.insert_memory(a_memory("m3", minute=3, status="archived"))
    store.insert_memory(a_memory("m1", minute=1))
    store.insert_memory(a_memory("m2", minute=2, status="superseded"))
    store.insert_memory(a_memory("m0", namespace=OTHER))
    # When the namespace is iterated / Then every status comes, oldest first, only this namespace
    assert ids(store.iter_memories(NS)) == ["m1", "m2", "m3"]
    assert ids(store.iter_memories(NS, ["active", "archived"])) == ["m1", "m3"]
    assert ids(store.iter_memories(NS, ["deleted"])) == []


def test_count_memories(store: MemoryStore) -> None:
    # Given memories of several statuses, types and layers
    store.insert_memory(a_memory("m1", type="fact"))
    store.insert_memory(a_memory("m2", type="preference", layer="core"))
    store.insert_memory(a_memory("m3", type="preference", status="archived", layer="core"))
    store.insert_memory(a_memory("m4", type="fact", status="deleted"))
    store.insert_memory(a_memory("m5", namespace=OTHER))
    # When they are counted
    counts = store.count_memories(NS)
    # Then statuses count every row, types and layers only active ones, every known key present
    assert counts["status"] == {"active": 2, "superseded": 0, "archived": 1, "deleted": 1, "expired": 0}
    assert {k: v for k, v in counts["type"].items() if v} == {"fact": 1, "preference": 1}
    assert counts["type"]["identity"] == 0
    assert counts["layer"] == {"fragment": 1, "event": 0, "core": 1}


def test_memories_changed_before(store: MemoryStore) -> None:
    # Given deleted/superseded memories whose status changed at various times
    store.insert_memory(a_memory("late", status="deleted", status_changed_at=at(50)))
    store.insert_memory(a_memory("early", status="deleted", status_changed_at=at(10)))
    store.insert_memory(a_memory("implicit", minute=20, status="superseded"))  # falls back to updated_at
    store.insert_memory(a_memory("archived", status="archived", status_changed_at=at(1)))
    store.insert_memory(a_memory("active", status_changed_at=at(1)))
    # When the sweep asks for rows changed before minute 40
    found = store.memories_changed_before(NS, ["deleted", "superseded"], at(40))
    # Then only those statuses, changed strictly before, oldest change first
    assert ids(found) == ["early", "implicit"]
    assert ids(store.memories_changed_before(NS, ["deleted", "superseded"], at(40), limit=1)) == ["early"]
    assert store.memories_changed_before(NS, ["deleted"], at(10)) == []
    assert store.memories_changed_before(OTHER, ["deleted"], at(100)) == []


def test_memories_unseen_since(store: MemoryStore) -> None:
    # Given active memories last seen at different times, one never seen
    store.insert_memory(a_memory("seen-late", minute=1, last_seen_at=at(90)))
    store.insert_memory(a_memory("seen-early", minute=1, last_seen_at=at(30)))
    store.insert_memory(a_memory("never-seen", minute=20))
    store.insert_memory(a_memory("archived", minute=1, status="archived"))
    # When asking for those unseen since minute 60
    found = store.memories_unseen_since(NS, at(60))
    # Then active ones whose last sighting (or creation) is before it, oldest sighting first
    assert ids(found) == ["never-seen", "seen-early"]
    assert ids(store.memories_unseen_since(NS, at(60), limit=1)) == ["never-seen"]
    assert store.memories_unseen_since(OTHER, at(60)) == []


def test_memory_rows_are_isolated_by_namespace(store: MemoryStore) -> None:
    # Given a memory in namespace A
    memory = store.insert_memory(
        a_memory("m1", fact_key="k", external_id="e", status_changed_at=at(0), tags=("t",), layer="core")
    )
    # When namespace B reads or writes by that id, key or listing
    # Then B never sees or touches A's row
    with pytest.raises(NotFound):
        store.get_memory(OTHER, "m1")
    with pytest.raises(NotFound):
        store.update_memory(memory.model_copy(update={"namespace": OTHER, "content": "hijack"}))
    store.delete_memory_row(OTHER, "m1")
    assert store.get_memories(OTHER, ["m1"]) == []
    assert store.find_active_by_fact_key(OTHER, "k") is None
    assert store.find_by_external_id(OTHER, "e") is None
    assert store.list_memories(OTHER, MemoryFilter(tag="t")).items == []
    assert list(store.iter_memories(OTHER)) == []
    assert sum(store.count_memories(OTHER)["status"].values()) == 0
    assert store.memories_unseen_since(OTHER, at(60)) == []
    assert store.get_memory(NS, "m1") == memory


# -- review candidates ------------------------------------------------------------------------


def test_candidate_insert_get_update(store: MemoryStore) -> None:
    # Given a pending candidate
    candidate = store.insert_candidate(
        a_candidate("c1", fact_key="pref:tea", tags=("x",), source_message_ids=("msg1",), target_memory_id="m1")
    )
    assert store.get_candidate(NS, "c1") == candidate
    # When it is approved
    approved = candidate.model_copy(
        update={"status": "approved", "result_memory_id": "m2", "decision_note": "ok", "decided_at": at(9)}
    )
    store.update_candidate(approved)
    # Then the next read sees the decision
    assert store.get_candidate(NS, "c1") == approved


def test_candidate_errors(store: MemoryStore) -> None:
    # Given one candidate
    store.insert_candidate(a_candidate("c1"))
    # Then a duplicate id conflicts, and unknown ids are NotFound for reads and updates
    with pytest.raises(Conflict):
        store.insert_candidate(a_candidate("c1"))
    with pytest.raises(NotFound):
        store.get_candidate(NS, "nope")
    with pytest.raises(NotFound):
        store.update_candidate(a_candidate("nope"))
    with pytest.raises(NotFound):
        store.get_candidate(OTHER, "c1")


def test_list_candidates_by_status_with_pages(store: MemoryStore) -> None:
    # Given pending and decided candidates, and one in another namespace
    for n in range(1, 5):
        store.insert_candidate(a_candidate(f"p{n}", minute=n))
    store.insert_candidate(a_candidate("d1", minute=9, status="discarded"))
    store.insert_candidate(a_candidate("x1", namespace=OTHER))
    # When listed by status, and for every status, in pages
    pending = all_pages(lambda cursor: store.list_candidates(NS, limit=3, cursor=cursor))
    every = all_pages(lambda cursor: store.list_candidates(NS, None, limit=3, cursor=cursor))
    # Then each listing is newest first and continues across pages
    assert pending == [["p4", "p3", "p2"], ["p1"]]
    assert every == [["d1", "p4", "p3"], ["p2", "p1"]]
    assert ids(store.list_candidates(NS, "discarded").items) == ["d1"]
    assert ids(store.list_candidates(OTHER).items) == ["x1"]


# -- messages ---------------------------------------------------------------------------------


def test_message_insert_is_idempotent_by_external_id(store: MemoryStore) -> None:
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


def test_a_message_keeps_its_error_note(store: MemoryStore) -> None:
    # Given a turn the upstream never answered, stored with what went wrong, and an answered one
    store.insert_message(a_message("msg1", external_id="t1").model_copy(update={"error": "upstream_timeout: slow"}))
    store.insert_message(a_message("msg2", minute=1, external_id="t2"))
    # Then both read back as stored
    assert [(m.id, m.error) for m in store.list_messages(NS)] == [("msg1", "upstream_timeout: slow"), ("msg2", None)]


def test_message_without_external_id_is_always_stored(store: MemoryStore) -> None:
    # Given / When two messages without an external_id are stored
    assert store.insert_message(a_message("msg1"))[1] is True
    assert store.insert_message(a_message("msg2"))[1] is True
    # Then both exist, and a duplicate id conflicts
    assert store.count_messages(NS) == 2
    with pytest.raises(Conflict):
        store.insert_message(a_message("msg1"))


def test_concurrent_retries_store_a_message_once(store: MemoryStore) -> None:
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


def test_list_messages_bounds_order_and_continuation(store: MemoryStore) -> None:
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


def test_count_and_delete_messages(store: MemoryStore) -> None:
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


# -- precious, glossary, digest, daily log ----------------------------------------------------


def test_precious_insert_list_delete(store: MemoryStore) -> None:
    # Given three precious notes and one in another namespace
    full = Precious(
        id="p0",
        namespace=NS,
        content="«keep this»",
        reason="vow",
        tags=("t",),
        source_message_ids=("m",),
        created_at=T0,
    )
    store.insert_precious(full)
    store.insert_precious(a_precious("p1", minute=1))
    store.insert_precious(a_precious("p2", minute=2))
    store.insert_precious(a_precious("px", namespace=OTHER))
    # Then they list newest first, limited, round-tripped
    assert ids(store.list_precious(NS)) == ["p2", "p1", "p0"]
    assert ids(store.list_precious(NS, limit=1)) == ["p2"]
    assert store.list_precious(NS)[-1] == full
    with pytest.raises(Conflict):
        store.insert_precious(a_precious("p1"))
    # When one is deleted / Then it is gone; unknown ids and other namespaces' ids are NotFound
    store.delete_precious(NS, "p1")
    assert ids(store.list_precious(NS)) == ["p2", "p0"]
    with pytest.raises(NotFound):
        store.delete_precious(NS, "p1")
    with pytest.raises(NotFound):
        store.delete_precious(NS, "px")
    assert ids(store.list_precious(OTHER)) == ["px"]


def test_glossary_put_get_list_delete(store: MemoryStore) -> None:
    # Given terms stored out of alphabetical order, mixed case
    store.put_glossary_term(a_term("g1", "zettel"))
    store.put_glossary_term(a_term("g2", "Alpha").model_copy(update={"aliases": ("α", "A")}))
    store.put_glossary_term(a_term("g3", "beta"))
    store.put_glossary_term(a_term("gx", "alpha", namespace=OTHER))
    # Then they list alphabetically ignoring case, and read back whole
    assert [t.term for t in store.list_glossary(NS)] == ["Alpha", "beta", "zettel"]
    assert store.get_glossary_term(NS, "g2").aliases == ("α", "A")
    # When a term is put again under the same id / Then it is replaced
    replaced = a_term("g3", "Beta").model_copy(update={"definition": "second letter", "updated_at": at(5)})
    store.put_glossary_term(replaced)
    assert store.get_glossary_term(NS, "g3") == replaced
    assert len(store.list_glossary(NS)) == 3
    # When one is deleted / Then it is gone; unknown and foreign ids are NotFound
    store.delete_glossary_term(NS, "g1")
    with pytest.raises(NotFound):
        store.get_glossary_term(NS, "g1")
    with pytest.raises(NotFound):
        store.delete_glossary_term(NS, "g1")
    with pytest.raises(NotFound):
        store.get_glossary_term(NS, "gx")
    assert [t.id for t in store.list_glossary(OTHER)] == ["gx"]


def test_digest_put_and_replace(store: MemoryStore) -> None:
    # Given no digest
    assert store.get_digest(NS) is None
    # When one is put, then replaced
    store.put_digest(Digest(namespace=NS, content="first", updated_at=T0))
    latest = store.put_digest(Digest(namespace=NS, content="second", updated_at=at(1)))
    # Then the latest is read back, and only in its namespace
    assert store.get_digest(NS) == latest
    assert store.get_digest(OTHER) is None


def test_daily_logs(store: MemoryStore) -> None:
    # Given logs for three dates, one in another namespace
    sections = ({"heading": "Work", "body": "shipped"},)
    for date in ("2025-03-01", "2025-03-03", "2025-03-02"):
        store.put_daily_log(DailyLog(namespace=NS, date=date, title=date, sections=sections, created_at=T0))
    store.put_daily_log(DailyLog(namespace=OTHER, date="2025-03-09", created_at=T0))
    # When a date is written again / Then it replaces that date's log
    rewritten = store.put_daily_log(DailyLog(namespace=NS, date="2025-03-02", summary="redo", created_at=at(1)))
    assert store.get_daily_log(NS, "2025-03-02") == rewritten
    assert store.get_daily_log(NS, "2025-03-01") == DailyLog(
        namespace=NS, date="2025-03-01", title="2025-03-01", sections=sections, created_at=T0
    )
    assert store.get_daily_log(NS, "2025-03-09") is None
    # And listings are newest date first, limited
    assert [log.date for log in store.list_daily_logs(NS)] == ["2025-03-03", "2025-03-02", "2025-03-01"]
    assert [log.date for log in store.list_daily_logs(NS, limit=2)] == ["2025-03-03", "2025-03-02"]
    assert [log.date for log in store.list_daily_logs(OTHER)] == ["2025-03-09"]


# -- events, usage, idempotency, cursors, cache -----------------------------------------------


def test_events(store: MemoryStore) -> None:
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


def test_usage(store: MemoryStore) -> None:
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


def test_idempotency_keys_are_put_once(store: MemoryStore) -> None:
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


def test_delete_idempotency_before(store: MemoryStore) -> None:
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


def test_cursors(store: MemoryStore) -> None:
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


def test_cache(store: MemoryStore) -> None:
    # Given a JSON value cached without expiry, one expiring later and one already expired
    value = {"answer": [1, 2.5, "三"], "nested": {"ok": True, "none": None}}
    store.put_cache(NS, "forever", value)
    store.put_cache(NS, "later", "soon", expires_at=datetime.now(UTC) + timedelta(hours=1))
    store.put_cache(NS, "stale", "old", expires_at=datetime.now(UTC) - timedelta(seconds=1))
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


def test_cache_rejects_values_that_are_not_json(store: MemoryStore) -> None:
    # Given a value JSON cannot hold / When it is cached / Then InvalidInput and nothing is stored
    with pytest.raises(InvalidInput):
        store.put_cache(NS, "bad", object())
    assert store.get_cache(NS, "bad") is None


# -- namespaces -------------------------------------------------------------------------------

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
