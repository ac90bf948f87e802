"""``MemoryStore`` in one SQLite file: the local default (``ENGRAM_STORE=sqlite``).

One connection in autocommit mode, shared across threads and guarded by a re-entrant lock (the HTTP
app calls the store from a thread pool); WAL lets other connections (the local search index keeps
its ``search_*`` tables in the same file) read while this one writes. Filterable fields are plain
columns named like the model fields; list and dict fields are JSON text. Timestamps are fixed-width
ISO-8601 UTC text, so text order is time order. The schema is created on first use and upgraded by
``_MIGRATIONS``: append a new tuple of statements to change it, never edit a released one.
"""

from __future__ import annotations

import json
import sqlite3
import threading
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import Any, Generic, TypeVar

from pydantic import BaseModel

from engram.adapters.files import private_sqlite
from engram.adapters.storage.common import (
    check_limit,
    cut_page,
    decode_cursor,
    empty_memory_counts,
    encode_cursor,
    glossary_order,
    thread_position,
    to_iso,
)
from engram.domain.errors import Conflict, InvalidInput, NotFound, UpstreamUnavailable
from engram.domain.models import (
    CacheEntry,
    Candidate,
    DailyLog,
    Digest,
    GlossaryTerm,
    IdempotencyRecord,
    Memory,
    MemoryEvent,
    MemoryFilter,
    Message,
    Page,
    Precious,
    Reminder,
    Thread,
    UsageRecord,
    utcnow,
)

