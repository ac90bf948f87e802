"""The shared document log of the ``replica`` search backend, in the store (SQLite file or DynamoDB table).

SQLite: tables ``replica_docs`` (one row per (namespace, memory_id), indexed by (namespace, seq)) and
``replica_meta``, in the store's file over their own connection (the conversation index's log:
``replica_conv_docs`` / ``replica_conv_meta``).

DynamoDB, in the store's table (docs/aws.md, "Search backends"):

=====================  ================================  =========================================
item                   PK / SK                           GSI1 (changes)
=====================  ================================  =========================================
search document        ``NS#ns`` / ``SDOC#<memory id>``  ``NS#ns#SDOC`` / ``<seq, 16 digits>#<id>``
model record           ``SEARCHMETA`` / ``META``
namespaces with docs   ``SEARCHNS`` / ``<ns>``
message document       ``NS#ns`` / ``CDOC#<message id>`` ``NS#ns#CDOC`` / same (the conversation index)
its model, namespaces  ``SEARCHMETA`` / ``META#CDOC``; ``SEARCHNS#CDOC`` / ``<ns>``
=====================  ================================  =========================================

A document keeps its text, type and vector (float16 binary: 768 bytes at 384 dimensions, 2 KB at
1024, so an item stays far below DynamoDB's 400 KB). Tombstones carry a ``ttl``.
"""

from __future__ import annotations

import contextlib
import sqlite3
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from engram.adapters.aws_clients import new_client
from engram.adapters.files import private_sqlite
from engram.adapters.search.document_log import TOMBSTONE_DAYS, LogMeta, LogRow
from engram.adapters.storage.dynamodb.table import ConditionFailed, DynamoTable
from engram.domain.deployment import TTL_ATTRIBUTE

_SQLITE_SCHEMA = """
CREATE TABLE IF NOT EXISTS {prefix}_docs (
    namespace TEXT NOT NULL,
    memory_id TEXT NOT NULL,
    seq INTEGER NOT NULL,
    deleted INTEGER NOT NULL,
    type TEXT NOT NULL,
    text TEXT NOT NULL,
    vec BLOB,
    dimension INTEGER,
    epoch INTEGER NOT NULL,
    PRIMARY KEY (namespace, memory_id)
);
CREATE INDEX IF NOT EXISTS {prefix}_docs_by_seq ON {prefix}_docs (namespace, seq);
CREATE TABLE IF NOT EXISTS {prefix}_meta (key TEXT PRIMARY KEY, value TEXT);
"""
# Rows of one page of ``all_rows`` (a 1024-dimension row is ~3 KB: ~6 MB a page).
ALL_ROWS_PAGE = 2000
_COLUMNS = "namespace, memory_id, seq, deleted, type, text, vec, dimension, epoch"


def _row(values: tuple[Any, ...]) -> LogRow:
    ns, mid, seq, deleted, type_, text, vec, dim, epoch = values
    return LogRow(
        namespace=ns,
        memory_id=mid,
        seq=int(seq),
        deleted=bool(deleted),
        type=type_,
        text=text,
        vector=bytes(vec) if vec is not None else None,
        dimension=int(dim) if dim is not None else None,
        epoch=int(epoch),
    )


