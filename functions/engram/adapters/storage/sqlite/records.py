"""The audit trail (memory events, usage) and the key-value rows (idempotency keys, job cursors,
cache entries) in the SQLite store; the namespace list and the health check."""

from __future__ import annotations

import json
import sqlite3
from datetime import datetime
from typing import Any

from engram.adapters.storage.common import cache_text, check_limit, cut_page, decode_cursor, to_iso
from engram.adapters.storage.sqlite.base import SqliteStoreBase
from engram.adapters.storage.sqlite.tables import CACHE, EVENTS, IDEMPOTENCY, USAGE
from engram.domain.errors import UpstreamUnavailable
from engram.domain.models import CacheEntry, IdempotencyRecord, MemoryEvent, Page, UsageRecord

_GET_CACHE_SQL = "SELECT value FROM cache WHERE namespace = ? AND key = ? AND (expires_at IS NULL OR expires_at > ?)"
# ``add_cache``: the cache's upsert, which writes over an existing row only while that row has expired.
_ADD_CACHE_SQL = f"{CACHE.upsert_sql} WHERE cache.expires_at IS NOT NULL AND cache.expires_at <= ?"


class SqliteRecords(SqliteStoreBase):
    # -- events, usage, idempotency, cursors, cache -----------------------------------------
    def append_event(self, event: MemoryEvent) -> None:
        self._execute(EVENTS.insert_sql, EVENTS.insert_params(event))

    def list_events(
        self, namespace: str, *, memory_id: str | None = None, kind: str | None = None, limit: int = 50
    ) -> list[MemoryEvent]:
        check_limit(limit)
        clauses = ["namespace = ?"]
        params: list[Any] = [namespace]
        if memory_id is not None:
            clauses.append("memory_id = ?")
            params.append(memory_id)
        if kind is not None:
            clauses.append("kind = ?")
            params.append(kind)
        where = " AND ".join(clauses)
        return self._select(EVENTS, f"{where} ORDER BY created_at DESC, id DESC LIMIT ?", [*params, limit])

    def delete_events_before(self, namespace: str, before: datetime) -> int:
        return self._execute(
            "DELETE FROM events WHERE namespace = ? AND created_at < ? AND run_id IS NULL", (namespace, to_iso(before))
        )

    # -- the change journal (docs/journal.md) -----------------------------------------------
    def get_run(self, namespace: str, run_id: str) -> MemoryEvent | None:
        return self._select_one(EVENTS, "namespace = ? AND id = ? AND run_id = id", (namespace, run_id))

    def list_runs(self, namespace: str, *, limit: int = 50, cursor: str | None = None) -> Page[MemoryEvent]:
        return self._page(EVENTS, "namespace = ? AND run_id = id", [namespace], limit, cursor)

    def list_run_changes(
        self, namespace: str, run_id: str, *, limit: int = 100, cursor: str | None = None
    ) -> Page[MemoryEvent]:
        check_limit(limit)
        after = decode_cursor(cursor)[1] if cursor is not None else ""
        rows = self._select(
            EVENTS,
            "namespace = ? AND run_id = ? AND id != run_id AND id > ? ORDER BY id LIMIT ?",
            (namespace, run_id, after, limit + 1),
        )
        return cut_page(rows, limit, lambda e: (e.created_at, e.id))

    def delete_journal_before(self, namespace: str, before: datetime) -> int:
        return self._execute(
            "DELETE FROM events WHERE namespace = ? AND created_at < ? AND run_id IS NOT NULL",
            (namespace, to_iso(before)),
        )

    def delete_memory_events(self, namespace: str, memory_id: str) -> int:
        return self._execute("DELETE FROM events WHERE namespace = ? AND memory_id = ?", (namespace, memory_id))

    def append_usage(self, usage: UsageRecord) -> None:
        self._execute(USAGE.insert_sql, USAGE.insert_params(usage))

    def list_usage(self, namespace: str, *, since: datetime | None = None) -> list[UsageRecord]:
        if since is None:
            return self._select(USAGE, "namespace = ? ORDER BY created_at, id", (namespace,))
        return self._select(
            USAGE, "namespace = ? AND created_at >= ? ORDER BY created_at, id", (namespace, to_iso(since))
        )

    def delete_usage_before(self, namespace: str, before: datetime) -> int:
        return self._execute("DELETE FROM usage WHERE namespace = ? AND created_at < ?", (namespace, to_iso(before)))

    def get_idempotency(self, namespace: str, key: str) -> IdempotencyRecord | None:
        return self._select_one(IDEMPOTENCY, "namespace = ? AND key = ?", (namespace, key))

    def put_idempotency(self, record: IdempotencyRecord) -> bool:
        sql = f"{IDEMPOTENCY.insert_sql} ON CONFLICT (namespace, key) DO NOTHING"
        return self._execute(sql, IDEMPOTENCY.insert_params(record)) == 1

    def delete_idempotency(self, namespace: str, key: str) -> None:
        self._execute("DELETE FROM idempotency WHERE namespace = ? AND key = ?", (namespace, key))

    def delete_idempotency_before(self, namespace: str, before: datetime) -> int:
        return self._execute(
            "DELETE FROM idempotency WHERE namespace = ? AND created_at < ?", (namespace, to_iso(before))
        )

    def get_cursor(self, namespace: str, name: str) -> str | None:
        with self._reading() as db:
            row = db.execute("SELECT value FROM cursors WHERE namespace = ? AND name = ?", (namespace, name)).fetchone()
        return None if row is None else str(row["value"])

    def set_cursor(self, namespace: str, name: str, value: str) -> None:
        self._execute(
            "INSERT INTO cursors (namespace, name, value) VALUES (?, ?, ?)"
            " ON CONFLICT (namespace, name) DO UPDATE SET value = excluded.value",
            (namespace, name, value),
        )

    def replace_cursor(self, namespace: str, name: str, value: str, *, expected: str | None) -> bool:
        if expected is None:
            sql = (
                "INSERT INTO cursors (namespace, name, value) VALUES (?, ?, ?) ON CONFLICT (namespace, name) DO NOTHING"
            )
            return self._execute(sql, (namespace, name, value)) == 1
        sql = "UPDATE cursors SET value = ? WHERE namespace = ? AND name = ? AND value = ?"
        return self._execute(sql, (value, namespace, name, expected)) == 1

    def get_cache(self, namespace: str, key: str) -> Any | None:
        # The value column alone: a chat turn reads two marks, and a CacheEntry model per read cost more
        # than the read.
        with self._reading() as db:
            row = db.execute(_GET_CACHE_SQL, (namespace, key, to_iso(self._clock.now()))).fetchone()
        return None if row is None else json.loads(row[0])

    def put_cache(self, namespace: str, key: str, value: Any, *, expires_at: datetime | None = None) -> None:
        text = cache_text(key, value)
        entry = CacheEntry(
            namespace=namespace, key=key, value=text, expires_at=expires_at, updated_at=self._clock.now()
        )
        self._execute(CACHE.upsert_sql, CACHE.insert_params(entry))

    def add_cache(
        self, namespace: str, key: str, value: Any, *, expires_at: datetime | None = None
    ) -> tuple[bool, Any]:
        text = cache_text(key, value)
        at = self._clock.now()
        now = to_iso(at)
        entry = CacheEntry(namespace=namespace, key=key, value=text, expires_at=expires_at, updated_at=at)
        # One statement: inserted, or written over an expired value; a live value is left alone (0 rows).
        # Only then is the held value read (another process may delete it in between: then try again).
        while True:
            with self._session() as db:
                if db.execute(_ADD_CACHE_SQL, [*CACHE.insert_params(entry), now]).rowcount == 1:
                    return True, None
                row = db.execute(_GET_CACHE_SQL, (namespace, key, now)).fetchone()
            if row is not None:
                return False, json.loads(row[0])

    def delete_cache(self, namespace: str, key: str) -> None:
        self._execute("DELETE FROM cache WHERE namespace = ? AND key = ?", (namespace, key))

    def list_namespaces(self) -> list[str]:
        tables = ("memories", "messages", "candidates", "precious", "glossary", "digests")
        sql = " UNION ".join(f"SELECT namespace FROM {table}" for table in tables) + " ORDER BY namespace"
        with self._reading() as db:
            return [row[0] for row in db.execute(sql)]

    def ping(self) -> None:
        try:
            with self._reading() as db:
                db.execute("SELECT 1").fetchone()
        except (sqlite3.Error, OSError) as exc:
            raise UpstreamUnavailable(f"the SQLite store at {self._path} cannot be used ({exc})") from exc