_MIGRATIONS: tuple[tuple[str, ...], ...] = (
    # 1: every row kind of the MemoryStore port.
    (
        """CREATE TABLE memories (
            namespace TEXT NOT NULL,
            id TEXT NOT NULL,
            content TEXT NOT NULL,
            type TEXT NOT NULL,
            fact_key TEXT,
            layer TEXT NOT NULL,
            importance REAL NOT NULL,
            confidence REAL NOT NULL,
            pinned INTEGER NOT NULL,
            tags TEXT NOT NULL,
            status TEXT NOT NULL,
            supersedes_id TEXT,
            superseded_by_id TEXT,
            source TEXT NOT NULL,
            source_message_ids TEXT NOT NULL,
            external_id TEXT,
            remind_at TEXT,
            seen_count INTEGER NOT NULL,
            last_seen_at TEXT,
            last_injected_at TEXT,
            recall_count INTEGER NOT NULL,
            created_at TEXT NOT NULL,
            updated_at TEXT NOT NULL,
            status_changed_at TEXT,
            expires_at TEXT,
            index_ref TEXT,
            PRIMARY KEY (namespace, id)
        )""",
        "CREATE INDEX memories_by_status ON memories (namespace, status, created_at, id)",
        "CREATE INDEX memories_by_created ON memories (namespace, created_at, id)",
        """CREATE UNIQUE INDEX memories_active_fact_key ON memories (namespace, fact_key)
            WHERE status = 'active' AND fact_key IS NOT NULL""",
        "CREATE UNIQUE INDEX memories_external_id ON memories (namespace, external_id)",
        """CREATE INDEX memories_by_status_change
            ON memories (namespace, status, COALESCE(status_changed_at, updated_at), id)""",
        """CREATE INDEX memories_by_last_seen
            ON memories (namespace, status, COALESCE(last_seen_at, created_at), id)""",
        """CREATE TABLE candidates (
            namespace TEXT NOT NULL,
            id TEXT NOT NULL,
            content TEXT NOT NULL,
            type TEXT NOT NULL,
            fact_key TEXT,
            importance REAL NOT NULL,
            confidence REAL NOT NULL,
            tags TEXT NOT NULL,
            source TEXT NOT NULL,
            source_message_ids TEXT NOT NULL,
            status TEXT NOT NULL,
            target_memory_id TEXT,
            result_memory_id TEXT,
            decision_note TEXT,
            created_at TEXT NOT NULL,
            decided_at TEXT,
            PRIMARY KEY (namespace, id)
        )""",
        "CREATE INDEX candidates_by_status ON candidates (namespace, status, created_at, id)",
        "CREATE INDEX candidates_by_created ON candidates (namespace, created_at, id)",
        """CREATE TABLE messages (
            namespace TEXT NOT NULL,
            id TEXT NOT NULL,
            conversation_id TEXT NOT NULL,
            role TEXT NOT NULL,
            content TEXT NOT NULL,
            model TEXT,
            usage TEXT NOT NULL,
            external_id TEXT,
            created_at TEXT NOT NULL,
            PRIMARY KEY (namespace, id)
        )""",
        "CREATE INDEX messages_by_created ON messages (namespace, created_at, id)",
        "CREATE UNIQUE INDEX messages_external_id ON messages (namespace, external_id)",
        """CREATE TABLE precious (
            namespace TEXT NOT NULL,
            id TEXT NOT NULL,
            content TEXT NOT NULL,
            source TEXT NOT NULL,
            reason TEXT,
            tags TEXT NOT NULL,
            source_message_ids TEXT NOT NULL,
            created_at TEXT NOT NULL,
            PRIMARY KEY (namespace, id)
        )""",
        "CREATE INDEX precious_by_created ON precious (namespace, created_at, id)",
        """CREATE TABLE glossary (
            namespace TEXT NOT NULL,
            id TEXT NOT NULL,
            term TEXT NOT NULL,
            aliases TEXT NOT NULL,
            definition TEXT NOT NULL,
            created_at TEXT NOT NULL,
            updated_at TEXT NOT NULL,
            PRIMARY KEY (namespace, id)
        )""",
        """CREATE TABLE digests (
            namespace TEXT NOT NULL PRIMARY KEY,
            content TEXT NOT NULL,
            updated_at TEXT NOT NULL
        )""",
        """CREATE TABLE daily_logs (
            namespace TEXT NOT NULL,
            date TEXT NOT NULL,
            title TEXT NOT NULL,
            summary TEXT NOT NULL,
            sections TEXT NOT NULL,
            created_at TEXT NOT NULL,
            PRIMARY KEY (namespace, date)
        )""",
        """CREATE TABLE events (
            namespace TEXT NOT NULL,
            id TEXT NOT NULL,
            kind TEXT NOT NULL,
            memory_id TEXT,
            detail TEXT NOT NULL,
            created_at TEXT NOT NULL,
            PRIMARY KEY (namespace, id)
        )""",
        "CREATE INDEX events_by_created ON events (namespace, created_at, id)",
        "CREATE INDEX events_by_memory ON events (namespace, memory_id, created_at, id)",
        "CREATE INDEX events_by_kind ON events (namespace, kind, created_at, id)",
        """CREATE TABLE usage (
            namespace TEXT NOT NULL,
            id TEXT NOT NULL,
            model TEXT NOT NULL,
            input_tokens INTEGER NOT NULL,
            output_tokens INTEGER NOT NULL,
            cache_read_tokens INTEGER NOT NULL,
            cache_write_tokens INTEGER NOT NULL,
            created_at TEXT NOT NULL,
            PRIMARY KEY (namespace, id)
        )""",
        "CREATE INDEX usage_by_created ON usage (namespace, created_at, id)",
        """CREATE TABLE idempotency (
            namespace TEXT NOT NULL,
            key TEXT NOT NULL,
            value TEXT NOT NULL,
            created_at TEXT NOT NULL,
            PRIMARY KEY (namespace, key)
        )""",
        "CREATE INDEX idempotency_by_created ON idempotency (namespace, created_at)",
        """CREATE TABLE cursors (
            namespace TEXT NOT NULL,
            name TEXT NOT NULL,
            value TEXT NOT NULL,
            PRIMARY KEY (namespace, name)
        )""",
        """CREATE TABLE cache (
            namespace TEXT NOT NULL,
            key TEXT NOT NULL,
            value TEXT NOT NULL,
            expires_at TEXT,
            updated_at TEXT NOT NULL,
            PRIMARY KEY (namespace, key)
        )""",
    ),
    # 2: a stored chat turn notes why it got no answer (Message.error).
    ("ALTER TABLE messages ADD COLUMN error TEXT",),
    # 3: threads (docs/threads.md): one row per conversation, counted as messages arrive.
    (
        """CREATE TABLE threads (
            namespace TEXT NOT NULL,
            id TEXT NOT NULL,
            title TEXT,
            message_count INTEGER NOT NULL,
            last_message_at TEXT,
            created_at TEXT NOT NULL,
            deleted_at TEXT,
            PRIMARY KEY (namespace, id)
        )""",
        "CREATE INDEX messages_by_thread ON messages (namespace, conversation_id, created_at, id)",
        """INSERT INTO threads (namespace, id, title, message_count, last_message_at, created_at, deleted_at)
            SELECT namespace, conversation_id, NULL, COUNT(*), MAX(created_at), MIN(created_at), NULL
            FROM messages GROUP BY namespace, conversation_id""",
    ),
    # 4: reminders (docs/reminders.md): delivery state of each memory's remind_at.
    (
        """CREATE TABLE reminders (
            namespace TEXT NOT NULL,
            memory_id TEXT NOT NULL,
            remind_at TEXT NOT NULL,
            status TEXT NOT NULL,
            delivered_at TEXT,
            lease_owner TEXT,
            lease_until TEXT,
            PRIMARY KEY (namespace, memory_id)
        )""",
        "CREATE INDEX reminders_by_time ON reminders (namespace, status, remind_at, memory_id)",
    ),
    # 5: the order messages were stored in (extraction reads in it); older rows take created_at.
    (
        "ALTER TABLE messages ADD COLUMN stored_at TEXT",
        "UPDATE messages SET stored_at = created_at",
        "CREATE INDEX messages_by_stored ON messages (namespace, stored_at, id)",
    ),
)
SCHEMA_VERSION = len(_MIGRATIONS)

_BUSY_TIMEOUT_S = 10.0
_ITER_CHUNK = 500
# Well under SQLite's limit on bound parameters per statement.
_IDS_PER_QUERY = 500

M = TypeVar("M", bound=BaseModel)
_Listed = TypeVar("_Listed", Memory, Candidate)


def _marks(count: int) -> str:
    return ", ".join("?" * count)


