"""Fusion and relevance variants on LoCoMo and the bilingual set, side by side (a tuning tool).

    python bench/fusion_variants.py [--strong-vectors] [--calibrate]

Candidates come from bench/candidates.py (computed once, cached). Every variant re-ranks the same
candidate lists (live memories only, as RecallService sees them after its store re-check) and then goes
through the pipeline's own dedup and diversity stage, so a row is what recall would return; rows are
scored on tuning and held-out separately (recall@5 / NDCG@10). Variants are chosen on tuning; one is
adopted only if it also wins on held-out.

``--strong-vectors`` simulates a much stronger embedder (as Bedrock Titan/Cohere are for some
queries): every labelled answer's cosine is raised by 2 standard deviations of its list, so the
vector list's top is usually right. Fusion must then follow the vectors, not drag them down.
``--calibrate`` fits the relevance model on tuning questions and prints its reliability on held-out.
"""

from __future__ import annotations

import argparse
import math
import random
import sys
from collections import defaultdict
from collections.abc import Callable
from functools import lru_cache
from pathlib import Path
from typing import TypedDict, Unpack

sys.path[:0] = [str(Path(__file__).resolve().parents[1] / "functions"), str(Path(__file__).resolve().parents[1])]

import numpy as np  # noqa: E402
from engram.adapters.search.inmemory import neighbour_density  # noqa: E402
from engram.domain import fusion, recall_scoring  # noqa: E402
from engram.domain.recall_scoring import fold_text, fuse_scores, jaccard  # noqa: E402
from engram.domain.text import tokenize  # noqa: E402
from engram.services.recall.pipeline import RecallConfig  # noqa: E402

from bench.candidates import Question, all_questions  # noqa: E402
from tests.configs import config  # noqa: E402

Ranker = Callable[[Question], list[str]]


class Knobs(TypedDict, total=False):
    """The fusion parameters a variant changes (keyword arguments of ``fusion.adaptive_fuse``)."""

    hubness: float
    script_strength: float
    standout_ref: float
    confidence_floor: float
    confidence_full: float


@lru_cache(maxsize=100_000)
def tokens(text: str) -> frozenset[str]:
    return frozenset(tokenize(text))


@lru_cache(maxsize=100_000)
def script(text: str) -> fusion.Script:
    return fusion.script_of(text)


def ranked(scores: dict[str, float]) -> list[str]:
    return [m for m, _ in sorted(scores.items(), key=lambda kv: (-kv[1], kv[0]))]


def live(q: Question) -> tuple[list[tuple[str, float]], list[tuple[str, float]]]:
    """The keyword and vector candidates that pass the store re-check (stale versions dropped)."""
    return [(m, s) for m, s in q.keyword if m in q.live], [(m, s) for m, s in q.vector if m in q.live]


def density(q: Question, k: int = fusion.HUBNESS_NEIGHBOURS) -> dict[str, float]:
    """Neighbourhood density of the live vector candidates (what the index's ``neighbour_density`` gives)."""
    ids = [m for m, _ in live(q)[1] if m in q.vectors]
    if len(ids) < 2:
        return {}
    matrix = np.stack([q.vectors[m] / np.linalg.norm(q.vectors[m]) for m in ids])
    return neighbour_density(ids, matrix, k)


def adaptive(
    q: Question, *, hub_k: int = fusion.HUBNESS_NEIGHBOURS, **params: Unpack[Knobs]
) -> tuple[dict[str, float], fusion.Evidence]:
    keyword, vector = live(q)
    return fusion.adaptive_fuse(
        tokenize(q.query),
        keyword,
        vector,
        lambda m: tokens(q.texts.get(m, "")),
        {m: script(t) for m, t in q.texts.items()},
        density=density(q, hub_k) if params.get("hubness", 1.0) > 0 else None,
        **params,
    )


def constant(q: Question, kw: float = 1.5, vec: float = 1.0) -> dict[str, float]:
    """The previous default: constant weights on max-normalized BM25 and min-max cosine."""
    keyword, vector = live(q)
    return fuse_scores([(fusion.max_normalized(keyword), kw if keyword else 0.0), (fusion.min_max(vector), vec)])


DEFAULTS = config(RecallConfig)


def pipeline(q: Question, fused: dict[str, float], diversity: float = DEFAULTS.diversity) -> list[str]:
    """RecallService's stage after fusion: the head of the ranking, near-duplicates dropped, diversity."""
    kept: list[str] = []
    folds: set[str] = set()
    seen: list[frozenset[str]] = []
    for mid in ranked(fused)[:20]:
        text = q.texts.get(mid, "")
        fold, toks = fold_text(text), tokens(text)
        if fold in folds or (len(toks) >= 3 and any(jaccard(toks, t) >= DEFAULTS.dedup_jaccard for t in seen)):
            continue
        folds.add(fold)
        seen.append(toks)
        kept.append(mid)
    scores = recall_scoring.diversify(kept, fused, lambda m: tokens(q.texts.get(m, "")), diversity)
    return sorted(kept, key=lambda m: (-scores[m], m))


