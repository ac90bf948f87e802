"""Memory rows kept in memory for ``SqliteMemoryStore.get_memories`` (a recall turn reads its ~50 candidates
back: the select and building the models were ~0.9 ms of a turn, bench/README.md "Gateway overhead").

Kept coherent with every write by the store's change log (migration 10 in ``schema.py``): a trigger on
``memories`` appends (namespace, id) to ``memory_changes`` on every insert, update and delete, whoever
writes (this connection, the search index's, another process). Before it answers from memory, the cache
reads the log past the last change it saw, in the same read transaction as the rows it then loads, and
drops the rows named there. ``seq`` is AUTOINCREMENT, so a rolled-back write leaves no gap and a seq is
never handed out twice; a trigger prunes the log to its newest ``LOG_KEPT`` rows every thousandth change,
so a gap right after the last change seen means changes were pruned unseen: the whole cache is dropped.

Invariant: a cached row equals the row in the file at the snapshot of the last check. It is only used or
filled outside a write transaction (inside one, a row or a log entry could still be rolled back):
``get_memories`` then reads the file as before.

The store reads on several connections (``readers.py``), so the cache has a lock of its own, held across
a load and the check of the log it is read with: loads run one after another, each in a snapshot taken
after the previous one's (a read on any connection sees every transaction committed before it began), so
a row loaded is never older than what the log said. The check before serving held rows runs before the
lock (one statement: the log past the last change seen, in its own snapshot) and is applied under it as
far as it goes past what another thread applied meanwhile: held rows then reflect a snapshot no older
than the statement's, which saw every write committed before the read began.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Callable, Sequence

from engram.domain.models import Memory

# Rows held; the oldest loaded go first beyond it (a recall turn reads ~50).
CACHED_ROWS = 4096
# Newest change-log rows the pruning trigger keeps (schema.py, migration 10).
LOG_KEPT = 10_000
_CHANGES_SINCE = "SELECT seq, namespace, id FROM memory_changes WHERE seq > ? ORDER BY seq"


class MemoryRowCache:
    """(namespace, id) -> Memory, checked against ``memory_changes`` on every read."""

    def __init__(self, capacity: int = CACHED_ROWS) -> None:
        self._capacity = capacity
        self._rows: dict[tuple[str, str], Memory] = {}
        self._seen: int | None = None  # the last change-log seq applied; None: not started
        self._lock = threading.Lock()  # one check (and its loads) at a time (module docstring)

    def clear(self) -> None:
        with self._lock:
            self._rows.clear()
            self._seen = None

    def _catch_up(self, db: sqlite3.Connection) -> None:
        """Drop what changed since the last check (inside the caller's read transaction)."""
        if self._seen is None:
            self._rows.clear()
            self._seen = int(db.execute("SELECT COALESCE(MAX(seq), 0) FROM memory_changes").fetchone()[0])
            return
        changes = db.execute(_CHANGES_SINCE, (self._seen,)).fetchall()
        if not changes:
            return
        if int(changes[0][0]) != self._seen + 1:  # pruned past what this cache saw
            self._rows.clear()
        else:
            for _, namespace, row_id in changes:
                self._rows.pop((namespace, row_id), None)
        self._seen = int(changes[-1][0])

    def _applied(self, since: int, changes: list[tuple[int, str, str]]) -> bool:
        """``changes`` (the log past ``since``, read before the lock) applied beyond what was applied
        meanwhile; False when the cache was cleared since (then it is not used). Under the lock."""
        if self._seen is None:
            return False
        if changes and int(changes[0][0]) != since + 1:  # pruned past what this cache saw
            self._rows.clear()
        else:
            for seq, namespace, row_id in changes:
                if int(seq) > self._seen:
                    self._rows.pop((namespace, row_id), None)
        if changes:
            self._seen = max(self._seen, int(changes[-1][0]))
        return True

    def get(
        self,
        db: sqlite3.Connection,
        namespace: str,
        row_ids: Sequence[str],
        load: Callable[[Sequence[str]], list[Memory]],
    ) -> dict[str, Memory]:
        """The rows of ``row_ids`` that exist, by id: from memory where current, the others through
        ``load`` (reads them on ``db``) in the same snapshot. ``db`` is not in a transaction and is the
        caller's alone meanwhile.

        When every row is held (a recall turn's candidates, mostly), the check of the log is one statement
        and its own snapshot, before the lock (module docstring), and nothing else is read: no transaction
        is opened around it (each statement hands the GIL back and forth)."""
        with self._lock:
            since = self._seen
        if since is not None:
            changes = db.execute(_CHANGES_SINCE, (since,)).fetchall()
            with self._lock:
                if self._applied(since, changes):
                    held = [self._rows.get((namespace, row_id)) for row_id in row_ids]
                    if all(row is not None for row in held):
                        return {row.id: row for row in held if row is not None}
        with self._lock:
            db.execute("BEGIN")
            try:
                self._catch_up(db)
                found: dict[str, Memory] = {}
                missing: list[str] = []
                for row_id in row_ids:
                    row = self._rows.get((namespace, row_id))
                    if row is None:
                        missing.append(row_id)
                    else:
                        found[row_id] = row
                if missing:
                    for memory in load(missing):
                        found[memory.id] = memory
                        self._rows[(namespace, memory.id)] = memory
                    overflow = len(self._rows) - self._capacity
                    if overflow > 0:
                        for key in list(self._rows)[:overflow]:
                            del self._rows[key]
            finally:
                db.execute("COMMIT")
            return found
