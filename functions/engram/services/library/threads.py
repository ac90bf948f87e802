"""Threads: conversations a client pins by id and continues from any client (docs/threads.md).

A thread is the set of messages stored under one ``conversation_id``; the store keeps its row (count,
last message time) as messages arrive. Deleting puts it in a recycle bin (restorable until cleanup
purges it, ``hard_delete_after_days`` later); a new message in a binned thread brings it back.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from engram.domain.errors import Conflict, InvalidInput
from engram.domain.models import Message, Page, Thread
from engram.domain.policies import MAX_THREAD_ID_CHARS, THREAD_ID_BAD_CHARS, checked_thread_id
from engram.domain.ports import Clock, ThreadRows

_PURGE_PAGE = 100


def thread_id_of(header: str | None, user_field: object) -> str:
    """The thread of a chat request (docs/threads.md): the ``x-engram-thread`` header, which must be a
    thread id (else InvalidInput, 400 ``invalid_thread_id``); else the body's user field, made to fit
    (cut to 200 chars, '/' and control characters replaced by '_'; '.' and '..' ignored); else ``default``."""
    if header is not None and header.strip():
        return checked_thread_id(header.strip())
    if isinstance(user_field, str) and user_field.strip():
        fitted = THREAD_ID_BAD_CHARS.sub("_", user_field.strip()[:MAX_THREAD_ID_CHARS])
        if fitted not in (".", ".."):
            return fitted
    return "default"


class ThreadService:
    def __init__(self, store: ThreadRows, clock: Clock) -> None:
        self._store = store
        self._clock = clock

    def list(
        self, namespace: str, *, deleted: bool = False, limit: int = 50, cursor: str | None = None
    ) -> Page[Thread]:
        return self._store.list_threads(namespace, deleted=deleted, limit=limit, cursor=cursor)

    def get(self, namespace: str, thread_id: str) -> Thread:
        return self._store.get_thread(namespace, thread_id)

    def messages(self, namespace: str, thread_id: str, *, limit: int = 50, cursor: str | None = None) -> Page[Message]:
        self._store.get_thread(namespace, thread_id)  # NotFound for an unknown thread, not an empty page
        return self._store.list_thread_messages(namespace, thread_id, limit=limit, cursor=cursor)

    def rename(self, namespace: str, thread_id: str, title: str | None) -> Thread:
        thread = self._store.get_thread(namespace, thread_id)
        clean = " ".join(title.split()) if title else None
        return self._store.update_thread(namespace, thread_id, title=clean or None, deleted_at=thread.deleted_at)

    def delete(self, namespace: str, thread_id: str) -> Thread:
        """To the recycle bin (a second delete keeps the first one's time)."""
        thread = self._store.get_thread(namespace, thread_id)
        if thread.deleted_at is not None:
            return thread
        return self._store.update_thread(namespace, thread_id, title=thread.title, deleted_at=self._clock.now())

    def restore(self, namespace: str, thread_id: str) -> Thread:
        thread = self._store.get_thread(namespace, thread_id)
        if thread.deleted_at is None:
            return thread
        return self._store.update_thread(namespace, thread_id, title=thread.title, deleted_at=None)

    def merge(self, namespace: str, thread_id: str, into: str) -> tuple[Thread, int]:
        """Move every message of ``thread_id`` into ``into``; the merged thread and how many moved."""
        if thread_id == into:
            raise InvalidInput("a thread cannot be merged into itself", code="same_thread")
        self._store.get_thread(namespace, thread_id)
        target = self._store.get_thread(namespace, into)
        if target.deleted_at is not None:
            raise Conflict(f"thread {into} is in the recycle bin: restore it first", code="thread_deleted")
        moved = self._store.move_thread(namespace, thread_id, into)
        return self._store.get_thread(namespace, into), moved

    def erase(self, namespace: str, thread_id: str) -> Thread:
        """Erase a thread in the recycle bin for good, with its messages (the panel's "Erase for good")."""
        thread = self._store.get_thread(namespace, thread_id)
        if thread.deleted_at is None:
            raise Conflict(f"thread {thread_id} is not in the recycle bin: delete it first", code="not_deleted")
        self._store.purge_thread(namespace, thread_id)
        return thread

    def purge_deleted(self, namespace: str, *, older_than_days: int, now: datetime | None = None) -> int:
        """Hard-delete the threads (and their messages) in the recycle bin for longer than the given days."""
        before = (now or self._clock.now()) - timedelta(days=older_than_days)
        doomed: list[str] = []
        cursor: str | None = None
        while True:
            page = self._store.list_threads(namespace, deleted=True, limit=_PURGE_PAGE, cursor=cursor)
            doomed += [t.id for t in page.items if t.deleted_at is not None and t.deleted_at < before]
            cursor = page.next_cursor
            if cursor is None:
                break
        for thread_id in doomed:
            self._store.purge_thread(namespace, thread_id)
        return len(doomed)
