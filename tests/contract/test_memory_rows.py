"""The ``MemoryRows`` contract (memories; domain/ports.py): every store in ``STORE_FACTORIES``."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
from engram.domain.errors import Conflict, InvalidInput, NotFound
from engram.domain.models import (
    Memory,
    MemoryFilter,
)
from engram.domain.ports import MemoryRows

from tests.contract.rows import (
    NS,
    OTHER,
    a_memory,
    all_pages,
    at,
    ids,
)


def test_the_store_implements_memory_rows(store: MemoryRows) -> None:
    assert isinstance(store, MemoryRows)


def test_memory_round_trips_every_field(store: MemoryRows) -> None:
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
        version=3,
    )
    # When it is inserted and read back
    returned = store.insert_memory(memory)
    stored = store.get_memory(NS, "m1")
    # Then the stored row equals the original, with aware timestamps
    assert returned == memory
    assert stored == memory
    assert stored.remind_at is not None and stored.remind_at.utcoffset() is not None
    assert stored.created_at.utcoffset() == timedelta(0)


def test_get_unknown_memory_raises_not_found(store: MemoryRows) -> None:
    # Given an empty store / When an unknown id is read / Then NotFound
    with pytest.raises(NotFound):
        store.get_memory(NS, "nope")


def test_insert_memory_with_existing_id_conflicts(store: MemoryRows) -> None:
    # Given a stored memory
    store.insert_memory(a_memory("m1"))
    # When another memory with the same id is inserted / Then Conflict, and the first row stays
    with pytest.raises(Conflict):
        store.insert_memory(a_memory("m1", content="other"))
    assert store.get_memory(NS, "m1").content == "content of m1"


def test_update_memory_replaces_the_row_at_the_next_version(store: MemoryRows) -> None:
    # Given a stored memory (version 1)
    original = store.insert_memory(a_memory("m1", tags=("a",), fact_key="k", remind_at=at(9)))
    assert original.version == 1
    # When it is updated, a field cleared among the changes
    changed = original.model_copy(update={"content": "new", "tags": ("b", "c"), "remind_at": None})
    returned = store.update_memory(changed)
    # Then the next read sees the change, one version on
    assert returned == changed.model_copy(update={"version": 2})
    assert store.get_memory(NS, "m1") == returned


def test_update_memory_at_a_stale_version_conflicts_and_writes_nothing(store: MemoryRows) -> None:
    # Given a memory read by two writers, and the first one's update stored
    read = store.insert_memory(a_memory("m1"))
    first = store.update_memory(read.model_copy(update={"status": "archived", "status_changed_at": at(3)}))
    # When the second writer replaces the row it read (version 1)
    with pytest.raises(Conflict) as caught:
        store.update_memory(read.model_copy(update={"content": "stale edit"}))
    # Then it is refused as a version conflict and the first writer's row stays
    assert caught.value.code == "version_conflict"
    assert store.get_memory(NS, "m1") == first


def test_a_replace_never_writes_the_counters(store: MemoryRows) -> None:
    # Given a memory read, then recalled and seen by others
    read = store.insert_memory(a_memory("m1", seen_count=1, last_seen_at=at(1)))
    store.record_injected(NS, ["m1"], at(5))
    store.record_seen(NS, "m1", at(6))
    # When the row read before is replaced (counters as read, and a try to set one)
    store.update_memory(read.model_copy(update={"content": "edited", "recall_count": 0, "seen_count": 99}))
    # Then the content changed and the counters are the store's own
    stored = store.get_memory(NS, "m1")
    assert stored.content == "edited"
    assert (stored.recall_count, stored.last_injected_at) == (1, at(5))
    assert (stored.seen_count, stored.last_seen_at) == (2, at(6))
    assert stored.version == 2


def test_record_injected_counts_each_memory_and_touches_nothing_else(store: MemoryRows) -> None:
    # Given an active and an archived memory
    active = store.insert_memory(a_memory("m1", fact_key="k"))
    archived = store.insert_memory(a_memory("m2", status="archived"))
    # When both are recorded as injected twice, an unknown id and a repeated id among them
    store.record_injected(NS, ["m1", "m2", "nope", "m1"], at(5))
    store.record_injected(NS, ["m1", "m2"], at(7))
    # Then each counts two injections, and nothing else of the rows changed (version, status included)
    for before in (active, archived):
        after = store.get_memory(NS, before.id)
        assert (after.recall_count, after.last_injected_at) == (2, at(7))
        assert after.model_copy(update={"recall_count": 0, "last_injected_at": None}) == before
    assert store.get_memories(NS, ["nope"]) == []


def test_record_seen_counts_a_sighting_and_returns_the_row(store: MemoryRows) -> None:
    # Given an active and an archived memory
    active = store.insert_memory(a_memory("m1", seen_count=1, last_seen_at=at(1)))
    store.insert_memory(a_memory("m2", status="archived", status_changed_at=at(2)))
    # When each is seen
    seen = store.record_seen(NS, "m1", at(8))
    seen_archived = store.record_seen(NS, "m2", at(9))
    # Then the counters moved, the rest did not, and the returned row is the stored one
    assert seen == active.model_copy(update={"seen_count": 2, "last_seen_at": at(8)})
    assert store.get_memory(NS, "m1") == seen
    assert (seen_archived.status, seen_archived.seen_count, seen_archived.version) == ("archived", 1, 1)
    assert store.get_memory(NS, "m2") == seen_archived
    # And an unknown id is NotFound
    with pytest.raises(NotFound):
        store.record_seen(NS, "nope", at(9))


def test_record_seen_keeps_a_sighting_for_the_retention_sweep(store: MemoryRows) -> None:
    # Given an old active memory, unseen since minute 0
    store.insert_memory(a_memory("m1"))
    assert ids(store.memories_unseen_since(NS, at(10))) == ["m1"]
    # When it is seen at minute 20 / Then it is no longer unseen before minute 10
    store.record_seen(NS, "m1", at(20))
    assert store.memories_unseen_since(NS, at(10)) == []


def test_update_memories_swaps_a_fact_key_in_one_transaction(store: MemoryRows) -> None:
    # Given an old version (superseded) and the active holder of its key
    old = store.insert_memory(a_memory("m1", fact_key="city", status="superseded", superseded_by_id="m2"))
    holder = store.insert_memory(a_memory("m2", fact_key="city", supersedes_id="m1"))
    # When the old one is revived and the holder superseded together
    retired = holder.model_copy(update={"status": "superseded", "superseded_by_id": "m1"})
    revived = old.model_copy(update={"status": "active", "superseded_by_id": None})
    result = store.update_memories([retired, revived])
    # Then both are stored one version on, and the revived one holds the key
    assert result == [retired.model_copy(update={"version": 2}), revived.model_copy(update={"version": 2})]
    assert store.get_memory(NS, "m1") == result[1]
    assert store.get_memory(NS, "m2") == result[0]
    assert store.find_active_by_fact_key(NS, "city") == result[1]


def test_update_memories_writes_nothing_when_one_row_moved_on(store: MemoryRows) -> None:
    # Given an old version and the holder of its key, and the holder changed after it was read
    old = store.insert_memory(a_memory("m1", fact_key="city", status="superseded"))
    holder = store.insert_memory(a_memory("m2", fact_key="city"))
    moved = store.update_memory(holder.model_copy(update={"content": "edited meanwhile"}))
    # When the swap runs on the holder as first read
    retired = holder.model_copy(update={"status": "superseded", "superseded_by_id": "m1"})
    with pytest.raises(Conflict) as caught:
        store.update_memories([retired, old.model_copy(update={"status": "active"})])
    # Then nothing changed: the holder keeps the key, the old row stays superseded
    assert caught.value.code == "version_conflict"
    assert store.get_memory(NS, "m2") == moved
    assert store.get_memory(NS, "m1") == old
    assert store.find_active_by_fact_key(NS, "city") == moved


def test_update_memories_writes_nothing_when_the_key_would_be_held_twice(store: MemoryRows) -> None:
    # Given an old version and the active holder of its key
    old = store.insert_memory(a_memory("m1", fact_key="city", status="superseded"))
    holder = store.insert_memory(a_memory("m2", fact_key="city"))
    # When the old one is revived without retiring the holder / Then Conflict, and nothing changed
    with pytest.raises(Conflict):
        store.update_memories([holder.model_copy(update={"content": "x"}), old.model_copy(update={"status": "active"})])
    assert store.get_memory(NS, "m1") == old
    assert store.get_memory(NS, "m2") == holder


def test_update_unknown_memory_raises_not_found(store: MemoryRows) -> None:
    # Given an empty store / When a memory that was never inserted is updated / Then NotFound, nothing stored
    with pytest.raises(NotFound):
        store.update_memory(a_memory("ghost"))
    assert store.get_memories(NS, ["ghost"]) == []


def test_update_cannot_make_a_second_active_memory_for_a_fact_key(store: MemoryRows) -> None:
    # Given an active memory and an archived one with the same fact_key
    store.insert_memory(a_memory("m1", fact_key="pref:tea"))
    archived = store.insert_memory(a_memory("m2", fact_key="pref:tea", status="archived"))
    # When the archived one is restored to active
    with pytest.raises(Conflict):
        store.update_memory(archived.model_copy(update={"status": "active"}))
    # Then it is still archived
    assert store.get_memory(NS, "m2").status == "archived"


def test_get_memories_keeps_requested_order_and_skips_unknown(store: MemoryRows) -> None:
    # Given three memories
    for n in (1, 2, 3):
        store.insert_memory(a_memory(f"m{n}", minute=n))
    # When they are fetched in a chosen order with an unknown id mixed in
    found = store.get_memories(NS, ["m3", "nope", "m1", "m2"])
    # Then they come back in that order without the unknown one
    assert ids(found) == ["m3", "m1", "m2"]
    assert store.get_memories(NS, []) == []


def test_at_most_one_active_memory_per_fact_key(store: MemoryRows) -> None:
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


def test_find_active_by_fact_key_ignores_inactive_rows(store: MemoryRows) -> None:
    # Given only a superseded memory for a key
    store.insert_memory(a_memory("m1", fact_key="pref:tea", status="superseded"))
    # When the active memory for the key is looked up / Then there is none
    assert store.find_active_by_fact_key(NS, "pref:tea") is None
    assert store.find_active_by_fact_key(NS, "unknown:key") is None


def test_external_id_is_unique_per_namespace(store: MemoryRows) -> None:
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


def test_supersede_swaps_the_active_row(store: MemoryRows) -> None:
    # Given an active memory for a key
    old = store.insert_memory(a_memory("m1", fact_key="city", content="Paris"))
    # When it is superseded by a new version
    retired = old.model_copy(update={"status": "superseded", "superseded_by_id": "m2", "status_changed_at": at(5)})
    new = a_memory("m2", fact_key="city", minute=5, content="Lyon", supersedes_id="m1")
    result = store.supersede(retired, new)
    # Then both rows are stored (the old one a version on) and the new one is the active memory for the key
    assert result == (retired.model_copy(update={"version": 2}), new)
    assert store.get_memory(NS, "m1") == result[0]
    assert store.get_memory(NS, "m2") == new
    assert store.find_active_by_fact_key(NS, "city") == new


def test_supersede_changes_nothing_when_the_new_key_is_taken(store: MemoryRows) -> None:
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


def test_supersede_changes_nothing_when_the_new_id_exists(store: MemoryRows) -> None:
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


def test_supersede_changes_nothing_when_the_old_row_stays_active(store: MemoryRows) -> None:
    # Given an active memory for a key
    old = store.insert_memory(a_memory("m1", fact_key="city"))
    # When a new active version is stored while the old one is still marked active
    with pytest.raises(Conflict):
        store.supersede(old.model_copy(update={"content": "edited"}), a_memory("m2", fact_key="city"))
    # Then nothing changed
    assert store.get_memory(NS, "m1") == old
    assert store.get_memories(NS, ["m2"]) == []


def test_supersede_at_a_stale_version_conflicts_and_stores_nothing(store: MemoryRows) -> None:
    # Given an active memory read, then archived by another writer
    read = store.insert_memory(a_memory("m1", fact_key="city"))
    archived = store.update_memory(read.model_copy(update={"status": "archived"}))
    # When the memory as first read is superseded
    retired = read.model_copy(update={"status": "superseded", "superseded_by_id": "m2"})
    with pytest.raises(Conflict) as caught:
        store.supersede(retired, a_memory("m2", fact_key="city", supersedes_id="m1"))
    # Then nothing changed and the new version was not stored
    assert caught.value.code == "version_conflict"
    assert store.get_memory(NS, "m1") == archived
    assert store.get_memories(NS, ["m2"]) == []


def test_supersede_many_retires_every_old_row_and_hands_a_key_to_the_new_one(store: MemoryRows) -> None:
    # Given three active memories, one holding a key
    a = store.insert_memory(a_memory("m1", fact_key="city", content="Paris"))
    b = store.insert_memory(a_memory("m2", content="lives near the river", minute=1))
    c = store.insert_memory(a_memory("m3", content="moved in 2024", minute=2))
    # When they are merged into one new memory that takes the key
    retire = {"status": "superseded", "superseded_by_id": "m4", "status_changed_at": at(5)}
    olds = [m.model_copy(update=retire) for m in (a, b, c)]
    new = a_memory("m4", fact_key="city", minute=5, content="Paris, by the river, since 2024", supersedes_id="m1")
    stored, returned = store.supersede_many(olds, new)
    # Then every old row is one version on and superseded, and the new one holds the key
    assert stored == [old.model_copy(update={"version": 2}) for old in olds]
    assert returned == new
    assert store.get_memories(NS, ["m1", "m2", "m3"]) == stored
    assert store.find_active_by_fact_key(NS, "city") == new


def test_supersede_many_with_one_stale_row_changes_nothing(store: MemoryRows) -> None:
    # Given two memories read, the second then edited by another writer
    a = store.insert_memory(a_memory("m1", fact_key="city"))
    b = store.insert_memory(a_memory("m2", minute=1))
    edited = store.update_memory(b.model_copy(update={"content": "edited meanwhile"}))
    # When both, as first read, are merged
    retire = {"status": "superseded", "superseded_by_id": "m3"}
    with pytest.raises(Conflict) as caught:
        store.supersede_many(
            [a.model_copy(update=retire), b.model_copy(update=retire)], a_memory("m3", fact_key="city")
        )
    # Then nothing changed: the first row keeps its key, the new row was not stored
    assert caught.value.code == "version_conflict"
    assert store.get_memory(NS, "m1") == a
    assert store.get_memory(NS, "m2") == edited
    assert store.get_memories(NS, ["m3"]) == []
    assert store.find_active_by_fact_key(NS, "city") == a


def test_supersede_many_refuses_an_old_row_of_another_namespace(store: MemoryRows) -> None:
    # Given a memory in another namespace
    other = store.insert_memory(a_memory("m1", namespace=OTHER))
    # When a merge names it
    with pytest.raises(InvalidInput):
        store.supersede_many([other.model_copy(update={"status": "superseded"})], a_memory("m2"))
    # Then it is unchanged and nothing was stored
    assert store.get_memory(OTHER, "m1") == other
    assert store.get_memories(NS, ["m2"]) == []


def test_supersede_returns_the_old_row_one_version_on(store: MemoryRows) -> None:
    # Given an active memory / When it is superseded
    old = store.insert_memory(a_memory("m1", fact_key="city"))
    retired = old.model_copy(update={"status": "superseded", "superseded_by_id": "m2"})
    stored_old, new = store.supersede(retired, a_memory("m2", fact_key="city"))
    # Then the old row is at version 2, the new one at 1
    assert (stored_old.version, new.version) == (2, 1)
    assert store.get_memory(NS, "m1") == stored_old


def test_supersede_of_unknown_memory_raises_not_found(store: MemoryRows) -> None:
    # Given an empty store / When a memory that was never stored is superseded
    with pytest.raises(NotFound):
        store.supersede(a_memory("m1", status="superseded"), a_memory("m2"))
    # Then the new version was not stored either
    assert store.get_memories(NS, ["m1", "m2"]) == []


def test_delete_memory_row_removes_it_and_ignores_unknown_ids(store: MemoryRows) -> None:
    # Given two memories
    store.insert_memory(a_memory("m1"))
    store.insert_memory(a_memory("m2"))
    # When one is hard-deleted, and an unknown id too
    assert store.delete_memory_row(NS, "m1") is True
    assert store.delete_memory_row(NS, "nope") is False
    # Then only the other one remains
    with pytest.raises(NotFound):
        store.get_memory(NS, "m1")
    assert ids(store.iter_memories(NS)) == ["m2"]


def test_delete_memory_row_at_a_version_spares_a_row_that_moved_on(store: MemoryRows) -> None:
    # Given a deleted memory with an external id, read by the retention sweep, then restored by its owner
    read = store.insert_memory(a_memory("m1", status="deleted", external_id="ext-1"))
    restored = store.update_memory(read.model_copy(update={"status": "active"}))
    # When the sweep hard-deletes the row it read / Then version conflict, and the row stays
    with pytest.raises(Conflict) as caught:
        store.delete_memory_row(NS, "m1", version=read.version)
    assert caught.value.code == "version_conflict"
    assert store.get_memory(NS, "m1") == restored
    # And at the current version it goes, freeing its external id
    assert store.delete_memory_row(NS, "m1", version=restored.version) is True
    store.insert_memory(a_memory("m2", external_id="ext-1"))


def test_list_memories_pages_newest_first(store: MemoryRows) -> None:
    # Given five memories, two of them created at the same instant
    for memory_id, minute in [("m1", 1), ("m2", 2), ("m3", 3), ("m4", 3), ("m5", 5)]:
        store.insert_memory(a_memory(memory_id, minute=minute))
    # When every page of two is fetched
    pages = all_pages(lambda cursor: store.list_memories(NS, MemoryFilter(), limit=2, cursor=cursor))
    # Then rows come newest first, ties by id descending, with no gap or repeat
    assert pages == [["m5", "m4"], ["m3", "m2"], ["m1"]]


def test_list_memories_last_full_page_has_no_cursor(store: MemoryRows) -> None:
    # Given exactly two memories / When a page of two is fetched / Then there is no next page
    store.insert_memory(a_memory("m1", minute=1))
    store.insert_memory(a_memory("m2", minute=2))
    page = store.list_memories(NS, MemoryFilter(), limit=2)
    assert ids(page.items) == ["m2", "m1"]
    assert page.next_cursor is None


def test_list_memories_cursor_is_stable_under_inserts(store: MemoryRows) -> None:
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


def test_list_memories_rejects_a_malformed_cursor(store: MemoryRows) -> None:
    # Given any store / When a cursor it did not make is passed / Then InvalidInput
    for cursor in ("not-a-cursor", "", "W10"):
        with pytest.raises(InvalidInput):
            store.list_memories(NS, MemoryFilter(), cursor=cursor)


def test_list_memories_filters(store: MemoryRows) -> None:
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


def test_list_memories_of_every_status_pages_across_statuses(store: MemoryRows) -> None:
    # Given one memory in each status, interleaved in time, and one in another namespace
    statuses = ["active", "superseded", "archived", "deleted", "expired", "active", "archived"]
    for n, status in enumerate(statuses):
        store.insert_memory(a_memory(f"m{n}", minute=n, status=status))
    store.insert_memory(a_memory("other", namespace=OTHER, status="archived"))
    # When every status is listed ("all" is the empty filter), two at a time
    pages = all_pages(lambda cursor: store.list_memories(NS, MemoryFilter(statuses=()), limit=2, cursor=cursor))
    # Then every row of the namespace comes back once, newest first, whatever its status
    assert pages == [["m6", "m5"], ["m4", "m3"], ["m2", "m1"], ["m0"]]


def test_list_memories_cursor_continues_with_filters(store: MemoryRows) -> None:
    # Given tagged and untagged memories interleaved in time
    for n in range(1, 8):
        store.insert_memory(a_memory(f"m{n}", minute=n, tags=("even",) if n % 2 == 0 else ()))
    # When the tagged ones are paged one at a time
    pages = all_pages(lambda cursor: store.list_memories(NS, MemoryFilter(tag="even"), limit=1, cursor=cursor))
    # Then each page holds the next tagged memory and nothing else
    assert pages == [["m6"], ["m4"], ["m2"]]


def test_iter_memories_is_oldest_first_and_filters_by_status(store: MemoryRows) -> None:
    # Given memories in several statuses, inserted out of time order
    store.insert_memory(a_memory("m3", minute=3, status="archived"))
    store.insert_memory(a_memory("m1", minute=1))
    store.insert_memory(a_memory("m2", minute=2, status="superseded"))
    store.insert_memory(a_memory("m0", namespace=OTHER))
    # When the namespace is iterated / Then every status comes, oldest first, only this namespace
    assert ids(store.iter_memories(NS)) == ["m1", "m2", "m3"]
    assert ids(store.iter_memories(NS, ["active", "archived"])) == ["m1", "m3"]
    assert ids(store.iter_memories(NS, ["deleted"])) == []


def test_count_memories(store: MemoryRows) -> None:
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


def test_memories_changed_before(store: MemoryRows) -> None:
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


def test_memories_unseen_since(store: MemoryRows) -> None:
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


def test_memories_unseen_since_pages_after_a_row(store: MemoryRows) -> None:
    # Given five unseen memories, two of them sighted at the same moment
    for name, minute in (("a", 1), ("b", 2), ("c1", 3), ("c2", 3), ("d", 4)):
        store.insert_memory(a_memory(name, minute=minute))
    # When paging two at a time, each page after the previous page's last (sighting, id)
    pages, after = [], None
    while True:
        page = store.memories_unseen_since(NS, at(60), limit=2, after=after)
        pages.append(ids(page))
        if len(page) < 2:
            break
        after = (page[-1].last_seen_at or page[-1].created_at, page[-1].id)
    # Then every row comes exactly once, in order, ties broken by id
    assert pages == [["a", "b"], ["c1", "c2"], ["d"]]


def test_memory_rows_are_isolated_by_namespace(store: MemoryRows) -> None:
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
