"""Reminders, precious notes, the glossary, the digest and daily logs in the SQLite store."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from engram.adapters.storage.common import check_limit, glossary_order, to_iso
from engram.adapters.storage.sqlite.base import SqliteStoreBase
from engram.adapters.storage.sqlite.tables import DAILY_LOGS, DIGESTS, GLOSSARY, PRECIOUS, REMINDERS
from engram.domain.errors import NotFound
from engram.domain.models import DailyLog, Digest, GlossaryTerm, Precious, Reminder


class SqliteNotes(SqliteStoreBase):
    # -- reminders --------------------------------------------------------------------------
    def put_reminder(self, reminder: Reminder) -> Reminder:
        self._execute(REMINDERS.upsert_sql, REMINDERS.insert_params(reminder))
        return reminder

    def find_reminder(self, namespace: str, memory_id: str) -> Reminder | None:
        return self._select_one(REMINDERS, "namespace = ? AND memory_id = ?", (namespace, memory_id))

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
        return self._select(REMINDERS, f"{where} ORDER BY remind_at, memory_id LIMIT ?", [*params, limit])

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
        self._execute(PRECIOUS.insert_sql, PRECIOUS.insert_params(precious))
        return precious

    def list_precious(self, namespace: str, *, limit: int = 100) -> list[Precious]:
        check_limit(limit)
        return self._select(PRECIOUS, "namespace = ? ORDER BY created_at DESC, id DESC LIMIT ?", (namespace, limit))

    def delete_precious(self, namespace: str, precious_id: str) -> None:
        if self._execute("DELETE FROM precious WHERE namespace = ? AND id = ?", (namespace, precious_id)) == 0:
            raise NotFound(f"precious {precious_id} not found")

    def put_glossary_term(self, term: GlossaryTerm) -> GlossaryTerm:
        self._execute(GLOSSARY.upsert_sql, GLOSSARY.insert_params(term))
        return term

    def get_glossary_term(self, namespace: str, term_id: str) -> GlossaryTerm:
        term = self._select_one(GLOSSARY, "namespace = ? AND id = ?", (namespace, term_id))
        if term is None:
            raise NotFound(f"glossary term {term_id} not found")
        return term

    def list_glossary(self, namespace: str) -> list[GlossaryTerm]:
        return sorted(self._select(GLOSSARY, "namespace = ?", (namespace,)), key=glossary_order)

    def delete_glossary_term(self, namespace: str, term_id: str) -> None:
        if self._execute("DELETE FROM glossary WHERE namespace = ? AND id = ?", (namespace, term_id)) == 0:
            raise NotFound(f"glossary term {term_id} not found")

    def get_digest(self, namespace: str) -> Digest | None:
        return self._select_one(DIGESTS, "namespace = ?", (namespace,))

    def put_digest(self, digest: Digest) -> Digest:
        self._execute(DIGESTS.upsert_sql, DIGESTS.insert_params(digest))
        return digest

    def get_daily_log(self, namespace: str, date: str) -> DailyLog | None:
        return self._select_one(DAILY_LOGS, "namespace = ? AND date = ?", (namespace, date))

    def put_daily_log(self, log: DailyLog) -> DailyLog:
        self._execute(DAILY_LOGS.upsert_sql, DAILY_LOGS.insert_params(log))
        return log

    def list_daily_logs(self, namespace: str, *, limit: int = 30) -> list[DailyLog]:
        check_limit(limit)
        return self._select(DAILY_LOGS, "namespace = ? ORDER BY date DESC LIMIT ?", (namespace, limit))
