"""Reminders, precious notes, the glossary, the digest and daily logs in process memory."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from engram.adapters.storage.common import check_limit, glossary_order
from engram.adapters.storage.inmemory.base import InMemoryStoreBase, newest_first
from engram.domain.errors import Conflict, NotFound
from engram.domain.models import DailyLog, Digest, GlossaryTerm, Precious, Reminder


class InMemoryNotes(InMemoryStoreBase):
    # -- reminders --------------------------------------------------------------------------
    def put_reminder(self, reminder: Reminder) -> Reminder:
        with self._lock:
            self._reminders.setdefault(reminder.namespace, {})[reminder.memory_id] = reminder
        return reminder

    def find_reminder(self, namespace: str, memory_id: str) -> Reminder | None:
        with self._lock:
            return self._reminders.get(namespace, {}).get(memory_id)

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
        with self._lock:
            rows = [
                r
                for r in self._reminders.get(namespace, {}).values()
                if r.status == status
                and (due_after is None or r.remind_at >= due_after)
                and (due_before is None or r.remind_at <= due_before)
            ]
        return sorted(rows, key=lambda r: (r.remind_at, r.memory_id))[:limit]

    def claim_reminder(self, namespace: str, memory_id: str, owner: str, *, now: datetime, until: datetime) -> bool:
        with self._lock:
            row = self._reminders.get(namespace, {}).get(memory_id)
            if row is None or row.status != "pending" or (row.lease_until is not None and row.lease_until >= now):
                return False
            self._reminders[namespace][memory_id] = row.model_copy(update={"lease_owner": owner, "lease_until": until})
            return True

    def settle_reminder(self, namespace: str, memory_id: str, owner: str, *, delivered_at: datetime | None) -> bool:
        with self._lock:
            row = self._reminders.get(namespace, {}).get(memory_id)
            if row is None or row.lease_owner != owner:
                return False
            changes: dict[str, Any] = {"lease_owner": None, "lease_until": None}
            if delivered_at is not None:
                changes.update(status="delivered", delivered_at=delivered_at)
            self._reminders[namespace][memory_id] = row.model_copy(update=changes)
            return True

    # -- precious, glossary, digest, daily log ---------------------------------------------
    def insert_precious(self, precious: Precious) -> Precious:
        with self._lock:
            rows = self._precious.setdefault(precious.namespace, {})
            if precious.id in rows:
                raise Conflict(f"precious {precious.id} already exists")
            rows[precious.id] = precious
            return precious

    def list_precious(self, namespace: str, *, limit: int = 100) -> list[Precious]:
        check_limit(limit)
        with self._lock:
            return newest_first(self._precious.get(namespace, {}).values())[:limit]

    def delete_precious(self, namespace: str, precious_id: str) -> None:
        with self._lock:
            if self._precious.get(namespace, {}).pop(precious_id, None) is None:
                raise NotFound(f"precious {precious_id} not found")

    def put_glossary_term(self, term: GlossaryTerm) -> GlossaryTerm:
        with self._lock:
            self._glossary.setdefault(term.namespace, {})[term.id] = term
            return term

    def get_glossary_term(self, namespace: str, term_id: str) -> GlossaryTerm:
        with self._lock:
            term = self._glossary.get(namespace, {}).get(term_id)
        if term is None:
            raise NotFound(f"glossary term {term_id} not found")
        return term

    def list_glossary(self, namespace: str) -> list[GlossaryTerm]:
        with self._lock:
            return sorted(self._glossary.get(namespace, {}).values(), key=glossary_order)

    def delete_glossary_term(self, namespace: str, term_id: str) -> None:
        with self._lock:
            if self._glossary.get(namespace, {}).pop(term_id, None) is None:
                raise NotFound(f"glossary term {term_id} not found")

    def get_digest(self, namespace: str) -> Digest | None:
        with self._lock:
            return self._digests.get(namespace)

    def put_digest(self, digest: Digest) -> Digest:
        with self._lock:
            self._digests[digest.namespace] = digest
            return digest

    def get_daily_log(self, namespace: str, date: str) -> DailyLog | None:
        with self._lock:
            return self._daily_logs.get(namespace, {}).get(date)

    def put_daily_log(self, log: DailyLog) -> DailyLog:
        with self._lock:
            self._daily_logs.setdefault(log.namespace, {})[log.date] = log
            return log

    def list_daily_logs(self, namespace: str, *, limit: int = 30) -> list[DailyLog]:
        check_limit(limit)
        with self._lock:
            logs = self._daily_logs.get(namespace, {}).values()
            return sorted(logs, key=lambda log: log.date, reverse=True)[:limit]
