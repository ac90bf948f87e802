"""``MemoryStore`` on one DynamoDB table (the AWS deployment's source of truth).

Item layout (``ns`` = namespace; timestamps are fixed-width ISO-8601 UTC, so text order is time order):

=========================  ==============================  ===========================================
item                       PK / SK                         GSI1 (listing) / GSI2 (sweeps)
=========================  ==============================  ===========================================
memory                     ``NS#ns`` / ``MEM#<id>``        ``NS#ns#MEM#<status>`` / ``<created>#<id>``;
                                                           GSI2 same PK / ``<sweep time>#<id>``
active fact_key lock       ``NS#ns`` / ``MEMKEY#<key>``    (``memory_id`` of the one active memory)
memory external_id lock    ``NS#ns`` / ``MEMEXT#<ext>``    (``memory_id``)
candidate                  ``NS#ns`` / ``CAND#<id>``       ``NS#ns#CAND#<status>`` / ``<created>#<id>``
message                    ``NS#ns`` / ``MSG#<created>#<id>``  ``NS#ns#THR#<conversation>`` / ``<created>#<id>``
                                                           (base table order = list order; GSI1 = thread);
                                                           GSI2 ``NS#ns#MSGIN`` / ``<stored>#<id>``
thread                     ``NS#ns`` / ``THREAD#<id>``     ``NS#ns#THREADS#<live|deleted>`` /
                                                           ``<last message or created>#<id>``
message id pointer         ``NS#ns`` / ``MSGID#<id>``      (``msg_sk``; makes ids unique)
message external_id lock   ``NS#ns`` / ``MSGEXT#<ext>``    (``msg_sk``; idempotent ingest)
reminder                   ``NS#ns`` / ``REMIND#<memory>``  ``NS#ns#REMIND#<status>`` / ``<remind_at>#<memory>``
precious / glossary        ``NS#ns`` / ``PREC#<id>``, ``GLOSS#<id>``
digest / daily log         ``NS#ns`` / ``DIGEST``, ``DAY#<yyyy-mm-dd>``
event                      ``NS#ns`` / ``EVT#<id>``        ``NS#ns#EVT`` / ``<created>#<id>``;
                                                           GSI2 ``NS#ns#EVTMEM#<memory>`` / same
usage                      ``NS#ns`` / ``USAGE#<id>``      ``NS#ns#USAGE`` / ``<created>#<id>``
idempotency key, cursor    ``NS#ns`` / ``IDEM#<key>``, ``CURSOR#<name>``
cache entry                ``NS#ns`` / ``CACHE#<key>``     (value kept as JSON text in ``value_json``)
namespace registry         ``NAMESPACES`` / ``<ns>``
rate-limit counter         ``RATE#<key>`` / ``W#<window start>``  (written by ``adapters/ratelimit/dynamodb.py``)
=========================  ==============================  ===========================================

Every access is a GetItem, a Query or a transaction; nothing scans. Rows keep their fields as plain
attributes (plus ``kind``) so they read well in the console. Messages, usage, events, idempotency
keys and expiring cache entries carry a ``ttl`` (epoch seconds) as a backstop to the cleanup job.
Memory sweep time (GSI2) is the last sighting for active rows and the status change for the others.

Consistency: GetItem, base-table queries (messages, precious, glossary, daily logs, idempotency) and
the uniqueness locks are strongly consistent; listings served from a GSI (memories, candidates,
events, usage) are eventually consistent, usually within a second.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import heapq
import itertools
import json
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any, TypeVar

from pydantic import BaseModel

from engram.domain.errors import (
    Conflict,
    InvalidInput,
    NotFound,
    UpstreamRateLimited,
    UpstreamRejected,
    UpstreamUnavailable,
)
from engram.domain.models import (
    MEMORY_STATUSES,
    MEMORY_TYPES,
    Candidate,
    DailyLog,
    Digest,
    GlossaryTerm,
    IdempotencyRecord,
    Memory,
    MemoryEvent,
    MemoryFilter,
    MemoryLayer,
    Message,
    Page,
    Precious,
    Reminder,
    Thread,
    UsageRecord,
    utcnow,
)

try:  # boto3 is in the `aws` extra and the Lambda layer; the module must import without it.
    from boto3.dynamodb.types import TypeDeserializer, TypeSerializer
    from botocore.exceptions import BotoCoreError, ClientError
except ImportError:  # pragma: no cover - exercised only without the aws extra
    TypeDeserializer = TypeSerializer = None  # type: ignore[assignment,misc]
    BotoCoreError = ClientError = Exception  # type: ignore[assignment,misc]

M = TypeVar("M", bound=BaseModel)

CANDIDATE_STATUSES: tuple[str, ...] = ("pending", "approved", "discarded", "merged")
MEMORY_LAYERS: tuple[str, ...] = MemoryLayer.__args__  # type: ignore[attr-defined]
NAMESPACES_PK = "NAMESPACES"
_MAX_TRANSACTION_RETRIES = 5
_RATE_LIMIT_CODES = {
    "ProvisionedThroughputExceededException",
    "ThrottlingException",
    "RequestLimitExceeded",
    "TooManyRequestsException",
}
_ACCESS_CODES = {"AccessDeniedException", "UnrecognizedClientException", "InvalidSignatureException"}

# The table the adapter expects (infra/storage.py creates the same; tests/infra checks they agree).
TABLE_KEYS = {"PK": "HASH", "SK": "RANGE"}
TABLE_INDEXES = {"GSI1": ("GSI1PK", "GSI1SK"), "GSI2": ("GSI2PK", "GSI2SK")}


def create_table(client: Any, table_name: str) -> None:
    """Create the table with the layout above (tests and local experiments; AWS uses the CDK stack)."""
    attributes = ["PK", "SK"] + [name for keys in TABLE_INDEXES.values() for name in keys]
    client.create_table(
        TableName=table_name,
        BillingMode="PAY_PER_REQUEST",
        AttributeDefinitions=[{"AttributeName": a, "AttributeType": "S"} for a in attributes],
        KeySchema=[{"AttributeName": k, "KeyType": t} for k, t in TABLE_KEYS.items()],
        GlobalSecondaryIndexes=[
            {
                "IndexName": index,
                "KeySchema": [{"AttributeName": pk, "KeyType": "HASH"}, {"AttributeName": sk, "KeyType": "RANGE"}],
                "Projection": {"ProjectionType": "ALL"},
            }
            for index, (pk, sk) in TABLE_INDEXES.items()
        ],
    )
    client.get_waiter("table_exists").wait(TableName=table_name)
    client.update_time_to_live(TableName=table_name, TimeToLiveSpecification={"Enabled": True, "AttributeName": "ttl"})


# -- value conversion ---------------------------------------------------------------------------


def _iso(value: datetime) -> str:
    """Fixed-width ISO-8601 UTC (microseconds): text order equals time order. Naive means UTC."""
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    return value.astimezone(UTC).isoformat(timespec="microseconds")


def _epoch(value: datetime) -> int:
    return int(value.timestamp())


def _to_dynamo(value: Any) -> Any:
    if isinstance(value, datetime):
        return _iso(value)
    if isinstance(value, bool) or value is None or isinstance(value, str | int):
        return value
    if isinstance(value, float):
        return Decimal(repr(value))
    if isinstance(value, dict):
        return {str(k): _to_dynamo(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_to_dynamo(v) for v in value]
    return value


def _from_dynamo(value: Any) -> Any:
    if isinstance(value, Decimal):
        return int(value) if value == value.to_integral_value() else float(value)
    if isinstance(value, dict):
        return {k: _from_dynamo(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_from_dynamo(v) for v in value]
    return value


def _fields(model: BaseModel) -> dict[str, Any]:
    """The model's fields as DynamoDB-ready values; ``None`` fields are left out."""
    data = {name: getattr(model, name) for name in type(model).model_fields}
    return {k: _to_dynamo(v) for k, v in data.items() if v is not None}


