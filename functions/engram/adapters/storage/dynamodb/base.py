"""What every part of ``DynamoMemoryStore`` shares: the table, the namespace partition, the namespace
registry, the TTLs, and newest-first paging over a time-ordered index."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from datetime import datetime, timedelta
from typing import Any, TypeVar

from engram.adapters.storage.common import cut_page, decode_cursor
from engram.adapters.storage.dynamodb.table import DynamoTable, epoch, sort_key
from engram.domain.models import Page
from engram.domain.ports import Clock

NAMESPACES_PK = "NAMESPACES"

R = TypeVar("R")


def cursor_sort_key(cursor: str | None) -> str | None:
    """The index sort key a page cursor (``storage/common.py``) points at: ``<time>#<id>``."""
    return sort_key(*decode_cursor(cursor)) if cursor is not None else None


class DynamoStoreBase:
    _db: DynamoTable
    _message_ttl: timedelta
    _log_ttl: timedelta
    _idempotency_ttl: timedelta
    _known_namespaces: set[str]
    _clock: Clock  # decides cache expiry and stamps (docs/ARCHITECTURE.md, "One clock")

    @staticmethod
    def _pk(namespace: str) -> str:
        return f"NS#{namespace}"

    @staticmethod
    def _ttl(created_at: datetime, keep: timedelta) -> int:
        return epoch(created_at + keep)

    def _register(self, namespace: str) -> None:
        """Remember that ``namespace`` has rows (once per process per namespace)."""
        if namespace in self._known_namespaces:
            return
        self._db.put(namespace_item(namespace))
        self._known_namespaces.add(namespace)

    @staticmethod
    def _page(
        items: Iterable[dict[str, Any]],
        load: Callable[[dict[str, Any]], R],
        limit: int,
        position: Callable[[R], tuple[datetime, str]],
        keep: Callable[[R], bool] = lambda _row: True,
    ) -> Page[R]:
        """The first ``limit`` kept rows of ``items`` (read one beyond), with a cursor if more follow."""
        rows: list[R] = []
        for item in items:
            row = load(item)
            if keep(row):
                rows.append(row)
                if len(rows) > limit:
                    break
        return cut_page(rows, limit, position)


def namespace_item(namespace: str) -> dict[str, Any]:
    """The table's registry item of a namespace (the cleanup job walks them; skills register theirs too)."""
    return {"PK": NAMESPACES_PK, "SK": namespace, "entity": "namespace", "namespace": namespace}