def adaptive_with(*, hub_k: int = fusion.HUBNESS_NEIGHBOURS, **params: Unpack[Knobs]) -> Ranker:
    """The adaptive pipeline with these parameters changed."""
    return lambda q: pipeline(q, adaptive(q, hub_k=hub_k, **params)[0])


def variants() -> dict[str, Ranker]:
    v: dict[str, Ranker] = {
        "bm25": lambda q: [m for m, _ in q.keyword],
        "vector": lambda q: [m for m, _ in q.vector],
        "vector, hubness-corrected": lambda q: ranked(dict(fusion.hubness_corrected(live(q)[1], density(q)))),
        "constant kw 1.5 : vec 1 (before)": lambda q: pipeline(q, constant(q), 0.0),
        "constant kw 0.5 : vec 1": lambda q: pipeline(q, constant(q, 0.5), 0.0),
        "adaptive, no hubness correction (before)": lambda q: pipeline(q, adaptive(q, hubness=0.0)[0]),
        "adaptive, no hubness, no diversity": lambda q: pipeline(q, adaptive(q, hubness=0.0)[0], 0.0),
        "adaptive + hubness (default)": lambda q: pipeline(q, adaptive(q)[0]),
        "adaptive + hubness, no diversity": lambda q: pipeline(q, adaptive(q)[0], 0.0),
        "adaptive + hubness, diversity 0.5": lambda q: pipeline(q, adaptive(q)[0], 0.5),
        "adaptive + hubness, no script correction": lambda q: pipeline(q, adaptive(q, script_strength=0.0)[0]),
        "adaptive + hubness, script strength 0.5": lambda q: pipeline(q, adaptive(q, script_strength=0.5)[0]),
    }
    for k in (5, 20):
        v[f"adaptive + hubness k = {k}"] = adaptive_with(hub_k=k)
    for w in (0.25, 1.0):
        v[f"adaptive + hubness weight {w}"] = adaptive_with(hubness=w)
    for ref in (0.0, 3.0):
        v[f"adaptive + hubness, vector weight x standout/{ref:g}"] = adaptive_with(standout_ref=ref)
    for floor, full in ((0.0, 1.0), (0.2, 0.5), (0.4, 0.7)):
        v[f"adaptive + hubness, confidence ramp {floor}-{full}"] = adaptive_with(
            confidence_floor=floor, confidence_full=full
        )
    return v


def metrics(ranking: list[str], answers: set[str]) -> tuple[float, float]:
    dcg = sum(1 / math.log2(i + 2) for i, m in enumerate(ranking[:10]) if m in answers)
    idcg = sum(1 / math.log2(i + 2) for i in range(min(10, len(answers))))
    return len(answers & set(ranking[:5])) / len(answers), dcg / idcg


def strengthen(questions: list[Question]) -> list[Question]:
    """Each answer's cosine raised by 2 standard deviations of its list (a simulated strong embedder)."""
    out = []
    for q in questions:
        values = [s for _, s in q.vector]
        if len(values) < 2:
            out.append(q)
            continue
        mean = sum(values) / len(values)
        sd = math.sqrt(sum((x - mean) ** 2 for x in values) / len(values))
        vec = sorted(((m, s + 2 * sd if m in q.answers else s) for m, s in q.vector), key=lambda kv: -kv[1])
        out.append(Question(**{**q.__dict__, "vector": vec}))
    return out


def relevance_rows(questions: list[Question], depth: int = 10) -> list[tuple[Question, str, float, float, bool]]:
    """(question, memory, standout, coverage, relevant) for the top ``depth`` fused live candidates."""
    rows = []
    for q in questions:
        fused, ev = adaptive(q)
        for mid in pipeline(q, fused)[:depth]:
            s = ev.vector_standout.get(mid, min(ev.vector_standout.values(), default=0.0))
            rows.append((q, mid, s, ev.coverage.get(mid, 0.0), mid in q.answers))
    return rows


def fit_logistic(x: list[list[float]], y: list[bool], steps: int = 300) -> list[float]:
    """Plain Newton-Raphson logistic regression with a little L2 (bias first)."""
    xs = np.array([[1.0, *row] for row in x])
    ys = np.array(y, dtype=float)
    w = np.zeros(xs.shape[1])
    for _ in range(steps):
        p = 1 / (1 + np.exp(-xs @ w))
        grad = xs.T @ (p - ys) + 1e-3 * w
        hess = (xs * (p * (1 - p))[:, None]).T @ xs + 1e-3 * np.eye(len(w))
        w -= np.linalg.solve(hess, grad)
    return [float(v) for v in w]


