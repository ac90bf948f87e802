"""Messages and threads in the SQLite store."""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from engram.adapters.storage.common import check_limit, cut_page, decode_cursor, thread_position, to_iso
from engram.adapters.storage.sqlite.base import SqliteStoreBase
from engram.adapters.storage.sqlite.tables import MESSAGES, THREAD_ORDER, THREADS
from engram.domain.errors import NotFound
from engram.domain.models import Message, Page, Thread

_INSERT_MESSAGE = f"{MESSAGES.insert_sql} ON CONFLICT (namespace, external_id) DO NOTHING"
_COUNT_IN_THREAD = (
    "INSERT INTO threads (namespace, id, title, message_count, last_message_at, created_at, deleted_at)"
    " VALUES (?, ?, NULL, 1, ?, ?, NULL) ON CONFLICT (namespace, id) DO UPDATE SET"
    " message_count = message_count + 1, last_message_at = excluded.last_message_at, deleted_at = NULL"
)


class SqliteMessages(SqliteStoreBase):
    # -- messages -------------------------------------------------------------------------
    def insert_message(self, message: Message) -> tuple[Message, bool]:
        return self.insert_messages([message])[0]

    def insert_messages(self, messages: Sequence[Message]) -> list[tuple[Message, bool]]:
        """Every message in one transaction: a turn's two sides cost one commit, not two."""
        if not messages:
            return []
        results: list[tuple[Message, bool]] = []
        with self._transaction() as db:
            for message in messages:
                results.append(self._insert_one(db, message))
        return results

    def _insert_one(self, db: sqlite3.Connection, message: Message) -> tuple[Message, bool]:
        """``insert_message`` inside the caller's transaction."""
        message = message.model_copy(update={"stored_at": message.stored_at or message.created_at})
        if db.execute(_INSERT_MESSAGE, MESSAGES.insert_params(message)).rowcount == 1:
            at = to_iso(message.created_at)
            db.execute(_COUNT_IN_THREAD, (message.namespace, message.conversation_id, at, at))
            return message, True
        row = db.execute(
            "SELECT * FROM messages WHERE namespace = ? AND external_id = ? LIMIT 1",
            (message.namespace, message.external_id),
        ).fetchone()
        assert row is not None, "the insert was skipped only because this external_id exists"
        return MESSAGES.load(row), False

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
        clauses, params = message_window("created_at", namespace, since, until)
        with self._snapshot():  # the cursor's row and the page in one snapshot
            if after_id is not None:
                after = self._select_one(MESSAGES, "namespace = ? AND id = ?", (namespace, after_id))
                if after is None:
                    raise NotFound(f"message {after_id} not found")
                clauses.append("(created_at, id) > (?, ?)")
                params.extend((to_iso(after.created_at), after.id))
            where = " AND ".join(clauses)
            return self._select(MESSAGES, f"{where} ORDER BY created_at, id LIMIT ?", [*params, limit])

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
        clauses, params = message_window("stored_at", namespace, since, until)
        if after is not None:
            clauses.append("(stored_at, id) > (?, ?)")
            params.extend((to_iso(after[0]), after[1]))
        where = " AND ".join(clauses)
        return self._select(MESSAGES, f"{where} ORDER BY stored_at, id LIMIT ?", [*params, limit])

    def count_messages(self, namespace: str, *, since: datetime | None = None) -> int:
        sql = "SELECT COUNT(*) FROM messages WHERE namespace = ?"
        params: list[Any] = [namespace]
        if since is not None:
            sql += " AND created_at >= ?"
            params.append(to_iso(since))
        with self._reading() as db:
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
        thread = self._select_one(THREADS, "namespace = ? AND id = ?", (namespace, thread_id))
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
            where += f" AND ({THREAD_ORDER}, id) < (?, ?)"
            params += [to_iso(at), row_id]
        rows = self._select(THREADS, f"{where} ORDER BY {THREAD_ORDER} DESC, id DESC LIMIT ?", [*params, limit + 1])
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
        rows = self._select(MESSAGES, f"{where} ORDER BY created_at, id LIMIT ?", [*params, limit + 1])
        return cut_page(rows, limit, lambda m: (m.created_at, m.id))

    def get_messages(self, namespace: str, message_ids: Sequence[str]) -> list[Message]:
        return self._by_ids(MESSAGES, namespace, message_ids)

    def messages_around(self, namespace: str, message: Message, *, before: int, after: int) -> list[Message]:
        where = "namespace = ? AND conversation_id = ?"
        params: list[Any] = [namespace, message.conversation_id]
        position = [to_iso(message.created_at), message.id]
        earlier = self._select(
            MESSAGES,
            f"{where} AND (created_at, id) < (?, ?) ORDER BY created_at DESC, id DESC LIMIT ?",
            [*params, *position, max(0, before)],
        )
        later = self._select(
            MESSAGES,
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


def message_window(
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
