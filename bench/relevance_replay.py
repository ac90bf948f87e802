"""Choose the small-namespace relevance's shrinkage on the tuning rows, by replaying the fusion (a tuning tool).

    python bench/relevance_replay.py [--priors 8,12,16,20,24] [--sizes 5,12,50] [--no-locomo]

Runs every namespace-size ask once (``bench/namespace_sizes.py``: present, absent in the same person's /
conversation's namespace, absent in another one's), recording the inputs of each recall's fusion
(``relevance_features.capture_fusion``). Then each ask's relevance is recomputed with
``fusion.adaptive_fuse`` under other values of its small-namespace options: ``namespace_prior`` (the
pseudo-memories the namespace-mates' median is shrunk by, ``fusion.NAMESPACE_PRIOR``; "off" = the
background padding alone) and ``common_words`` (``fusion.without_common``). Only relevance moves (the
ranking does not read these), so the replay is exact: the configured row equals the pipeline's.

Printed per variant: confident strays (the best hit's relevance >= 0.5 where the answer is absent) per
set, split, size and absent kind, and the share of answer memories injected at the configured floor and
budget on the present asks; then the largest prior whose tuning rows all stay <= 5 % (with the
common-word rule), the rule ``fusion.NAMESPACE_PRIOR`` was chosen by (docs/recall.md, "Relevance at
every size"). Held-out rows are printed, never read by the choice.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

sys.path[:0] = [str(Path(__file__).resolve().parents[1] / "functions"), str(Path(__file__).resolve().parents[1])]

from engram.domain import fusion  # noqa: E402

from bench import injection_curve, namespace_sizes, relevance_features  # noqa: E402
from bench.bilingual import DATA  # noqa: E402
from bench.common import Pipeline  # noqa: E402
from bench.injection_curve import Config, Turn, line_tokens  # noqa: E402
from bench.retrieval import default_data  # noqa: E402

Key = tuple[str, str, int, str]  # set, split, size, "present" | SAME | ELSEWHERE


def replayed(ask: namespace_sizes.Ask, options: dict[str, Any]) -> list[float]:
    """The relevance of each ranked hit of ``ask`` under other fusion options."""
    assert ask.fusion is not None
    _, evidence = ask.fusion.replay(**options)
    return [fusion.relevance(evidence, mid) for mid, _, _ in ask.ranked]


def measure(
    asks: Sequence[namespace_sizes.Ask], options: dict[str, Any], config: Config
) -> tuple[dict[Key, float], dict[Key, float]]:
    """Confident-stray rate per absent row, and the answer share injected under ``config`` per present row."""
    strays: dict[Key, list[bool]] = defaultdict(list)
    shares: dict[Key, list[float]] = defaultdict(list)
    for ask in asks:
        if ask.fusion is None or not ask.ranked:
            continue
        relevance = replayed(ask, options)
        key: Key = (ask.dataset, ask.split, ask.size, ask.absent or "present")
        if not ask.answers:
            strays[key].append(relevance[0] >= namespace_sizes.CONFIDENT)
            continue
        turn = Turn(
            ask.dataset,
            ask.split,
            str(ask.size),
            frozenset(ask.answers),
            tuple((mid, r, line_tokens(content)) for (mid, _, content), r in zip(ask.ranked, relevance, strict=True)),
        )
        shares[key].append(len(turn.answers & set(injection_curve.inject(turn, config))) / len(turn.answers))
    return (
        {k: sum(v) / len(v) for k, v in strays.items()},
        {k: sum(v) / len(v) for k, v in shares.items()},
    )


def variants(priors: Sequence[float]) -> list[tuple[str, dict[str, Any]]]:
    out: list[tuple[str, dict[str, Any]]] = [
        ("background padding only", {"namespace_prior": 1e12, "common_words": False})
    ]
    out.append(("+ common words carry no weight", {"namespace_prior": 1e12, "common_words": True}))
    for prior in priors:
        out.append(
            (
                f"+ namespace-mates, prior {prior:g}, no common-word rule",
                {"namespace_prior": prior, "common_words": False},
            )
        )
        out.append(
            (f"+ namespace-mates, prior {prior:g}, common words", {"namespace_prior": prior, "common_words": True})
        )
    out.append(("+ namespace-mates, no shrinkage, common words", {"namespace_prior": 0.0, "common_words": True}))
    return out


def report(asks: Sequence[namespace_sizes.Ask], priors: Sequence[float], config: Config) -> float | None:
    rows = sorted(
        {(a.dataset, a.split, a.size) for a in asks if not a.answers}, key=lambda r: (r[0], r[1] != "tuning", r[2])
    )
    print(f"\nConfident strays (same / elsewhere) and, in brackets, answer memories injected at {config.label()}\n")
    print("| variant | " + " | ".join(f"{d} {s} {n}" for d, s, n in rows) + " | tuning worst |")
    print("|---|" + "---|" * len(rows) + "---|")
    eligible: list[float] = []
    for name, options in variants(priors):
        strays, shares = measure(asks, options, config)
        cells = []
        for d, s, n in rows:
            same = strays.get((d, s, n, namespace_sizes.SAME))
            elsewhere = strays.get((d, s, n, namespace_sizes.ELSEWHERE))
            share = shares.get((d, s, n, "present"))
            cells.append(
                " / ".join("—" if v is None else f"{v:.1%}" for v in (same, elsewhere))
                + ("" if share is None else f" ({share:.0%})")
            )
        worst = max((v for k, v in strays.items() if k[1] == "tuning"), default=0.0)
        if options["common_words"] and 0 < options["namespace_prior"] < 1e12 and worst <= namespace_sizes.GOAL:
            eligible.append(float(options["namespace_prior"]))
        print(f"| {name} | " + " | ".join(cells) + f" | {worst:.1%} |")
    chosen = max(eligible, default=None)
    configured = fusion.NAMESPACE_PRIOR
    if chosen is None:
        print(f"\nNo prior keeps every tuning row <= {namespace_sizes.GOAL:.0%} (configured: {configured:g}).")
    else:
        verdict = "is" if chosen == configured else "is NOT"
        print(
            f"\nThe largest prior with every tuning row <= {namespace_sizes.GOAL:.0%}: {chosen:g}; "
            f"the configured fusion.NAMESPACE_PRIOR ({configured:g}) {verdict} that."
        )
    return chosen


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--priors", default="8,12,16,20,24")
    parser.add_argument("--sizes", default="5,12,50", help="the padded sizes (200 is never padded: unchanged)")
    parser.add_argument("--data", type=Path, default=None, help="LoCoMo dev file")
    parser.add_argument("--bilingual", type=Path, default=DATA)
    parser.add_argument("--no-locomo", action="store_true")
    args = parser.parse_args()
    t0 = time.perf_counter()
    relevance_features.capture_fusion()
    pipe = Pipeline()
    try:
        sources = list(namespace_sizes.bilingual_sources(args.bilingual))
        locomo = args.data or default_data()
        if not args.no_locomo and locomo.exists():
            sources += list(namespace_sizes.locomo_sources(locomo))
        tally = namespace_sizes.collect(pipe, sources, [int(s) for s in args.sizes.split(",")], None, t0)
        config = Config(pipe.config.min_relevance, pipe.config.budget_tokens or None, pipe.config.sure_relevance)
    finally:
        pipe.close()
    report(tally.asks, [float(p) for p in args.priors.split(",")], config)
    print(f"\n{time.perf_counter() - t0:.0f}s")


if __name__ == "__main__":
    main()
