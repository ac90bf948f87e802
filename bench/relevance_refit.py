"""Re-fit the relevance model at every namespace size from one ``bench/quality.py --dump`` file (a tuning tool).

    python bench/relevance_refit.py DUMP

The dump holds every simulated chat turn (full sets and namespaces of 5-200 memories) with, per hit of
its deep ranking, what the relevance estimate saw (``bench/relevance_features.py``). Each feature set
below is fitted on the tuning turns only (the top 10 hits of every turn; a turn whose answer is absent
counts all of them as negatives), then every turn's relevance is recomputed with it and printed beside
the current model: the confident-stray rate (best hit >= 0.5 where the answer is absent) per set, split
and size, expected calibration error, and the injection default ``bench/injection_curve.py`` chooses.
Ranking does not change (relevance only feeds the floor, the budget and the "less certain" mark).
"""

from __future__ import annotations

import argparse
import math
import pickle
import sys
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parents[1] / "functions"), str(Path(__file__).resolve().parents[1])]

from bench import injection_curve  # noqa: E402
from bench.fusion_variants import fit_logistic  # noqa: E402
from bench.injection_curve import Turn  # noqa: E402

DEPTH = 10
CONFIDENT = 0.5
Row = tuple[float, float, int, float, float]  # standout, coverage, real candidates, gap to runner-up, top standout
Featurize = Callable[[Row], list[float]]


def rows_of(turn: Turn) -> list[Row]:
    standouts = [f[0] for f in turn.features]
    top = max(standouts, default=0.0)
    out: list[Row] = []
    for i, (s, c, n, _) in enumerate(turn.features):
        others = [v for j, v in enumerate(standouts) if j != i]
        out.append((s, c, n, s - max(others, default=s), top))
    return out


FEATURES: dict[str, Featurize] = {
    "standout, coverage (the current form)": lambda r: [r[0], r[1]],
    "+ log(candidates)": lambda r: [r[0], r[1], math.log(max(1, r[2]))],
    "+ lead over the runner-up": lambda r: [r[0], r[1], r[3]],
    "+ lead, log(candidates)": lambda r: [r[0], r[1], r[3], math.log(max(1, r[2]))],
    # The share of the standout's background that is reference padding (0 from 50 candidates on).
    "+ padding share x standout": lambda r: [r[0], r[1], _pad(r) * r[0]],
    "+ padding share, x standout, x coverage": lambda r: [r[0], r[1], _pad(r), _pad(r) * r[0], _pad(r) * r[1]],
}


def _pad(r: Row, candidates: int = 50) -> float:
    return max(0, candidates - r[2]) / candidates


def sigmoid(x: float) -> float:
    return 1.0 / (1.0 + math.exp(-max(-50.0, min(50.0, x))))


def rescored(turns: Sequence[Turn], predict: Callable[[Row], float]) -> list[Turn]:
    out = []
    for t in turns:
        if not t.features or not all(f[3] for f in t.features):
            out.append(t)  # keyword-only turns keep their own model
            continue
        rel = [round(predict(r), 4) for r in rows_of(t)]
        out.append(replace(t, deep=tuple((m, p, c) for (m, _, c), p in zip(t.deep, rel, strict=True))))
    return out


def strays(turns: Sequence[Turn]) -> dict[tuple[str, str, str], tuple[float, int]]:
    groups: dict[tuple[str, str, str], list[Turn]] = defaultdict(list)
    for t in turns:
        if not t.answers:
            groups[(t.dataset, t.split, t.size)].append(t)
    return {
        key: (sum(bool(t.deep) and t.deep[0][1] >= CONFIDENT for t in ts) / len(ts), len(ts))
        for key, ts in groups.items()
    }


def ece(turns: Sequence[Turn]) -> float:
    bins: dict[int, list[tuple[float, bool]]] = defaultdict(list)
    for t in turns:
        for mid, p, _ in t.deep[:DEPTH]:
            bins[min(9, int(p * 10))].append((p, mid in t.answers))
    n = sum(len(v) for v in bins.values())
    return sum(
        len(v) / n * abs(sum(p for p, _ in v) / len(v) - sum(1 for _, y in v if y) / len(v)) for v in bins.values()
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("dump", type=Path)
    args = parser.parse_args()
    with args.dump.open("rb") as f:
        turns: list[Turn] = pickle.load(f)["turns"]  # a file bench/quality.py wrote
    tuning = [t for t in turns if t.split == "tuning" and t.features and all(f[3] for f in t.features)]
    variants: dict[str, list[Turn]] = {"current model": turns}
    for name, featurize in FEATURES.items():
        x: list[list[float]] = []
        y: list[bool] = []
        for t in tuning:
            for (mid, _, _), r in list(zip(t.deep, rows_of(t), strict=True))[:DEPTH]:
                x.append(featurize(r))
                y.append(mid in t.answers)
        w = fit_logistic(x, y)
        print(f"{name}: weights {[round(v, 3) for v in w]} (bias first; {len(x)} tuning candidates)")

        def predict(r: Row, w: list[float] = w, featurize: Featurize = featurize) -> float:
            return sigmoid(w[0] + sum(a * b for a, b in zip(w[1:], featurize(r), strict=True)))

        variants[name] = rescored(turns, predict)
    keys = sorted({k for v in variants.values() for k in strays(v)}, key=lambda k: (k[0], k[1], _size(k[2])))
    print("\nConfident strays (best hit >= 0.5 where the answer is absent), per model\n")
    print("| set | split | size | absent | " + " | ".join(variants) + " |")
    print("|---|---|---|---|" + "---|" * len(variants))
    table = {name: strays(v) for name, v in variants.items()}
    for key in keys:
        n = next(table[name][key][1] for name in table if key in table[name])
        cells = [f"{table[name][key][0]:.1%}" if key in table[name] else "—" for name in variants]
        print(f"| {key[0]} | {key[1]} | {key[2]} | {n} | " + " | ".join(cells) + " |")
    print(
        "\n| model | ECE tuning | ECE held-out | chosen injection default (tuning) "
        "| bilingual full: answers injected / strays, tuning | held-out | LoCoMo full: answers, tuning | held-out |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for name, v in variants.items():
        chosen, reached = injection_curve.choose(v, injection_curve.BEFORE)
        e_t = ece([t for t in v if t.split == "tuning"])
        e_h = ece([t for t in v if t.split == "held-out"])
        cells = []
        for dataset in ("bilingual", "locomo"):
            for split in ("tuning", "held-out"):
                p = injection_curve.measure(injection_curve.groups(v, split)[f"{dataset} full"], chosen)
                cells.append(f"{p.share:.0%} / {p.strays:.2f}" if p.unanswerable else f"{p.share:.0%}")
        print(
            f"| {name} | {e_t:.3f} | {e_h:.3f} | {chosen.label()}{' (reaches 70 %)' if reached else ''} | "
            + " | ".join(cells)
            + " |"
        )


def _size(size: str) -> int:
    return 0 if size == "full" else int(size)


if __name__ == "__main__":
    main()
