"""How big a replica index the functions can hold (docs/aws.md, "Replica sizes and ceiling").

Each function keeps a private copy of the index of every namespace it serves: the SQLite file (text,
FTS5 and float32 vectors) in ``/tmp`` and the vectors in memory. Writing a snapshot streams that file
to S3 from a consistent copy next to it, so ``/tmp`` holds the index twice while a job snapshots.
Measured by ``bench/replica.py`` (bench/README.md): ~5 KB per memory at 1024 dimensions, 50,000
memories ~245 MB of index.
"""

from __future__ import annotations

import math

from engram.domain.deployment import REPLICA_WARN_SHARE

# Bytes of index per memory: the float32 vector plus its text, FTS5 postings and row (bench/replica.py).
TEXT_BYTES_PER_MEMORY = 900
# /tmp: the index, its snapshot copy while a job writes it, and room for SQLite's journal and the code.
DISK_COPIES = 2.2
DISK_SLACK_MB = 64
# Memory: the process (Python, numpy, the app) plus the vector matrix and SQLite's page cache, which
# grow faster than the index: measured 5.3 KB a memory at 50k and 7.5 KB at 100k (1024 dimensions, a
# full hydrate; bench/README.md, "At the sizes the README names"), so 1.5 copies of the index.
PROCESS_MB = 350
MEMORY_COPIES = 1.5
# Lambda's limits (MB).
EPHEMERAL_MIN_MB, EPHEMERAL_MAX_MB = 512, 10_240
MEMORY_MAX_MB = 10_240
# Sized for this much more than the expected index, and warned about at the functions' share of the
# ceiling (engram.domain.deployment).
HEADROOM = 1.5
WARN_SHARE = REPLICA_WARN_SHARE


def index_bytes(memories: int, dimension: int) -> int:
    return memories * (4 * dimension + TEXT_BYTES_PER_MEMORY)


def ephemeral_mb(memories: int, dimension: int) -> int:
    """``/tmp`` for ``memories`` with headroom, in Lambda's 1 MB steps and limits."""
    need = index_bytes(math.ceil(memories * HEADROOM), dimension) * DISK_COPIES / 1e6 + DISK_SLACK_MB
    return min(EPHEMERAL_MAX_MB, max(EPHEMERAL_MIN_MB, math.ceil(need)))


def memory_mb(memories: int, dimension: int) -> int:
    """Function memory ``memories`` need with headroom (the configured size wins when larger)."""
    need = PROCESS_MB + index_bytes(math.ceil(memories * HEADROOM), dimension) * MEMORY_COPIES / 1e6
    return min(MEMORY_MAX_MB, math.ceil(need))


def ceiling(*, ephemeral: int, memory: int, dimension: int) -> int:
    """The most memories (in the namespaces one function serves) that fit ``ephemeral`` MB of /tmp and
    ``memory`` MB of memory."""
    per = 4 * dimension + TEXT_BYTES_PER_MEMORY
    by_disk = (ephemeral - DISK_SLACK_MB) * 1e6 / DISK_COPIES / per
    by_memory = (memory - PROCESS_MB) * 1e6 / MEMORY_COPIES / per
    return max(0, int(min(by_disk, by_memory)))
