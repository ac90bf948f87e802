"""``engram migrate``: one-off, idempotent, resumable upgrades of rows written by older versions
(README, "Upgrading"; docs/aws.md, "Upgrading a deployment").

Today one step: messages stored on DynamoDB before threads and insertion order existed get their index
keys (``MessageIndexBackfill``), so thread listings, extraction (``engram extract --backfill``) and
conversation recall see them. Progress is saved after every batch (cursor ``migrate:message-indexes``),
so a run that stops resumes where it was; a finished namespace is scanned again from the start by the
next run, which then changes nothing. Stores that upgrade their schema when opened (SQLite) have nothing
to do here.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass

from engram.domain.ports import KeyValueRows, MessageIndexBackfill
from engram.services.recall.conversations import CURSOR as CONVERSATION_CURSOR

CURSOR = "migrate:message-indexes"
BATCH = 200


@dataclass
class MigrationReport:
    namespace: str
    supported: bool = True
    read: int = 0
    fixed: int = 0

    def to_dict(self) -> dict[str, object]:
        return asdict(self)


class MigrationService:
    def __init__(self, store: KeyValueRows) -> None:
        self._store = store

    @property
    def needed(self) -> bool:
        """Whether this store has rows an older version may have written incompletely."""
        return isinstance(self._store, MessageIndexBackfill)

    def backfill_message_indexes(
        self, namespace: str, *, batch: int = BATCH, progress: Callable[[int], None] | None = None
    ) -> MigrationReport:
        """Give the namespace's older messages their missing index keys, batch by batch (module docstring)."""
        report = MigrationReport(namespace)
        store = self._store
        if not isinstance(store, MessageIndexBackfill):
            report.supported = False
            return report
        position = self._store.get_cursor(namespace, CURSOR) or None
        while True:
            read, fixed, position = store.backfill_message_indexes(namespace, after=position, limit=batch)
            report.read += read
            report.fixed += fixed
            if fixed:
                # Messages now on the stored-order index lie before the conversation index's cursor: index
                # every message of the namespace again (a document is replaced, never doubled).
                self._store.set_cursor(namespace, CONVERSATION_CURSOR, "")
            self._store.set_cursor(namespace, CURSOR, position or "")
            if progress is not None:
                progress(read)
            if position is None:
                return report