def _model(cls: type[M], item: dict[str, Any]) -> M:
    return cls.model_validate({k: _from_dynamo(v) for k, v in item.items() if k in cls.model_fields})


# -- cursors ------------------------------------------------------------------------------------


def _encode_cursor(sort_key: str) -> str:
    return base64.urlsafe_b64encode(json.dumps(["d1", sort_key]).encode()).decode().rstrip("=")


def _decode_cursor(cursor: str) -> str:
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        version, sort_key = json.loads(raw)
    except (binascii.Error, UnicodeDecodeError, ValueError, TypeError) as exc:
        raise InvalidInput("invalid cursor") from exc
    if version != "d1" or not isinstance(sort_key, str) or not sort_key:
        raise InvalidInput("invalid cursor")
    return sort_key


def _check_limit(limit: int) -> None:
    if limit < 1:
        raise InvalidInput(f"limit must be at least 1, got {limit}")


def _memory_matches(memory: Memory, filters: MemoryFilter) -> bool:
    return (
        (not filters.types or memory.type in filters.types)
        and (filters.layer is None or memory.layer == filters.layer)
        and (filters.tag is None or filters.tag in memory.tags)
        and (filters.pinned is None or memory.pinned == filters.pinned)
        and (filters.fact_key is None or memory.fact_key == filters.fact_key)
    )


def _sweep_at(memory: Memory) -> datetime:
    if memory.status == "active":
        return memory.last_seen_at or memory.created_at
    return memory.status_changed_at or memory.updated_at


class _Cancelled(Exception):
    """A transaction was cancelled; ``reasons`` holds one code per operation ("None" if it was fine)."""

    def __init__(self, reasons: list[str]) -> None:
        super().__init__(", ".join(reasons))
        self.reasons = reasons