class SqliteSearchLog:
    """``SearchLog`` in the local store's SQLite file (every ``engram serve`` on the data dir shares it).
    ``prefix`` names its tables (``<prefix>_docs``, ``<prefix>_meta``): one log per index kept in the file."""

    def __init__(self, path: str | Path, *, prefix: str = "replica") -> None:
        if not prefix.isidentifier():
            raise ValueError(f"bad table prefix {prefix!r}")
        self._prefix = prefix
        self._path = str(path)
        self._lock = threading.RLock()
        self._conn: sqlite3.Connection | None = None

    def _db(self) -> sqlite3.Connection:
        if self._conn is None:
            if self._path != ":memory:":
                private_sqlite(Path(self._path))
            conn = sqlite3.connect(self._path, check_same_thread=False, isolation_level=None, timeout=10.0)
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA busy_timeout=10000")
            conn.executescript(_SQLITE_SCHEMA.format(prefix=self._prefix))
            self._conn = conn
        return self._conn

    def close(self) -> None:
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None

    def put(self, row: LogRow) -> None:
        with self._lock:
            self._db().execute(
                f"INSERT OR REPLACE INTO {self._prefix}_docs ({_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    row.namespace,
                    row.memory_id,
                    row.seq,
                    int(row.deleted),
                    row.type,
                    row.text,
                    row.vector,
                    row.dimension,
                    row.epoch,
                ),
            )

    def changed_since(self, namespace: str, seq: int) -> list[LogRow]:
        with self._lock:
            rows = self._db().execute(
                f"SELECT {_COLUMNS} FROM {self._prefix}_docs WHERE namespace = ? AND seq > ? ORDER BY seq",
                (namespace, seq),
            )
            return [_row(r) for r in rows.fetchall()]

    def all_rows(self, namespace: str) -> Iterator[LogRow]:
        """Page by page (``ALL_ROWS_PAGE`` rows by memory id), so a hydrate never holds the whole log."""
        after = ""
        while True:
            with self._lock:
                rows = (
                    self._db()
                    .execute(
                        f"SELECT {_COLUMNS} FROM {self._prefix}_docs WHERE namespace = ? AND deleted = 0 "
                        "AND memory_id > ? ORDER BY memory_id LIMIT ?",
                        (namespace, after, ALL_ROWS_PAGE),
                    )
                    .fetchall()
                )
            yield from map(_row, rows)
            if len(rows) < ALL_ROWS_PAGE:
                return
            after = rows[-1][1]

    def count(self, namespace: str) -> int:
        with self._lock:
            found = (
                self._db()
                .execute(f"SELECT COUNT(*) FROM {self._prefix}_docs WHERE namespace = ? AND deleted = 0", (namespace,))
                .fetchone()
            )
        return int(found[0])

    def namespaces(self) -> list[str]:
        with self._lock:
            return [r[0] for r in self._db().execute(f"SELECT DISTINCT namespace FROM {self._prefix}_docs").fetchall()]

    def _read_meta(self, conn: sqlite3.Connection) -> LogMeta:
        values = dict(conn.execute(f"SELECT key, value FROM {self._prefix}_meta").fetchall())
        dim = values.get("dimension")
        return LogMeta(
            model_id=values.get("model_id"), dimension=int(dim) if dim else None, epoch=int(values.get("epoch") or 0)
        )

    def meta(self) -> LogMeta:
        with self._lock:
            return self._read_meta(self._db())

    def record_dimension(self, dimension: int) -> LogMeta:
        with self._lock:
            conn = self._db()
            conn.execute(
                f"INSERT OR IGNORE INTO {self._prefix}_meta (key, value) VALUES ('dimension', ?)", (str(dimension),)
            )
            return self._read_meta(conn)

    def reset(self, model_id: str, dimension: int) -> LogMeta:
        with self._lock:
            conn = self._db()
            conn.execute("BEGIN IMMEDIATE")
            try:
                epoch = self._read_meta(conn).epoch + 1
                for key, value in (("model_id", model_id), ("dimension", str(dimension)), ("epoch", str(epoch))):
                    conn.execute(f"INSERT OR REPLACE INTO {self._prefix}_meta (key, value) VALUES (?, ?)", (key, value))
                conn.execute("COMMIT")
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            return self._read_meta(conn)

    def ping(self) -> None:
        with self._lock:
            self._db().execute(f"SELECT 1 FROM {self._prefix}_meta LIMIT 1").fetchall()


META_KEY = {"PK": {"S": "SEARCHMETA"}, "SK": {"S": "META"}}
NAMESPACES_PK = "SEARCHNS"


