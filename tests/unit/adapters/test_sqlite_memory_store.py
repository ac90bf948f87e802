"""What only the SQLite store promises beyond the contract: a durable file, a versioned schema."""

from __future__ import annotations

import json
import sqlite3
from contextlib import closing
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
from engram.adapters.storage.common import to_iso
from engram.adapters.storage.sqlite import SCHEMA_VERSION, SqliteMemoryStore
from engram.adapters.storage.sqlite import memories as sqlite_memories
from engram.adapters.storage.sqlite.schema import MIGRATIONS
from engram.domain.errors import Conflict, UpstreamUnavailable
from engram.domain.models import Memory, MemoryFilter, Message
from pydantic import BaseModel

from tests.fakes.clock import ManualClock

T0 = datetime(2025, 3, 1, 12, 0, tzinfo=UTC)
CLOCK = ManualClock(T0)  # the store stamps its migrations with it


def a_memory(memory_id: str, minute: int = 0) -> Memory:
    created = T0 + timedelta(minutes=minute)
    return Memory(id=memory_id, namespace="alice", content="likes tea", created_at=created, updated_at=created)


def test_rows_survive_a_restart(tmp_path: Path) -> None:
    # Given a store that wrote a memory and a cursor, then closed
    path = tmp_path / "data" / "engram.db"
    first = SqliteMemoryStore(path, clock=CLOCK)
    memory = first.insert_memory(a_memory("m1"))
    first.set_cursor("alice", "extraction", "msg1")
    first.close()
    # When the file is opened again
    second = SqliteMemoryStore(path, clock=CLOCK)
    try:
        # Then everything is still there
        assert second.get_memory("alice", "m1") == memory
        assert second.get_cursor("alice", "extraction") == "msg1"
        assert second.list_namespaces() == ["alice"]
    finally:
        second.close()


