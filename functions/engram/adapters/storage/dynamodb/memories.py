"""Memories and review candidates on the DynamoDB table: rows, uniqueness locks, listings, sweeps.

Over 450 lines on purpose: every write of a memory row (versioned replace, supersede and restore
transactions, the fact-key and external-id locks, counters) shares the lock items and condition
expressions kept here; the SQLite and in-memory stores hold the same in their ``memories.py``.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Iterator, Sequence
from datetime import datetime
from typing import Any

from engram.adapters.storage.common import (
    CANDIDATE_STATUSES,
    check_limit,
    check_supersede,
    empty_memory_counts,
    memory_matches,
    replaced,
    to_iso,
)
from engram.adapters.storage.dynamodb.base import DynamoStoreBase, cursor_sort_key
from engram.adapters.storage.dynamodb.table import MAX_TRANSACTION_ITEMS, Cancelled, fields, sort_key, to_model
from engram.domain.errors import VERSION_CONFLICT, Conflict, EngramError, InvalidInput, NotFound, version_conflict
from engram.domain.models import MEMORY_COUNTERS, MEMORY_STATUSES, Candidate, Memory, MemoryFilter, Page

# What a replace leaves alone: the key, the version (it adds one) and the counters (docs/ARCHITECTURE.md,
# "Write rules"; the counters move only by record_injected / record_seen).
_NOT_REPLACED = frozenset({"PK", "SK", "version", *MEMORY_COUNTERS})
_RETRIES = 4  # rounds of record_seen (or a hard delete) while the row changes under it


def _sweep_at(memory: Memory) -> datetime:
    if memory.status == "active":
        return memory.last_seen_at or memory.created_at
    return memory.status_changed_at or memory.updated_at


def _created(row: Memory | Candidate) -> tuple[datetime, str]:
    return row.created_at, row.id


class DynamoMemories(DynamoStoreBase):
    # -- memories -------------------------------------------------------------------------
    def _memory_item(self, memory: Memory) -> dict[str, Any]:
        pk = self._pk(memory.namespace)
        partition = f"{pk}#MEM#{memory.status}"
        return {
            "PK": pk,
            "SK": f"MEM#{memory.id}",
            "entity": "memory",
            "GSI1PK": partition,
            "GSI1SK": sort_key(memory.created_at, memory.id),
            "GSI2PK": partition,
            "GSI2SK": sort_key(_sweep_at(memory), memory.id),
            **fields(memory),
        }

    @staticmethod
    def _locks(memory: Memory | None) -> dict[str, str]:
        """The uniqueness lock items a memory row holds: sort key -> memory id."""
        if memory is None:
            return {}
        locks: dict[str, str] = {}
        if memory.status == "active" and memory.fact_key:
            locks[f"MEMKEY#{memory.fact_key}"] = memory.id
        if memory.external_id:
            locks[f"MEMEXT#{memory.external_id}"] = memory.id
        return locks

    def _lock_operations(
        self, namespace: str, before: Sequence[Memory | None], after: Sequence[Memory]
    ) -> list[dict[str, Any]]:
        """Transaction items that move the lock items from the ``before`` rows to the ``after`` rows."""
        held: dict[str, str] = {}
        for row in before:
            held.update(self._locks(row))
        wanted: dict[str, str] = {}
        for row in after:
            for sk, owner in self._locks(row).items():
                if sk in wanted and wanted[sk] != owner:
                    what = "fact_key" if sk.startswith("MEMKEY#") else "external_id"
                    raise Conflict(f"{what} {sk.split('#', 1)[1]!r} would be held by two memories")
                wanted[sk] = owner
        pk = self._pk(namespace)
        operations: list[dict[str, Any]] = []
        for sk in sorted(set(held) | set(wanted)):
            old_owner, new_owner = held.get(sk), wanted.get(sk)
            if old_owner == new_owner:
                continue
            key = self._db.key(pk, sk)
            if new_owner is None:
                operations.append(
                    {
                        "Delete": {
                            "TableName": self._db.name,
                            "Key": key,
                            "ConditionExpression": "attribute_not_exists(PK) OR memory_id = :owner",
                            "ExpressionAttributeValues": {":owner": {"S": old_owner}},
                        }
                    }
                )
                continue
            put = self._db.put_operation(
                {"PK": pk, "SK": sk, "entity": "memory_lock", "memory_id": new_owner}, "attribute_not_exists(PK)"
            )
            if old_owner is not None:
                put["Put"]["ConditionExpression"] += " OR memory_id = :owner"
                put["Put"]["ExpressionAttributeValues"] = {":owner": {"S": old_owner}}
            operations.append(put)
        return operations

    def _put_memory_operation(self, memory: Memory, *, exists: bool) -> dict[str, Any]:
        condition = "attribute_exists(PK)" if exists else "attribute_not_exists(PK)"
        return self._db.put_operation(self._memory_item(memory), condition)

    def _write_memories(self, operations: list[dict[str, Any]], conflict: str) -> None:
        try:
            self._db.transact(operations)
        except Cancelled as exc:
            raise Conflict(conflict) from exc

    def _read_memory(self, namespace: str, memory_id: str) -> Memory | None:
        item = self._db.get(self._pk(namespace), f"MEM#{memory_id}")
        return to_model(Memory, item) if item else None

    def insert_memory(self, memory: Memory) -> Memory:
        self._register(memory.namespace)
        operations = [
            self._put_memory_operation(memory, exists=False),
            *self._lock_operations(memory.namespace, [], [memory]),
        ]
        self._write_memories(operations, f"memory {memory.id} already exists, or its fact_key/external_id is taken")
        return memory

    @staticmethod
    def _at_version(memory: Memory) -> str:
        """The condition "the row exists and is still at the version ``memory`` was read at" (names
        ``#ver``, value ``:ver``); a row written before versions existed has none and reads as 1."""
        if memory.version == 1:
            return "attribute_exists(PK) AND (attribute_not_exists(#ver) OR #ver = :ver)"
        return "attribute_exists(PK) AND #ver = :ver"

    def _replace_update(self, memory: Memory) -> dict[str, Any]:
        """UpdateItem arguments (no table, no key) that replace the row read at ``memory.version``:
        every attribute but the counters set or removed, the version one on."""
        names = {"#ver": "version"}
        values: dict[str, Any] = {":ver": memory.version, ":next": memory.version + 1}
        sets = ["#ver = :next"]
        for n, (name, value) in enumerate(self._memory_item(memory).items()):
            if name not in _NOT_REPLACED:
                names[f"#a{n}"], values[f":a{n}"] = name, value
                sets.append(f"#a{n} = :a{n}")
        gone = [name for name in Memory.model_fields if name not in _NOT_REPLACED and getattr(memory, name) is None]
        names.update({f"#r{n}": name for n, name in enumerate(gone)})
        expression = "SET " + ", ".join(sets)
        if gone:
            expression += " REMOVE " + ", ".join(f"#r{n}" for n in range(len(gone)))
        return {
            "UpdateExpression": expression,
            "ConditionExpression": self._at_version(memory),
            "ExpressionAttributeNames": names,
            "ExpressionAttributeValues": self._db.ser(values),
        }

    def _replace_operation(self, memory: Memory) -> dict[str, Any]:
        key = self._db.key(self._pk(memory.namespace), f"MEM#{memory.id}")
        return {"Update": {"TableName": self._db.name, "Key": key, **self._replace_update(memory)}}

    def _why_not_replaced(self, memories: Sequence[Memory], conflict: str) -> EngramError:
        """Why a replace of ``memories`` wrote nothing: a row gone, a row moved on, or a key taken."""
        for memory in memories:
            current = self._read_memory(memory.namespace, memory.id)
            if current is None:
                return NotFound(f"memory {memory.id} not found")
            if current.version != memory.version:
                return version_conflict(memory.id, memory.version, current.version)
        return Conflict(conflict)

    def update_memory(self, memory: Memory) -> Memory:
        return self.update_memories([memory])[0]

    def update_memories(self, memories: Sequence[Memory]) -> list[Memory]:
        if not memories:
            return []
        namespace = memories[0].namespace
        if any(m.namespace != namespace for m in memories):
            raise InvalidInput("update_memories needs every memory in the same namespace")
        current = [self._read_memory(namespace, m.id) for m in memories]
        for memory, row in zip(memories, current, strict=True):
            if row is None:
                raise NotFound(f"memory {memory.id} not found")
            if row.version != memory.version:
                raise version_conflict(memory.id, memory.version, row.version)
        locks = self._lock_operations(namespace, current, memories)
        conflict = "its fact_key or external_id is taken"
        if len(memories) == 1 and not locks:  # a plain replace: one UpdateItem, not a transaction
            key = self._pk(namespace), f"MEM#{memories[0].id}"
            if self._db.update(*key, **self._replace_update(memories[0])) is None:
                raise self._why_not_replaced(memories, conflict)
            return [replaced(memories[0])]
        try:
            self._db.transact([*(self._replace_operation(m) for m in memories), *locks])
        except Cancelled as exc:
            raise self._why_not_replaced(memories, conflict) from exc
        return [replaced(m) for m in memories]

    def record_injected(self, namespace: str, memory_ids: Sequence[str], at: datetime) -> None:
        pk = self._pk(namespace)
        for memory_id in dict.fromkeys(memory_ids):
            self._db.update(  # None (condition failed): the row is gone, nothing to count
                pk,
                f"MEM#{memory_id}",
                UpdateExpression="ADD recall_count :one SET last_injected_at = :at",
                ConditionExpression="attribute_exists(PK)",
                ExpressionAttributeValues={":one": {"N": "1"}, ":at": {"S": to_iso(at)}},
            )

    def record_seen(self, namespace: str, memory_id: str, at: datetime) -> Memory:
        # An active row's sweep key (GSI2) is its last sighting, so it moves with it; any other
        # status keeps the key of its status change. Each try is one UpdateItem conditioned on the status.
        pk, sk = self._pk(namespace), f"MEM#{memory_id}"
        values = {":one": {"N": "1"}, ":at": {"S": to_iso(at)}, ":active": {"S": "active"}}
        for _ in range(_RETRIES):
            response = self._db.update(
                pk,
                sk,
                UpdateExpression="ADD seen_count :one SET last_seen_at = :at, GSI2SK = :sweep",
                ConditionExpression="attribute_exists(PK) AND #st = :active",
                ExpressionAttributeNames={"#st": "status"},
                ExpressionAttributeValues={**values, ":sweep": {"S": sort_key(at, memory_id)}},
                ReturnValues="ALL_NEW",
            ) or self._db.update(
                pk,
                sk,
                UpdateExpression="ADD seen_count :one SET last_seen_at = :at",
                ConditionExpression="attribute_exists(PK) AND #st <> :active",
                ExpressionAttributeNames={"#st": "status"},
                ExpressionAttributeValues=values,
                ReturnValues="ALL_NEW",
            )
            if response is not None:
                return to_model(Memory, self._db.des(response["Attributes"]))
            if self._read_memory(namespace, memory_id) is None:
                break
        raise NotFound(f"memory {memory_id} not found")

    def get_memory(self, namespace: str, memory_id: str) -> Memory:
        memory = self._read_memory(namespace, memory_id)
        if memory is None:
            raise NotFound(f"memory {memory_id} not found")
        return memory

    def get_memories(self, namespace: str, memory_ids: Sequence[str]) -> list[Memory]:
        pk = self._pk(namespace)
        keys = [(pk, f"MEM#{memory_id}") for memory_id in dict.fromkeys(memory_ids)]
        found = {memory.id: memory for memory in (to_model(Memory, item) for item in self._db.batch_get(keys))}
        return [found[memory_id] for memory_id in memory_ids if memory_id in found]

    def _find_locked(self, namespace: str, lock_sk: str) -> Memory | None:
        lock = self._db.get(self._pk(namespace), lock_sk)
        if lock is None:
            return None
        return self._read_memory(namespace, lock["memory_id"])

    def find_active_by_fact_key(self, namespace: str, fact_key: str) -> Memory | None:
        memory = self._find_locked(namespace, f"MEMKEY#{fact_key}")
        return memory if memory is not None and memory.status == "active" and memory.fact_key == fact_key else None

    def find_by_external_id(self, namespace: str, external_id: str) -> Memory | None:
        memory = self._find_locked(namespace, f"MEMEXT#{external_id}")
        return memory if memory is not None and memory.external_id == external_id else None

    def _newest_first(
        self, namespace: str, prefix: str, statuses: Sequence[str], before: str | None, page_size: int
    ) -> Iterator[dict[str, Any]]:
        """GSI1 items of several status partitions merged newest first, strictly before ``before``."""
        pk = self._pk(namespace)
        streams = [
            self._db.query(
                pk=f"{pk}#{prefix}#{status}", index="GSI1", sk_before=before, forward=False, page_size=page_size
            )
            for status in dict.fromkeys(statuses)
        ]
        return heapq.merge(*streams, key=lambda item: item["GSI1SK"], reverse=True)

    def list_memories(
        self, namespace: str, filters: MemoryFilter, *, limit: int = 50, cursor: str | None = None
    ) -> Page[Memory]:
        check_limit(limit)
        page_size = min(max(limit + 1, 25), 500)
        items = self._newest_first(namespace, "MEM", filters.listed_statuses, cursor_sort_key(cursor), page_size)
        return self._page(
            items, lambda item: to_model(Memory, item), limit, _created, lambda m: memory_matches(m, filters)
        )

    def iter_memories(self, namespace: str, statuses: Sequence[str] = ()) -> Iterable[Memory]:
        pk = self._pk(namespace)
        streams = [
            self._db.query(pk=f"{pk}#MEM#{status}", index="GSI1", forward=True)
            for status in dict.fromkeys(statuses or MEMORY_STATUSES)
        ]
        for item in heapq.merge(*streams, key=lambda item: item["GSI1SK"]):
            yield to_model(Memory, item)

    def supersede(self, old: Memory, new: Memory) -> tuple[Memory, Memory]:
        stored, new = self.supersede_many([old], new)
        return stored[0], new

    def supersede_many(self, olds: Sequence[Memory], new: Memory) -> tuple[list[Memory], Memory]:
        check_supersede(olds, new)
        current: list[Memory | None] = []
        for old in olds:
            row = self._read_memory(old.namespace, old.id)
            if row is None:
                raise NotFound(f"memory {old.id} not found")
            if row.version != old.version:
                raise version_conflict(old.id, old.version, row.version)
            current.append(row)
        self._register(new.namespace)
        operations = [
            *(self._replace_operation(old) for old in olds),
            self._put_memory_operation(new, exists=False),
            *self._lock_operations(new.namespace, current, [*olds, new]),
        ]
        if len(operations) > MAX_TRANSACTION_ITEMS:
            raise InvalidInput(f"too many memories to supersede in one transaction ({len(olds)})")
        try:
            self._db.transact(operations)
        except Cancelled as exc:
            raise self._why_not_replaced(olds, f"cannot supersede with {new.id}: id or key taken") from exc
        return [replaced(old) for old in olds], new

    def delete_memory_row(self, namespace: str, memory_id: str, *, version: int | None = None) -> bool:
        pk = self._pk(namespace)
        for _ in range(_RETRIES):
            current = self._read_memory(namespace, memory_id)
            if current is None:
                return False
            if version is not None and current.version != version:
                raise version_conflict(memory_id, version, current.version)
            # The row and its locks go together, and only the row as read (its locks are the ones freed).
            row = {
                "Delete": {
                    "TableName": self._db.name,
                    "Key": self._db.key(pk, f"MEM#{memory_id}"),
                    "ConditionExpression": self._at_version(current),
                    "ExpressionAttributeNames": {"#ver": "version"},
                    "ExpressionAttributeValues": {":ver": {"N": str(current.version)}},
                }
            }
            locks = [
                {
                    "Delete": {
                        "TableName": self._db.name,
                        "Key": self._db.key(pk, sk),
                        "ConditionExpression": "attribute_not_exists(PK) OR memory_id = :owner",
                        "ExpressionAttributeValues": {":owner": {"S": owner}},
                    }
                }
                for sk, owner in self._locks(current).items()
            ]
            try:
                self._db.transact([row, *locks])
                return True
            except Cancelled:
                if version is not None:
                    raise self._why_not_replaced([current], f"memory {memory_id}: a lock it held moved") from None
        raise Conflict(f"memory {memory_id} kept changing while it was deleted", code=VERSION_CONFLICT)

    def count_memories(self, namespace: str) -> dict[str, dict[str, int]]:
        counts = empty_memory_counts()
        pk = self._pk(namespace)
        for status in MEMORY_STATUSES:
            partition = f"{pk}#MEM#{status}"
            if status != "active":
                counts["status"][status] = self._db.count(pk=partition, index="GSI1")
                continue
            for item in self._db.query(pk=partition, index="GSI1", projection=("type", "layer")):
                counts["status"]["active"] += 1
                counts["type"][item["type"]] = counts["type"].get(item["type"], 0) + 1
                counts["layer"][item["layer"]] = counts["layer"].get(item["layer"], 0) + 1
        return counts

    def memories_changed_before(
        self, namespace: str, statuses: Sequence[str], before: datetime, *, limit: int = 500
    ) -> list[Memory]:
        check_limit(limit)
        pk = self._pk(namespace)
        rows: list[Memory] = []
        for status in dict.fromkeys(statuses):
            if status == "active":  # GSI2 orders active rows by sighting, not by status change
                rows += [
                    m
                    for m in self.iter_memories(namespace, ["active"])
                    if (m.status_changed_at or m.updated_at) < before
                ]
                continue
            items = self._db.query(pk=f"{pk}#MEM#{status}", index="GSI2", sk_before=to_iso(before), page_size=limit)
            for n, item in enumerate(items):
                if n >= limit:
                    break
                rows.append(to_model(Memory, item))
        rows.sort(key=lambda m: (m.status_changed_at or m.updated_at, m.id))
        return rows[:limit]

    def memories_unseen_since(
        self, namespace: str, before: datetime, *, limit: int = 500, after: tuple[datetime, str] | None = None
    ) -> list[Memory]:
        check_limit(limit)
        pk = f"{self._pk(namespace)}#MEM#active"
        if after is None:
            items = self._db.query(pk=pk, index="GSI2", sk_before=to_iso(before), page_size=limit)
        else:
            # BETWEEN is inclusive: the previous page's last row comes back first and is dropped below;
            # ``<time>#<id>`` keys of rows seen at ``before`` sort after ``before`` itself, as with sk_before.
            lo = sort_key(*after)
            items = (
                item
                for item in self._db.query(pk=pk, index="GSI2", sk_between=(lo, to_iso(before)), page_size=limit + 1)
                if item["GSI2SK"] != lo
            )
        rows: list[Memory] = []
        for item in items:
            rows.append(to_model(Memory, item))
            if len(rows) >= limit:
                break
        return rows

    # -- review candidates ----------------------------------------------------------------
    def _candidate_item(self, candidate: Candidate) -> dict[str, Any]:
        pk = self._pk(candidate.namespace)
        return {
            "PK": pk,
            "SK": f"CAND#{candidate.id}",
            "entity": "candidate",
            "GSI1PK": f"{pk}#CAND#{candidate.status}",
            "GSI1SK": sort_key(candidate.created_at, candidate.id),
            **fields(candidate),
        }

    def insert_candidate(self, candidate: Candidate) -> Candidate:
        self._register(candidate.namespace)
        if not self._db.put(self._candidate_item(candidate), "attribute_not_exists(PK)"):
            raise Conflict(f"candidate {candidate.id} already exists")
        return candidate

    def update_candidate(self, candidate: Candidate) -> Candidate:
        if not self._db.put(self._candidate_item(candidate), "attribute_exists(PK)"):
            raise NotFound(f"candidate {candidate.id} not found")
        return candidate

    def get_candidate(self, namespace: str, candidate_id: str) -> Candidate:
        item = self._db.get(self._pk(namespace), f"CAND#{candidate_id}")
        if item is None:
            raise NotFound(f"candidate {candidate_id} not found")
        return to_model(Candidate, item)

    def list_candidates(
        self, namespace: str, status: str | None = "pending", *, limit: int = 50, cursor: str | None = None
    ) -> Page[Candidate]:
        check_limit(limit)
        statuses = CANDIDATE_STATUSES if status is None else (status,)
        items = self._newest_first(namespace, "CAND", statuses, cursor_sort_key(cursor), min(limit + 1, 500))
        return self._page(items, lambda item: to_model(Candidate, item), limit, _created)
