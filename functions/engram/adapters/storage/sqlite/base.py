"""What every part of ``SqliteMemoryStore`` shares: the connection, its lock, sessions and
transactions, selects and paging."""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from engram.adapters.files import private_sqlite
from engram.adapters.storage.common import check_limit, cut_page, decode_cursor, to_iso
from engram.adapters.storage.sqlite.row_cache import MemoryRowCache
from engram.adapters.storage.sqlite.schema import immediate, migrate
from engram.adapters.storage.sqlite.tables import (
    BUSY_TIMEOUT_S,
    IDS_PER_QUERY,
    Listed,
    M,
    Table,
    conflict_message,
    marks,
)
from engram.domain.errors import Conflict, UpstreamUnavailable
from engram.domain.models import Page
from engram.domain.ports import Clock


class SqliteStoreBase:
    """One connection to the SQLite file at ``path`` (parent directories are created on first use),
    opened and migrated on first use, and the statements every part of the store runs through it."""

    def __init__(self, path: str | Path, *, clock: Clock) -> None:
        self._path = Path(path)
        self._clock = clock  # decides cache expiry and stamps (docs/ARCHITECTURE.md, "One clock")
        self._lock = threading.RLock()
        self._db: sqlite3.Connection | None = None
        self._closed = False
        self._memory_rows = MemoryRowCache()  # get_memories' rows, kept coherent by the change log

    def close(self) -> None:
        """Close the connection; the store cannot be used afterwards."""
        with self._lock:
            if self._db is not None:
                self._db.close()
                self._db = None
            self._memory_rows.clear()
            self._closed = True

    # -- plumbing ---------------------------------------------------------------------------
    def _connection(self) -> sqlite3.Connection:
        """The open connection, opened and migrated on first use. The caller holds the lock."""
        if self._closed:
            raise UpstreamUnavailable("the SQLite store is closed")
        if self._db is None:
            if str(self._path) != ":memory:":
                private_sqlite(self._path)  # owner-only, like its -wal/-shm (adapters/files.py)
            db = sqlite3.connect(self._path, timeout=BUSY_TIMEOUT_S, isolation_level=None, check_same_thread=False)
            try:
                db.row_factory = sqlite3.Row
                db.execute("PRAGMA journal_mode = WAL")
                db.execute("PRAGMA synchronous = NORMAL")
                migrate(db, self._clock.now())
            except BaseException:
                db.close()
                raise
            self._db = db
        return self._db

    @contextmanager
    def _session(self) -> Iterator[sqlite3.Connection]:
        """The connection, held exclusively; a broken uniqueness rule becomes ``Conflict``."""
        with self._lock:
            try:
                yield self._connection()
            except sqlite3.IntegrityError as exc:
                raise Conflict(conflict_message(exc)) from exc

    @contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        with self._session() as db, immediate(db):
            yield db

    def _select(self, table: Table[M], where: str, params: Sequence[Any] = ()) -> list[M]:
        with self._session() as db:
            rows = db.execute(f"SELECT * FROM {table.name} WHERE {where}", params).fetchall()
        return [table.load(row) for row in rows]

    def _select_one(self, table: Table[M], where: str, params: Sequence[Any]) -> M | None:
        rows = self._select(table, f"{where} LIMIT 1", params)
        return rows[0] if rows else None

    def _by_ids(self, table: Table[Any], namespace: str, row_ids: Sequence[str]) -> list[Any]:
        """The rows of ``table`` with these ids in the namespace, in the given order; unknown ids skipped."""
        found: dict[str, Any] = {}
        unique_ids = list(dict.fromkeys(row_ids))
        for start in range(0, len(unique_ids), IDS_PER_QUERY):
            chunk = unique_ids[start : start + IDS_PER_QUERY]
            rows = self._select(table, f"namespace = ? AND id IN ({marks(len(chunk))})", [namespace, *chunk])
            found.update((row.id, row) for row in rows)
        return [found[row_id] for row_id in row_ids if row_id in found]

    def _execute(self, sql: str, params: Sequence[Any]) -> int:
        """Run one write; the number of rows it touched."""
        with self._session() as db:
            return db.execute(sql, params).rowcount

    def _page(
        self, table: Table[Listed], where: str, params: list[Any], limit: int, cursor: str | None
    ) -> Page[Listed]:
        """Newest first, starting after the cursor's row."""
        check_limit(limit)
        if cursor is not None:
            created_at, row_id = decode_cursor(cursor)
            where += " AND (created_at, id) < (?, ?)"
            params = [*params, to_iso(created_at), row_id]
        rows = self._select(table, f"{where} ORDER BY created_at DESC, id DESC LIMIT ?", [*params, limit + 1])
        return cut_page(rows, limit, lambda row: (row.created_at, row.id))
