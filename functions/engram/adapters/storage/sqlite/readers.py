"""The SQLite store's read connections: a small pool beside its one writing connection.

In WAL mode a reader needs no lock of ours: each read transaction (or autocommit statement) sees every
transaction committed before it began, and never waits for the writer. So the store's reads borrow one of
at most ``READ_CONNECTIONS`` connections for the length of a call, while its writes queue on the writing
connection's lock (``base.py``). Before, every call ran on the one connection under one lock, and at
8 concurrent chat turns the turns waited 16-18 ms each for it (bench/README.md, "The local default's
recall turn, session 10"): the thread holding it hands the GIL back on every statement.

A thread borrows one connection at a time: a read nested in another read (``get_memories`` loading the
rows its cache lacks) gets the connection its outer read holds, so both run in one snapshot. The pool is
bounded (file descriptors: three a connection, with the -wal and -shm files), its connections are reused
by whichever thread comes next (most recently returned first, its page cache warm), and ``close`` closes
every one: the idle ones at once, one in use when its read returns it.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Callable

from engram.domain.errors import UpstreamUnavailable

# Read connections open at most; a read beyond them waits for one to come back. A chat turn reads on one
# worker thread at a time, so the gateway's concurrent turns each find one up to this many.
READ_CONNECTIONS = 8


class ReadConnections:
    """At most ``size`` connections made by ``open_reader``, lent one per thread at a time."""

    def __init__(self, open_reader: Callable[[], sqlite3.Connection], size: int = READ_CONNECTIONS) -> None:
        self._open_reader = open_reader
        self._size = size
        self._idle: list[sqlite3.Connection] = []
        self._opened = 0  # open connections, idle or lent
        self._closed = False
        self._changed = threading.Condition(threading.Lock())
        self._lent = threading.local()  # this thread's borrowed connection and how deep its reads nest

    @property
    def opened(self) -> int:
        return self._opened

    def __enter__(self) -> sqlite3.Connection:
        """``with pool as db``: a read connection for the caller's reads (the one this thread holds already,
        if it does). A plain context manager, shared by every thread (what it lends is kept per thread):
        a turn makes a few reads, each ~3 us cheaper than through a generator's context manager."""
        lent = self._lent
        held: sqlite3.Connection | None = getattr(lent, "db", None)
        if held is not None:
            lent.depth += 1
            return held
        db = self._take()
        lent.db, lent.depth = db, 0
        return db

    def __exit__(self, *exc: object) -> None:
        lent = self._lent
        if lent.depth:
            lent.depth -= 1
            return
        db, lent.db = lent.db, None
        self._give(db)

    def _take(self) -> sqlite3.Connection:
        with self._changed:
            while True:
                if self._closed:
                    raise UpstreamUnavailable("the SQLite store is closed")
                if self._idle:
                    return self._idle.pop()
                if self._opened < self._size:
                    self._opened += 1
                    break
                self._changed.wait()
        try:
            return self._open_reader()
        except BaseException:
            with self._changed:
                self._opened -= 1
                self._changed.notify()
            raise

    def _give(self, db: sqlite3.Connection) -> None:
        keep = True
        try:
            if db.in_transaction:  # a read that failed between BEGIN and COMMIT: end its snapshot
                db.execute("ROLLBACK")
        except sqlite3.Error:
            keep = False  # not reused: a new one is opened in its place
        with self._changed:
            if keep and not self._closed:
                self._idle.append(db)
                self._changed.notify()
                return
            self._opened -= 1
            self._changed.notify()
        db.close()

    def close(self) -> None:
        """Close every connection: the idle ones now, each lent one when its read returns it."""
        with self._changed:
            self._closed = True
            idle, self._idle = self._idle, []
            self._opened -= len(idle)
            self._changed.notify_all()
        for db in idle:
            db.close()