class DynamoSearchLog:
    """``SearchLog`` in the DynamoDB table of the store (the layout in the module docstring). ``kind``
    names its items: ``SDOC`` for the memory index; another kind (``CDOC``: conversation messages) keeps
    its own documents, model record and namespace list beside it."""

    def __init__(
        self, table_name: str, client: Any | None = None, *, region_name: str | None = None, kind: str = "SDOC"
    ) -> None:
        if not kind.isalnum():
            raise ValueError(f"bad document kind {kind!r}")
        self._kind = kind
        # The memory index's names predate kinds; other kinds get theirs suffixed.
        self._meta_key = META_KEY if kind == "SDOC" else {"PK": {"S": "SEARCHMETA"}, "SK": {"S": f"META#{kind}"}}
        self._namespaces_pk = NAMESPACES_PK if kind == "SDOC" else f"{NAMESPACES_PK}#{kind}"
        if client is None:
            client = new_client("dynamodb", region_name)
        self._db = DynamoTable(client, table_name)
        self._known: set[str] = set()

    def _call(self, operation: str, **kwargs: Any) -> dict[str, Any]:
        """One call on the store's table through its toolkit (errors translated by ``adapters/aws_errors.py``;
        a failed condition is ``ConditionFailed``)."""
        return self._db.call(operation, TableName=self._db.name, **kwargs)

    def put(self, row: LogRow) -> None:
        pk = f"NS#{row.namespace}"
        item: dict[str, Any] = {
            "PK": {"S": pk},
            "SK": {"S": f"{self._kind}#{row.memory_id}"},
            "GSI1PK": {"S": f"{pk}#{self._kind}"},
            "GSI1SK": {"S": f"{row.seq:016d}#{row.memory_id}"},
            "entity": {"S": "search_doc"},
            "namespace": {"S": row.namespace},
            "memory_id": {"S": row.memory_id},
            "seq": {"N": str(row.seq)},
            "deleted": {"BOOL": row.deleted},
            "type": {"S": row.type},
            "text": {"S": row.text},
            "epoch": {"N": str(row.epoch)},
        }
        if row.vector is not None:
            item["vec"] = {"B": row.vector}
            item["dimension"] = {"N": str(row.dimension)}
        if row.deleted:
            item[TTL_ATTRIBUTE] = {"N": str(int(time.time()) + TOMBSTONE_DAYS * 86_400)}
        self._call("put_item", Item=item)
        if row.namespace not in self._known:
            self._call("put_item", Item={"PK": {"S": self._namespaces_pk}, "SK": {"S": row.namespace}})
            self._known.add(row.namespace)

    @staticmethod
    def _row(item: dict[str, Any]) -> LogRow:
        vec = item.get("vec")
        return LogRow(
            namespace=item["namespace"]["S"],
            memory_id=item["memory_id"]["S"],
            seq=int(item["seq"]["N"]),
            deleted=bool(item.get("deleted", {}).get("BOOL", False)),
            type=item.get("type", {}).get("S", "fact"),
            text=item.get("text", {}).get("S", ""),
            vector=bytes(vec["B"]) if vec else None,
            dimension=int(item["dimension"]["N"]) if "dimension" in item else None,
            epoch=int(item.get("epoch", {}).get("N", "0")),
        )

    def _query(self, **kwargs: Any) -> Iterator[dict[str, Any]]:
        while True:
            response = self._call("query", **kwargs)
            yield from response.get("Items", [])
            last = response.get("LastEvaluatedKey")
            if not last:
                return
            kwargs["ExclusiveStartKey"] = last

    def changed_since(self, namespace: str, seq: int) -> list[LogRow]:
        items = self._query(
            IndexName="GSI1",
            KeyConditionExpression="GSI1PK = :pk AND GSI1SK > :after",
            ExpressionAttributeValues={":pk": {"S": f"NS#{namespace}#{self._kind}"}, ":after": {"S": f"{seq:016d}#~"}},
        )
        return [self._row(item) for item in items]

    def all_rows(self, namespace: str) -> Iterator[LogRow]:
        items = self._query(
            KeyConditionExpression="PK = :pk AND begins_with(SK, :prefix)",
            ExpressionAttributeValues={":pk": {"S": f"NS#{namespace}"}, ":prefix": {"S": f"{self._kind}#"}},
            ConsistentRead=True,
        )
        return (row for row in map(self._row, items) if not row.deleted)

    def count(self, namespace: str) -> int:
        """Live rows, counted by DynamoDB (Select=COUNT: no item leaves the table; the read is still billed)."""
        kwargs: dict[str, Any] = {
            "KeyConditionExpression": "PK = :pk AND begins_with(SK, :prefix)",
            "FilterExpression": "attribute_not_exists(deleted) OR deleted = :no",  # as _row reads it
            "ExpressionAttributeValues": {
                ":pk": {"S": f"NS#{namespace}"},
                ":prefix": {"S": f"{self._kind}#"},
                ":no": {"BOOL": False},
            },
            "Select": "COUNT",
            "ConsistentRead": True,
        }
        total = 0
        while True:
            response = self._call("query", **kwargs)
            total += int(response.get("Count", 0))
            last = response.get("LastEvaluatedKey")
            if not last:
                return total
            kwargs["ExclusiveStartKey"] = last

    def namespaces(self) -> list[str]:
        items = self._query(
            KeyConditionExpression="PK = :pk", ExpressionAttributeValues={":pk": {"S": self._namespaces_pk}}
        )
        return [item["SK"]["S"] for item in items]

    @staticmethod
    def _meta(item: dict[str, Any] | None) -> LogMeta:
        if not item:
            return LogMeta()
        return LogMeta(
            model_id=item["model_id"]["S"] if "model_id" in item else None,
            dimension=int(item["dimension"]["N"]) if "dimension" in item else None,
            epoch=int(item.get("epoch", {}).get("N", "0")),
        )

    def meta(self) -> LogMeta:
        return self._meta(self._call("get_item", Key=self._meta_key, ConsistentRead=True).get("Item"))

    def record_dimension(self, dimension: int) -> LogMeta:
        with contextlib.suppress(ConditionFailed):  # another process recorded one first: read it
            self._call(
                "update_item",
                Key=self._meta_key,
                UpdateExpression="SET dimension = :d",
                ConditionExpression="attribute_not_exists(dimension)",
                ExpressionAttributeValues={":d": {"N": str(dimension)}},
            )
        return self.meta()

    def reset(self, model_id: str, dimension: int) -> LogMeta:
        response = self._call(
            "update_item",
            Key=self._meta_key,
            UpdateExpression="SET model_id = :m, dimension = :d ADD epoch :one",
            ExpressionAttributeValues={":m": {"S": model_id}, ":d": {"N": str(dimension)}, ":one": {"N": "1"}},
            ReturnValues="ALL_NEW",
        )
        return self._meta(response.get("Attributes"))

    def ping(self) -> None:
        self._call("get_item", Key=self._meta_key)
