"""Bilingual retrieval: our own Chinese/English/mixed personal-memory set, per question label.

    python bench/bilingual.py [--data bench/data/bilingual.json] [--persona ID ...]

The set (``bench/data/make_bilingual.py``) has four invented people, ~450 memories and ~370
questions labelled lexical, paraphrase, cross_lingual, multi, temporal and no_answer; two people
are the tuning split, two are held out. Each person is a namespace. Superseded versions of changed
facts stay in the search index (as a lagging index mirror would hold them) and are marked superseded
in the store; returning one counts as a leak.

Methods, side by side on the same index:

- bm25:    the keyword index alone
- vector:  cosine kNN alone (the local multilingual-e5-small)
- engram:  RecallService with its default settings (adaptive fusion)
- engram (constant): the previous default, constant keyword 1.5 : vector 1.0 fusion, no diversity

The baselines are scored after the same store re-check the pipeline does (only live memories), so
the comparison is about ranking; "raw leaks" shows what that re-check removes. Answerable questions
are scored with recall@5, NDCG@10 and hit@1. ``no_answer`` questions report how many hits come back
at the chat gateway's settings, and "tokens/turn" estimates what the gateway injects per chat turn
(the rendered memory patch: 1 token per CJK character + 1 per 4 other characters).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from collections import defaultdict
from datetime import datetime
from pathlib import Path
from typing import Any

sys.path[:0] = [str(Path(__file__).resolve().parents[1] / "functions"), str(Path(__file__).resolve().parents[1])]

from engram.adapters.clock import SystemClock  # noqa: E402
from engram.domain.models import Memory  # noqa: E402
from engram.domain.text import is_cjk  # noqa: E402
from engram.services.chat.injection import render_patch  # noqa: E402
from engram.services.recall.pipeline import RecallConfig, RecallService, render_prompt  # noqa: E402

from bench.common import REPO, Pipeline  # noqa: E402
from tests.configs import config  # noqa: E402

DATA = REPO / "bench" / "data" / "bilingual.json"
LABELS = ["lexical", "paraphrase", "cross_lingual", "multi", "temporal"]
K_CANDIDATES = 50


def estimate_tokens(text: str) -> int:
    cjk = sum(1 for ch in text if is_cjk(ch))
    return cjk + math.ceil((len(text) - cjk) / 4)


def bold(value: float, best: bool) -> str:
    return f"**{value:.3f}**" if best else f"{value:.3f}"


def metrics(ranked: list[str], answers: list[str]) -> dict[str, float]:
    ev = set(answers)
    dcg = sum(1 / math.log2(i + 2) for i, m in enumerate(ranked[:10]) if m in ev)
    idcg = sum(1 / math.log2(i + 2) for i in range(min(10, len(ev))))
    return {
        "r5": len(ev & set(ranked[:5])) / len(ev),
        "ndcg10": dcg / idcg,
        "hit1": 1.0 if ranked[:1] and ranked[0] in ev else 0.0,
    }


def load_personas(path: Path, only: list[str]) -> list[dict[str, Any]]:
    personas = json.loads(path.read_text(encoding="utf-8"))["personas"]
    return [p for p in personas if not only or p["id"] in only]


def index_persona(pipe: Pipeline, persona: dict[str, Any]) -> None:
    """Every memory into the store (with its status) and into the index (superseded ones too)."""
    texts = [m["text"] for m in persona["memories"]]
    vectors = pipe.embedder.embed_documents(texts) if pipe.embedder else [None] * len(texts)
    for m, vector in zip(persona["memories"], vectors, strict=True):
        when = datetime.fromisoformat(m["created_at"])
        memory = Memory(
            id=m["id"],
            namespace=persona["id"],
            content=m["text"],
            fact_key=m["fact_key"],
            status=m["status"],
            created_at=when,
            updated_at=when,
        )
        pipe.add_memory(memory, vector)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, default=DATA)
    parser.add_argument("--persona", nargs="*", default=[], help="only these persona ids")
    args = parser.parse_args()
    personas = load_personas(args.data, args.persona)
    pipe = Pipeline()
    assert pipe.embedder is not None
    methods = ["bm25", "vector", "engram (constant)", "engram"]
    before = RecallService(
        pipe.store,
        pipe.index,
        pipe.embedder,
        None,
        None,
        SystemClock(),
        config(RecallConfig, fusion="score", diversity=0.0, min_relevance=0.0),
    )
    sums: dict[tuple[str, str, str], list[float]] = defaultdict(lambda: [0.0] * 5)  # (split, label, method)
    no_answer: dict[str, list[float]] = defaultdict(list)  # split -> hits returned at the gateway's settings
    kept: dict[str, list[float]] = defaultdict(list)  # split -> share of an answer's memories injected
    tokens: dict[str, list[int]] = defaultdict(list)  # "answer" / "no_answer" -> tokens injected per turn
    t0 = time.perf_counter()
    gateway_k = pipe.config.top_k
    for persona in personas:
        ns, split = persona["id"], persona["split"]
        print(f"[{time.perf_counter() - t0:6.1f}s] {ns} ({split}): {len(persona['memories'])} memories", flush=True)
        index_persona(pipe, persona)
        live = {m["id"] for m in persona["memories"] if m["status"] == "active"}
        for q in persona["questions"]:
            text = q["q"]
            raw = {
                "bm25": [h.memory_id for h in pipe.index.keyword_search(ns, text, k=K_CANDIDATES)],
                "vector": [
                    h.memory_id for h in pipe.index.vector_search(ns, pipe.embedder.embed_query(text), k=K_CANDIDATES)
                ],
                "engram (constant)": [h.memory.id for h in before.recall(ns, text, top_k=10).hits],
                "engram": pipe.recall(ns, text, 10, min_relevance=0.0),
            }
            gateway = pipe.service.recall(ns, text, top_k=gateway_k)
            injected = estimate_tokens(render_patch([], render_prompt(gateway)))
            if q["label"] == "no_answer":
                no_answer[split].append(len(gateway.hits))
                tokens["no_answer"].append(injected)
                continue
            tokens["answer"].append(injected)
            injected_ids = {h.memory.id for h in gateway.hits}
            kept[split].append(len(injected_ids & set(q["answers"])) / len(q["answers"]))
            superseded = set(q["superseded"])
            for method, ids in raw.items():
                m = metrics([i for i in ids if i in live], q["answers"])
                leak = 1.0 if superseded & set(ids[:5]) else 0.0
                for group in (split, "all"):
                    for label in (q["label"], "all"):
                        acc = sums[(group, label, method)]
                        acc[0] += m["r5"]
                        acc[1] += m["ndcg10"]
                        acc[2] += m["hit1"]
                        acc[3] += leak if superseded else 0.0
                        acc[4] += 1
    pipe.close()

    print(f"\nBilingual set ({args.data.name}), {len(personas)} people; top-10 per question\n")
    print("| split | questions | n | method | recall@5 | NDCG@10 | hit@1 | raw leaks@5 |")
    print("|---|---|---|---|---|---|---|---|")
    for group in ("all", "tuning", "held-out"):
        for label in ["all", *LABELS]:
            for method in methods:
                total = sums.get((group, label, method))
                if not total or not total[4]:
                    continue
                n = int(total[4])
                r5 = bold(total[0] / n, total[0] >= max(sums[(group, label, x)][0] for x in methods))
                ndcg = bold(total[1] / n, total[1] >= max(sums[(group, label, x)][1] for x in methods))
                print(f"| {group} | {label} | {n} | {method} | {r5} | {ndcg} | {total[2] / n:.3f} | {int(total[3])} |")
    print(f"\nno_answer questions and tokens injected per chat turn (gateway settings: top_k {gateway_k}, ")
    print(f"min_relevance {getattr(pipe.config, 'min_relevance', 0.0)})\n")
    print("| measure | value |")
    print("|---|---|")
    for group in ("tuning", "held-out"):
        hits = no_answer.get(group, [])
        if hits:
            empty = sum(1 for h in hits if h == 0) / len(hits)
            print(
                f"| {group}: mean hits on no_answer ({len(hits)}) | {sum(hits) / len(hits):.2f} (empty {empty:.0%}) |"
            )
        got = kept.get(group, [])
        if got:
            print(f"| {group}: answer memories injected, answerable ({len(got)}) | {sum(got) / len(got):.0%} |")
    for kind in ("answer", "no_answer"):
        vals = sorted(tokens.get(kind, []))
        if vals:
            p95 = vals[min(len(vals) - 1, int(0.95 * len(vals)))]
            print(
                f"| tokens injected per turn, {kind.replace('_', ' ')} present: mean / p95 | "
                f"{sum(vals) / len(vals):.0f} / {p95} |".replace("no answer present", "no answer")
            )
    print(f"\n{time.perf_counter() - t0:.0f}s")


if __name__ == "__main__":
    main()