def test_schema_version_is_recorded_once(tmp_path: Path) -> None:
    # Given a store opened twice on the same file
    path = tmp_path / "engram.db"
    for _ in range(2):
        store = SqliteMemoryStore(path, clock=CLOCK)
        store.ping()
        store.close()
    # When the file is inspected
    with closing(sqlite3.connect(path)) as db:
        versions = [row[0] for row in db.execute("SELECT version FROM schema_version ORDER BY version")]
        stamps = {row[0] for row in db.execute("SELECT applied_at FROM schema_version")}
        tables = [row[0] for row in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
        (journal_mode,) = db.execute("PRAGMA journal_mode").fetchone()
    # Then every migration was applied exactly once, in WAL mode, leaving ``search_*`` to the index
    assert SCHEMA_VERSION >= 1
    assert versions == list(range(1, SCHEMA_VERSION + 1))
    assert stamps == {to_iso(T0)}  # stamped by the store's clock, not the wall clock
    assert {"memories", "messages", "candidates", "schema_version"} <= set(tables)
    assert not [name for name in tables if name.startswith("search_")]
    assert journal_mode == "wal"


def test_a_file_of_the_first_schema_is_migrated_and_keeps_its_messages(tmp_path: Path) -> None:
    # Given a file written by schema 1 (before messages noted errors), holding one message
    path = tmp_path / "engram.db"
    with closing(sqlite3.connect(path)) as db:
        db.execute("CREATE TABLE schema_version (version INTEGER PRIMARY KEY, applied_at TEXT NOT NULL)")
        for statement in MIGRATIONS[0]:
            db.execute(statement)
        db.execute("INSERT INTO schema_version VALUES (1, '2025-03-01T12:00:00+00:00')")
        db.execute(
            "INSERT INTO messages (namespace, id, conversation_id, role, content, model, usage, external_id,"
            " created_at) VALUES ('alice', 'msg1', 'default', 'user', 'hello', NULL, '{}', 'k1', ?)",
            ("2025-03-01T12:00:00+00:00",),
        )
        db.commit()
    # When the store opens it
    store = SqliteMemoryStore(path, clock=CLOCK)
    try:
        # Then the old message reads back with no error, and a new one keeps its note
        (old,) = store.list_messages("alice")
        assert (old.id, old.content, old.error) == ("msg1", "hello", None)
        store.insert_message(old.model_copy(update={"id": "msg2", "external_id": "k2", "error": "upstream_timeout: x"}))
        assert [m.error for m in store.list_messages("alice")] == [None, "upstream_timeout: x"]
    finally:
        store.close()


def test_memories_stored_before_versions_read_as_version_1(tmp_path: Path) -> None:
    # Given a file of schema 5 (before memory versions) holding one memory
    path = tmp_path / "engram.db"
    with closing(sqlite3.connect(path)) as db:
        db.execute("CREATE TABLE schema_version (version INTEGER PRIMARY KEY, applied_at TEXT NOT NULL)")
        for number, statements in enumerate(MIGRATIONS[:5], start=1):
            for statement in statements:
                db.execute(statement)
            db.execute("INSERT INTO schema_version VALUES (?, '2025-03-01T12:00:00+00:00')", (number,))
        db.execute(
            "INSERT INTO memories (namespace, id, content, type, layer, importance, confidence, pinned, tags,"
            " status, source, source_message_ids, seen_count, recall_count, created_at, updated_at)"
            " VALUES ('alice', 'm1', 'tea', 'fact', 'fragment', 0.5, 0.8, 0, '[]', 'active', 'api', '[]', 2, 3, ?, ?)",
            ("2025-03-01T12:00:00.000000+00:00", "2025-03-01T12:00:00.000000+00:00"),
        )
        db.commit()
    # When the store opens it
    store = SqliteMemoryStore(path, clock=CLOCK)
    try:
        # Then the memory reads at version 1, and a replace at that version moves it to 2 once
        old = store.get_memory("alice", "m1")
        assert (old.version, old.seen_count, old.recall_count) == (1, 2, 3)
        assert store.update_memory(old.model_copy(update={"status": "archived"})).version == 2
        with pytest.raises(Conflict):
            store.update_memory(old.model_copy(update={"content": "stale"}))
        assert store.get_memory("alice", "m1").status == "archived"
    finally:
        store.close()


def test_nothing_touches_the_disk_before_first_use(tmp_path: Path) -> None:
    # Given a store built on a path that does not exist yet
    path = tmp_path / "later" / "engram.db"
    store = SqliteMemoryStore(path, clock=CLOCK)
    # Then the file appears only once the store is used
    assert not path.exists()
    store.ping()
    assert path.exists()
    store.close()


def test_timestamps_are_stored_as_utc_iso_text(tmp_path: Path) -> None:
    # Given a memory created in UTC+02:00
    path = tmp_path / "engram.db"
    store = SqliteMemoryStore(path, clock=CLOCK)
    local = datetime(2025, 3, 1, 14, 0, tzinfo=timezone(timedelta(hours=2)))
    store.insert_memory(a_memory("m1").model_copy(update={"created_at": local}))
    store.close()
    # When the raw row is read
    with closing(sqlite3.connect(path)) as db:
        (created_at,) = db.execute("SELECT created_at FROM memories").fetchone()
    # Then it is fixed-width UTC text
    assert created_at == "2025-03-01T12:00:00.000000+00:00"


def test_iter_memories_crosses_chunk_boundaries(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Given more memories than one chunk holds
    monkeypatch.setattr(sqlite_memories, "ITER_CHUNK", 2)
    store = SqliteMemoryStore(tmp_path / "engram.db", clock=CLOCK)
    for n in range(5):
        store.insert_memory(a_memory(f"m{n}", minute=n))
    # When they are iterated / Then every one comes once, oldest first
    assert [m.id for m in store.iter_memories("alice")] == ["m0", "m1", "m2", "m3", "m4"]
    store.close()


def test_listings_use_the_indexes(tmp_path: Path) -> None:
    # Given a store with its schema
    path = tmp_path / "engram.db"
    store = SqliteMemoryStore(path, clock=CLOCK)
    store.ping()
    store.close()
    # When the planner explains the hot queries
    queries = {
        "memories_by_status": "SELECT * FROM memories WHERE namespace = 'a' AND status IN ('active')"
        " ORDER BY created_at DESC, id DESC LIMIT 51",
        "memories_active_fact_key": "SELECT * FROM memories WHERE namespace = 'a' AND fact_key = 'k'"
        " AND status = 'active'",
        "messages_by_created": "SELECT * FROM messages WHERE namespace = 'a' AND created_at >= '2025'"
        " ORDER BY created_at, id LIMIT 100",
    }
    with closing(sqlite3.connect(path)) as db:
        plans = {
            name: " ".join(row[3] for row in db.execute(f"EXPLAIN QUERY PLAN {sql}")) for name, sql in queries.items()
        }
    # Then each one searches its index (no full scan, no temporary sort)
    for index, plan in plans.items():
        assert f"USING INDEX {index}" in plan, plan
        assert "TEMP B-TREE" not in plan, plan


def test_a_closed_store_reports_unavailable(tmp_path: Path) -> None:
    # Given a closed store
    store = SqliteMemoryStore(tmp_path / "engram.db", clock=CLOCK)
    store.insert_memory(a_memory("m1"))
    store.close()
    # When it is pinged or read / Then it says it cannot be used
    with pytest.raises(UpstreamUnavailable):
        store.ping()
    with pytest.raises(UpstreamUnavailable):
        store.list_memories("alice", MemoryFilter())


def test_a_broken_uniqueness_rule_is_a_conflict_without_sqlite_internals(tmp_path: Path) -> None:
    # Given a store with an active keyed memory, one with an external id, and one plain row
    store = SqliteMemoryStore(tmp_path / "engram.db", clock=CLOCK)
    try:
        store.insert_memory(a_memory("m1").model_copy(update={"fact_key": "home:city"}))
        store.insert_memory(a_memory("m2").model_copy(update={"external_id": "x1"}))
        # When each rule is broken / Then a Conflict says which, in the store's own words
        cases = [
            (a_memory("m3").model_copy(update={"fact_key": "home:city"}), "another active memory holds this fact_key"),
            (a_memory("m4").model_copy(update={"external_id": "x1"}), "this external_id is already used"),
            (a_memory("m1"), "a row with this id already exists"),
        ]
        for row, message in cases:
            with pytest.raises(Conflict) as err:
                store.insert_memory(row)
            assert err.value.message == message
    finally:
        store.close()


def test_messages_stored_together_are_one_transaction(tmp_path: Path) -> None:
    # Given a store, and the statements its connection runs
    store = SqliteMemoryStore(tmp_path / "engram.db", clock=CLOCK)
    store.insert_message(Message(id="m0", namespace="alice", role="user", content="hi", created_at=T0))
    statements: list[str] = []
    db = store._connection()
    db.set_trace_callback(statements.append)

    def side(message_id: str, minute: int) -> Message:
        at = T0 + timedelta(minutes=minute)
        return Message(id=message_id, namespace="alice", role="user", content=message_id, created_at=at)

    try:
        # When a turn's two sides are stored together
        store.insert_messages([side("m1", 1), side("m2", 2)])
        # Then they are one transaction: one BEGIN, one COMMIT
        assert [s for s in statements if s.startswith(("BEGIN", "COMMIT"))] == ["BEGIN IMMEDIATE", "COMMIT"]
        # And a batch that breaks a rule half-way stores none of it (nor counts it in the thread)
        with pytest.raises(Conflict):
            store.insert_messages([side("m3", 3), side("m1", 4)])
        assert [m.id for m in store.list_messages("alice")] == ["m0", "m1", "m2"]
        assert store.get_thread("alice", "default").message_count == 3
    finally:
        db.set_trace_callback(None)
        store.close()


@pytest.mark.filterwarnings("ignore:Pydantic serializer warnings")  # the last row is built unvalidated on purpose
def test_json_columns_hold_what_pydantics_json_mode_gives() -> None:
    # Given rows of every table with JSON fields, in other scripts too, and a value json cannot dump as it is
    from engram.adapters.storage.sqlite import tables
    from engram.domain.models import DailyLog, GlossaryTerm

    rows: list[tuple[tables.Table[Any], BaseModel]] = [
        (tables.MEMORIES, a_memory("m1").model_copy(update={"tags": ("茶", "tea"), "source_message_ids": ("a",)})),
        (
            tables.MESSAGES,
            Message(id="x", namespace="alice", role="user", content="hi", created_at=T0, usage={"in": 3}),
        ),
        (
            tables.GLOSSARY,
            GlossaryTerm(
                id="g",
                namespace="alice",
                term="LGTM",
                aliases=("lgtm", "好"),
                definition="ok",
                created_at=T0,
                updated_at=T0,
            ),
        ),
        (
            tables.DAILY_LOGS,
            DailyLog(namespace="alice", date="2025-03-01", sections=({"h": "早上", "t": "tea"},), created_at=T0),
        ),
        (
            tables.MESSAGES,
            Message.model_construct(
                id="y",
                namespace="alice",
                role="user",
                content="hi",
                created_at=T0,
                usage={"at": T0},  # type: ignore[dict-item]  # what json cannot dump as it is
                conversation_id="default",
            ),
        ),
    ]
    for table, obj in rows:
        # When the table turns it into column values
        row = table.row(obj)
        # Then each JSON column is the text of pydantic's JSON mode, as before
        dumped = obj.model_dump(mode="json", include=set(table.json_fields))
        for column in table.json_fields:
            assert row[column] == json.dumps(dumped[column], ensure_ascii=False)
