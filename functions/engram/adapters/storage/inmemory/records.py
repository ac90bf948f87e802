"""The audit trail (memory events, usage) and the key-value rows (idempotency keys, job cursors,
cache entries) in process memory; the namespace list and the health check."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from engram.adapters.storage.common import cache_text, check_limit, cut_page, decode_cursor
from engram.adapters.storage.inmemory.base import (
    InMemoryStoreBase,
    delete_where,
    newest_first,
    oldest_first,
    page,
)
from engram.domain.errors import Conflict
from engram.domain.models import CacheEntry, IdempotencyRecord, MemoryEvent, Page, UsageRecord


class InMemoryRecords(InMemoryStoreBase):
    # -- events, usage, idempotency, cursors, cache -----------------------------------------
    def append_event(self, event: MemoryEvent) -> None:
        with self._lock:
            rows = self._events.setdefault(event.namespace, {})
            if event.id in rows:
                raise Conflict(f"event {event.id} already exists")
            rows[event.id] = event

    def list_events(
        self, namespace: str, *, memory_id: str | None = None, kind: str | None = None, limit: int = 50
    ) -> list[MemoryEvent]:
        check_limit(limit)
        with self._lock:
            events = [
                e
                for e in self._events.get(namespace, {}).values()
                if (memory_id is None or e.memory_id == memory_id) and (kind is None or e.kind == kind)
            ]
        return newest_first(events)[:limit]

    def delete_events_before(self, namespace: str, before: datetime) -> int:
        with self._lock:
            return delete_where(self._events, namespace, lambda e: e.run_id is None and e.created_at < before)

    # -- the change journal (docs/journal.md) -----------------------------------------------
    def get_run(self, namespace: str, run_id: str) -> MemoryEvent | None:
        with self._lock:
            event = self._events.get(namespace, {}).get(run_id)
        return event if event is not None and event.is_run else None

    def list_runs(self, namespace: str, *, limit: int = 50, cursor: str | None = None) -> Page[MemoryEvent]:
        with self._lock:
            runs = [e for e in self._events.get(namespace, {}).values() if e.is_run]
        return page(runs, limit, cursor)

    def list_run_changes(
        self, namespace: str, run_id: str, *, limit: int = 100, cursor: str | None = None
    ) -> Page[MemoryEvent]:
        check_limit(limit)
        after = decode_cursor(cursor)[1] if cursor is not None else ""
        with self._lock:
            changes = [
                e
                for e in self._events.get(namespace, {}).values()
                if e.run_id == run_id and not e.is_run and e.id > after
            ]
        changes.sort(key=lambda e: e.id)
        return cut_page(changes[: limit + 1], limit, lambda e: (e.created_at, e.id))

    def delete_journal_before(self, namespace: str, before: datetime) -> int:
        with self._lock:
            return delete_where(self._events, namespace, lambda e: e.run_id is not None and e.created_at < before)

    def delete_memory_events(self, namespace: str, memory_id: str) -> int:
        with self._lock:
            return delete_where(self._events, namespace, lambda e: e.memory_id == memory_id)

    def append_usage(self, usage: UsageRecord) -> None:
        with self._lock:
            rows = self._usage.setdefault(usage.namespace, {})
            if usage.id in rows:
                raise Conflict(f"usage record {usage.id} already exists")
            rows[usage.id] = usage

    def list_usage(self, namespace: str, *, since: datetime | None = None) -> list[UsageRecord]:
        with self._lock:
            rows = [u for u in self._usage.get(namespace, {}).values() if since is None or u.created_at >= since]
        return oldest_first(rows)

    def delete_usage_before(self, namespace: str, before: datetime) -> int:
        with self._lock:
            return delete_where(self._usage, namespace, lambda u: u.created_at < before)

    def get_idempotency(self, namespace: str, key: str) -> IdempotencyRecord | None:
        with self._lock:
            return self._idempotency.get(namespace, {}).get(key)

    def put_idempotency(self, record: IdempotencyRecord) -> bool:
        with self._lock:
            rows = self._idempotency.setdefault(record.namespace, {})
            if record.key in rows:
                return False
            rows[record.key] = record
            return True

    def delete_idempotency(self, namespace: str, key: str) -> None:
        with self._lock:
            self._idempotency.get(namespace, {}).pop(key, None)

    def delete_idempotency_before(self, namespace: str, before: datetime) -> int:
        with self._lock:
            rows = self._idempotency.get(namespace, {})
            keys = [key for key, record in rows.items() if record.created_at < before]
            for key in keys:
                del rows[key]
            return len(keys)

    def get_cursor(self, namespace: str, name: str) -> str | None:
        with self._lock:
            return self._cursors.get(namespace, {}).get(name)

    def set_cursor(self, namespace: str, name: str, value: str) -> None:
        with self._lock:
            self._cursors.setdefault(namespace, {})[name] = value

    def replace_cursor(self, namespace: str, name: str, value: str, *, expected: str | None) -> bool:
        with self._lock:
            cursors = self._cursors.setdefault(namespace, {})
            if cursors.get(name) != expected:
                return False
            cursors[name] = value
            return True

    def get_cache(self, namespace: str, key: str) -> Any | None:
        with self._lock:
            entry = self._cache.get(namespace, {}).get(key)
        if entry is None or (entry.expires_at is not None and entry.expires_at <= self._clock.now()):
            return None
        return json.loads(entry.value)

    def put_cache(self, namespace: str, key: str, value: Any, *, expires_at: datetime | None = None) -> None:
        text = cache_text(key, value)
        entry = CacheEntry(
            namespace=namespace, key=key, value=text, expires_at=expires_at, updated_at=self._clock.now()
        )
        with self._lock:
            self._cache.setdefault(namespace, {})[key] = entry

    def add_cache(
        self, namespace: str, key: str, value: Any, *, expires_at: datetime | None = None
    ) -> tuple[bool, Any]:
        text = cache_text(key, value)
        now = self._clock.now()
        entry = CacheEntry(namespace=namespace, key=key, value=text, expires_at=expires_at, updated_at=now)
        with self._lock:
            entries = self._cache.setdefault(namespace, {})
            held = entries.get(key)
            if held is not None and (held.expires_at is None or held.expires_at > now):
                return False, json.loads(held.value)
            entries[key] = entry
        return True, None

    def delete_cache(self, namespace: str, key: str) -> None:
        with self._lock:
            self._cache.get(namespace, {}).pop(key, None)

    def list_namespaces(self) -> list[str]:
        with self._lock:
            tables: list[dict[str, Any]] = [
                self._memories,
                self._messages,
                self._candidates,
                self._precious,
                self._glossary,
            ]
            names = {namespace for table in tables for namespace, rows in table.items() if rows}
            names.update(self._digests)
        return sorted(names)

    def ping(self) -> None:
        """Always reachable."""
