"""Curation by hand on every store (in-memory, SQLite, DynamoDB under moto): a merge and its undo round-trip
exactly, an undo never overwrites a later change, consolidation drafts change nothing until applied, the
core-memory candidates, and the duplicate check answering as the write would."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from engram.adapters.clock import SystemClock
from engram.adapters.search.inmemory import InMemorySearchIndex
from engram.domain.errors import Conflict, NotFound, UpstreamUnavailable
from engram.domain.models import Memory
from engram.domain.ports import MemoryStore
from engram.services.jobs.consolidation import ConsolidationService, ItemDecision
from engram.services.library.curation import CurationService, MergeFields, SourceRef
from engram.services.library.memories import MemoryPatch, MemoryRules, MemoryService, MemoryWrite

from tests.configs import config
from tests.contract.conftest import STORE_FACTORIES
from tests.fakes.chat_model import ScriptedChatModel

NS = "alice"


@pytest.fixture(params=list(STORE_FACTORIES))
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[MemoryStore]:
    with STORE_FACTORIES[request.param](tmp_path, SystemClock()) as adapter:
        yield adapter


class Parts:
    def __init__(self, store: MemoryStore, model: ScriptedChatModel | None = None) -> None:
        self.store = store
        self.index = InMemorySearchIndex()
        self.clock = SystemClock()
        self.memories = MemoryService(store, self.index, None, self.clock, config(MemoryRules))
        self.curation = CurationService(store, self.memories, self.clock, model)
        self.queued: list[tuple[str, dict[str, Any]]] = []
        self.consolidation = ConsolidationService(store, self.curation, self.clock, model, self)

    def enqueue(self, job: str, payload: dict[str, Any]) -> None:  # the job queue: run it by hand
        self.queued.append((job, payload))

    def remember(self, content: str, **fields: Any) -> Memory:
        return self.memories.write(NS, MemoryWrite(content=content, **fields)).memory

    def snapshot(self) -> list[dict[str, Any]]:
        return [m.model_dump(mode="json") for m in self.store.iter_memories(NS)]

    def found(self, text: str) -> set[str]:
        return {h.memory_id for h in self.index.keyword_search(NS, text, k=20)}


def _fields(content: str, **chosen: Any) -> MergeFields:
    fields = MergeFields(content=content, **chosen)
    fields.set_fields = frozenset(chosen)
    return fields


def test_merge_then_undo_restores_the_sources_exactly(store: MemoryStore) -> None:
    # Given three memories: one holding a key, one pinned with tags, one said again (its counter moved)
    p = Parts(store)
    a = p.remember("Alice lives in Lyon", fact_key="profile:city", importance=0.6)
    b = p.remember("Alice's flat is near the Saône", pinned=True, tags=["home"], type="fact")
    c = p.remember("Alice moved to Lyon in 2024", type="event", layer="event")
    store.record_seen(NS, c.id, p.clock.now())
    before = store.get_memories(NS, [a.id, b.id, c.id])
    # When they are merged (the person keeps the suggested fields, edits the text)
    refs = [SourceRef(m.id, m.version) for m in before]
    result = p.curation.merge(NS, refs, _fields("Alice lives in Lyon, near the Saône, since 2024"))
    merged = result.memory
    # Then the sources are superseded by the merged memory, which takes the key and their best fields
    for source in store.get_memories(NS, [a.id, b.id, c.id]):
        assert source.status == "superseded" and source.superseded_by_id == merged.id
    assert merged.supersedes_id == a.id and merged.status == "active"
    assert store.find_active_by_fact_key(NS, "profile:city") == merged
    assert (merged.pinned, merged.layer, merged.importance, merged.tags) == (True, "event", 0.6, ("home",))
    assert p.found("Saône") == {merged.id}
    # When the merge is undone
    restored = p.curation.undo_merge(NS, merged.id)
    # Then each source is exactly as it was (only its version moved on), the merged memory is gone
    after = store.get_memories(NS, [a.id, b.id, c.id])
    assert [m.model_dump(exclude={"version"}) for m in after] == [m.model_dump(exclude={"version"}) for m in before]
    assert [m.id for m in restored] == [a.id, b.id, c.id]
    with pytest.raises(NotFound):
        store.get_memory(NS, merged.id)
    assert store.find_active_by_fact_key(NS, "profile:city") == after[0]
    assert p.found("Lyon") == {a.id, c.id}
    # And the history says what happened
    assert [e.kind for e in store.list_events(NS, memory_id=b.id)][:2] == ["restored", "superseded"]


def test_undo_leaves_a_later_change_alone(store: MemoryStore) -> None:
    # Given a merge whose merged memory was edited afterwards
    p = Parts(store)
    a, b = p.remember("Tea in the morning"), p.remember("Green tea preferred")
    merged = p.curation.merge(NS, [SourceRef(a.id), SourceRef(b.id)], _fields("Green tea in the morning")).memory
    edited = p.memories.update(NS, merged.id, MemoryPatch(content="Green tea every morning"))
    state = p.snapshot()
    # When the merge is undone
    with pytest.raises(Conflict) as caught:
        p.curation.undo_merge(NS, merged.id)
    # Then it is refused and nothing changed: the edit stands, the sources stay superseded
    assert caught.value.code == "version_conflict"
    assert p.snapshot() == state
    assert store.get_memory(NS, merged.id).content == edited.content


def test_undo_leaves_a_source_restored_since_alone(store: MemoryStore) -> None:
    # Given a merge, then one source restored by hand (its version moved on)
    p = Parts(store)
    a, b = p.remember("Runs on Sundays"), p.remember("Runs 10 km")
    merged = p.curation.merge(NS, [SourceRef(a.id), SourceRef(b.id)], _fields("Runs 10 km on Sundays")).memory
    p.memories.restore(NS, a.id)
    state = p.snapshot()
    # When the merge is undone, Then it is refused and nothing changed
    with pytest.raises(Conflict):
        p.curation.undo_merge(NS, merged.id)
    assert p.snapshot() == state


def test_a_merge_of_a_memory_changed_since_it_was_read_writes_nothing(store: MemoryStore) -> None:
    # Given two memories, one edited after the person read it
    p = Parts(store)
    a, b = p.remember("Likes jazz"), p.remember("Likes Coltrane")
    p.memories.update(NS, b.id, MemoryPatch(content="Likes Coltrane and Monk"))
    state = p.snapshot()
    # When the merge names the versions as read
    with pytest.raises(Conflict) as caught:
        p.curation.merge(NS, [SourceRef(a.id, a.version), SourceRef(b.id, b.version)], _fields("Likes jazz"))
    # Then it is refused and nothing was written
    assert caught.value.code == "version_conflict"
    assert p.snapshot() == state


def test_the_draft_comes_from_the_model_or_joins_the_texts(store: MemoryStore) -> None:
    # Given two memories and a model that drafts once, then fails
    model = ScriptedChatModel().script_json({"content": "Alice drinks green tea each morning", "type": "preference"})
    model.script(UpstreamUnavailable("down"))
    p = Parts(store, model)
    a, b = p.remember("Tea in the morning", tags=["tea"]), p.remember("Green tea preferred", importance=0.7)
    refs = [SourceRef(a.id), SourceRef(b.id)]
    state = p.snapshot()
    # When a merge is drafted twice
    first = asyncio.run(p.curation.draft(NS, refs))
    second = asyncio.run(p.curation.draft(NS, refs))
    # Then the first is the model's text (the sources oldest first in its prompt), the second the texts joined
    assert (first.content, first.drafted_by, first.type) == (
        "Alice drinks green tea each morning",
        "model",
        "preference",
    )
    assert model.calls[0].user.index("Tea in the morning") < model.calls[0].user.index("Green tea preferred")
    assert (second.content, second.drafted_by) == ("Tea in the morning\nGreen tea preferred", "joined")
    assert "upstream_unavailable" in second.note
    assert (first.importance, first.tags) == (0.7, ["tea"])
    # And a draft writes nothing
    assert p.snapshot() == state


def test_consolidation_changes_nothing_until_applied(store: MemoryStore) -> None:
    # Given four memories and a model that proposes two merges and a rewrite
    p = Parts(store, ScriptedChatModel())
    rows = [p.remember(t) for t in ("Tea at 7", "Drinks tea at seven", "Has a cat", "cat named Miso")]
    assert p.consolidation._model is not None
    p.consolidation._model.script(  # type: ignore[attr-defined]
        lambda messages: json.dumps(
            {
                "items": [
                    {"source_ids": [rows[0].id, rows[1].id], "content": "Drinks tea at 7", "type": "preference"},
                    {"source_ids": [rows[2].id, rows[3].id], "content": "Has a cat named Miso", "importance": 0.8},
                    {"source_ids": [rows[2].id], "content": "a second claim on the cat: refused"},
                    {"source_ids": ["mem_unknown"], "content": "not in the batch: refused"},
                ]
            }
        )
    )
    state = p.snapshot()
    # When a draft of the four is started and its job runs
    draft = p.consolidation.start(NS, memory_ids=[m.id for m in rows])
    assert p.queued == [("consolidate", {"namespace": NS, "draft_id": draft["id"]})]
    ready = asyncio.run(p.consolidation.run(NS, draft["id"]))
    # Then it is ready with two valid items, progress complete, and nothing changed in the store
    assert (ready["state"], ready["done"], ready["total"], len(ready["items"])) == ("ready", 1, 1, 2)
    assert p.snapshot() == state
    # When the first is accepted with an edit, the second dropped
    applied = p.consolidation.apply(NS, draft["id"], [ItemDecision("it1", content="Drinks black tea at 7")])
    # Then only the first became a merge; the cat memories are untouched
    results = {r["item"]: r for r in applied["results"]}
    assert results["it1"]["status"] == "applied" and results["it2"]["status"] == "dropped"
    merged = store.get_memory(NS, results["it1"]["memory_id"])
    assert (merged.content, merged.type) == ("Drinks black tea at 7", "preference")
    assert [m.status for m in store.get_memories(NS, [m.id for m in rows])] == [
        "superseded",
        "superseded",
        "active",
        "active",
    ]
    # And it cannot be applied twice, and the merge it made can be undone
    with pytest.raises(Conflict):
        p.consolidation.apply(NS, draft["id"], [])
    p.curation.undo_merge(NS, merged.id)
    assert p.snapshot() == [{**row, "version": now["version"]} for row, now in zip(state, p.snapshot(), strict=True)]


def test_a_consolidation_item_whose_memories_changed_is_refused_alone(store: MemoryStore) -> None:
    # Given a ready draft with two items, then one of its memories edited
    model = ScriptedChatModel()
    p = Parts(store, model)
    rows = [p.remember(t) for t in ("Bikes to work", "Cycles to the office", "Reads sci-fi", "Likes Le Guin")]
    model.script_json(
        {
            "items": [
                {"source_ids": [rows[0].id, rows[1].id], "content": "Cycles to work"},
                {"source_ids": [rows[2].id, rows[3].id], "content": "Reads sci-fi, Le Guin above all"},
            ]
        }
    )
    draft = p.consolidation.start(NS, memory_ids=[m.id for m in rows])
    asyncio.run(p.consolidation.run(NS, draft["id"]))
    p.memories.update(NS, rows[0].id, MemoryPatch(content="Bikes to work when it is dry"))
    # When both items are accepted
    applied = p.consolidation.apply(NS, draft["id"], [ItemDecision("it1"), ItemDecision("it2")])
    # Then the changed one is refused (the edit stands) and the other merged
    results = {r["item"]: r for r in applied["results"]}
    assert (results["it1"]["status"], results["it1"]["error"]) == ("refused", "version_conflict")
    assert results["it2"]["status"] == "applied"
    assert store.get_memory(NS, rows[0].id).content == "Bikes to work when it is dry"


def test_core_candidates_are_the_often_used_memories_not_yet_core(store: MemoryStore) -> None:
    # Given memories recalled or said again often, one of them pinned, one rarely used
    p = Parts(store)
    often = p.remember("Works as a nurse")
    repeated = p.remember("Vegetarian")
    pinned = p.remember("Allergic to nuts", pinned=True)
    rare = p.remember("Once visited Oslo")
    for _ in range(5):
        store.record_injected(NS, [often.id, pinned.id], p.clock.now())
    for _ in range(3):
        store.record_seen(NS, repeated.id, p.clock.now())
    store.record_injected(NS, [rare.id], p.clock.now())
    # When the candidates are listed
    found = p.curation.core_candidates(NS)
    # Then the often-used ones that are not pinned or core are listed, the most used first
    assert [c.memory.id for c in found] == [often.id, repeated.id]
    assert found[0].why == "recalled into 5 chat turns" and found[1].why == "said again 3 times"
    # And a memory promoted to core leaves the list
    p.memories.update(NS, often.id, MemoryPatch(layer="core"))
    assert [c.memory.id for c in p.curation.core_candidates(NS)] == [repeated.id]


def test_the_check_answers_as_the_write_would(store: MemoryStore) -> None:
    # Given a keyed memory and an unkeyed one
    p = Parts(store)
    city = p.remember("Lives in Lyon", fact_key="profile:city")
    tea = p.remember("Likes green tea")
    state = p.snapshot()
    # When texts are checked
    same = p.memories.check(NS, MemoryWrite(content="lives in Lyon.", fact_key="profile:city"))
    changed = p.memories.check(NS, MemoryWrite(content="Lives in Paris", fact_key="profile:city"))
    new = p.memories.check(NS, MemoryWrite(content="Plays the cello"))
    twin = p.memories.check(NS, MemoryWrite(content="Likes green tea!"), dedup=True)
    # Then each says what the write would do, and nothing was written
    assert (same.action, same.target) == ("seen", city)
    assert (changed.action, changed.target, changed.reason) == ("superseded", city, "content changed")
    assert (new.action, new.target) == ("created", None)
    assert (twin.action, twin.target) == ("seen", tea)
    assert [m.id for m, _ in twin.near] == [tea.id]
    assert p.snapshot() == state
    # And the writes then do what was said
    assert p.memories.write(NS, MemoryWrite(content="Lives in Paris", fact_key="profile:city")).action == "superseded"
    assert p.memories.write(NS, MemoryWrite(content="Likes green tea!"), dedup=True).action == "seen"


def test_a_merge_is_a_run_of_the_change_journal_and_its_undo_there_restores_the_sources(store: MemoryStore) -> None:
    from engram.services.library.journaled_store import journaled

    # Given the services on the journaled store (as bootstrap wires them) and two memories
    journal, rows = journaled(store, SystemClock())
    memories = MemoryService(rows, InMemorySearchIndex(), None, SystemClock(), config(MemoryRules))
    curation = CurationService(rows, memories, SystemClock(), journal=journal)
    a = memories.write(NS, MemoryWrite(content="Runs on Sundays", fact_key="sport:running")).memory
    b = memories.write(NS, MemoryWrite(content="Runs 10 km", tags=["sport"])).memory
    before = store.get_memories(NS, [a.id, b.id])
    # When they are merged
    result = curation.merge(NS, [SourceRef(a.id), SourceRef(b.id)], _fields("Runs 10 km on Sundays"))
    # Then the merge is a run whose changes are the two sources retired and the merged memory created
    assert result.run_id is not None
    record = journal.get_run(NS, result.run_id)
    assert record.kind == "merge"
    changed = {c.memory_id for c in journal.changes(NS, result.run_id).items}
    assert changed == {a.id, b.id, result.memory.id}
    # When that run is undone in the journal
    journal.undo(NS, result.run_id, source="test")
    # Then the sources are active again as they were, and the merged memory is no longer active
    after = store.get_memories(NS, [a.id, b.id])
    assert [m.model_dump(exclude={"version", "updated_at"}) for m in after] == [
        m.model_dump(exclude={"version", "updated_at"}) for m in before
    ]
    assert store.get_memory(NS, result.memory.id).status != "active"
    assert store.find_active_by_fact_key(NS, "sport:running") == after[0]
