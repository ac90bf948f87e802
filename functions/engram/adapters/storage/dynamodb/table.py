"""The DynamoDB table toolkit under ``DynamoMemoryStore``: value conversion, keys, calls with error
translation, queries page by page, transactions with retries, batch reads and deletes.

It knows nothing of memories or messages; the store modules next to it decide what goes in the items
(the layout is in this package's ``__init__``).
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator, Sequence
from datetime import datetime
from decimal import Decimal
from typing import Any, TypeVar

from pydantic import BaseModel

from engram.adapters.aws_errors import translate
from engram.adapters.storage.common import to_iso
from engram.domain.deployment import TABLE_INDEXES, TABLE_KEYS, TTL_ATTRIBUTE  # infra/storage.py reads them too
from engram.domain.errors import UpstreamRateLimited, UpstreamUnavailable

try:  # boto3 is in the `aws` extra and the Lambda layer; the module must import without it.
    from boto3.dynamodb.types import TypeDeserializer, TypeSerializer
    from botocore.exceptions import BotoCoreError, ClientError
except ImportError:  # pragma: no cover - exercised only without the aws extra
    TypeDeserializer = TypeSerializer = None
    BotoCoreError = ClientError = Exception

M = TypeVar("M", bound=BaseModel)

MAX_TRANSACTION_RETRIES = 5
MAX_TRANSACTION_ITEMS = 100  # what one TransactWriteItems call may hold


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
    client.update_time_to_live(
        TableName=table_name, TimeToLiveSpecification={"Enabled": True, "AttributeName": TTL_ATTRIBUTE}
    )


# -- value conversion ---------------------------------------------------------------------------


def epoch(value: datetime) -> int:
    return int(value.timestamp())


def to_dynamo(value: Any) -> Any:
    if isinstance(value, datetime):
        return to_iso(value)
    if isinstance(value, bool) or value is None or isinstance(value, str | int):
        return value
    if isinstance(value, float):
        return Decimal(repr(value))
    if isinstance(value, dict):
        return {str(k): to_dynamo(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [to_dynamo(v) for v in value]
    return value


def from_dynamo(value: Any) -> Any:
    if isinstance(value, Decimal):
        return int(value) if value == value.to_integral_value() else float(value)
    if isinstance(value, dict):
        return {k: from_dynamo(v) for k, v in value.items()}
    if isinstance(value, list):
        return [from_dynamo(v) for v in value]
    return value


def fields(model: BaseModel) -> dict[str, Any]:
    """The model's fields as DynamoDB-ready values; ``None`` fields are left out."""
    data = {name: getattr(model, name) for name in type(model).model_fields}
    return {k: to_dynamo(v) for k, v in data.items() if v is not None}


def to_model(cls: type[M], item: dict[str, Any]) -> M:
    return cls.model_validate({k: from_dynamo(v) for k, v in item.items() if k in cls.model_fields})


def sort_key(at: datetime, row_id: str) -> str:
    """The ``<time>#<id>`` sort key every time-ordered index uses (text order = time order)."""
    return f"{to_iso(at)}#{row_id}"


# -- failures -----------------------------------------------------------------------------------


class Cancelled(Exception):
    """A transaction was cancelled; ``reasons`` holds one code per operation ("None" if it was fine)."""

    def __init__(self, reasons: list[str]) -> None:
        super().__init__(", ".join(reasons))
        self.reasons = reasons


