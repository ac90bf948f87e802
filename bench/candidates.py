"""Candidate lists for every benchmark question, computed once and cached (input of bench/fusion_variants.py).

For LoCoMo (``bench/retrieval.py``'s questions) and the bilingual set (``bench/bilingual.py``'s), each
question gets the keyword hits and the vector hits (50 each, with scores) exactly as RecallService
sees them from the SQLite index, the texts of those candidates and the labels needed to score.
Every question also refers to one shared map of memory id -> passage vector (pickled once), so the
hubness correction (the neighbourhood density of a candidate list) can be recomputed for any list.
"""

from __future__ import annotations

import hashlib
import pickle
import sys
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

sys.path[:0] = [str(Path(__file__).resolve().parents[1] / "functions"), str(Path(__file__).resolve().parents[1])]

from bench.bilingual import DATA, index_persona, load_personas  # noqa: E402
from bench.common import CACHE, Pipeline  # noqa: E402
from bench.retrieval import TUNING, default_data, load  # noqa: E402

DEPTH = 50


@dataclass
class Question:
    dataset: str  # "locomo" | "bilingual"
    split: str  # "tuning" | "held-out"
    label: str  # LoCoMo: "locomo"; bilingual: the question's label
    query: str
    answers: set[str]
    superseded: set[str]
    keyword: list[tuple[str, float]]
    vector: list[tuple[str, float]]
    texts: dict[str, str] = field(default_factory=dict)
    live: set[str] = field(default_factory=set)
    vectors: dict[str, np.ndarray] = field(default_factory=dict)  # shared by all questions of a run


def _collect(pipe: Pipeline, ns: str, query: str) -> tuple[list[tuple[str, float]], list[tuple[str, float]]]:
    assert pipe.embedder is not None
    kw = [(h.memory_id, h.score) for h in pipe.index.keyword_search(ns, query, k=DEPTH)]
    vec = [(h.memory_id, h.score) for h in pipe.index.vector_search(ns, pipe.embedder.embed_query(query), k=DEPTH)]
    return kw, vec


def _remember_vectors(pipe: Pipeline, ids: list[str], texts: list[str], vectors: dict[str, np.ndarray]) -> None:
    assert pipe.embedder is not None  # the passage vectors come from the embedder's disk cache
    for mid, vec in zip(ids, pipe.embedder.embed_documents(texts), strict=True):
        vectors[mid] = np.asarray(vec, dtype=np.float32)


def locomo_questions(pipe: Pipeline, path: Path, vectors: dict[str, np.ndarray]) -> list[Question]:
    out: list[Question] = []
    for conv in load(path):
        ns = "locomo-" + conv["id"]
        ids = pipe.add_memories(ns, [t["text"] for t in conv["turns"]], [t["when"] for t in conv["turns"]])
        _remember_vectors(pipe, ids, [t["text"] for t in conv["turns"]], vectors)
        turn_to_mem = {t["id"]: m for m, t in zip(ids, conv["turns"], strict=True)}
        texts = {m: t["text"] for m, t in zip(ids, conv["turns"], strict=True)}
        for q in conv["questions"]:
            kw, vec = _collect(pipe, ns, q["q"])
            out.append(
                Question(
                    dataset="locomo",
                    split="tuning" if conv["id"] in TUNING else "held-out",
                    label="locomo",
                    query=q["q"],
                    answers={turn_to_mem[e] for e in q["evidence"]},
                    superseded=set(),
                    keyword=kw,
                    vector=vec,
                    texts={m: texts[m] for m, _ in kw + vec},
                    live=set(ids),
                    vectors=vectors,
                )
            )
    return out


def bilingual_questions(pipe: Pipeline, path: Path, vectors: dict[str, np.ndarray]) -> list[Question]:
    out: list[Question] = []
    for persona in load_personas(path, []):
        ns = persona["id"]
        index_persona(pipe, persona)
        _remember_vectors(
            pipe, [m["id"] for m in persona["memories"]], [m["text"] for m in persona["memories"]], vectors
        )
        texts = {m["id"]: m["text"] for m in persona["memories"]}
        live = {m["id"] for m in persona["memories"] if m["status"] == "active"}
        for q in persona["questions"]:
            kw, vec = _collect(pipe, ns, q["q"])
            out.append(
                Question(
                    dataset="bilingual",
                    split=persona["split"],
                    label=q["label"],
                    query=q["q"],
                    answers=set(q["answers"]),
                    superseded=set(q["superseded"]),
                    keyword=kw,
                    vector=vec,
                    texts={m: texts[m] for m, _ in kw + vec},
                    live=live,
                    vectors=vectors,
                )
            )
    return out


def all_questions(locomo: Path | None = None, bilingual: Path = DATA) -> list[Question]:
    """Both sets' questions with candidates, from the on-disk cache when the inputs are unchanged."""
    locomo = locomo or default_data()
    digest = hashlib.sha1()
    for p in (locomo, bilingual, Path(__file__)):
        digest.update(p.read_bytes() if p.exists() else b"")
    path = CACHE / f"candidates-{digest.hexdigest()[:16]}.pkl"
    if path.exists():
        return pickle.loads(path.read_bytes())  # type: ignore[no-any-return]
    pipe = Pipeline()
    vectors: dict[str, np.ndarray] = {}
    try:
        questions = bilingual_questions(pipe, bilingual, vectors)
        if locomo.exists():
            questions += locomo_questions(pipe, locomo, vectors)
    finally:
        pipe.close()
    CACHE.mkdir(parents=True, exist_ok=True)
    path.write_bytes(pickle.dumps(questions))
    return questions
