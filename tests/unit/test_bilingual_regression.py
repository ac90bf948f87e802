"""A slice of the bilingual benchmark (bench/data/bilingual.json) on the real local stack.

One held-out person (~110 memories, ~90 questions) through RecallService with its defaults, against
plain vector search on the same index. If a change to fusion, relevance or tokenization makes the
pipeline worse than vectors alone, leaks a superseded version, or floods no-answer questions, this
fails. The full benchmark (four people, BM25 too, per label) is bench/bilingual.py.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from engram.adapters.embed.local import LocalEmbedder
from engram.adapters.search.sqlite import SqliteSearchIndex
from engram.adapters.storage.inmemory import InMemoryMemoryStore
from engram.domain.models import IndexedDoc, Memory
from engram.services.recall.pipeline import RecallConfig, RecallService

from tests.configs import config

DATA = Path(__file__).resolve().parents[2] / "bench" / "data" / "bilingual.json"
PERSONA = "priya"  # held out: nothing was tuned on her


class Clock:
    def now(self) -> datetime:
        return datetime(2026, 1, 1, tzinfo=UTC)


World = tuple[RecallService, SqliteSearchIndex, Any, dict[str, Any]]


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    persona = next(p for p in json.loads(DATA.read_text(encoding="utf-8"))["personas"] if p["id"] == PERSONA)
    store = InMemoryMemoryStore(clock=Clock())
    index = SqliteSearchIndex(Path(tmp_path_factory.mktemp("bilingual")) / "e.db")
    embedder = LocalEmbedder()
    vectors = embedder.embed_documents([m["text"] for m in persona["memories"]])
    for m, vector in zip(persona["memories"], vectors, strict=True):
        when = datetime.fromisoformat(m["created_at"])
        memory = Memory(
            id=m["id"],
            namespace=PERSONA,
            content=m["text"],
            fact_key=m["fact_key"],
            status=m["status"],
            created_at=when,
            updated_at=when,
        )
        store.insert_memory(memory)
        # Superseded versions stay in the index, as a lagging index mirror would keep them.
        index.upsert(
            IndexedDoc(
                memory_id=m["id"], namespace=PERSONA, text=m["text"], type="fact", vector=tuple(vector), created_at=when
            )
        )
    yield RecallService(store, index, embedder, None, None, Clock(), config(RecallConfig)), index, embedder, persona
    index.close()


def _recall_at_5(ranked: list[str], answers: list[str]) -> float:
    return len(set(ranked[:5]) & set(answers)) / len(answers)


def test_pipeline_beats_plain_vectors_and_never_leaks(world: World) -> None:
    service, index, embedder, persona = world
    live = {m["id"] for m in persona["memories"] if m["status"] == "active"}
    pipeline: dict[str, list[float]] = {}
    vectors: dict[str, list[float]] = {}
    for q in persona["questions"]:
        if q["label"] == "no_answer":
            continue
        # When asking the pipeline (full ranking) and plain vector search
        ranked = [h.memory.id for h in service.recall(PERSONA, q["q"], top_k=10, min_relevance=0.0).hits]
        plain = [h.memory_id for h in index.vector_search(PERSONA, embedder.embed_query(q["q"]), k=50)]
        # Then no superseded version is ever returned
        assert not set(ranked) & set(q["superseded"]), q["q"]
        for label in (q["label"], "all"):
            pipeline.setdefault(label, []).append(_recall_at_5(ranked, q["answers"]))
            vectors.setdefault(label, []).append(_recall_at_5([m for m in plain if m in live], q["answers"]))

    def mean(xs: list[float]) -> float:
        return sum(xs) / len(xs)

    # And the pipeline is at least as good as vectors alone, overall, across languages and on paraphrases
    assert mean(pipeline["all"]) >= mean(vectors["all"]), (pipeline, vectors)
    assert mean(pipeline["cross_lingual"]) >= mean(vectors["cross_lingual"])
    assert mean(pipeline["paraphrase"]) >= mean(vectors["paraphrase"])
    assert mean(pipeline["lexical"]) == 1.0


def test_questions_without_an_answer_come_back_nearly_empty(world: World) -> None:
    service, _, _, persona = world
    # When asking about things this person never said, at the gateway's default relevance floor
    hits = [len(service.recall(PERSONA, q["q"]).hits) for q in persona["questions"] if q["label"] == "no_answer"]
    # Then most come back empty
    assert sum(hits) / len(hits) <= 1.0, hits
    assert sum(1 for h in hits if h == 0) >= len(hits) / 2, hits
