"""``DynamoMemoryStore``: the ``MemoryStore`` port on one DynamoDB table, one part per concern."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from engram.adapters.aws_clients import new_client
from engram.adapters.storage.dynamodb.memories import DynamoMemories
from engram.adapters.storage.dynamodb.notes import DynamoNotes
from engram.adapters.storage.dynamodb.records import DynamoRecords
from engram.adapters.storage.dynamodb.table import DynamoTable
from engram.adapters.storage.dynamodb.upgrade import DynamoUpgrades
from engram.domain.errors import InvalidInput
from engram.domain.ports import Clock


class DynamoMemoryStore(DynamoMemories, DynamoUpgrades, DynamoNotes, DynamoRecords):
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
        clock: Clock,
    ) -> None:
        if not table_name:
            raise InvalidInput("DynamoMemoryStore needs a table name (ENGRAM_TABLE_NAME)")
        if client is None:
            client = new_client("dynamodb", region_name)
        self._db = DynamoTable(client, table_name)
        self._message_ttl = timedelta(days=message_ttl_days)
        self._log_ttl = timedelta(days=log_ttl_days)
        self._idempotency_ttl = timedelta(days=idempotency_ttl_days)
        self._known_namespaces = set()
        self._clock = clock
