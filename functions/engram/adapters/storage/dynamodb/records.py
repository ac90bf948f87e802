"""The audit trail (memory events, usage) and the key-value rows (idempotency keys, job cursors,
cache entries, the namespace registry) on the DynamoDB table."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import datetime
from typing import Any

from engram.adapters.storage.common import cache_text, check_limit, decode_cursor, to_iso
from engram.adapters.storage.dynamodb.base import NAMESPACES_PK, DynamoStoreBase, cursor_sort_key
from engram.adapters.storage.dynamodb.table import epoch, fields, sort_key, to_model
from engram.domain.deployment import TTL_ATTRIBUTE
from engram.domain.errors import Conflict
from engram.domain.models import IdempotencyRecord, MemoryEvent, Page, UsageRecord


class DynamoRecords(DynamoStoreBase):
    # -- events, usage ----------------------------------------------------------------------
    def append_event(self, event: MemoryEvent) -> None:
        pk = self._pk(event.namespace)
        order = sort_key(event.created_at, event.id)
        item = {
            "PK": pk,
            "SK": f"EVT#{event.id}",
            "entity": "event",
            "GSI1PK": f"{pk}#EVT",
            "GSI1SK": order,
            **fields(event),
        }
        if event.run_id is None:
            item[TTL_ATTRIBUTE] = self._ttl(event.created_at, self._log_ttl)
        elif not event.is_run:  # a run's change sits under its run (docs/journal.md), kept by the journal's retention
            item["SK"] = f"RUN#{event.run_id}#{event.id}"
        if event.is_run:
            item |= {"GSI2PK": f"{pk}#RUNS", "GSI2SK": order}
        elif event.memory_id is not None:
            item |= {"GSI2PK": f"{pk}#EVTMEM#{event.memory_id}", "GSI2SK": order}
        if not self._db.put(item, "attribute_not_exists(PK)"):
            raise Conflict(f"event {event.id} already exists")

    def list_events(
        self, namespace: str, *, memory_id: str | None = None, kind: str | None = None, limit: int = 50
    ) -> list[MemoryEvent]:
        check_limit(limit)
        pk = self._pk(namespace)
        if memory_id is not None:
            items = self._db.query(pk=f"{pk}#EVTMEM#{memory_id}", index="GSI2", forward=False, page_size=limit + 1)
        else:
            items = self._db.query(pk=f"{pk}#EVT", index="GSI1", forward=False, page_size=limit + 1)
        rows: list[MemoryEvent] = []
        for item in items:
            event = to_model(MemoryEvent, item)
            if kind is None or event.kind == kind:
                rows.append(event)
                if len(rows) >= limit:
                    break
        return rows

    def _delete_logged_before(
        self, namespace: str, partition: str, before: datetime, doomed: Callable[[dict[str, Any]], bool]
    ) -> int:
        pk = self._pk(namespace)
        items = self._db.query(
            pk=f"{pk}#{partition}", index="GSI1", sk_before=to_iso(before), projection=("PK", "SK", "run_id")
        )
        keys = [(pk, item["SK"]) for item in items if doomed(item)]
        self._db.batch_delete(keys)
        return len(keys)

    def delete_events_before(self, namespace: str, before: datetime) -> int:
        return self._delete_logged_before(
            namespace, "EVT", before, lambda item: item["SK"].startswith("EVT#") and "run_id" not in item
        )

    # -- the change journal (docs/journal.md) -----------------------------------------------
    def get_run(self, namespace: str, run_id: str) -> MemoryEvent | None:
        item = self._db.get(self._pk(namespace), f"EVT#{run_id}")
        event = to_model(MemoryEvent, item) if item else None
        return event if event is not None and event.is_run else None

    def list_runs(self, namespace: str, *, limit: int = 50, cursor: str | None = None) -> Page[MemoryEvent]:
        check_limit(limit)
        items = self._db.query(
            pk=f"{self._pk(namespace)}#RUNS",
            index="GSI2",
            sk_before=cursor_sort_key(cursor),
            forward=False,
            page_size=limit + 1,
        )
        return self._page(items, lambda item: to_model(MemoryEvent, item), limit, lambda e: (e.created_at, e.id))

    def list_run_changes(
        self, namespace: str, run_id: str, *, limit: int = 100, cursor: str | None = None
    ) -> Page[MemoryEvent]:
        check_limit(limit)
        prefix = f"RUN#{run_id}#"
        after = decode_cursor(cursor)[1] if cursor is not None else ""
        items = self._db.query(
            pk=self._pk(namespace), sk_between=(f"{prefix}{after}", f"{prefix}~"), page_size=limit + 2
        )
        return self._page(
            items,
            lambda item: to_model(MemoryEvent, item),
            limit,
            lambda e: (e.created_at, e.id),
            keep=lambda e: e.id > after,
        )

    def delete_journal_before(self, namespace: str, before: datetime) -> int:
        return self._delete_logged_before(namespace, "EVT", before, lambda item: "run_id" in item)

    def delete_memory_events(self, namespace: str, memory_id: str) -> int:
        pk = self._pk(namespace)
        items = self._db.query(pk=f"{pk}#EVTMEM#{memory_id}", index="GSI2", projection=("PK", "SK"))
        keys = [(pk, item["SK"]) for item in items]
        self._db.batch_delete(keys)
        return len(keys)

    def append_usage(self, usage: UsageRecord) -> None:
        pk = self._pk(usage.namespace)
        item = {
            "PK": pk,
            "SK": f"USAGE#{usage.id}",
            "entity": "usage",
            "GSI1PK": f"{pk}#USAGE",
            "GSI1SK": sort_key(usage.created_at, usage.id),
            TTL_ATTRIBUTE: self._ttl(usage.created_at, self._log_ttl),
            **fields(usage),
        }
        if not self._db.put(item, "attribute_not_exists(PK)"):
            raise Conflict(f"usage record {usage.id} already exists")

    def list_usage(self, namespace: str, *, since: datetime | None = None) -> list[UsageRecord]:
        partition = f"{self._pk(namespace)}#USAGE"
        if since is None:
            items = self._db.query(pk=partition, index="GSI1")
        else:
            items = self._db.query(pk=partition, index="GSI1", sk_between=(to_iso(since), "~"))
        return [to_model(UsageRecord, item) for item in items]

    def delete_usage_before(self, namespace: str, before: datetime) -> int:
        return self._delete_logged_before(namespace, "USAGE", before, lambda item: item["SK"].startswith("USAGE#"))

    # -- idempotency, cursors, cache, namespaces ----------------------------------------------
    def get_idempotency(self, namespace: str, key: str) -> IdempotencyRecord | None:
        item = self._db.get(self._pk(namespace), f"IDEM#{key}")
        return to_model(IdempotencyRecord, item) if item else None

    def put_idempotency(self, record: IdempotencyRecord) -> bool:
        item = {
            "PK": self._pk(record.namespace),
            "SK": f"IDEM#{record.key}",
            "entity": "idempotency",
            TTL_ATTRIBUTE: self._ttl(record.created_at, self._idempotency_ttl),
            **fields(record),
        }
        return self._db.put(item, "attribute_not_exists(PK)")

    def delete_idempotency(self, namespace: str, key: str) -> None:
        self._db.delete(self._pk(namespace), f"IDEM#{key}")

    def delete_idempotency_before(self, namespace: str, before: datetime) -> int:
        pk = self._pk(namespace)
        cutoff = to_iso(before)
        doomed = [
            (pk, item["SK"])
            for item in self._db.query(pk=pk, sk_prefix="IDEM#", projection=("PK", "SK", "created_at"))
            if item["created_at"] < cutoff
        ]
        self._db.batch_delete(doomed)
        return len(doomed)

    def get_cursor(self, namespace: str, name: str) -> str | None:
        item = self._db.get(self._pk(namespace), f"CURSOR#{name}")
        return str(item["value"]) if item else None

    def set_cursor(self, namespace: str, name: str, value: str) -> None:
        self._db.put(self._cursor_item(namespace, name, value))

    def replace_cursor(self, namespace: str, name: str, value: str, *, expected: str | None) -> bool:
        item = self._cursor_item(namespace, name, value)
        if expected is None:
            return self._db.put(item, condition="attribute_not_exists(PK)")
        return self._db.put(
            item,
            condition="#value = :expected",
            ExpressionAttributeNames={"#value": "value"},
            ExpressionAttributeValues={":expected": {"S": expected}},
        )

    def _cursor_item(self, namespace: str, name: str, value: str) -> dict[str, Any]:
        return {
            "PK": self._pk(namespace),
            "SK": f"CURSOR#{name}",
            "entity": "cursor",
            "namespace": namespace,
            "name": name,
            "value": value,
            "updated_at": to_iso(self._clock.now()),
        }

    def get_cache(self, namespace: str, key: str) -> Any | None:
        item = self._db.get(self._pk(namespace), f"CACHE#{key}")
        if item is None:
            return None
        expires_at = item.get("expires_at")
        if expires_at is not None and datetime.fromisoformat(expires_at) <= self._clock.now():
            return None
        return json.loads(item["value_json"])

    def put_cache(self, namespace: str, key: str, value: Any, *, expires_at: datetime | None = None) -> None:
        self._db.put(self._cache_item(namespace, key, value, expires_at))

    def add_cache(
        self, namespace: str, key: str, value: Any, *, expires_at: datetime | None = None
    ) -> tuple[bool, Any]:
        item = self._cache_item(namespace, key, value, expires_at)
        # Absent, or held past its expiry (DynamoDB's TTL deletes expired items only eventually): the same
        # fixed-width ISO text ``get_cache`` compares as a time.
        condition = "attribute_not_exists(PK) OR #expires <= :now"
        while True:
            stored, held = self._db.put_or_held(
                item,
                condition,
                ExpressionAttributeNames={"#expires": "expires_at"},
                ExpressionAttributeValues={":now": {"S": to_iso(self._clock.now())}},
            )
            if stored:
                return True, None
            if held is not None:
                return False, json.loads(held["value_json"])

    def _cache_item(self, namespace: str, key: str, value: Any, expires_at: datetime | None) -> dict[str, Any]:
        item: dict[str, Any] = {
            "PK": self._pk(namespace),
            "SK": f"CACHE#{key}",
            "entity": "cache",
            "namespace": namespace,
            "key": key,
            "value_json": cache_text(key, value, ensure_ascii=False),
            "updated_at": to_iso(self._clock.now()),
        }
        if expires_at is not None:
            item |= {"expires_at": to_iso(expires_at), TTL_ATTRIBUTE: epoch(expires_at)}
        return item

    def delete_cache(self, namespace: str, key: str) -> None:
        self._db.delete(self._pk(namespace), f"CACHE#{key}")

    def list_namespaces(self) -> list[str]:
        return sorted(item["SK"] for item in self._db.query(pk=NAMESPACES_PK, projection=("SK",)))

    def ping(self) -> None:
        self._db.get(NAMESPACES_PK, "#ping")