class _Table(Generic[M]):
    """How one model maps to one table: one column per field, list/dict fields as JSON text."""

    def __init__(self, name: str, model: type[M], key: tuple[str, ...], json_fields: Iterable[str] = ()) -> None:
        self.name = name
        self.model = model
        self.json_fields = frozenset(json_fields)
        self.columns = tuple(model.model_fields)
        values = [c for c in self.columns if c not in key]
        self.insert_sql = f"INSERT INTO {name} ({', '.join(self.columns)}) VALUES ({_marks(len(self.columns))})"
        self.upsert_sql = f"{self.insert_sql} ON CONFLICT ({', '.join(key)}) DO UPDATE SET " + ", ".join(
            f"{c} = excluded.{c}" for c in values
        )
        self.update_sql = f"UPDATE {name} SET {', '.join(f'{c} = ?' for c in values)} WHERE " + " AND ".join(
            f"{c} = ?" for c in key
        )
        self._update_order = (*values, *key)

    def _row(self, obj: M) -> dict[str, Any]:
        as_json = obj.model_dump(mode="json", include=set(self.json_fields))
        row: dict[str, Any] = {}
        for column in self.columns:
            if column in self.json_fields:
                row[column] = json.dumps(as_json[column], ensure_ascii=False)
            else:
                value = getattr(obj, column)
                row[column] = to_iso(value) if isinstance(value, datetime) else value
        return row

    def insert_params(self, obj: M) -> list[Any]:
        row = self._row(obj)
        return [row[c] for c in self.columns]

    def update_params(self, obj: M) -> list[Any]:
        row = self._row(obj)
        return [row[c] for c in self._update_order]

    def load(self, row: sqlite3.Row) -> M:
        fields = dict(row)
        for column in self.json_fields:
            fields[column] = json.loads(fields[column])
        return self.model.model_validate(fields)


_MEMORIES = _Table("memories", Memory, ("namespace", "id"), ("tags", "source_message_ids"))
_CANDIDATES = _Table("candidates", Candidate, ("namespace", "id"), ("tags", "source_message_ids"))
_MESSAGES = _Table("messages", Message, ("namespace", "id"), ("usage",))
_THREADS = _Table("threads", Thread, ("namespace", "id"))
_REMINDERS = _Table("reminders", Reminder, ("namespace", "memory_id"))
_THREAD_ORDER = "COALESCE(last_message_at, created_at)"
_PRECIOUS = _Table("precious", Precious, ("namespace", "id"), ("tags", "source_message_ids"))
_GLOSSARY = _Table("glossary", GlossaryTerm, ("namespace", "id"), ("aliases",))
_DIGESTS = _Table("digests", Digest, ("namespace",))
_DAILY_LOGS = _Table("daily_logs", DailyLog, ("namespace", "date"), ("sections",))
_EVENTS = _Table("events", MemoryEvent, ("namespace", "id"), ("detail",))
_USAGE = _Table("usage", UsageRecord, ("namespace", "id"))
_IDEMPOTENCY = _Table("idempotency", IdempotencyRecord, ("namespace", "key"), ("value",))
# Cache values are JSON text already (see ``put_cache``), so the column holds them as they are.
_CACHE = _Table("cache", CacheEntry, ("namespace", "key"))


def _conflict_message(exc: sqlite3.IntegrityError) -> str:
    """What a broken uniqueness rule means, without SQLite's table and column names."""
    text = str(exc)
    if "memories.fact_key" in text:
        return "another active memory holds this fact_key"
    if "external_id" in text:
        return "this external_id is already used"
    if "UNIQUE" in text:
        return "a row with this id already exists"
    return "the row breaks a rule of the store"


def _memory_filter_sql(filters: MemoryFilter) -> tuple[str, list[Any]]:
    statuses = filters.listed_statuses
    clauses = [f"status IN ({_marks(len(statuses))})"]
    params: list[Any] = list(statuses)
    if filters.types:
        clauses.append(f"type IN ({_marks(len(filters.types))})")
        params.extend(filters.types)
    if filters.layer is not None:
        clauses.append("layer = ?")
        params.append(filters.layer)
    if filters.tag is not None:
        clauses.append("EXISTS (SELECT 1 FROM json_each(memories.tags) WHERE json_each.value = ?)")
        params.append(filters.tag)
    if filters.pinned is not None:
        clauses.append("pinned = ?")
        params.append(filters.pinned)
    if filters.fact_key is not None:
        clauses.append("fact_key = ?")
        params.append(filters.fact_key)
    return " AND ".join(clauses), params


@contextmanager
def _immediate(db: sqlite3.Connection) -> Iterator[sqlite3.Connection]:
    """One write transaction, taken up front so concurrent writers queue instead of deadlocking."""
    db.execute("BEGIN IMMEDIATE")
    try:
        yield db
    except BaseException:
        db.execute("ROLLBACK")
        raise
    db.execute("COMMIT")


def _migrate(db: sqlite3.Connection) -> None:
    db.execute("CREATE TABLE IF NOT EXISTS schema_version (version INTEGER PRIMARY KEY, applied_at TEXT NOT NULL)")
    with _immediate(db):
        (current,) = db.execute("SELECT COALESCE(MAX(version), 0) FROM schema_version").fetchone()
        for version, statements in enumerate(_MIGRATIONS[current:], start=current + 1):
            for statement in statements:
                db.execute(statement)
            db.execute("INSERT INTO schema_version (version, applied_at) VALUES (?, ?)", (version, to_iso(utcnow())))


