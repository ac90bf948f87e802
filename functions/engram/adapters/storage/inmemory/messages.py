"""Messages and threads in process memory."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from engram.adapters.storage.common import check_limit, cut_page, decode_cursor, thread_position
from engram.adapters.storage.inmemory.base import InMemoryStoreBase, delete_where, latest, oldest_first
from engram.domain.errors import Conflict, NotFound
from engram.domain.models import Message, Page, Thread


class InMemoryMessages(InMemoryStoreBase):
    # -- messages -------------------------------------------------------------------------
    def insert_message(self, message: Message) -> tuple[Message, bool]:
        with self._lock:
            rows = self._messages.setdefault(message.namespace, {})
            keys = self._message_keys.setdefault(message.namespace, {})
            if message.external_id is not None:
                # Only this method adds messages, so the last one inserted with the key is the only one
                # that can still hold it (an earlier one was gone when it was inserted).
                stored = rows.get(keys.get(message.external_id, ""))
                if stored is not None and stored.external_id == message.external_id:
                    return stored, False
            if message.id in rows:
                raise Conflict(f"message {message.id} already exists")
            message = message.model_copy(update={"stored_at": message.stored_at or message.created_at})
            rows[message.id] = message
            if message.external_id is not None:
                keys[message.external_id] = message.id
            self._count_in_thread(message)
            return message, True

    def insert_messages(self, messages: Sequence[Message]) -> list[tuple[Message, bool]]:
        with self._lock:
            return [self.insert_message(message) for message in messages]

    def _count_in_thread(self, message: Message) -> None:
        threads = self._threads.setdefault(message.namespace, {})
        thread = threads.get(message.conversation_id) or Thread(
            namespace=message.namespace, id=message.conversation_id, created_at=message.created_at
        )
        threads[thread.id] = thread.model_copy(
            update={
                "message_count": thread.message_count + 1,
                "last_message_at": message.created_at,
                "deleted_at": None,
            }
        )

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
        with self._lock:
            rows = self._messages.get(namespace, {})
            after = None
            if after_id is not None:
                if after_id not in rows:
                    raise NotFound(f"message {after_id} not found")
                after = (rows[after_id].created_at, after_id)
            timed = [(m.created_at, m) for m in rows.values()]
        return _window(timed, since, until, after)[:limit]

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
        with self._lock:
            rows = [(m.stored_at, m) for m in self._messages.get(namespace, {}).values() if m.stored_at is not None]
        return _window(rows, since, until, after)[:limit]

    def count_messages(self, namespace: str, *, since: datetime | None = None) -> int:
        with self._lock:
            return sum(1 for m in self._messages.get(namespace, {}).values() if since is None or m.created_at >= since)

    def delete_messages_before(self, namespace: str, before: datetime) -> int:
        with self._lock:
            gone = [m for m in self._messages.get(namespace, {}).values() if m.created_at < before]
            self._uncount(namespace, gone)
            return delete_where(self._messages, namespace, lambda m: m.created_at < before)

    def _uncount(self, namespace: str, messages: Sequence[Message]) -> None:
        threads = self._threads.get(namespace, {})
        for message in messages:
            thread = threads.get(message.conversation_id)
            if thread is not None:
                threads[thread.id] = thread.model_copy(update={"message_count": max(0, thread.message_count - 1)})

    # -- threads ----------------------------------------------------------------------------
    def get_thread(self, namespace: str, thread_id: str) -> Thread:
        with self._lock:
            thread = self._threads.get(namespace, {}).get(thread_id)
        if thread is None:
            raise NotFound(f"thread {thread_id} not found")
        return thread

    def list_threads(
        self, namespace: str, *, deleted: bool = False, limit: int = 50, cursor: str | None = None
    ) -> Page[Thread]:
        check_limit(limit)
        with self._lock:
            rows = [t for t in self._threads.get(namespace, {}).values() if (t.deleted_at is not None) == deleted]
        ordered = sorted(rows, key=thread_position, reverse=True)
        if cursor is not None:
            after = decode_cursor(cursor)
            ordered = [t for t in ordered if thread_position(t) < after]
        return cut_page(ordered, limit, thread_position)

    def update_thread(
        self, namespace: str, thread_id: str, *, title: str | None, deleted_at: datetime | None
    ) -> Thread:
        with self._lock:
            thread = self.get_thread(namespace, thread_id).model_copy(update={"title": title, "deleted_at": deleted_at})
            self._threads[namespace][thread_id] = thread
            return thread

    def list_thread_messages(
        self, namespace: str, thread_id: str, *, limit: int = 100, cursor: str | None = None
    ) -> Page[Message]:
        check_limit(limit)
        with self._lock:
            rows = oldest_first(m for m in self._messages.get(namespace, {}).values() if m.conversation_id == thread_id)
        if cursor is not None:
            after = decode_cursor(cursor)
            rows = [m for m in rows if (m.created_at, m.id) > after]
        return cut_page(rows, limit, lambda m: (m.created_at, m.id))

    def get_messages(self, namespace: str, message_ids: Sequence[str]) -> list[Message]:
        with self._lock:
            rows = self._messages.get(namespace, {})
            return [rows[i] for i in message_ids if i in rows]

    def messages_around(self, namespace: str, message: Message, *, before: int, after: int) -> list[Message]:
        with self._lock:
            thread = [
                m for m in self._messages.get(namespace, {}).values() if m.conversation_id == message.conversation_id
            ]
        at = (message.created_at, message.id)
        thread.sort(key=lambda m: (m.created_at, m.id))
        earlier = [m for m in thread if (m.created_at, m.id) < at]
        later = [m for m in thread if (m.created_at, m.id) > at]
        head = earlier[len(earlier) - before :] if before > 0 else []
        return [*head, message, *later[: max(0, after)]]

    def move_thread(self, namespace: str, source: str, target: str) -> int:
        with self._lock:
            into = self.get_thread(namespace, target)
            rows = self._messages.get(namespace, {})
            moved = [m for m in rows.values() if m.conversation_id == source]
            for message in moved:
                rows[message.id] = message.model_copy(update={"conversation_id": target})
            gone = self._threads.get(namespace, {}).pop(source, None)
            if gone is not None:
                self._threads[namespace][target] = into.model_copy(
                    update={
                        "message_count": into.message_count + gone.message_count,
                        "last_message_at": latest(into.last_message_at, gone.last_message_at),
                    }
                )
            return len(moved)

    def purge_thread(self, namespace: str, thread_id: str) -> int:
        with self._lock:
            self._threads.get(namespace, {}).pop(thread_id, None)
            return delete_where(self._messages, namespace, lambda m: m.conversation_id == thread_id)


def _window(
    timed: Sequence[tuple[datetime, Message]],
    since: datetime | None,
    until: datetime | None,
    after: tuple[datetime, str] | None,
) -> list[Message]:
    """The messages whose time ``t`` (created or stored) has ``since <= t < until`` and ``(t, id)`` past
    ``after``, in (t, id) order: the listings' window, whichever time they read."""
    picked = [
        (at, m)
        for at, m in timed
        if (since is None or at >= since) and (until is None or at < until) and (after is None or (at, m.id) > after)
    ]
    return [m for _, m in sorted(picked, key=lambda row: (row[0], row[1].id))]
