"""Reminders, precious notes, the glossary, the digest and daily logs on the DynamoDB table."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from engram.adapters.storage.common import check_limit, glossary_order, to_iso
from engram.adapters.storage.dynamodb.base import DynamoStoreBase
from engram.adapters.storage.dynamodb.table import fields, sort_key, to_model
from engram.domain.errors import Conflict, NotFound
from engram.domain.models import DailyLog, Digest, GlossaryTerm, Precious, Reminder


class DynamoNotes(DynamoStoreBase):
    # -- reminders --------------------------------------------------------------------------
    def _reminder_item(self, reminder: Reminder) -> dict[str, Any]:
        pk = self._pk(reminder.namespace)
        return {
            "PK": pk,
            "SK": f"REMIND#{reminder.memory_id}",
            "entity": "reminder",
            "GSI1PK": f"{pk}#REMIND#{reminder.status}",
            "GSI1SK": sort_key(reminder.remind_at, reminder.memory_id),
            **fields(reminder),
        }

    def put_reminder(self, reminder: Reminder) -> Reminder:
        self._register(reminder.namespace)
        self._db.put(self._reminder_item(reminder))
        return reminder

    def find_reminder(self, namespace: str, memory_id: str) -> Reminder | None:
        item = self._db.get(self._pk(namespace), f"REMIND#{memory_id}")
        return to_model(Reminder, item) if item else None

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
        low = to_iso(due_after) if due_after is not None else "0"
        high = f"{to_iso(due_before)}#\uffff" if due_before is not None else "\uffff"
        items = self._db.query(
            pk=f"{self._pk(namespace)}#REMIND#{status}", index="GSI1", sk_between=(low, high), page_size=min(limit, 500)
        )
        rows: list[Reminder] = []
        for item in items:
            rows.append(to_model(Reminder, item))
            if len(rows) >= limit:
                break
        return rows

    def _update_reminder(self, namespace: str, memory_id: str, **update: Any) -> bool:
        """One conditional UpdateItem on the reminder row; ``False`` if the condition failed."""
        return self._db.update(self._pk(namespace), f"REMIND#{memory_id}", **update) is not None

    def claim_reminder(self, namespace: str, memory_id: str, owner: str, *, now: datetime, until: datetime) -> bool:
        # A conditional write is atomic on the item: of concurrent claims exactly one passes the check.
        return self._update_reminder(
            namespace,
            memory_id,
            UpdateExpression="SET lease_owner = :owner, lease_until = :until",
            ConditionExpression="#status = :pending AND (attribute_not_exists(lease_until) OR lease_until < :now)",
            ExpressionAttributeNames={"#status": "status"},
            ExpressionAttributeValues=self._db.ser(
                {":owner": owner, ":until": to_iso(until), ":pending": "pending", ":now": to_iso(now)}
            ),
        )

    def settle_reminder(self, namespace: str, memory_id: str, owner: str, *, delivered_at: datetime | None) -> bool:
        values: dict[str, Any] = {":owner": owner}
        expression = "REMOVE lease_owner, lease_until"
        if delivered_at is not None:
            expression = "SET #status = :delivered, delivered_at = :at, GSI1PK = :partition " + expression
            values.update(
                {
                    ":delivered": "delivered",
                    ":at": to_iso(delivered_at),
                    ":partition": f"{self._pk(namespace)}#REMIND#delivered",
                }
            )
        return self._update_reminder(
            namespace,
            memory_id,
            UpdateExpression=expression,
            ConditionExpression="lease_owner = :owner",
            ExpressionAttributeValues=self._db.ser(values),
            **({"ExpressionAttributeNames": {"#status": "status"}} if delivered_at is not None else {}),
        )

    # -- precious, glossary, digest, daily log ---------------------------------------------
    def insert_precious(self, precious: Precious) -> Precious:
        self._register(precious.namespace)
        item = {"PK": self._pk(precious.namespace), "SK": f"PREC#{precious.id}", "entity": "precious"}
        if not self._db.put({**item, **fields(precious)}, "attribute_not_exists(PK)"):
            raise Conflict(f"precious {precious.id} already exists")
        return precious

    def list_precious(self, namespace: str, *, limit: int = 100) -> list[Precious]:
        check_limit(limit)
        rows = [to_model(Precious, item) for item in self._db.query(pk=self._pk(namespace), sk_prefix="PREC#")]
        rows.sort(key=lambda p: (p.created_at, p.id), reverse=True)
        return rows[:limit]

    def delete_precious(self, namespace: str, precious_id: str) -> None:
        if not self._db.delete(self._pk(namespace), f"PREC#{precious_id}", "attribute_exists(PK)"):
            raise NotFound(f"precious {precious_id} not found")

    def put_glossary_term(self, term: GlossaryTerm) -> GlossaryTerm:
        self._register(term.namespace)
        self._db.put({"PK": self._pk(term.namespace), "SK": f"GLOSS#{term.id}", "entity": "glossary", **fields(term)})
        return term

    def get_glossary_term(self, namespace: str, term_id: str) -> GlossaryTerm:
        item = self._db.get(self._pk(namespace), f"GLOSS#{term_id}")
        if item is None:
            raise NotFound(f"glossary term {term_id} not found")
        return to_model(GlossaryTerm, item)

    def list_glossary(self, namespace: str) -> list[GlossaryTerm]:
        items = self._db.query(pk=self._pk(namespace), sk_prefix="GLOSS#")
        return sorted((to_model(GlossaryTerm, item) for item in items), key=glossary_order)

    def delete_glossary_term(self, namespace: str, term_id: str) -> None:
        if not self._db.delete(self._pk(namespace), f"GLOSS#{term_id}", "attribute_exists(PK)"):
            raise NotFound(f"glossary term {term_id} not found")

    def get_digest(self, namespace: str) -> Digest | None:
        item = self._db.get(self._pk(namespace), "DIGEST")
        return to_model(Digest, item) if item else None

    def put_digest(self, digest: Digest) -> Digest:
        self._register(digest.namespace)
        self._db.put({"PK": self._pk(digest.namespace), "SK": "DIGEST", "entity": "digest", **fields(digest)})
        return digest

    def get_daily_log(self, namespace: str, date: str) -> DailyLog | None:
        item = self._db.get(self._pk(namespace), f"DAY#{date}")
        return to_model(DailyLog, item) if item else None

    def put_daily_log(self, log: DailyLog) -> DailyLog:
        self._db.put({"PK": self._pk(log.namespace), "SK": f"DAY#{log.date}", "entity": "daily_log", **fields(log)})
        return log

    def list_daily_logs(self, namespace: str, *, limit: int = 30) -> list[DailyLog]:
        check_limit(limit)
        rows: list[DailyLog] = []
        for item in self._db.query(pk=self._pk(namespace), sk_prefix="DAY#", forward=False, page_size=limit):
            rows.append(to_model(DailyLog, item))
            if len(rows) >= limit:
                break
        return rows
