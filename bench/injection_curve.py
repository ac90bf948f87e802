"""The injection curve: how many answer memories reach the model, and how many stray ones, per floor and
token budget (issue 24, item 3; `bench/quality.py` prints it).

Each chat turn is simulated from one deep ranking (the pipeline's top ``BUDGET_MAX_HITS`` without a
floor, each hit with its relevance and the tokens of its injected line): a configuration keeps the hits
at or above its floor, best first, while their lines fit in its budget, exactly as
``RecallService.recall(..., budget_tokens=B)`` does (``services/recall/pipeline.py``, ``within_budget``); the
"top 5" rows are the previous rule (the floor, then the 5 best). Answerable turns count the share of
their answer memories injected; unanswerable turns (``no_answer`` questions, and every question asked
in a namespace that does not hold its answer) count the memories injected, all of them stray. At each
namespace size the asks in another person's / conversation's namespace (true absence) are their own
row ("size N elsewhere"), beside the row of the present asks and the absent ones in the same source.
The default is chosen on the tuning rows only (``choose``): the highest answer share on the full sets
whose stray memories stay <= ``MAX_STRAYS`` per unanswerable turn on average there, and at every
namespace size, both rows, no more than ``MAX_STRAYS`` or than the previous rule already had.
"""

from __future__ import annotations

import sys
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parents[1] / "functions"), str(Path(__file__).resolve().parents[1])]

from engram.domain.text import estimate_tokens  # noqa: E402
from engram.services.recall.pipeline import TENTATIVE_HEAD  # noqa: E402

FLOORS = (0.0, 0.02, 0.05, 0.08, 0.1, 0.15, 0.2, 0.3)
BUDGETS = (60, 120, 200, 300, 400)
TOP_K = 5
MAX_STRAYS = 1.0
GOAL_SHARE = 0.7


@dataclass(frozen=True)
class Turn:
    dataset: str  # "bilingual" | "locomo"
    split: str  # "tuning" | "held-out"
    size: str  # "full" or the namespace size
    answers: frozenset[str]
    deep: tuple[tuple[str, float, int], ...]  # memory id, relevance, tokens of its line
    # What the relevance estimate saw per deep hit (``bench/relevance_features.py``), for re-fitting.
    features: tuple[tuple[float, float, int, bool], ...] = ()


@dataclass(frozen=True)
class Config:
    floor: float
    budget: int | None  # None: the top-5 rule
    sure: float = 0.5

    def label(self) -> str:
        return f"floor {self.floor:g}, " + (f"budget {self.budget}" if self.budget else f"top {TOP_K}")


# The rule before issue 24: floor 0.2, the 5 best (the strays it had at each size are the limit there).
BEFORE = Config(0.2, None)


def line_tokens(content: str, kind: str = "fact", date: str = "2025-01-01") -> int:
    """Tokens of one injected line as ``render_prompt`` writes it (``memory_line``), with its newline."""
    return estimate_tokens(f"- {' '.join(content.split())} ({kind}, {date})") + 1


def inject(turn: Turn, config: Config) -> list[str]:
    kept = [(mid, rel, cost) for mid, rel, cost in turn.deep if rel >= config.floor]
    if config.budget is None:
        return [mid for mid, _, _ in kept[:TOP_K]]
    out: list[str] = []
    used = 0
    heading = estimate_tokens(TENTATIVE_HEAD)
    tentative = False
    for mid, rel, cost in kept:
        extra = heading if rel < config.sure and not tentative else 0
        if used + cost + extra > config.budget:
            continue
        used += cost + extra
        tentative = tentative or rel < config.sure
        out.append(mid)
    return out


@dataclass
class Point:
    share: float  # answer memories injected, answerable turns
    strays: float  # memories injected per unanswerable turn
    tokens: float  # tokens per answerable turn (lines only)
    answerable: int
    unanswerable: int


def measure(turns: Iterable[Turn], config: Config) -> Point:
    shares: list[float] = []
    strays: list[int] = []
    tokens: list[int] = []
    for turn in turns:
        ids = inject(turn, config)
        if turn.answers:
            shares.append(len(turn.answers & set(ids)) / len(turn.answers))
            cost = {mid: c for mid, _, c in turn.deep}
            tokens.append(sum(cost[m] for m in ids))
        else:
            strays.append(len(ids))
    return Point(
        sum(shares) / max(1, len(shares)),
        sum(strays) / max(1, len(strays)),
        sum(tokens) / max(1, len(tokens)),
        len(shares),
        len(strays),
    )


def configs() -> list[Config]:
    return [Config(f, None) for f in FLOORS] + [Config(f, b) for f in FLOORS for b in BUDGETS]