class DynamoMemoryStore:
    """The ``MemoryStore`` port on DynamoDB. ``client`` is a boto3 DynamoDB client (built if omitted)."""

    def __init__(
        self,
        table_name: str,
        client: Any | None = None,
        *,
        region_name: str | None = None,
        message_ttl_days: int = 14,
        log_ttl_days: int = 30,
        idempotency_ttl_days: int = 7,
    ) -> None:
        if not table_name:
            raise InvalidInput("DynamoMemoryStore needs a table name (ENGRAM_TABLE_NAME)")
        if client is None:
            import boto3

            client = boto3.client("dynamodb", region_name=region_name or None)
        self._client = client
        self._table = table_name
        self._serializer = TypeSerializer()
        self._deserializer = TypeDeserializer()
        self._message_ttl = timedelta(days=message_ttl_days)
        self._log_ttl = timedelta(days=log_ttl_days)
        self._idempotency_ttl = timedelta(days=idempotency_ttl_days)
        self._known_namespaces: set[str] = set()

    # -- low level ----------------------------------------------------------------------------
    def _call(self, operation: str, **kwargs: Any) -> dict[str, Any]:
        """Call the client, translating SDK errors into Engram's (transaction cancels stay special)."""
        try:
            return getattr(self._client, operation)(**kwargs)  # type: ignore[no-any-return]
        except ClientError as exc:
            error = exc.response.get("Error", {})
            code = error.get("Code", "")
            message = error.get("Message", "")
            if code == "TransactionCanceledException":
                reasons = [r.get("Code", "None") for r in exc.response.get("CancellationReasons", [])]
                if not reasons and "[" in message:  # some emulators only put them in the message
                    reasons = [r.strip() for r in message[message.rindex("[") + 1 : message.rindex("]")].split(",")]
                raise _Cancelled(reasons) from exc
            if code == "ConditionalCheckFailedException":
                raise
            if code in _RATE_LIMIT_CODES:
                raise UpstreamRateLimited(f"DynamoDB throttled {operation}") from exc
            if code in _ACCESS_CODES:
                raise UpstreamRejected(f"DynamoDB refused {operation}: {code}", status=502) from exc
            if code == "ResourceNotFoundException":
                raise UpstreamUnavailable(f"DynamoDB table {self._table!r} not found") from exc
            if code == "ValidationException":
                raise InvalidInput(f"DynamoDB rejected {operation}: {message}") from exc
            raise UpstreamUnavailable(f"DynamoDB {operation} failed: {code}") from exc
        except BotoCoreError as exc:
            raise UpstreamUnavailable(f"DynamoDB {operation} failed: {type(exc).__name__}") from exc

    def _ser(self, item: dict[str, Any]) -> dict[str, Any]:
        return {k: self._serializer.serialize(v) for k, v in item.items() if v is not None}

    def _des(self, item: dict[str, Any]) -> dict[str, Any]:
        return {k: self._deserializer.deserialize(v) for k, v in item.items()}

    @staticmethod
    def _pk(namespace: str) -> str:
        return f"NS#{namespace}"

    def _key(self, pk: str, sk: str) -> dict[str, Any]:
        return {"PK": {"S": pk}, "SK": {"S": sk}}

    def _get(self, pk: str, sk: str) -> dict[str, Any] | None:
        response = self._call("get_item", TableName=self._table, Key=self._key(pk, sk), ConsistentRead=True)
        item = response.get("Item")
        return self._des(item) if item else None

    def _put(self, item: dict[str, Any], condition: str | None = None, **extra: Any) -> bool:
        """Put ``item``; with a condition, ``False`` if it failed (nothing written)."""
        kwargs: dict[str, Any] = {"TableName": self._table, "Item": self._ser(item)}
        if condition:
            kwargs["ConditionExpression"] = condition
        kwargs.update(extra)
        try:
            self._call("put_item", **kwargs)
        except ClientError as exc:  # only ConditionalCheckFailed gets here
            del exc
            return False
        return True

    def _delete(self, pk: str, sk: str, condition: str | None = None, **extra: Any) -> bool:
        kwargs: dict[str, Any] = {"TableName": self._table, "Key": self._key(pk, sk)}
        if condition:
            kwargs["ConditionExpression"] = condition
        kwargs.update(extra)
        try:
            self._call("delete_item", **kwargs)
        except ClientError:
            return False
        return True

    def _query(
        self,
        *,
        pk: str,
        index: str | None = None,
        sk_between: tuple[str, str] | None = None,
        sk_before: str | None = None,
        sk_prefix: str | None = None,
        forward: bool = True,
        page_size: int | None = None,
        projection: Sequence[str] = (),
    ) -> Iterator[dict[str, Any]]:
        """Items of one partition in sort-key order, fetched page by page as the caller iterates."""
        pk_name, sk_name = ("PK", "SK") if index is None else TABLE_INDEXES[index]
        expression_names = {"#pk": pk_name}
        values: dict[str, Any] = {":pk": {"S": pk}}
        condition = "#pk = :pk"
        if sk_between is not None or sk_before is not None or sk_prefix is not None:
            expression_names["#sk"] = sk_name
        if sk_between is not None:
            condition += " AND #sk BETWEEN :lo AND :hi"
            values[":lo"], values[":hi"] = {"S": sk_between[0]}, {"S": sk_between[1]}
        elif sk_before is not None:
            condition += " AND #sk < :before"
            values[":before"] = {"S": sk_before}
        elif sk_prefix is not None:
            condition += " AND begins_with(#sk, :prefix)"
            values[":prefix"] = {"S": sk_prefix}
        kwargs: dict[str, Any] = {
            "TableName": self._table,
            "KeyConditionExpression": condition,
            "ExpressionAttributeNames": expression_names,
            "ExpressionAttributeValues": values,
            "ScanIndexForward": forward,
        }
        if index is None:
            kwargs["ConsistentRead"] = True
        else:
            kwargs["IndexName"] = index
        if page_size:
            kwargs["Limit"] = page_size
        if projection:
            placeholders = {f"#p{n}": name for n, name in enumerate(projection)}
            expression_names.update(placeholders)
            kwargs["ProjectionExpression"] = ", ".join(placeholders)
        while True:
            response = self._call("query", **kwargs)
            for item in response.get("Items", []):
                yield self._des(item)
            last = response.get("LastEvaluatedKey")
            if not last:
                return
            kwargs["ExclusiveStartKey"] = last

    def _count(self, **query: Any) -> int:
        return sum(1 for _ in self._query(**query, projection=("PK", "SK")))

    def _transact(self, operations: list[dict[str, Any]]) -> None:
        """TransactWriteItems with retries on transaction conflicts; ``_Cancelled`` on a failed condition."""
        for attempt in range(_MAX_TRANSACTION_RETRIES):
            try:
                self._call("transact_write_items", TransactItems=operations)
                return
            except _Cancelled as exc:
                if "ConditionalCheckFailed" in exc.reasons or attempt == _MAX_TRANSACTION_RETRIES - 1:
                    raise
                time.sleep(0.02 * 2**attempt)

    def _batch_delete(self, keys: Iterable[tuple[str, str]]) -> None:
        pending = [{"DeleteRequest": {"Key": self._key(pk, sk)}} for pk, sk in keys]
        while pending:
            chunk, pending = pending[:25], pending[25:]
            requests: dict[str, Any] = {self._table: chunk}
            for attempt in range(8):
                response = self._call("batch_write_item", RequestItems=requests)
                requests = response.get("UnprocessedItems") or {}
                if not requests:
                    break
                time.sleep(0.05 * 2**attempt)
            if requests:
                raise UpstreamRateLimited("DynamoDB left deletes unprocessed")

    def _register(self, namespace: str) -> None:
        """Remember that ``namespace`` has rows (once per process per namespace)."""
        if namespace in self._known_namespaces:
            return
        self._put({"PK": NAMESPACES_PK, "SK": namespace, "entity": "namespace", "namespace": namespace})
        self._known_namespaces.add(namespace)

    # -- memories -------------------------------------------------------------------------
    def _memory_item(self, memory: Memory) -> dict[str, Any]:
        pk = self._pk(memory.namespace)
        partition = f"{pk}#MEM#{memory.status}"
        return {
            "PK": pk,
            "SK": f"MEM#{memory.id}",
            "entity": "memory",
            "GSI1PK": partition,
            "GSI1SK": f"{_iso(memory.created_at)}#{memory.id}",
            "GSI2PK": partition,
            "GSI2SK": f"{_iso(_sweep_at(memory))}#{memory.id}",
            **_fields(memory),
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
            key = self._key(pk, sk)
            if new_owner is None:
                operations.append(
                    {
                        "Delete": {
                            "TableName": self._table,
                            "Key": key,
                            "ConditionExpression": "attribute_not_exists(PK) OR memory_id = :owner",
                            "ExpressionAttributeValues": {":owner": {"S": old_owner}},
                        }
                    }
                )
                continue
            item = self._ser({"PK": pk, "SK": sk, "entity": "memory_lock", "memory_id": new_owner})
            condition = "attribute_not_exists(PK)"
            values: dict[str, Any] = {}
            if old_owner is not None:
                condition += " OR memory_id = :owner"
                values[":owner"] = {"S": old_owner}
            put: dict[str, Any] = {"TableName": self._table, "Item": item, "ConditionExpression": condition}
            if values:
                put["ExpressionAttributeValues"] = values
            operations.append({"Put": put})
        return operations

    def _put_memory_operation(self, memory: Memory, *, exists: bool) -> dict[str, Any]:
        return {
            "Put": {
                "TableName": self._table,
                "Item": self._ser(self._memory_item(memory)),
                "ConditionExpression": "attribute_exists(PK)" if exists else "attribute_not_exists(PK)",
            }
        }

    def _write_memories(self, operations: list[dict[str, Any]], conflict: str) -> None:
        try:
            self._transact(operations)
        except _Cancelled as exc:
            raise Conflict(conflict) from exc

    def _read_memory(self, namespace: str, memory_id: str) -> Memory | None:
        item = self._get(self._pk(namespace), f"MEM#{memory_id}")
        return _model(Memory, item) if item else None

    def insert_memory(self, memory: Memory) -> Memory:
        self._register(memory.namespace)
        operations = [
            self._put_memory_operation(memory, exists=False),
            *self._lock_operations(memory.namespace, [], [memory]),
        ]
        self._write_memories(operations, f"memory {memory.id} already exists, or its fact_key/external_id is taken")
        return memory

    def update_memory(self, memory: Memory) -> Memory:
        current = self._read_memory(memory.namespace, memory.id)
        if current is None:
            raise NotFound(f"memory {memory.id} not found")
        operations = [
            self._put_memory_operation(memory, exists=True),
            *self._lock_operations(memory.namespace, [current], [memory]),
        ]
        self._write_memories(operations, f"memory {memory.id}: its fact_key or external_id is taken")
        return memory

    def get_memory(self, namespace: str, memory_id: str) -> Memory:
        memory = self._read_memory(namespace, memory_id)
        if memory is None:
            raise NotFound(f"memory {memory_id} not found")
        return memory

    def get_memories(self, namespace: str, memory_ids: Sequence[str]) -> list[Memory]:
        pk = self._pk(namespace)
        items = self._batch_get([(pk, f"MEM#{memory_id}") for memory_id in dict.fromkeys(memory_ids)])
        found = {memory.id: memory for memory in (_model(Memory, item) for item in items)}
        return [found[memory_id] for memory_id in memory_ids if memory_id in found]

    def _batch_get(self, keys: Sequence[tuple[str, str]]) -> list[dict[str, Any]]:
        """The items of these (PK, SK) keys that exist (strongly consistent), in no particular order."""
        out: list[dict[str, Any]] = []
        for start in range(0, len(keys), 100):
            chunk = [self._key(pk, sk) for pk, sk in keys[start : start + 100]]
            request: dict[str, Any] = {self._table: {"Keys": chunk, "ConsistentRead": True}}
            for attempt in range(8):
                response = self._call("batch_get_item", RequestItems=request)
                out += [self._des(item) for item in response.get("Responses", {}).get(self._table, [])]
                request = response.get("UnprocessedKeys") or {}
                if not request:
                    break
                time.sleep(0.05 * 2**attempt)
        return out

    def _find_locked(self, namespace: str, lock_sk: str) -> Memory | None:
        lock = self._get(self._pk(namespace), lock_sk)
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
            self._query(
                pk=f"{pk}#{prefix}#{status}", index="GSI1", sk_before=before, forward=False, page_size=page_size
            )
            for status in dict.fromkeys(statuses)
        ]
        return heapq.merge(*streams, key=lambda item: item["GSI1SK"], reverse=True)

    def _page(self, items: Iterator[dict[str, Any]], cls: type[M], limit: int, keep: Callable[[M], bool]) -> Page[M]:
        rows: list[tuple[str, M]] = []
        for item in items:
            row = _model(cls, item)
            if keep(row):
                rows.append((item["GSI1SK"], row))
                if len(rows) > limit:
                    break
        if len(rows) <= limit:
            return Page(items=[row for _, row in rows])
        return Page(items=[row for _, row in rows[:limit]], next_cursor=_encode_cursor(rows[limit - 1][0]))

    def list_memories(
        self, namespace: str, filters: MemoryFilter, *, limit: int = 50, cursor: str | None = None
    ) -> Page[Memory]:
        _check_limit(limit)
        before = _decode_cursor(cursor) if cursor is not None else None
        statuses = filters.listed_statuses
        page_size = min(max(limit + 1, 25), 500)
        items = self._newest_first(namespace, "MEM", statuses, before, page_size)
        return self._page(items, Memory, limit, lambda m: _memory_matches(m, filters))

    def iter_memories(self, namespace: str, statuses: Sequence[str] = ()) -> Iterable[Memory]:
        pk = self._pk(namespace)
        streams = [
            self._query(pk=f"{pk}#MEM#{status}", index="GSI1", forward=True)
            for status in dict.fromkeys(statuses or MEMORY_STATUSES)
        ]
        for item in heapq.merge(*streams, key=lambda item: item["GSI1SK"]):
            yield _model(Memory, item)

    def supersede(self, old: Memory, new: Memory) -> tuple[Memory, Memory]:
        if old.namespace != new.namespace:
            raise InvalidInput("supersede needs both memories in the same namespace")
        current = self._read_memory(old.namespace, old.id)
        if current is None:
            raise NotFound(f"memory {old.id} not found")
        self._register(new.namespace)
        operations = [
            self._put_memory_operation(old, exists=True),
            self._put_memory_operation(new, exists=False),
            *self._lock_operations(old.namespace, [current], [old, new]),
        ]
        self._write_memories(operations, f"cannot supersede {old.id} with {new.id}: id or key taken")
        return old, new

    def delete_memory_row(self, namespace: str, memory_id: str) -> None:
        current = self._read_memory(namespace, memory_id)
        if current is None:
            return
        pk = self._pk(namespace)
        self._delete(pk, f"MEM#{memory_id}")
        for sk, owner in self._locks(current).items():
            self._delete(pk, sk, "memory_id = :owner", ExpressionAttributeValues={":owner": {"S": owner}})

    def count_memories(self, namespace: str) -> dict[str, dict[str, int]]:
        counts: dict[str, dict[str, int]] = {
            "status": dict.fromkeys(MEMORY_STATUSES, 0),
            "type": dict.fromkeys(MEMORY_TYPES, 0),
            "layer": dict.fromkeys(MEMORY_LAYERS, 0),
        }
        pk = self._pk(namespace)
        for status in MEMORY_STATUSES:
            partition = f"{pk}#MEM#{status}"
            if status != "active":
                counts["status"][status] = self._count(pk=partition, index="GSI1")
                continue
            for item in self._query(pk=partition, index="GSI1", projection=("type", "layer")):
                counts["status"]["active"] += 1
                counts["type"][item["type"]] = counts["type"].get(item["type"], 0) + 1
                counts["layer"][item["layer"]] = counts["layer"].get(item["layer"], 0) + 1
        return counts

    def memories_changed_before(
        self, namespace: str, statuses: Sequence[str], before: datetime, *, limit: int = 500
    ) -> list[Memory]:
        _check_limit(limit)
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
            items = self._query(pk=f"{pk}#MEM#{status}", index="GSI2", sk_before=_iso(before), page_size=limit)
            for n, item in enumerate(items):
                if n >= limit:
                    break
                rows.append(_model(Memory, item))
        rows.sort(key=lambda m: (m.status_changed_at or m.updated_at, m.id))
        return rows[:limit]

    def memories_unseen_since(self, namespace: str, before: datetime, *, limit: int = 500) -> list[Memory]:
        _check_limit(limit)
        items = self._query(
            pk=f"{self._pk(namespace)}#MEM#active", index="GSI2", sk_before=_iso(before), page_size=limit
        )
        rows: list[Memory] = []
        for item in items:
            rows.append(_model(Memory, item))
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
            "GSI1SK": f"{_iso(candidate.created_at)}#{candidate.id}",
            **_fields(candidate),
        }

    def insert_candidate(self, candidate: Candidate) -> Candidate:
        self._register(candidate.namespace)
        if not self._put(self._candidate_item(candidate), "attribute_not_exists(PK)"):
            raise Conflict(f"candidate {candidate.id} already exists")
        return candidate

    def update_candidate(self, candidate: Candidate) -> Candidate:
        if not self._put(self._candidate_item(candidate), "attribute_exists(PK)"):
            raise NotFound(f"candidate {candidate.id} not found")
        return candidate

    def get_candidate(self, namespace: str, candidate_id: str) -> Candidate:
        item = self._get(self._pk(namespace), f"CAND#{candidate_id}")
        if item is None:
            raise NotFound(f"candidate {candidate_id} not found")
        return _model(Candidate, item)

    def list_candidates(
        self, namespace: str, status: str | None = "pending", *, limit: int = 50, cursor: str | None = None
    ) -> Page[Candidate]:
        _check_limit(limit)
        before = _decode_cursor(cursor) if cursor is not None else None
        statuses = CANDIDATE_STATUSES if status is None else (status,)
        items = self._newest_first(namespace, "CAND", statuses, before, min(limit + 1, 500))
        return self._page(items, Candidate, limit, lambda _c: True)

    # -- messages -------------------------------------------------------------------------
    def _ttl(self, created_at: datetime, keep: timedelta) -> int:
        return _epoch(created_at + keep)

    def insert_message(self, message: Message) -> tuple[Message, bool]:
        message = message.model_copy(update={"stored_at": message.stored_at or message.created_at})
        self._register(message.namespace)
        pk = self._pk(message.namespace)
        msg_sk = f"MSG#{_iso(message.created_at)}#{message.id}"
        ttl = self._ttl(message.created_at, self._message_ttl)
        common = {"entity": "message_ref", "msg_sk": msg_sk, "message_id": message.id, "ttl": ttl}
        in_thread = {
            "GSI1PK": f"{pk}#THR#{message.conversation_id}",
            "GSI1SK": f"{_iso(message.created_at)}#{message.id}",
            "GSI2PK": f"{pk}#MSGIN",
            "GSI2SK": f"{_iso(message.stored_at)}#{message.id}",  # type: ignore[arg-type]
        }
        operations: list[dict[str, Any]] = [
            {
                "Put": {
                    "TableName": self._table,
                    "Item": self._ser(
                        {"PK": pk, "SK": msg_sk, "entity": "message", "ttl": ttl, **in_thread, **_fields(message)}
                    ),
                    "ConditionExpression": "attribute_not_exists(PK)",
                }
            },
            {
                "Put": {
                    "TableName": self._table,
                    "Item": self._ser({"PK": pk, "SK": f"MSGID#{message.id}", **common}),
                    "ConditionExpression": "attribute_not_exists(PK)",
                }
            },
        ]
        if message.external_id is not None:
            operations.append(
                {
                    "Put": {
                        "TableName": self._table,
                        "Item": self._ser({"PK": pk, "SK": f"MSGEXT#{message.external_id}", **common}),
                        "ConditionExpression": "attribute_not_exists(PK)",
                    }
                }
            )
        operations.append(self._count_in_thread(message))  # last: the reasons above keep their places
        try:
            self._transact(operations)
        except _Cancelled as exc:
            external_taken = len(exc.reasons) > 2 and exc.reasons[2] == "ConditionalCheckFailed"
            if message.external_id is not None and external_taken:
                stored = self._message_by_ref(message.namespace, f"MSGEXT#{message.external_id}")
                if stored is not None:
                    return stored, False
            raise Conflict(f"message {message.id} already exists") from exc
        return message, True

    def _count_in_thread(self, message: Message) -> dict[str, Any]:
        """The thread's row, created with its first message; counted, moved to this message's time and
        taken out of the recycle bin by every message."""
        pk = self._pk(message.namespace)
        at = _iso(message.created_at)
        return {
            "Update": {
                "TableName": self._table,
                "Key": self._key(pk, f"THREAD#{message.conversation_id}"),
                "UpdateExpression": "SET entity = :entity, #id = :id, #ns = :ns,"
                " created_at = if_not_exists(created_at, :at), last_message_at = :at, GSI1PK = :live,"
                " GSI1SK = :sort REMOVE deleted_at ADD message_count :one",
                "ExpressionAttributeNames": {"#id": "id", "#ns": "namespace"},
                "ExpressionAttributeValues": self._ser(
                    {
                        ":entity": "thread",
                        ":id": message.conversation_id,
                        ":ns": message.namespace,
                        ":at": at,
                        ":live": f"{pk}#THREADS#live",
                        ":sort": f"{at}#{message.conversation_id}",
                        ":one": 1,
                    }
                ),
            }
        }

    def _message_by_ref(self, namespace: str, ref_sk: str) -> Message | None:
        pk = self._pk(namespace)
        ref = self._get(pk, ref_sk)
        if ref is None:
            return None
        item = self._get(pk, ref["msg_sk"])
        return _model(Message, item) if item else None

    def list_messages(
        self,
        namespace: str,
        *,
        since: datetime | None = None,
        until: datetime | None = None,
        limit: int = 100,
        after_id: str | None = None,
    ) -> list[Message]:
        _check_limit(limit)
        pk = self._pk(namespace)
        low = f"MSG#{_iso(since)}" if since is not None else "MSG#"
        high = f"MSG#{_iso(until)}" if until is not None else "MSG$"
        after_sk: str | None = None
        if after_id is not None:
            ref = self._get(pk, f"MSGID#{after_id}")
            if ref is None:
                raise NotFound(f"message {after_id} not found")
            after_sk = ref["msg_sk"]
            low = max(low, after_sk)
        if low > high:
            return []
        rows: list[Message] = []
        for item in self._query(pk=pk, sk_between=(low, high), page_size=min(limit + 1, 1000)):
            if item["SK"] == after_sk:
                continue
            rows.append(_model(Message, item))
            if len(rows) >= limit:
                break
        return rows

    def list_messages_stored(
        self,
        namespace: str,
        *,
        after: tuple[datetime, str] | None = None,
        since: datetime | None = None,
        until: datetime | None = None,
        limit: int = 100,
    ) -> list[Message]:
        _check_limit(limit)
        low = _iso(since) if since is not None else "0"
        skip = None
        if after is not None:
            skip = f"{_iso(after[0])}#{after[1]}"
            low = max(low, skip)
        high = _iso(until) if until is not None else "\uffff"
        if low > high:
            return []
        rows: list[Message] = []
        items = self._query(
            pk=f"{self._pk(namespace)}#MSGIN", index="GSI2", sk_between=(low, high), page_size=min(limit + 1, 1000)
        )
        for item in items:
            if item["GSI2SK"] == skip:
                continue
            rows.append(_model(Message, item))
            if len(rows) >= limit:
                break
        return rows

    def count_messages(self, namespace: str, *, since: datetime | None = None) -> int:
        low = f"MSG#{_iso(since)}" if since is not None else "MSG#"
        return self._count(pk=self._pk(namespace), sk_between=(low, "MSG$"))

    def delete_messages_before(self, namespace: str, before: datetime) -> int:
        pk = self._pk(namespace)
        doomed: list[tuple[str, str]] = []
        count = 0
        items = self._query(
            pk=pk,
            sk_between=("MSG#", f"MSG#{_iso(before)}"),
            projection=("PK", "SK", "id", "external_id", "conversation_id"),
        )
        per_thread: dict[str, int] = {}
        for item in items:
            count += 1
            doomed += self._message_keys(pk, item)
            thread = str(item.get("conversation_id") or "default")
            per_thread[thread] = per_thread.get(thread, 0) + 1
        self._batch_delete(doomed)
        for thread, gone in per_thread.items():
            self._add_to_count(namespace, thread, -gone)
        return count

    @staticmethod
    def _message_keys(pk: str, item: dict[str, Any]) -> list[tuple[str, str]]:
        """A message's item and its id / external id pointers."""
        keys = [(pk, item["SK"]), (pk, f"MSGID#{item['id']}")]
        if item.get("external_id") is not None:
            keys.append((pk, f"MSGEXT#{item['external_id']}"))
        return keys

    def _add_to_count(self, namespace: str, thread_id: str, delta: int) -> None:
        # No row (a message stored before threads existed): nothing to count.
        with contextlib.suppress(ClientError):
            self._call(
                "update_item",
                TableName=self._table,
                Key=self._key(self._pk(namespace), f"THREAD#{thread_id}"),
                UpdateExpression="ADD message_count :delta",
                ConditionExpression="attribute_exists(PK)",
                ExpressionAttributeValues=self._ser({":delta": delta}),
            )

    # -- threads ----------------------------------------------------------------------------
    def _thread(self, item: dict[str, Any]) -> Thread:
        item = {**item, "message_count": max(0, int(item.get("message_count") or 0))}
        return _model(Thread, item)

    def get_thread(self, namespace: str, thread_id: str) -> Thread:
        item = self._get(self._pk(namespace), f"THREAD#{thread_id}")
        if item is None:
            raise NotFound(f"thread {thread_id} not found")
        return self._thread(item)

    def list_threads(
        self, namespace: str, *, deleted: bool = False, limit: int = 50, cursor: str | None = None
    ) -> Page[Thread]:
        _check_limit(limit)
        before = _decode_cursor(cursor) if cursor is not None else None
        partition = f"{self._pk(namespace)}#THREADS#{'deleted' if deleted else 'live'}"
        items = self._query(pk=partition, index="GSI1", sk_before=before, forward=False, page_size=min(limit + 1, 500))
        rows: list[tuple[str, Thread]] = []
        for item in items:
            rows.append((item["GSI1SK"], self._thread(item)))
            if len(rows) > limit:
                break
        if len(rows) <= limit:
            return Page(items=[row for _, row in rows])
        return Page(items=[row for _, row in rows[:limit]], next_cursor=_encode_cursor(rows[limit - 1][0]))

    def update_thread(
        self, namespace: str, thread_id: str, *, title: str | None, deleted_at: datetime | None
    ) -> Thread:
        pk = self._pk(namespace)
        values: dict[str, Any] = {":live": f"{pk}#THREADS#{'live' if deleted_at is None else 'deleted'}"}
        sets = ["GSI1PK = :live"]
        removes = []
        for name, value in (("title", title), ("deleted_at", _iso(deleted_at) if deleted_at else None)):
            if value is None:
                removes.append(name)
            else:
                sets.append(f"{name} = :{name}")
                values[f":{name}"] = value
        expression = "SET " + ", ".join(sets) + (" REMOVE " + ", ".join(removes) if removes else "")
        try:
            response = self._call(
                "update_item",
                TableName=self._table,
                Key=self._key(pk, f"THREAD#{thread_id}"),
                UpdateExpression=expression,
                ConditionExpression="attribute_exists(PK)",
                ExpressionAttributeValues=self._ser(values),
                ReturnValues="ALL_NEW",
            )
        except ClientError as exc:
            raise NotFound(f"thread {thread_id} not found") from exc
        return self._thread(self._des(response["Attributes"]))

    def _thread_items(self, namespace: str, thread_id: str, after: str | None = None) -> Iterator[dict[str, Any]]:
        partition = f"{self._pk(namespace)}#THR#{thread_id}"
        if after is None:
            return self._query(pk=partition, index="GSI1")
        return (
            i for i in self._query(pk=partition, index="GSI1", sk_between=(after, "\uffff")) if i["GSI1SK"] != after
        )

    def list_thread_messages(
        self, namespace: str, thread_id: str, *, limit: int = 100, cursor: str | None = None
    ) -> Page[Message]:
        _check_limit(limit)
        after = _decode_cursor(cursor) if cursor is not None else None
        rows: list[tuple[str, Message]] = []
        for item in self._thread_items(namespace, thread_id, after):
            rows.append((item["GSI1SK"], _model(Message, item)))
            if len(rows) > limit:
                break
        if len(rows) <= limit:
            return Page(items=[row for _, row in rows])
        return Page(items=[row for _, row in rows[:limit]], next_cursor=_encode_cursor(rows[limit - 1][0]))

    def get_messages(self, namespace: str, message_ids: Sequence[str]) -> list[Message]:
        pk = self._pk(namespace)
        refs = self._batch_get([(pk, f"MSGID#{message_id}") for message_id in dict.fromkeys(message_ids)])
        items = self._batch_get([(pk, str(ref["msg_sk"])) for ref in refs if ref.get("msg_sk")])
        found = {message.id: message for message in (_model(Message, item) for item in items)}
        return [found[message_id] for message_id in message_ids if message_id in found]

    def messages_around(self, namespace: str, message: Message, *, before: int, after: int) -> list[Message]:
        # The thread's index (GSI1), both ways from the message's own sort key.
        partition = f"{self._pk(namespace)}#THR#{message.conversation_id}"
        position = f"{_iso(message.created_at)}#{message.id}"
        earlier: list[Message] = []
        if before > 0:
            items = self._query(pk=partition, index="GSI1", sk_before=position, forward=False, page_size=before)
            earlier = [_model(Message, item) for item in itertools.islice(items, before)]
        later: list[Message] = []
        if after > 0:
            items = self._query(pk=partition, index="GSI1", sk_between=(position, "\uffff"), page_size=after + 1)
            later = [_model(Message, i) for i in itertools.islice(items, after + 1) if i["GSI1SK"] != position][:after]
        return [*reversed(earlier), message, *later]

    def move_thread(self, namespace: str, source: str, target: str) -> int:
        pk = self._pk(namespace)
        into = self.get_thread(namespace, target)
        gone = self._get(pk, f"THREAD#{source}")
        moved = 0
        for item in list(self._thread_items(namespace, source)):
            self._call(
                "update_item",
                TableName=self._table,
                Key=self._key(pk, item["SK"]),
                UpdateExpression="SET conversation_id = :to, GSI1PK = :thread",
                ExpressionAttributeValues=self._ser({":to": target, ":thread": f"{pk}#THR#{target}"}),
            )
            moved += 1
        if gone is not None:
            latest = max(
                filter(
                    None, (_iso(into.last_message_at) if into.last_message_at else None, gone.get("last_message_at"))
                ),
                default=None,
            )
            values: dict[str, Any] = {":n": int(gone.get("message_count") or 0)}
            expression = "ADD message_count :n"
            if latest is not None:
                expression = "SET last_message_at = :at, GSI1SK = :sort " + expression
                values[":at"], values[":sort"] = latest, f"{latest}#{target}"
            self._call(
                "update_item",
                TableName=self._table,
                Key=self._key(pk, f"THREAD#{target}"),
                UpdateExpression=expression,
                ExpressionAttributeValues=self._ser(values),
            )
            self._delete(pk, f"THREAD#{source}")
        return moved

    def purge_thread(self, namespace: str, thread_id: str) -> int:
        pk = self._pk(namespace)
        doomed: list[tuple[str, str]] = []
        for item in self._thread_items(namespace, thread_id):
            doomed += self._message_keys(pk, item)
        count = sum(1 for _, sk in doomed if sk.startswith("MSG#"))
        self._batch_delete(doomed)
        self._delete(pk, f"THREAD#{thread_id}")
        return count

    # -- reminders --------------------------------------------------------------------------
    def _reminder_item(self, reminder: Reminder) -> dict[str, Any]:
        pk = self._pk(reminder.namespace)
        return {
            "PK": pk,
            "SK": f"REMIND#{reminder.memory_id}",
            "entity": "reminder",
            "GSI1PK": f"{pk}#REMIND#{reminder.status}",
            "GSI1SK": f"{_iso(reminder.remind_at)}#{reminder.memory_id}",
            **_fields(reminder),
        }

    def put_reminder(self, reminder: Reminder) -> Reminder:
        self._register(reminder.namespace)
        self._put(self._reminder_item(reminder))
        return reminder

    def find_reminder(self, namespace: str, memory_id: str) -> Reminder | None:
        item = self._get(self._pk(namespace), f"REMIND#{memory_id}")
        return _model(Reminder, item) if item else None

    def list_reminders(
        self,
        namespace: str,
        status: str,
        *,
        due_after: datetime | None = None,
        due_before: datetime | None = None,
        limit: int = 100,
    ) -> list[Reminder]:
        _check_limit(limit)
        low = _iso(due_after) if due_after is not None else "0"
        high = f"{_iso(due_before)}#\uffff" if due_before is not None else "\uffff"
        items = self._query(
            pk=f"{self._pk(namespace)}#REMIND#{status}", index="GSI1", sk_between=(low, high), page_size=min(limit, 500)
        )
        rows: list[Reminder] = []
        for item in items:
            rows.append(_model(Reminder, item))
            if len(rows) >= limit:
                break
        return rows

    def _update_reminder(self, namespace: str, memory_id: str, **update: Any) -> bool:
        """One conditional UpdateItem on the reminder row; ``False`` if the condition failed."""
        try:
            self._call(
                "update_item",
                TableName=self._table,
                Key=self._key(self._pk(namespace), f"REMIND#{memory_id}"),
                **update,
            )
        except ClientError:  # only ConditionalCheckFailed gets here
            return False
        return True

    def claim_reminder(self, namespace: str, memory_id: str, owner: str, *, now: datetime, until: datetime) -> bool:
        # A conditional write is atomic on the item: of concurrent claims exactly one passes the check.
        return self._update_reminder(
            namespace,
            memory_id,
            UpdateExpression="SET lease_owner = :owner, lease_until = :until",
            ConditionExpression="#status = :pending AND (attribute_not_exists(lease_until) OR lease_until < :now)",
            ExpressionAttributeNames={"#status": "status"},
            ExpressionAttributeValues=self._ser(
                {":owner": owner, ":until": _iso(until), ":pending": "pending", ":now": _iso(now)}
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
                    ":at": _iso(delivered_at),
                    ":partition": f"{self._pk(namespace)}#REMIND#delivered",
                }
            )
        return self._update_reminder(
            namespace,
            memory_id,
            UpdateExpression=expression,
            ConditionExpression="lease_owner = :owner",
            ExpressionAttributeValues=self._ser(values),
            **({"ExpressionAttributeNames": {"#status": "status"}} if delivered_at is not None else {}),
        )

    # -- precious, glossary, digest, daily log ---------------------------------------------
    def insert_precious(self, precious: Precious) -> Precious:
        self._register(precious.namespace)
        item = {"PK": self._pk(precious.namespace), "SK": f"PREC#{precious.id}", "entity": "precious"}
        if not self._put({**item, **_fields(precious)}, "attribute_not_exists(PK)"):
            raise Conflict(f"precious {precious.id} already exists")
        return precious

    def list_precious(self, namespace: str, *, limit: int = 100) -> list[Precious]:
        _check_limit(limit)
        rows = [_model(Precious, item) for item in self._query(pk=self._pk(namespace), sk_prefix="PREC#")]
        rows.sort(key=lambda p: (p.created_at, p.id), reverse=True)
        return rows[:limit]

    def delete_precious(self, namespace: str, precious_id: str) -> None:
        if not self._delete(self._pk(namespace), f"PREC#{precious_id}", "attribute_exists(PK)"):
            raise NotFound(f"precious {precious_id} not found")

    def put_glossary_term(self, term: GlossaryTerm) -> GlossaryTerm:
        self._register(term.namespace)
        self._put({"PK": self._pk(term.namespace), "SK": f"GLOSS#{term.id}", "entity": "glossary", **_fields(term)})
        return term

    def get_glossary_term(self, namespace: str, term_id: str) -> GlossaryTerm:
        item = self._get(self._pk(namespace), f"GLOSS#{term_id}")
        if item is None:
            raise NotFound(f"glossary term {term_id} not found")
        return _model(GlossaryTerm, item)

    def list_glossary(self, namespace: str) -> list[GlossaryTerm]:
        terms = [_model(GlossaryTerm, item) for item in self._query(pk=self._pk(namespace), sk_prefix="GLOSS#")]
        return sorted(terms, key=lambda t: (t.term.casefold(), t.id))

    def delete_glossary_term(self, namespace: str, term_id: str) -> None:
        if not self._delete(self._pk(namespace), f"GLOSS#{term_id}", "attribute_exists(PK)"):
            raise NotFound(f"glossary term {term_id} not found")

    def get_digest(self, namespace: str) -> Digest | None:
        item = self._get(self._pk(namespace), "DIGEST")
        return _model(Digest, item) if item else None

    def put_digest(self, digest: Digest) -> Digest:
        self._register(digest.namespace)
        self._put({"PK": self._pk(digest.namespace), "SK": "DIGEST", "entity": "digest", **_fields(digest)})
        return digest

    def get_daily_log(self, namespace: str, date: str) -> DailyLog | None:
        item = self._get(self._pk(namespace), f"DAY#{date}")
        return _model(DailyLog, item) if item else None

    def put_daily_log(self, log: DailyLog) -> DailyLog:
        self._put({"PK": self._pk(log.namespace), "SK": f"DAY#{log.date}", "entity": "daily_log", **_fields(log)})
        return log

    def list_daily_logs(self, namespace: str, *, limit: int = 30) -> list[DailyLog]:
        _check_limit(limit)
        rows: list[DailyLog] = []
        for item in self._query(pk=self._pk(namespace), sk_prefix="DAY#", forward=False, page_size=limit):
            rows.append(_model(DailyLog, item))
            if len(rows) >= limit:
                break
        return rows

    # -- events, usage, idempotency, cursors, cache -----------------------------------------
    def append_event(self, event: MemoryEvent) -> None:
        pk = self._pk(event.namespace)
        order = f"{_iso(event.created_at)}#{event.id}"
        item = {
            "PK": pk,
            "SK": f"EVT#{event.id}",
            "entity": "event",
            "GSI1PK": f"{pk}#EVT",
            "GSI1SK": order,
            "ttl": self._ttl(event.created_at, self._log_ttl),
            **_fields(event),
        }
        if event.memory_id is not None:
            item |= {"GSI2PK": f"{pk}#EVTMEM#{event.memory_id}", "GSI2SK": order}
        if not self._put(item, "attribute_not_exists(PK)"):
            raise Conflict(f"event {event.id} already exists")

    def list_events(
        self, namespace: str, *, memory_id: str | None = None, kind: str | None = None, limit: int = 50
    ) -> list[MemoryEvent]:
        _check_limit(limit)
        pk = self._pk(namespace)
        if memory_id is not None:
            items = self._query(pk=f"{pk}#EVTMEM#{memory_id}", index="GSI2", forward=False, page_size=limit + 1)
        else:
            items = self._query(pk=f"{pk}#EVT", index="GSI1", forward=False, page_size=limit + 1)
        rows: list[MemoryEvent] = []
        for item in items:
            event = _model(MemoryEvent, item)
            if kind is None or event.kind == kind:
                rows.append(event)
                if len(rows) >= limit:
                    break
        return rows

    def _delete_logged_before(self, namespace: str, partition: str, prefix: str, before: datetime) -> int:
        pk = self._pk(namespace)
        items = self._query(pk=f"{pk}#{partition}", index="GSI1", sk_before=_iso(before), projection=("PK", "SK"))
        doomed = [(pk, item["SK"]) for item in items if item["SK"].startswith(prefix)]
        self._batch_delete(doomed)
        return len(doomed)

    def delete_events_before(self, namespace: str, before: datetime) -> int:
        return self._delete_logged_before(namespace, "EVT", "EVT#", before)

    def append_usage(self, usage: UsageRecord) -> None:
        pk = self._pk(usage.namespace)
        item = {
            "PK": pk,
            "SK": f"USAGE#{usage.id}",
            "entity": "usage",
            "GSI1PK": f"{pk}#USAGE",
            "GSI1SK": f"{_iso(usage.created_at)}#{usage.id}",
            "ttl": self._ttl(usage.created_at, self._log_ttl),
            **_fields(usage),
        }
        if not self._put(item, "attribute_not_exists(PK)"):
            raise Conflict(f"usage record {usage.id} already exists")

    def list_usage(self, namespace: str, *, since: datetime | None = None) -> list[UsageRecord]:
        partition = f"{self._pk(namespace)}#USAGE"
        if since is None:
            items = self._query(pk=partition, index="GSI1")
        else:
            items = self._query(pk=partition, index="GSI1", sk_between=(_iso(since), "~"))
        return [_model(UsageRecord, item) for item in items]

    def delete_usage_before(self, namespace: str, before: datetime) -> int:
        return self._delete_logged_before(namespace, "USAGE", "USAGE#", before)

    def get_idempotency(self, namespace: str, key: str) -> IdempotencyRecord | None:
        item = self._get(self._pk(namespace), f"IDEM#{key}")
        return _model(IdempotencyRecord, item) if item else None

    def put_idempotency(self, record: IdempotencyRecord) -> bool:
        item = {
            "PK": self._pk(record.namespace),
            "SK": f"IDEM#{record.key}",
            "entity": "idempotency",
            "ttl": self._ttl(record.created_at, self._idempotency_ttl),
            **_fields(record),
        }
        return self._put(item, "attribute_not_exists(PK)")

    def delete_idempotency_before(self, namespace: str, before: datetime) -> int:
        pk = self._pk(namespace)
        cutoff = _iso(before)
        doomed = [
            (pk, item["SK"])
            for item in self._query(pk=pk, sk_prefix="IDEM#", projection=("PK", "SK", "created_at"))
            if item["created_at"] < cutoff
        ]
        self._batch_delete(doomed)
        return len(doomed)

    def get_cursor(self, namespace: str, name: str) -> str | None:
        item = self._get(self._pk(namespace), f"CURSOR#{name}")
        return str(item["value"]) if item else None

    def set_cursor(self, namespace: str, name: str, value: str) -> None:
        self._put(
            {
                "PK": self._pk(namespace),
                "SK": f"CURSOR#{name}",
                "entity": "cursor",
                "namespace": namespace,
                "name": name,
                "value": value,
                "updated_at": _iso(utcnow()),
            }
        )

    def get_cache(self, namespace: str, key: str) -> Any | None:
        item = self._get(self._pk(namespace), f"CACHE#{key}")
        if item is None:
            return None
        expires_at = item.get("expires_at")
        if expires_at is not None and datetime.fromisoformat(expires_at) <= utcnow():
            return None
        return json.loads(item["value_json"])

    def put_cache(self, namespace: str, key: str, value: Any, *, expires_at: datetime | None = None) -> None:
        try:
            text = json.dumps(value, ensure_ascii=False)
        except (TypeError, ValueError) as exc:
            raise InvalidInput(f"cache value for {key!r} is not JSON-serializable") from exc
        item: dict[str, Any] = {
            "PK": self._pk(namespace),
            "SK": f"CACHE#{key}",
            "entity": "cache",
            "namespace": namespace,
            "key": key,
            "value_json": text,
            "updated_at": _iso(utcnow()),
        }
        if expires_at is not None:
            item |= {"expires_at": _iso(expires_at), "ttl": _epoch(expires_at)}
        self._put(item)

    def delete_cache(self, namespace: str, key: str) -> None:
        self._delete(self._pk(namespace), f"CACHE#{key}")

    def list_namespaces(self) -> list[str]:
        return sorted(item["SK"] for item in self._query(pk=NAMESPACES_PK, projection=("SK",)))

    def ping(self) -> None:
        self._get(NAMESPACES_PK, "#ping")
