"""Cross-window recall: how long after a turn ends it is found from another thread, and what it costs.

    python bench/cross_window.py [--turns 60]

The real local stack (SQLite store and conversation index, ``MessageService`` as the gateway's exchange
calls it, ``ConversationService.search`` as the chat turn of another thread calls it, keyword side).
For each of ``--turns`` distinct turns (a user message and the assistant's answer, each naming a made-up
hotel, restaurant or shop): the time its two messages take to store, today (store only: the turn is
findable after the next extraction run, up to ``ENGRAM_EXTRACT_INTERVAL_HOURS``) and now (store +
keyword-index each message as it is stored: ``ConversationService.index_stored``); then, from the end
of that write, the time until a search in another thread first finds it (polled every millisecond, up
to 5 s). The extraction job later adds the vectors (``index_new``), as before.

Across Lambda instances the document reaches the other instances' replicas at their next sync
(``ENGRAM_REPLICA_SYNC_SECONDS``), and OpenSearch at its refresh (~1 s); neither runs here.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parents[1] / "functions"), str(Path(__file__).resolve().parents[1])]

from engram.adapters.search.sqlite import SqliteSearchIndex  # noqa: E402
from engram.adapters.storage.sqlite import SqliteMemoryStore  # noqa: E402
from engram.services.index.guard import GuardedIndex  # noqa: E402
from engram.services.library.messages import MessageIn, MessageService  # noqa: E402
from engram.services.recall.conversations import ConversationConfig, ConversationService  # noqa: E402

from tests.configs import config as service_config  # noqa: E402

PLACES = ["Hotel", "Restaurant", "Bakery", "Bookshop", "Gallery", "Cafe"]
CITIES = ["Lisbon", "Porto", "Kyoto", "Oslo", "Lyon", "Quito", "Hanoi", "Tbilisi"]


class Clock:
    def __init__(self) -> None:
        self._now = datetime(2026, 6, 1, tzinfo=UTC)

    def now(self) -> datetime:
        self._now += timedelta(milliseconds=1)
        return self._now


def turn(i: int) -> tuple[str, str, str]:
    """A user turn, its answer and a question asked later in another thread, all about one made-up place."""
    place, city = PLACES[i % len(PLACES)], CITIES[i % len(CITIES)]
    name = f"{place} Zarvo{i:03d}"
    return (
        f"We booked the {name} in {city} for the first week of June.",
        f"Great, the {name} is close to the old town of {city}.",
        f"Which {place.lower()} did we book in {city}? The Zarvo{i:03d} one?",
    )


def measure(turns: int, keyword_now: bool) -> tuple[list[float], list[float], int]:
    """Store ms per turn, delay ms from the end of the write to the first search that finds it, misses."""
    with tempfile.TemporaryDirectory(prefix="engram-xwin-") as tmp:
        clock = Clock()
        store = SqliteMemoryStore(Path(tmp) / "store.db", clock=clock)
        index = GuardedIndex(SqliteSearchIndex(Path(tmp) / "conv.db"), clock=clock)
        conversations = ConversationService(
            store, index, None, clock, service_config(ConversationConfig, min_relevance=0.0)
        )
        messages = MessageService(store, clock, on_stored=conversations.index_stored if keyword_now else None)
        write_ms: list[float] = []
        delay_ms: list[float] = []
        missed = 0
        for i in range(turns):
            user, answer, question = turn(i)
            t = time.perf_counter()
            messages.ingest(
                "ns",
                [
                    MessageIn(role="user", content=user, conversation_id=f"trip-{i}"),
                    MessageIn(role="assistant", content=answer, conversation_id=f"trip-{i}"),
                ],
            )
            done = time.perf_counter()
            write_ms.append((done - t) * 1000)
            found = False
            while time.perf_counter() - done < (5.0 if keyword_now else 0.05):
                result = conversations.search("ns", question, exclude_thread="elsewhere")
                if any(f"Zarvo{i:03d}" in m.content for f in result.fragments for m in f.messages):
                    delay_ms.append((time.perf_counter() - done) * 1000)
                    found = True
                    break
                time.sleep(0.001)
            missed += not found
        index.close()
        store.close()
        return write_ms, delay_ms, missed


def pct(values: list[float], q: float) -> float:
    v = sorted(values)
    return v[min(len(v) - 1, int(q * len(v)))] if v else float("nan")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--turns", type=int, default=60)
    args = parser.parse_args(argv)
    today = measure(args.turns, keyword_now=False)
    now = measure(args.turns, keyword_now=True)
    print("\nCross-window recall: a turn's fragment found from another thread (SQLite, keyword side)\n")
    print("| | store a turn p50 / p95 (ms) | found from another thread after the turn | p50 / p95 delay (ms) |")
    print("|---|---|---|---|")
    for name, (write, delay, missed) in (("before (store only)", today), ("now (store + keyword-index)", now)):
        found = len(write) - missed
        when = (
            f"{found}/{len(write)} at once"
            if found
            else f"0/{len(write)}: at the next extraction run (every ENGRAM_EXTRACT_INTERVAL_HOURS)"
        )
        print(
            f"| {name} | {statistics.median(write):.2f} / {pct(write, 0.95):.2f} | {when} | "
            + (f"{statistics.median(delay):.2f} / {pct(delay, 0.95):.2f}" if delay else "—")
            + " |"
        )
    added = statistics.median(now[0]) - statistics.median(today[0])
    print(f"\nAdded to each turn's write (p50): {added:.2f} ms (two keyword documents; vectors stay in the job).")


if __name__ == "__main__":
    main()
