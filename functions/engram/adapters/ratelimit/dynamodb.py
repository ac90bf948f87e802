"""``RateLimiter`` on the deployment's DynamoDB table: one item per key and window, shared by every
Lambda instance.

Item: ``PK = RATE#<key>``, ``SK = W#<window start>``, a count ``n`` and a ``ttl`` an hour after the
window ends (DynamoDB's TTL removes old windows). One conditional ``UpdateItem`` per request: add 1
when the count is below the limit; a failed condition means the window is full.
"""

from __future__ import annotations

from typing import Any

from engram.adapters.aws_clients import new_client
from engram.adapters.storage.dynamodb.table import DynamoTable
from engram.domain.deployment import TTL_ATTRIBUTE
from engram.domain.errors import InvalidInput
from engram.domain.ports import Clock

TTL_AFTER_WINDOW_SECONDS = 3600


class DynamoRateLimiter:
    def __init__(
        self,
        table_name: str,
        client: Any | None = None,
        *,
        region_name: str | None = None,
        clock: Clock,
    ) -> None:
        if not table_name:
            raise InvalidInput("DynamoRateLimiter needs a table name (ENGRAM_TABLE_NAME)")
        if client is None:
            client = new_client("dynamodb", region_name)
        self._db = DynamoTable(client, table_name)  # errors translated by adapters/aws_errors.py
        self._clock = clock  # windows follow the container's clock (docs/ARCHITECTURE.md, "One clock")

    def hit(self, key: str, limit: int, window_seconds: int) -> float | None:
        now = self._clock.now().timestamp()
        start = int(now // window_seconds) * window_seconds
        end = start + window_seconds
        counted = self._db.update(
            f"RATE#{key}",
            f"W#{start}",
            UpdateExpression="ADD #n :one SET #ttl = :ttl",
            ConditionExpression="attribute_not_exists(#n) OR #n < :limit",
            ExpressionAttributeNames={"#n": "n", "#ttl": TTL_ATTRIBUTE},
            ExpressionAttributeValues={
                ":one": {"N": "1"},
                ":limit": {"N": str(limit)},
                ":ttl": {"N": str(end + TTL_AFTER_WINDOW_SECONDS)},
            },
        )
        if counted is None:  # the condition failed: the window is full
            return max(end - now, 0.001)
        return None

    def reset(self, key: str, window_seconds: int) -> None:
        start = int(self._clock.now().timestamp() // window_seconds) * window_seconds
        self._db.delete(f"RATE#{key}", f"W#{start}")