class ConditionFailed(Exception):
    """A single-item write's condition did not hold (nothing was written). ``item``: the item held, in
    DynamoDB's wire form, when the write asked for it (``ReturnValuesOnConditionCheckFailure``)."""

    def __init__(self, message: str, item: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.item = item


class DynamoTable:
    """One DynamoDB table behind a boto3 client: every call goes through ``call`` (errors translated by
    ``adapters/aws_errors.py``); a failed condition is ``ConditionFailed``, a cancelled transaction
    ``Cancelled`` — the store decides what those mean."""

    def __init__(self, client: Any, name: str) -> None:
        self.client = client
        self.name = name
        self._serializer = TypeSerializer()
        self._deserializer = TypeDeserializer()

    def call(self, operation: str, **kwargs: Any) -> dict[str, Any]:
        try:
            response: dict[str, Any] = getattr(self.client, operation)(**kwargs)
            return response
        except ClientError as exc:
            error = exc.response.get("Error", {})
            code = error.get("Code", "")
            message = error.get("Message", "")
            if code == "TransactionCanceledException":
                reasons = [r.get("Code", "None") for r in exc.response.get("CancellationReasons", [])]
                if not reasons and "[" in message:  # some emulators only put them in the message
                    reasons = [r.strip() for r in message[message.rindex("[") + 1 : message.rindex("]")].split(",")]
                raise Cancelled(reasons) from exc
            if code == "ConditionalCheckFailedException":
                raise ConditionFailed(message, exc.response.get("Item")) from exc
            if code == "ResourceNotFoundException":
                raise UpstreamUnavailable(f"DynamoDB table {self.name!r} not found") from exc
            raise translate(exc, f"DynamoDB {operation}") from exc
        except BotoCoreError as exc:
            raise translate(exc, f"DynamoDB {operation}") from exc

    def ser(self, item: dict[str, Any]) -> dict[str, Any]:
        return {k: self._serializer.serialize(v) for k, v in item.items() if v is not None}

    def des(self, item: dict[str, Any]) -> dict[str, Any]:
        return {k: self._deserializer.deserialize(v) for k, v in item.items()}

    @staticmethod
    def key(pk: str, sk: str) -> dict[str, Any]:
        return {"PK": {"S": pk}, "SK": {"S": sk}}

    def get(self, pk: str, sk: str) -> dict[str, Any] | None:
        response = self.call("get_item", TableName=self.name, Key=self.key(pk, sk), ConsistentRead=True)
        item = response.get("Item")
        return self.des(item) if item else None

    def put(self, item: dict[str, Any], condition: str | None = None, **extra: Any) -> bool:
        """Put ``item``; with a condition, ``False`` if it failed (nothing written)."""
        kwargs: dict[str, Any] = {"TableName": self.name, "Item": self.ser(item)}
        if condition:
            kwargs["ConditionExpression"] = condition
        try:
            self.call("put_item", **kwargs, **extra)
        except ConditionFailed:
            return False
        return True

    def put_or_held(self, item: dict[str, Any], condition: str, **extra: Any) -> tuple[bool, dict[str, Any] | None]:
        """Put ``item`` if ``condition`` holds: ``(True, None)``; else ``(False, the item held)``, nothing
        written. The held item comes back with the failed condition (one call); an emulator that leaves it
        out costs a read. ``None`` held: the item was deleted meanwhile (the caller may try again)."""
        try:
            self.call(
                "put_item",
                TableName=self.name,
                Item=self.ser(item),
                ConditionExpression=condition,
                ReturnValuesOnConditionCheckFailure="ALL_OLD",
                **extra,
            )
        except ConditionFailed as exc:
            if exc.item is not None:
                return False, self.des(exc.item)
            return False, self.get(item["PK"], item["SK"])
        return True, None

    def delete(self, pk: str, sk: str, condition: str | None = None, **extra: Any) -> bool:
        kwargs: dict[str, Any] = {"TableName": self.name, "Key": self.key(pk, sk)}
        if condition:
            kwargs["ConditionExpression"] = condition
        try:
            self.call("delete_item", **kwargs, **extra)
        except ConditionFailed:
            return False
        return True

    def update(self, pk: str, sk: str, **update: Any) -> dict[str, Any] | None:
        """One UpdateItem; ``None`` if its condition failed, else the response."""
        try:
            return self.call("update_item", TableName=self.name, Key=self.key(pk, sk), **update)
        except ConditionFailed:
            return None

    def query(
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
            "TableName": self.name,
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
            response = self.call("query", **kwargs)
            for item in response.get("Items", []):
                yield self.des(item)
            last = response.get("LastEvaluatedKey")
            if not last:
                return
            kwargs["ExclusiveStartKey"] = last

    def count(self, **query: Any) -> int:
        return sum(1 for _ in self.query(**query, projection=("PK", "SK")))

    def transact(self, operations: list[dict[str, Any]]) -> None:
        """TransactWriteItems with retries on transaction conflicts; ``Cancelled`` on a failed condition."""
        for attempt in range(MAX_TRANSACTION_RETRIES):
            try:
                self.call("transact_write_items", TransactItems=operations)
                return
            except Cancelled as exc:
                if "ConditionalCheckFailed" in exc.reasons or attempt == MAX_TRANSACTION_RETRIES - 1:
                    raise
                time.sleep(0.02 * 2**attempt)

    def put_operation(self, item: dict[str, Any], condition: str) -> dict[str, Any]:
        """A transaction ``Put`` of ``item`` under ``condition``."""
        return {"Put": {"TableName": self.name, "Item": self.ser(item), "ConditionExpression": condition}}

    def batch_get(self, keys: Sequence[tuple[str, str]]) -> Iterator[dict[str, Any]]:
        """The items at ``keys`` that exist (strongly consistent), in no particular order."""
        for start in range(0, len(keys), 100):
            chunk = [self.key(pk, sk) for pk, sk in keys[start : start + 100]]
            request: dict[str, Any] = {self.name: {"Keys": chunk, "ConsistentRead": True}}
            for attempt in range(8):
                response = self.call("batch_get_item", RequestItems=request)
                for item in response.get("Responses", {}).get(self.name, []):
                    yield self.des(item)
                request = response.get("UnprocessedKeys") or {}
                if not request:
                    break
                time.sleep(0.05 * 2**attempt)

    def batch_delete(self, keys: Iterable[tuple[str, str]]) -> None:
        pending = [{"DeleteRequest": {"Key": self.key(pk, sk)}} for pk, sk in keys]
        while pending:
            chunk, pending = pending[:25], pending[25:]
            requests: dict[str, Any] = {self.name: chunk}
            for attempt in range(8):
                response = self.call("batch_write_item", RequestItems=requests)
                requests = response.get("UnprocessedItems") or {}
                if not requests:
                    break
                time.sleep(0.05 * 2**attempt)
            if requests:
                raise UpstreamRateLimited("DynamoDB left deletes unprocessed")
