"""One clock (docs/ARCHITECTURE.md, "One clock"): every time Engram decides — cache and idempotency
expiry, rate-limit windows, leases, retention, stamps on rows — comes from the injected ``Clock``
(``domain/ports.py``; the real one is ``adapters/clock.py``), never from a read of the wall clock in a
store, a service, an adapter or a job handler.

The test parses every module of the package and lists each read of the time: the wall clock
(``time.time``, ``datetime.now``, ``date.today`` ...) and the elapsed-time counters (``time.monotonic``,
``time.perf_counter``). Each one must stand in ``EXEMPT`` with the reason it is not a decision the
clock owns; an exemption no longer used fails too, so the list stays exact.
"""

from __future__ import annotations

import ast
from collections import Counter
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "functions" / "engram"

# The one place that reads the wall clock for everyone.
THE_CLOCK = "adapters/clock.py"

WALL_CLOCK = {
    "time": {"time", "time_ns", "localtime", "gmtime", "ctime", "asctime"},
    "datetime": {"now", "utcnow", "today"},
    "date": {"today"},
}
ELAPSED = {"time": {"monotonic", "monotonic_ns", "perf_counter", "perf_counter_ns", "process_time"}}

# (module, read) -> why the read is not a time the Clock decides. Keep each reason precise: a new
# read earns a line here only when it is one of these kinds.
EXEMPT: dict[tuple[str, str], str] = {
    # Id generation: the millisecond prefix makes ids sort by creation; no expiry or stamp reads it.
    ("domain/models.py", "time.time"): "new_id(): the ULID-style id's millisecond prefix",
    # The wire formats' `created` stamps: a field of a response the client reads, decided nothing.
    ("domain/wire/anthropic.py", "time.time"): "`created` of an OpenAI response translated from Anthropic",
    ("domain/wire/anthropic_stream.py", "time.time"): "`created` of the OpenAI chunks of an Anthropic stream",
    ("domain/wire/converse.py", "time.time"): "`created` of OpenAI responses and chunks translated from Converse",
    ("domain/wire/responses.py", "time.time"): "`created_at` of Responses translated from chat completions",
    ("services/chat/gateway.py", "time.time"): "`created` of each model in the `GET /v1/models` list",
    # The replica's sequence numbers: epoch milliseconds, strictly increasing per process, shared
    # with DynamoDB's TTL (docs/aws.md, "Search backends"); they order log rows, they are not stamps.
    ("adapters/search/document_log.py", "time.time"): "SEQ: the replica log's sequence numbers",
    ("adapters/search/replica.py", "time.time"): "a snapshot older than the tombstones' TTL, in sequence numbers",
    # DynamoDB TTL attributes: DynamoDB deletes by its own (real) clock, so the attribute is real time.
    ("adapters/search/replica_log.py", "time.time"): "the DynamoDB `ttl` attribute of a tombstone",
    # Monotonic timing for timeouts and intervals inside one process: a duration, never stored,
    # never compared with a stored time, and immune to wall-clock jumps.
    ("adapters/search/replica.py", "time.monotonic"): "the replica's sync interval (ENGRAM_REPLICA_SYNC_SECONDS)",
    ("services/recall/boot.py", "time.monotonic"): "age of the boot block kept in process for the chat path (max_age)",
    ("services/index/gated_embedder.py", "time.monotonic"): "re-check interval of the index's embedding model",
    ("services/index/guard.py", "time.monotonic"): "retry back-off while the search index is unavailable",
    ("services/runtime_settings.py", "time.monotonic"): "re-read interval of the runtime settings row (5 s)",
    ("services/index/reindex.py", "time.monotonic"): "the deadline of a reindex slice (the Lambda's remaining time)",
    ("services/jobs/consolidation.py", "time.monotonic"): "the deadline of a consolidation draft's slice (likewise)",
    ("entrypoints/lambdas/runtime.py", "time.monotonic"): "that deadline, from the invocation's remaining time",
    ("entrypoints/console.py", "time.monotonic"): "the CLI progress bar's rate and redraw interval",
    # Latency measurement: reported in headers, logs and recall stages, decided nothing.
    ("services/recall/pipeline.py", "time.perf_counter"): "recall stage timings",
    ("services/chat/gateway.py", "time.perf_counter"): "recall and upstream latency of a turn",
    ("services/chat/turn_context.py", "time.perf_counter"): "how long a turn's context took (x-engram-recall-ms)",
    ("entrypoints/http/app.py", "time.perf_counter"): "request duration in the access log",
    ("entrypoints/http/app.py", "time.monotonic"): "the telemetry switch read at most once a second",
}