class SqliteMemoryStore:
    """The store in one SQLite file at ``path`` (parent directories are created on first use)."""

    def __init__(self, path: str | Path) -> None:
        self._path = Path(path)
        self._lock = threading.RLock()
        self._db: sqlite3.Connection | None = None
        self._closed = False

    def close(self) -> None:
        """Close the connection; the store cannot be used afterwards."""
        with self._lock:
            if self._db is not None:
                self._db.close()
                self._db = None
            self._closed = True

    # -- plumbing ---------------------------------------------------------------------------
    def _connection(self) -> sqlite3.Connection:
        """The open connection, opened and migrated on first use. The caller holds the lock."""
        if self._closed:
            raise UpstreamUnavailable("the SQLite store is closed")
        if self._db is None:
            if str(self._path) != ":memory:":
                private_sqlite(self._path)  # owner-only, like its -wal/-shm (adapters/files.py)
            db = sqlite3.connect(self._path, timeout=_BUSY_TIMEOUT_S, isolation_level=None, check_same_thread=False)
            try:
                db.row_factory = sqlite3.Row
                db.execute("PRAGMA journal_mode = WAL")
                db.execute("PRAGMA synchronous = NORMAL")
                _migrate(db)
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
                raise Conflict(_conflict_message(exc)) from exc

    @contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        with self._session() as db, _immediate(db):
            yield db

    def _select(self, table: _Table[M], where: str, params: Sequence[Any] = ()) -> list[M]:
        with self._session() as db:
            rows = db.execute(f"SELECT * FROM {table.name} WHERE {where}", params).fetchall()
        return [table.load(row) for row in rows]

    def _select_one(self, table: _Table[M], where: str, params: Sequence[Any]) -> M | None:
        rows = self._select(table, f"{where} LIMIT 1", params)
        return rows[0] if rows else None

    def _execute(self, sql: str, params: Sequence[Any]) -> int:
        """Run one write; the number of rows it touched."""
        with self._session() as db:
            return db.execute(sql, params).rowcount

    def _page(
        self, table: _Table[_Listed], where: str, params: list[Any], limit: int, cursor: str | None
    ) -> Page[_Listed]:
        """Newest first, starting after the cursor's row."""
        check_limit(limit)
        if cursor is not None:
            created_at, row_id = decode_cursor(cursor)
            where += " AND (created_at, id) < (?, ?)"
            params = [*params, to_iso(created_at), row_id]
        rows = self._select(table, f"{where} ORDER BY created_at DESC, id DESC LIMIT ?", [*params, limit + 1])
        if len(rows) <= limit:
            return Page(items=rows)
        last = rows[limit - 1]
        return Page(items=rows[:limit], next_cursor=encode_cursor(last.created_at, last.id))

    # -- memories -------------------------------------------------------------------------
    def insert_memory(self, memory: Memory) -> Memory:
        self._execute(_MEMORIES.insert_sql, _MEMORIES.insert_params(memory))
        return memory

    def update_memory(self, memory: Memory) -> Memory:
        if self._execute(_MEMORIES.update_sql, _MEMORIES.update_params(memory)) == 0:
            raise NotFound(f"memory {memory.id} not found")
        return memory

    def get_memory(self, namespace: str, memory_id: str) -> Memory:
        memory = self._select_one(_MEMORIES, "namespace = ? AND id = ?", (namespace, memory_id))
        if memory is None:
            raise NotFound(f"memory {memory_id} not found")
        return memory

    def get_memories(self, namespace: str, memory_ids: Sequence[str]) -> list[Memory]:
        return self._by_ids(_MEMORIES, namespace, memory_ids)

    def _by_ids(self, table: _Table[Any], namespace: str, row_ids: Sequence[str]) -> list[Any]:
        """The rows of ``table`` with these ids in the namespace, in the given order; unknown ids skipped."""
        found: dict[str, Any] = {}
        unique_ids = list(dict.fromkeys(row_ids))
        for start in range(0, len(unique_ids), _IDS_PER_QUERY):
            chunk = unique_ids[start : start + _IDS_PER_QUERY]
            rows = self._select(table, f"namespace = ? AND id IN ({_marks(len(chunk))})", [namespace, *chunk])
            found.update((row.id, row) for row in rows)
        return [found[row_id] for row_id in row_ids if row_id in found]

    def find_active_by_fact_key(self, namespace: str, fact_key: str) -> Memory | None:
        return self._select_one(
            _MEMORIES, "namespace = ? AND fact_key = ? AND status = 'active'", (namespace, fact_key)
        )

    def find_by_external_id(self, namespace: str, external_id: str) -> Memory | None:
        return self._select_one(_MEMORIES, "namespace = ? AND external_id = ?", (namespace, external_id))

    def list_memories(
        self, namespace: str, filters: MemoryFilter, *, limit: int = 50, cursor: str | None = None
    ) -> Page[Memory]:
        where, params = _memory_filter_sql(filters)
        return self._page(_MEMORIES, f"namespace = ? AND {where}", [namespace, *params], limit, cursor)

    def iter_memories(self, namespace: str, statuses: Sequence[str] = ()) -> Iterable[Memory]:
        # Keyset-paginated so a large namespace is never held in memory nor the lock held between chunks.
        where = "namespace = ?"
        params: list[Any] = [namespace]
        if statuses:
            where += f" AND status IN ({_marks(len(statuses))})"
            params.extend(statuses)
        after: list[Any] = []
        while True:
            clause = f"{where} AND (created_at, id) > (?, ?)" if after else where
            chunk = self._select(_MEMORIES, f"{clause} ORDER BY created_at, id LIMIT ?", [*params, *after, _ITER_CHUNK])
            yield from chunk
            if len(chunk) < _ITER_CHUNK:
                return
            after = [to_iso(chunk[-1].created_at), chunk[-1].id]

    def supersede(self, old: Memory, new: Memory) -> tuple[Memory, Memory]:
        if old.namespace != new.namespace:
            raise InvalidInput("supersede needs both memories in the same namespace")
        with self._transaction() as db:
            # The old row goes first: it frees the fact_key the new row takes.
            if db.execute(_MEMORIES.update_sql, _MEMORIES.update_params(old)).rowcount == 0:
                raise NotFound(f"memory {old.id} not found")
            db.execute(_MEMORIES.insert_sql, _MEMORIES.insert_params(new))
        return old, new

    def delete_memory_row(self, namespace: str, memory_id: str) -> None:
        self._execute("DELETE FROM memories WHERE namespace = ? AND id = ?", (namespace, memory_id))

    def count_memories(self, namespace: str) -> dict[str, dict[str, int]]:
        counts = empty_memory_counts()
        with self._session() as db:
            rows = db.execute(
                "SELECT status, type, layer, COUNT(*) FROM memories WHERE namespace = ? GROUP BY status, type, layer",
                (namespace,),
            ).fetchall()
        for status, memory_type, layer, count in rows:
            counts["status"][status] += count
            if status == "active":
                counts["type"][memory_type] += count
                counts["layer"][layer] += count
        return counts

    def memories_changed_before(
        self, namespace: str, statuses: Sequence[str], before: datetime, *, limit: int = 500
    ) -> list[Memory]:
        check_limit(limit)
        if not statuses:
            return []
        changed_at = "COALESCE(status_changed_at, updated_at)"
        return self._select(
            _MEMORIES,
            f"namespace = ? AND status IN ({_marks(len(statuses))}) AND {changed_at} < ?"
            f" ORDER BY {changed_at}, id LIMIT ?",
            [namespace, *statuses, to_iso(before), limit],
        )

    def memories_unseen_since(self, namespace: str, before: datetime, *, limit: int = 500) -> list[Memory]:
        check_limit(limit)
        seen_at = "COALESCE(last_seen_at, created_at)"
        return self._select(
            _MEMORIES,
            f"namespace = ? AND status = 'active' AND {seen_at} < ? ORDER BY {seen_at}, id LIMIT ?",
            [namespace, to_iso(before), limit],
        )

    # -- review candidates ----------------------------------------------------------------
    def insert_candidate(self, candidate: Candidate) -> Candidate:
        self._execute(_CANDIDATES.insert_sql, _CANDIDATES.insert_params(candidate))
        return candidate

    def update_candidate(self, candidate: Candidate) -> Candidate:
        if self._execute(_CANDIDATES.update_sql, _CANDIDATES.update_params(candidate)) == 0:
            raise NotFound(f"candidate {candidate.id} not found")
        return candidate

    def get_candidate(self, namespace: str, candidate_id: str) -> Candidate:
        candidate = self._select_one(_CANDIDATES, "namespace = ? AND id = ?", (namespace, candidate_id))
        if candidate is None:
            raise NotFound(f"candidate {candidate_id} not found")
        return candidate

    def list_candidates(
        self, namespace: str, status: str | None = "pending", *, limit: int = 50, cursor: str | None = None
    ) -> Page[Candidate]:
        if status is None:
            return self._page(_CANDIDATES, "namespace = ?", [namespace], limit, cursor)
        return self._page(_CANDIDATES, "namespace = ? AND status = ?", [namespace, status], limit, cursor)

    # -- messages -------------------------------------------------------------------------
    def insert_message(self, message: Message) -> tuple[Message, bool]:
        message = message.model_copy(update={"stored_at": message.stored_at or message.created_at})
        with self._transaction() as db:
            sql = f"{_MESSAGES.insert_sql} ON CONFLICT (namespace, external_id) DO NOTHING"
            if db.execute(sql, _MESSAGES.insert_params(message)).rowcount == 1:
                at = to_iso(message.created_at)
                db.execute(
                    "INSERT INTO threads (namespace, id, title, message_count, last_message_at, created_at, deleted_at)"
                    " VALUES (?, ?, NULL, 1, ?, ?, NULL) ON CONFLICT (namespace, id) DO UPDATE SET"
                    " message_count = message_count + 1, last_message_at = excluded.last_message_at, deleted_at = NULL",
                    (message.namespace, message.conversation_id, at, at),
                )
                return message, True
            stored = self._select_one(
                _MESSAGES, "namespace = ? AND external_id = ?", (message.namespace, message.external_id)
            )
        assert stored is not None, "the insert was skipped only because this external_id exists"
        return stored, False

    def list_messages(
        self,
        namespace: str,
        *,
        since: datetime | None = None,
        until: datetime | None = None,
        limit: int = 100,
        after_id: str | None = None,
    ) -> list[Message]:
        check_limit(limit)
        clauses, params = _message_window("created_at", namespace, since, until)
        with self._lock:
            if after_id is not None:
                after = self._select_one(_MESSAGES, "namespace = ? AND id = ?", (namespace, after_id))
                if after is None:
                    raise NotFound(f"message {after_id} not found")
                clauses.append("(created_at, id) > (?, ?)")
                params.extend((to_iso(after.created_at), after.id))
            where = " AND ".join(clauses)
            return self._select(_MESSAGES, f"{where} ORDER BY created_at, id LIMIT ?", [*params, limit])

    def list_messages_stored(
        self,
        namespace: str,
        *,
        after: tuple[datetime, str] | None = None,
        since: datetime | None = None,
        until: datetime | None = None,
        limit: int = 100,
    ) -> list[Message]:
        check_limit(limit)
        clauses, params = _message_window("stored_at", namespace, since, until)
        if after is not None:
            clauses.append("(stored_at, id) > (?, ?)")
            params.extend((to_iso(after[0]), after[1]))
        where = " AND ".join(clauses)
        return self._select(_MESSAGES, f"{where} ORDER BY stored_at, id LIMIT ?", [*params, limit])

    def count_messages(self, namespace: str, *, since: datetime | None = None) -> int:
        sql = "SELECT COUNT(*) FROM messages WHERE namespace = ?"
        params: list[Any] = [namespace]
        if since is not None:
            sql += " AND created_at >= ?"
            params.append(to_iso(since))
        with self._session() as db:
            (count,) = db.execute(sql, params).fetchone()
        return int(count)

    def delete_messages_before(self, namespace: str, before: datetime) -> int:
        with self._transaction() as db:
            params = (namespace, to_iso(before))
            db.execute(
                "UPDATE threads SET message_count = MAX(0, message_count - (SELECT COUNT(*) FROM messages m"
                " WHERE m.namespace = threads.namespace AND m.conversation_id = threads.id AND m.created_at < ?))"
                " WHERE namespace = ?",
                (params[1], namespace),
            )
            return int(db.execute("DELETE FROM messages WHERE namespace = ? AND created_at < ?", params).rowcount)

    # -- threads ----------------------------------------------------------------------------
    def get_thread(self, namespace: str, thread_id: str) -> Thread:
        thread = self._select_one(_THREADS, "namespace = ? AND id = ?", (namespace, thread_id))
        if thread is None:
            raise NotFound(f"thread {thread_id} not found")
        return thread

    def list_threads(
        self, namespace: str, *, deleted: bool = False, limit: int = 50, cursor: str | None = None
    ) -> Page[Thread]:
        check_limit(limit)
        where = f"namespace = ? AND deleted_at IS {'NOT ' if deleted else ''}NULL"
        params: list[Any] = [namespace]
        if cursor is not None:
            at, row_id = decode_cursor(cursor)
            where += f" AND ({_THREAD_ORDER}, id) < (?, ?)"
            params += [to_iso(at), row_id]
        rows = self._select(_THREADS, f"{where} ORDER BY {_THREAD_ORDER} DESC, id DESC LIMIT ?", [*params, limit + 1])
        return cut_page(rows, limit, thread_position)

    def update_thread(
        self, namespace: str, thread_id: str, *, title: str | None, deleted_at: datetime | None
    ) -> Thread:
        with self._transaction() as db:
            changed = db.execute(
                "UPDATE threads SET title = ?, deleted_at = ? WHERE namespace = ? AND id = ?",
                (title, to_iso(deleted_at) if deleted_at else None, namespace, thread_id),
            ).rowcount
        if not changed:
            raise NotFound(f"thread {thread_id} not found")
        return self.get_thread(namespace, thread_id)

    def list_thread_messages(
        self, namespace: str, thread_id: str, *, limit: int = 100, cursor: str | None = None
    ) -> Page[Message]:
        check_limit(limit)
        where = "namespace = ? AND conversation_id = ?"
        params: list[Any] = [namespace, thread_id]
        if cursor is not None:
            at, row_id = decode_cursor(cursor)
            where += " AND (created_at, id) > (?, ?)"
            params += [to_iso(at), row_id]
        rows = self._select(_MESSAGES, f"{where} ORDER BY created_at, id LIMIT ?", [*params, limit + 1])
        return cut_page(rows, limit, lambda m: (m.created_at, m.id))

    def get_messages(self, namespace: str, message_ids: Sequence[str]) -> list[Message]:
        return self._by_ids(_MESSAGES, namespace, message_ids)

    def messages_around(self, namespace: str, message: Message, *, before: int, after: int) -> list[Message]:
        where = "namespace = ? AND conversation_id = ?"
        params: list[Any] = [namespace, message.conversation_id]
        position = [to_iso(message.created_at), message.id]
        earlier = self._select(
            _MESSAGES,
            f"{where} AND (created_at, id) < (?, ?) ORDER BY created_at DESC, id DESC LIMIT ?",
            [*params, *position, max(0, before)],
        )
        later = self._select(
            _MESSAGES,
            f"{where} AND (created_at, id) > (?, ?) ORDER BY created_at, id LIMIT ?",
            [*params, *position, max(0, after)],
        )
        return [*reversed(earlier), message, *later]

    def move_thread(self, namespace: str, source: str, target: str) -> int:
        with self._transaction() as db:
            if (
                db.execute("SELECT 1 FROM threads WHERE namespace = ? AND id = ?", (namespace, target)).fetchone()
                is None
            ):
                raise NotFound(f"thread {target} not found")
            moved = db.execute(
                "UPDATE messages SET conversation_id = ? WHERE namespace = ? AND conversation_id = ?",
                (target, namespace, source),
            ).rowcount
            gone = db.execute(
                "SELECT message_count, last_message_at FROM threads WHERE namespace = ? AND id = ?", (namespace, source)
            ).fetchone()
            if gone is not None:
                into = db.execute(
                    "SELECT last_message_at FROM threads WHERE namespace = ? AND id = ?", (namespace, target)
                ).fetchone()
                latest = max(filter(None, (into["last_message_at"], gone["last_message_at"])), default=None)
                db.execute(
                    "UPDATE threads SET message_count = message_count + ?, last_message_at = ?"
                    " WHERE namespace = ? AND id = ?",
                    (gone["message_count"], latest, namespace, target),
                )
                db.execute("DELETE FROM threads WHERE namespace = ? AND id = ?", (namespace, source))
        return int(moved)

    def purge_thread(self, namespace: str, thread_id: str) -> int:
        with self._transaction() as db:
            db.execute("DELETE FROM threads WHERE namespace = ? AND id = ?", (namespace, thread_id))
            return int(
                db.execute(
                    "DELETE FROM messages WHERE namespace = ? AND conversation_id = ?", (namespace, thread_id)
                ).rowcount
            )

    # -- reminders --------------------------------------------------------------------------
    def put_reminder(self, reminder: Reminder) -> Reminder:
        self._execute(_REMINDERS.upsert_sql, _REMINDERS.insert_params(reminder))
        return reminder

    def find_reminder(self, namespace: str, memory_id: str) -> Reminder | None:
        return self._select_one(_REMINDERS, "namespace = ? AND memory_id = ?", (namespace, memory_id))

    def list_reminders(
        self,
        namespace: str,
        status: str,
        *,
        due_after: datetime | None = None,
        due_before: datetime | None = None,
        limit: int = 100,
    ) -> list[Reminder]:
        check_limit(limit)
        where = "namespace = ? AND status = ?"
        params: list[Any] = [namespace, status]
        if due_after is not None:
            where += " AND remind_at >= ?"
            params.append(to_iso(due_after))
        if due_before is not None:
            where += " AND remind_at <= ?"
            params.append(to_iso(due_before))
        return self._select(_REMINDERS, f"{where} ORDER BY remind_at, memory_id LIMIT ?", [*params, limit])

    def claim_reminder(self, namespace: str, memory_id: str, owner: str, *, now: datetime, until: datetime) -> bool:
        taken = self._execute(
            "UPDATE reminders SET lease_owner = ?, lease_until = ? WHERE namespace = ? AND memory_id = ?"
            " AND status = 'pending' AND (lease_until IS NULL OR lease_until < ?)",
            (owner, to_iso(until), namespace, memory_id, to_iso(now)),
        )
        return taken == 1

    def settle_reminder(self, namespace: str, memory_id: str, owner: str, *, delivered_at: datetime | None) -> bool:
        if delivered_at is None:
            sql = "UPDATE reminders SET lease_owner = NULL, lease_until = NULL"
            params: list[Any] = []
        else:
            sql = "UPDATE reminders SET lease_owner = NULL, lease_until = NULL, status = 'delivered', delivered_at = ?"
            params = [to_iso(delivered_at)]
        done = self._execute(
            f"{sql} WHERE namespace = ? AND memory_id = ? AND lease_owner = ?", [*params, namespace, memory_id, owner]
        )
        return done == 1

    # -- precious, glossary, digest, daily log ---------------------------------------------
    def insert_precious(self, precious: Precious) -> Precious:
        self._execute(_PRECIOUS.insert_sql, _PRECIOUS.insert_params(precious))
        return precious

    def list_precious(self, namespace: str, *, limit: int = 100) -> list[Precious]:
        check_limit(limit)
        return self._select(_PRECIOUS, "namespace = ? ORDER BY created_at DESC, id DESC LIMIT ?", (namespace, limit))

    def delete_precious(self, namespace: str, precious_id: str) -> None:
        if self._execute("DELETE FROM precious WHERE namespace = ? AND id = ?", (namespace, precious_id)) == 0:
            raise NotFound(f"precious {precious_id} not found")

    def put_glossary_term(self, term: GlossaryTerm) -> GlossaryTerm:
        self._execute(_GLOSSARY.upsert_sql, _GLOSSARY.insert_params(term))
        return term

    def get_glossary_term(self, namespace: str, term_id: str) -> GlossaryTerm:
        term = self._select_one(_GLOSSARY, "namespace = ? AND id = ?", (namespace, term_id))
        if term is None:
            raise NotFound(f"glossary term {term_id} not found")
        return term

    def list_glossary(self, namespace: str) -> list[GlossaryTerm]:
        return sorted(self._select(_GLOSSARY, "namespace = ?", (namespace,)), key=glossary_order)

    def delete_glossary_term(self, namespace: str, term_id: str) -> None:
        if self._execute("DELETE FROM glossary WHERE namespace = ? AND id = ?", (namespace, term_id)) == 0:
            raise NotFound(f"glossary term {term_id} not found")

    def get_digest(self, namespace: str) -> Digest | None:
        return self._select_one(_DIGESTS, "namespace = ?", (namespace,))

    def put_digest(self, digest: Digest) -> Digest:
        self._execute(_DIGESTS.upsert_sql, _DIGESTS.insert_params(digest))
        return digest

    def get_daily_log(self, namespace: str, date: str) -> DailyLog | None:
        return self._select_one(_DAILY_LOGS, "namespace = ? AND date = ?", (namespace, date))

    def put_daily_log(self, log: DailyLog) -> DailyLog:
        self._execute(_DAILY_LOGS.upsert_sql, _DAILY_LOGS.insert_params(log))
        return log

    def list_daily_logs(self, namespace: str, *, limit: int = 30) -> list[DailyLog]:
        check_limit(limit)
        return self._select(_DAILY_LOGS, "namespace = ? ORDER BY date DESC LIMIT ?", (namespace, limit))

    # -- events, usage, idempotency, cursors, cache -----------------------------------------
    def append_event(self, event: MemoryEvent) -> None:
        self._execute(_EVENTS.insert_sql, _EVENTS.insert_params(event))

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
        return self._select(_EVENTS, f"{where} ORDER BY created_at DESC, id DESC LIMIT ?", [*params, limit])

    def delete_events_before(self, namespace: str, before: datetime) -> int:
        return self._execute("DELETE FROM events WHERE namespace = ? AND created_at < ?", (namespace, to_iso(before)))

    def append_usage(self, usage: UsageRecord) -> None:
        self._execute(_USAGE.insert_sql, _USAGE.insert_params(usage))

    def list_usage(self, namespace: str, *, since: datetime | None = None) -> list[UsageRecord]:
        if since is None:
            return self._select(_USAGE, "namespace = ? ORDER BY created_at, id", (namespace,))
        return self._select(
            _USAGE, "namespace = ? AND created_at >= ? ORDER BY created_at, id", (namespace, to_iso(since))
        )

    def delete_usage_before(self, namespace: str, before: datetime) -> int:
        return self._execute("DELETE FROM usage WHERE namespace = ? AND created_at < ?", (namespace, to_iso(before)))

    def get_idempotency(self, namespace: str, key: str) -> IdempotencyRecord | None:
        return self._select_one(_IDEMPOTENCY, "namespace = ? AND key = ?", (namespace, key))

    def put_idempotency(self, record: IdempotencyRecord) -> bool:
        sql = f"{_IDEMPOTENCY.insert_sql} ON CONFLICT (namespace, key) DO NOTHING"
        return self._execute(sql, _IDEMPOTENCY.insert_params(record)) == 1

    def delete_idempotency_before(self, namespace: str, before: datetime) -> int:
        return self._execute(
            "DELETE FROM idempotency WHERE namespace = ? AND created_at < ?", (namespace, to_iso(before))
        )

    def get_cursor(self, namespace: str, name: str) -> str | None:
        with self._session() as db:
            row = db.execute("SELECT value FROM cursors WHERE namespace = ? AND name = ?", (namespace, name)).fetchone()
        return None if row is None else str(row["value"])

    def set_cursor(self, namespace: str, name: str, value: str) -> None:
        self._execute(
            "INSERT INTO cursors (namespace, name, value) VALUES (?, ?, ?)"
            " ON CONFLICT (namespace, name) DO UPDATE SET value = excluded.value",
            (namespace, name, value),
        )

    def get_cache(self, namespace: str, key: str) -> Any | None:
        entry = self._select_one(
            _CACHE,
            "namespace = ? AND key = ? AND (expires_at IS NULL OR expires_at > ?)",
            (namespace, key, to_iso(utcnow())),
        )
        return None if entry is None else json.loads(entry.value)

    def put_cache(self, namespace: str, key: str, value: Any, *, expires_at: datetime | None = None) -> None:
        try:
            text = json.dumps(value)
        except (TypeError, ValueError) as exc:
            raise InvalidInput(f"cache value for {key!r} is not JSON-serializable") from exc
        entry = CacheEntry(namespace=namespace, key=key, value=text, expires_at=expires_at, updated_at=utcnow())
        self._execute(_CACHE.upsert_sql, _CACHE.insert_params(entry))

    def delete_cache(self, namespace: str, key: str) -> None:
        self._execute("DELETE FROM cache WHERE namespace = ? AND key = ?", (namespace, key))

    def list_namespaces(self) -> list[str]:
        tables = ("memories", "messages", "candidates", "precious", "glossary", "digests")
        sql = " UNION ".join(f"SELECT namespace FROM {table}" for table in tables) + " ORDER BY namespace"
        with self._session() as db:
            return [row[0] for row in db.execute(sql)]

    def ping(self) -> None:
        with self._lock:
            try:
                self._connection().execute("SELECT 1").fetchone()
            except (sqlite3.Error, OSError) as exc:
                raise UpstreamUnavailable(f"the SQLite store at {self._path} cannot be used ({exc})") from exc


def _message_window(
    column: str, namespace: str, since: datetime | None, until: datetime | None
) -> tuple[list[str], list[Any]]:
    """WHERE clauses and parameters for a namespace's messages with ``since <= column < until``."""
    clauses = ["namespace = ?"]
    params: list[Any] = [namespace]
    if since is not None:
        clauses.append(f"{column} >= ?")
        params.append(to_iso(since))
    if until is not None:
        clauses.append(f"{column} < ?")
        params.append(to_iso(until))
    return clauses, params