def groups(turns: Sequence[Turn], split: str) -> dict[str, list[Turn]]:
    """The turns of one split by row: each data set on its full namespaces, then each namespace size."""
    out: dict[str, list[Turn]] = defaultdict(list)
    for t in turns:
        if t.split != split:
            continue
        out[f"{t.dataset} {'full' if t.size == 'full' else 'size ' + t.size}"].append(t)
    return out


def choose(turns: Sequence[Turn], before: Config) -> tuple[Config, bool]:
    """The tuning-chosen default: the best mean answer share over the full sets (each set counted once:
    the size rows are drawn from them) among the configurations whose stray memories stay <= ``MAX_STRAYS``
    per unanswerable turn on the full sets, and at every namespace size <= ``MAX_STRAYS`` or no more than
    ``before`` had there (injecting more must not bring strays back); and whether it reaches ``GOAL_SHARE``."""
    rows = {name: ts for name, ts in groups(turns, "tuning").items() if any(not t.answers for t in ts)}
    limit = {
        name: max(MAX_STRAYS, measure(ts, before).strays) if "size" in name else MAX_STRAYS for name, ts in rows.items()
    }
    full = [ts for name, ts in groups(turns, "tuning").items() if name.endswith(" full")]
    best: tuple[float, Config] | None = None
    for config in configs():
        if any(measure(ts, config).strays > limit[name] + 1e-9 for name, ts in rows.items()):
            continue
        share = sum(measure(ts, config).share for ts in full) / max(1, len(full))
        # Ties: the smaller budget, then the higher floor (fewer tokens, fewer strays).
        key = (round(share, 4), -(config.budget or 0), config.floor)
        if best is None or key > (round(best[0], 4), -(best[1].budget or 0), best[1].floor):
            best = (share, config)
    assert best is not None, "no configuration keeps the strays under the limit"
    return best[1], best[0] >= GOAL_SHARE


def report(turns: Sequence[Turn], current: Config, configured: Config | None = None) -> Config:
    """The curve per split and row, the configuration ``choose`` picks on tuning, and whether the
    configured default (the settings' floor and budget) is that pick."""
    chosen, reached = choose(turns, current)
    print("\nInjection curve: answer memories injected (answerable turns) / stray memories per unanswerable turn")
    print(
        f"(tuning rows choose the default: best share on the full sets with <= {MAX_STRAYS:g} stray per "
        "unanswerable turn, and at each size no more strays than the previous rule or 1)\n"
    )
    for split in ("tuning", "held-out"):
        rows = groups(turns, split)
        names = sorted(rows, key=lambda r: (r.split(" ")[0], r != f"{r.split(' ')[0]} full", _size_key(r)))
        print(f"\n{split}\n")
        print("| configuration | " + " | ".join(names) + " | tokens / answerable turn (full sets) |")
        print("|---|" + "---|" * len(names) + "---|")
        full = [t for t in turns if t.split == split and t.size == "full"]
        for config in configs():
            marks = " **(chosen)**" if config == chosen else " (before)" if config == current else ""
            if configured is not None and config == configured:
                marks += " (configured default)"
            cells = []
            for name in names:
                p = measure(rows[name], config)
                share = f"{p.share:.0%}" if p.answerable else "—"
                cells.append(f"{share} / " + (f"{p.strays:.2f}" if p.unanswerable else "—"))
            print(f"| {config.label()}{marks} | " + " | ".join(cells) + f" | {measure(full, config).tokens:.0f} |")
    verdict = "reaches" if reached else "does NOT reach"
    print(
        f"\nChosen on tuning: {chosen.label()} ({verdict} {GOAL_SHARE:.0%} of answer memories "
        f"at <= {MAX_STRAYS:g} stray)."
    )
    if configured is not None:
        same = "is" if configured == chosen else "is NOT"
        print(f"The configured default ({configured.label()}) {same} the chosen point.")
    return chosen


def main() -> None:
    """Re-read a ``bench/quality.py --dump`` file: the curve and the choice again, no recall run."""
    import argparse
    import pickle

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("dump", type=Path)
    parser.add_argument("--floor", type=float, default=None, help="the configured floor to compare")
    parser.add_argument("--budget", type=int, default=None, help="the configured budget to compare")
    args = parser.parse_args()
    with args.dump.open("rb") as f:
        data = pickle.load(f)  # a file bench/quality.py wrote
    configured = Config(args.floor, args.budget) if args.floor is not None else None
    report(data["turns"], BEFORE, configured)


if __name__ == "__main__":
    main()


def _size_key(name: str) -> tuple[int, str]:
    """The size and what follows it in a row name (locomo size 50 elsewhere: 50, elsewhere); full: 0."""
    words = name.split(" ")
    if "size" not in words:
        return 0, ""
    at = words.index("size")
    return int(words[at + 1]), " ".join(words[at + 2 :])