def calibrate(questions: list[Question]) -> None:
    rows = relevance_rows(questions)
    tune = [r for r in rows if r[0].split == "tuning"]
    w = fit_logistic([[r[2], r[3]] for r in tune], [r[4] for r in tune])
    wk = fit_logistic([[r[3]] for r in tune], [r[4] for r in tune])
    print(
        f"\nrelevance model (fitted on {len(tune)} tuning candidates): bias {w[0]:.3f}, standout {w[1]:.3f}, "
        f"coverage {w[2]:.3f}; keyword-only: bias {wk[0]:.3f}, coverage {wk[1]:.3f}"
    )
    model = fusion.RelevanceModel(bias=w[0], standout=w[1], coverage=w[2], keyword_bias=wk[0], keyword_coverage=wk[1])

    def p(r: tuple[Question, str, float, float, bool]) -> float:
        ev = fusion.Evidence(0.0, 0.0, 0.0, {r[1]: r[3]}, {r[1]: r[2]}, has_vectors=True)
        return fusion.relevance(ev, r[1], model)

    for split in ("tuning", "held-out"):
        part = [r for r in rows if r[0].split == split]
        print(f"\nreliability on {split} ({len(part)} candidates): predicted vs observed per bin")
        print("| relevance bin | candidates | mean predicted | observed relevant |")
        print("|---|---|---|---|")
        bins: dict[int, list[tuple[float, bool]]] = defaultdict(list)
        for r in part:
            pr = p(r)
            bins[min(9, int(pr * 10))].append((pr, r[4]))
        ece = 0.0
        for b in sorted(bins):
            vals = bins[b]
            mp = sum(v for v, _ in vals) / len(vals)
            ob = sum(1 for _, t in vals if t) / len(vals)
            ece += len(vals) / len(part) * abs(mp - ob)
            print(f"| {b / 10:.1f}-{(b + 1) / 10:.1f} | {len(vals)} | {mp:.3f} | {ob:.3f} |")
        print(f"expected calibration error: {ece:.3f}")
    print("\n| min_relevance | split | no_answer: mean hits (top 5) | answerable: answers kept in top 5 |")
    print("|---|---|---|---|")
    by_q: dict[int, list[tuple[float, bool, int]]] = defaultdict(list)
    for r in rows:
        by_q[id(r[0])].append((p(r), r[4], len(by_q[id(r[0])])))
    qmap = {id(q): q for q in questions}
    for floor in (0.0, 0.05, 0.1, 0.15, 0.2, 0.22, 0.25, 0.3):
        for split in ("tuning", "held-out"):
            hits = kept = total = 0.0
            n_no = 0
            for qid, cand in by_q.items():
                q = qmap[qid]
                if q.split != split or q.dataset != "bilingual":
                    continue
                top5 = [c for c in cand[:5] if c[0] >= floor]
                if not q.answers:
                    hits += len(top5)
                    n_no += 1
                else:
                    kept += sum(1 for c in top5 if c[1])
                    total += sum(1 for c in cand[:5] if c[1])
            print(f"| {floor:.2f} | {split} | {hits / max(n_no, 1):.2f} | {kept / max(total, 1):.2f} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--strong-vectors", action="store_true")
    parser.add_argument("--only", default="", help="substring filter on variant names")
    parser.add_argument("--calibrate", action="store_true")
    args = parser.parse_args()
    if args.calibrate:
        calibrate(all_questions())
        return
    questions = [q for q in all_questions() if q.answers]
    if args.strong_vectors:
        questions = strengthen(questions)
    groups = sorted({(q.dataset, q.split) for q in questions}) + sorted(
        {(q.dataset, q.label) for q in questions if q.dataset == "bilingual"}
    )
    names = [f"{d} {s}" for d, s in groups]
    print("\n| variant | " + " | ".join(names) + " |")
    print("|---|" + "---|" * len(names))
    random.seed(0)
    for name, fn in variants().items():
        if args.only and args.only not in name and name not in ("bm25", "vector"):
            continue
        acc: dict[tuple[str, str], list[float]] = defaultdict(lambda: [0.0, 0.0, 0])
        for q in questions:
            r5, ndcg = metrics([m for m in fn(q) if m in q.live], q.answers)
            for key in ((q.dataset, q.split), (q.dataset, q.label)):
                a = acc[key]
                a[0] += r5
                a[1] += ndcg
                a[2] += 1
        cells = [f"{acc[g][0] / acc[g][2]:.3f} / {acc[g][1] / acc[g][2]:.3f}" if acc[g][2] else "-" for g in groups]
        print(f"| {name} | " + " | ".join(cells) + " |", flush=True)


if __name__ == "__main__":
    main()