def _time_reads(source: str) -> list[str]:
    """Every read of the time in ``source`` as ``module.function`` (a call or a reference such as a
    default argument), including names imported from ``time`` / ``datetime``."""
    tree = ast.parse(source)
    watched = {
        module: WALL_CLOCK.get(module, set()) | ELAPSED.get(module, set()) for module in ("time", "datetime", "date")
    }
    # local name -> the watched module or class it is (``import time``, ``from datetime import datetime as dt``)
    aliases: dict[str, str] = {}
    reads: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name in ("time", "datetime"):
                    aliases[alias.asname or alias.name] = alias.name
        elif isinstance(node, ast.ImportFrom) and node.module in ("time", "datetime"):
            for alias in node.names:
                if node.module == "datetime" and alias.name in ("datetime", "date"):
                    aliases[alias.asname or alias.name] = alias.name
                elif node.module == "time" and alias.name in watched["time"]:
                    reads.append(f"time.{alias.name}")  # ``from time import time``: a read by another name
    for node in ast.walk(tree):
        if not isinstance(node, ast.Attribute):
            continue
        owner = node.value
        if isinstance(owner, ast.Name):
            kind = aliases.get(owner.id)
        elif isinstance(owner, ast.Attribute) and isinstance(owner.value, ast.Name):
            # datetime.datetime.now / datetime.date.today
            kind = (
                owner.attr if aliases.get(owner.value.id) == "datetime" and owner.attr in ("datetime", "date") else None
            )
        else:
            kind = None
        if kind is not None and node.attr in watched.get(kind, set()):
            reads.append(f"{'time' if kind == 'time' else kind}.{node.attr}")
    return reads


def _modules() -> list[Path]:
    return [p for p in sorted(PACKAGE.rglob("*.py")) if p.relative_to(PACKAGE).as_posix() != THE_CLOCK]


def _name(path: Path) -> str:
    return path.relative_to(PACKAGE).as_posix()


@pytest.mark.parametrize("path", _modules(), ids=_name)
def test_no_module_reads_the_time_itself(path: Path) -> None:
    reads = Counter(_time_reads(path.read_text(encoding="utf-8")))
    unexplained = sorted(read for read in reads if (_name(path), read) not in EXEMPT)
    assert not unexplained, (
        f"{_name(path)} reads the time itself ({', '.join(unexplained)}): take it from the injected Clock "
        "(a store at construction, a service through its constructor), or, if it is a timeout, a latency "
        "or a wire stamp, add it to EXEMPT with its reason (docs/ARCHITECTURE.md, 'One clock')"
    )


def test_every_exemption_is_still_used() -> None:
    used = {(_name(path), read) for path in _modules() for read in _time_reads(path.read_text(encoding="utf-8"))}
    assert not sorted(set(EXEMPT) - used), "exempt reads that no longer exist: remove them from EXEMPT"


def test_the_clock_itself_reads_the_wall_clock() -> None:
    assert _time_reads((PACKAGE / THE_CLOCK).read_text(encoding="utf-8")) == ["datetime.now"]


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("import time\nx = time.time()", ["time.time"]),
        ("import time\ndef f(now=time.monotonic): ...", ["time.monotonic"]),
        ("from time import time as t\nx = t()", ["time.time"]),
        ("from datetime import UTC, datetime\nx = datetime.now(UTC)", ["datetime.now"]),
        ("from datetime import datetime as dt\nx = dt.utcnow()", ["datetime.utcnow"]),
        ("import datetime\nx = datetime.datetime.now()", ["datetime.now"]),
        ("import datetime\nx = datetime.date.today()", ["date.today"]),
        ("from datetime import date\nx = date.today()", ["date.today"]),
        ("from datetime import datetime\nx = datetime.fromisoformat('2026-01-01')", []),
        ("def f(clock):\n    return clock.now()", []),
    ],
)
def test_the_check_finds_each_way_of_reading_the_time(source: str, expected: list[str]) -> None:
    assert _time_reads(source) == expected
