"""What every part of ``SqliteMemoryStore`` shares: the writing connection and its lock, the read
connections (``readers.py``), sessions and transactions, selects and paging."""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import Any

from engram.adapters.files import private_sqlite
from engram.adapters.storage.common import check_limit, cut_page, decode_cursor, to_iso
from engram.adapters.storage.sqlite.readers import ReadConnections
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
    """The SQLite file at ``path`` (parent directories are created on first use), opened and migrated on
    first use: writes on one connection under one lock (``_session``, ``_transaction``), reads on a pool of
    read connections without it (``_reading``; WAL readers need no lock, ``readers.py``), and the
    statements every part of the store runs through them.

    A read made while this thread holds the writing connection (inside a write session or transaction)
    runs on that connection: it sees the transaction's own writes, and a row it reads is not cached (it
    could still be rolled back). An in-memory database (``:memory:``) is one connection's alone: every
    read runs on the writing connection there."""

    def __init__(self, path: str | Path, *, clock: Clock) -> None:
        self._path = Path(path)
        self._clock = clock  # decides cache expiry and stamps (docs/ARCHITECTURE.md, "One clock")
        self._lock = threading.RLock()
        self._writing: int | None = None  # the thread holding the lock in a session (only it sets its own id)
        self._db: sqlite3.Connection | None = None
        self._closed = False
        self._shared = str(path) != ":memory:"  # other connections see the same database
        self._readers = ReadConnections(self._open_reader)
        self._memory_rows = MemoryRowCache()  # get_memories' rows, kept coherent by the change log

    def close(self) -> None:
        """Close every connection, the writing one and the readers' (one in use when its read ends); the
        store cannot be used afterwards."""
        with self._lock:
            self._closed = True
            self._readers.close()
            if self._db is not None:
                self._db.close()
                self._db = None
            self._memory_rows.clear()

    # -- plumbing ---------------------------------------------------------------------------
    def _connection(self) -> sqlite3.Connection:
        """The writing connection, opened and migrated on first use. The caller holds the lock."""
        if self._closed:
            raise UpstreamUnavailable("the SQLite store is closed")
        if self._db is None:
            if self._shared:
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

    def _open_reader(self) -> sqlite3.Connection:
        """A read connection (``readers.py``), opened once the file exists and is migrated (under the lock
        only the first time: a write transaction open meanwhile does not hold it up)."""
        if self._db is None:
            with self._lock:
                self._connection()
        db = sqlite3.connect(self._path, timeout=BUSY_TIMEOUT_S, isolation_level=None, check_same_thread=False)
        try:
            db.row_factory = sqlite3.Row
            db.execute("PRAGMA query_only = 1")  # a write sent here by mistake fails instead of racing the writer
        except BaseException:
            db.close()
            raise
        return db

    @contextmanager
    def _session(self) -> Iterator[sqlite3.Connection]:
        """The writing connection, held exclusively; a broken uniqueness rule becomes ``Conflict``."""
        with self._lock:
            outer, self._writing = self._writing, threading.get_ident()
            try:
                yield self._connection()
            except sqlite3.IntegrityError as exc:
                raise Conflict(conflict_message(exc)) from exc
            finally:
                self._writing = outer

    @contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        with self._session() as db, immediate(db):
            yield db

    def _reading(self) -> AbstractContextManager[sqlite3.Connection]:
        """A connection for reads: this thread's writing session's if it is in one (or the database is
        in memory), else a read connection, without the writers' lock."""
        if self._writing == threading.get_ident() or not self._shared:
            return self._session()
        return self._readers

    @contextmanager
    def _snapshot(self) -> Iterator[sqlite3.Connection]:
        """``_reading`` in one read transaction (or the caller's transaction): its reads agree."""
        with self._reading() as db:
            if db.in_transaction:
                yield db
                return
            db.execute("BEGIN")
            try:
                yield db
            finally:
                db.execute("COMMIT")

    def _select(self, table: Table[M], where: str, params: Sequence[Any] = ()) -> list[M]:
        with self._reading() as db:
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
