"""How each model maps to its SQLite table (one column per field, list/dict fields as JSON text), and
the table of every row kind."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterable
from datetime import datetime
from typing import Any, Generic, TypeVar

from pydantic import BaseModel

from engram.adapters.storage.common import to_iso
from engram.domain.models import (
    CacheEntry,
    Candidate,
    DailyLog,
    Digest,
    GlossaryTerm,
    IdempotencyRecord,
    Memory,
    MemoryEvent,
    Message,
    Precious,
    Reminder,
    Thread,
    UsageRecord,
)
from engram.domain.skills import Skill, SkillVersion

BUSY_TIMEOUT_S = 10.0
ITER_CHUNK = 500
# Well under SQLite's limit on bound parameters per statement.
IDS_PER_QUERY = 500

M = TypeVar("M", bound=BaseModel)
Listed = TypeVar("Listed", Memory, Candidate, MemoryEvent)


def marks(count: int) -> str:
    return ", ".join("?" * count)


class Table(Generic[M]):
    """How one model maps to one table: one column per field, list/dict fields as JSON text."""

    def __init__(self, name: str, model: type[M], key: tuple[str, ...], json_fields: Iterable[str] = ()) -> None:
        self.name = name
        self.model = model
        self.json_fields = frozenset(json_fields)
        self.columns = tuple(model.model_fields)
        values = [c for c in self.columns if c not in key]
        self.insert_sql = f"INSERT INTO {name} ({', '.join(self.columns)}) VALUES ({marks(len(self.columns))})"
        self.upsert_sql = f"{self.insert_sql} ON CONFLICT ({', '.join(key)}) DO UPDATE SET " + ", ".join(
            f"{c} = excluded.{c}" for c in values
        )
        self.update_sql = f"UPDATE {name} SET {', '.join(f'{c} = ?' for c in values)} WHERE " + " AND ".join(
            f"{c} = ?" for c in key
        )
        self._update_order = (*values, *key)

    def row(self, obj: M) -> dict[str, Any]:
        """The column values of ``obj``. A JSON field is dumped from its value as it is (tuples of strings,
        dicts of numbers: what pydantic's JSON mode would give, without its serializer's cost on every
        write); a value ``json`` cannot dump as it is, or only as something else than JSON (NaN), goes
        through pydantic's JSON mode as before."""
        row: dict[str, Any] = {}
        for column in self.columns:
            value = getattr(obj, column)
            if column in self.json_fields:
                try:
                    row[column] = json.dumps(value, ensure_ascii=False, allow_nan=False)
                except (TypeError, ValueError):
                    as_json = obj.model_dump(mode="json", include={column})
                    row[column] = json.dumps(as_json[column], ensure_ascii=False)
            else:
                row[column] = to_iso(value) if isinstance(value, datetime) else value
        return row

    def insert_params(self, obj: M) -> list[Any]:
        row = self.row(obj)
        return [row[c] for c in self.columns]

    def update_params(self, obj: M) -> list[Any]:
        row = self.row(obj)
        return [row[c] for c in self._update_order]

    def load(self, row: sqlite3.Row) -> M:
        # Zipped with its column names: half the CPU of dict(row) (a recall turn loads ~100 rows).
        fields = dict(zip(row.keys(), row, strict=True))
        for column in self.json_fields:
            fields[column] = json.loads(fields[column])
        return self.model.model_validate(fields)


MEMORIES = Table("memories", Memory, ("namespace", "id"), ("tags", "source_message_ids"))
CANDIDATES = Table("candidates", Candidate, ("namespace", "id"), ("tags", "source_message_ids"))
MESSAGES = Table("messages", Message, ("namespace", "id"), ("usage",))
THREADS = Table("threads", Thread, ("namespace", "id"))
REMINDERS = Table("reminders", Reminder, ("namespace", "memory_id"))
THREAD_ORDER = "COALESCE(last_message_at, created_at)"
PRECIOUS = Table("precious", Precious, ("namespace", "id"), ("tags", "source_message_ids"))
GLOSSARY = Table("glossary", GlossaryTerm, ("namespace", "id"), ("aliases",))
DIGESTS = Table("digests", Digest, ("namespace",))
DAILY_LOGS = Table("daily_logs", DailyLog, ("namespace", "date"), ("sections",))
EVENTS = Table("events", MemoryEvent, ("namespace", "id"), ("detail",))
USAGE = Table("usage", UsageRecord, ("namespace", "id"))
IDEMPOTENCY = Table("idempotency", IdempotencyRecord, ("namespace", "key"), ("value",))
# Cache values are JSON text already (see ``put_cache``), so the column holds them as they are.
CACHE = Table("cache", CacheEntry, ("namespace", "key"))
SKILLS = Table("skills", Skill, ("namespace", "name"), ("tags", "agents"))
SKILL_VERSIONS = Table("skill_versions", SkillVersion, ("namespace", "name", "version"), ("tags", "files"))


def conflict_message(exc: sqlite3.IntegrityError) -> str:
    """What a broken uniqueness rule means, without SQLite's table and column names."""
    text = str(exc)
    if "memories.fact_key" in text:
        return "another active memory holds this fact_key"
    if "external_id" in text:
        return "this external_id is already used"
    if "UNIQUE" in text:
        return "a row with this id already exists"
    return "the row breaks a rule of the store"
