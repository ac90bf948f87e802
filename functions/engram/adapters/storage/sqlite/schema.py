"""The SQLite store's schema: ``MIGRATIONS`` builds and upgrades it (append a new tuple of statements
to change it, never edit a released one), applied in one write transaction on first use."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime

from engram.adapters.storage.common import to_iso

MIGRATIONS: tuple[tuple[str, ...], ...] = (
    # 1: every row kind of the MemoryStore port.
    (
        """CREATE TABLE memories (
            namespace TEXT NOT NULL,
            id TEXT NOT NULL,
            content TEXT NOT NULL,
            type TEXT NOT NULL,
            fact_key TEXT,
            layer TEXT NOT NULL,
            importance REAL NOT NULL,
            confidence REAL NOT NULL,
            pinned INTEGER NOT NULL,
            tags TEXT NOT NULL,
            status TEXT NOT NULL,
            supersedes_id TEXT,
            superseded_by_id TEXT,
            source TEXT NOT NULL,
            source_message_ids TEXT NOT NULL,
            external_id TEXT,
            remind_at TEXT,
            seen_count INTEGER NOT NULL,
            last_seen_at TEXT,
            last_injected_at TEXT,
            recall_count INTEGER NOT NULL,
            created_at TEXT NOT NULL,
            updated_at TEXT NOT NULL,
            status_changed_at TEXT,
            expires_at TEXT,
            index_ref TEXT,
            PRIMARY KEY (namespace, id)
        )""",
        "CREATE INDEX memories_by_status ON memories (namespace, status, created_at, id)",
        "CREATE INDEX memories_by_created ON memories (namespace, created_at, id)",
        """CREATE UNIQUE INDEX memories_active_fact_key ON memories (namespace, fact_key)
            WHERE status = 'active' AND fact_key IS NOT NULL""",
        "CREATE UNIQUE INDEX memories_external_id ON memories (namespace, external_id)",
        """CREATE INDEX memories_by_status_change
            ON memories (namespace, status, COALESCE(status_changed_at, updated_at), id)""",
        """CREATE INDEX memories_by_last_seen
            ON memories (namespace, status, COALESCE(last_seen_at, created_at), id)""",
        """CREATE TABLE candidates (
            namespace TEXT NOT NULL,
            id TEXT NOT NULL,
            content TEXT NOT NULL,
            type TEXT NOT NULL,
            fact_key TEXT,
            importance REAL NOT NULL,
            confidence REAL NOT NULL,
            tags TEXT NOT NULL,
            source TEXT NOT NULL,
            source_message_ids TEXT NOT NULL,
            status TEXT NOT NULL,
            target_memory_id TEXT,
            result_memory_id TEXT,
            decision_note TEXT,
            created_at TEXT NOT NULL,
            decided_at TEXT,
            PRIMARY KEY (namespace, id)
        )""",
        "CREATE INDEX candidates_by_status ON candidates (namespace, status, created_at, id)",
        "CREATE INDEX candidates_by_created ON candidates (namespace, created_at, id)",
        """CREATE TABLE messages (
            namespace TEXT NOT NULL,
            id TEXT NOT NULL,
            conversation_id TEXT NOT NULL,
            role TEXT NOT NULL,
            content TEXT NOT NULL,
            model TEXT,
            usage TEXT NOT NULL,
            external_id TEXT,
            created_at TEXT NOT NULL,
            PRIMARY KEY (namespace, id)
        )""",
        "CREATE INDEX messages_by_created ON messages (namespace, created_at, id)",
        "CREATE UNIQUE INDEX messages_external_id ON messages (namespace, external_id)",
        """CREATE TABLE precious (
            namespace TEXT NOT NULL,
            id TEXT NOT NULL,
            content TEXT NOT NULL,
            source TEXT NOT NULL,
            reason TEXT,
            tags TEXT NOT NULL,
            source_message_ids TEXT NOT NULL,
            created_at TEXT NOT NULL,
            PRIMARY KEY (namespace, id)
        )""",
        "CREATE INDEX precious_by_created ON precious (namespace, created_at, id)",
        """CREATE TABLE glossary (
            namespace TEXT NOT NULL,
            id TEXT NOT NULL,
            term TEXT NOT NULL,
            aliases TEXT NOT NULL,
            definition TEXT NOT NULL,
            created_at TEXT NOT NULL,
            updated_at TEXT NOT NULL,
            PRIMARY KEY (namespace, id)
        )""",
        """CREATE TABLE digests (
            namespace TEXT NOT NULL PRIMARY KEY,
            content TEXT NOT NULL,
            updated_at TEXT NOT NULL
        )""",
        """CREATE TABLE daily_logs (
            namespace TEXT NOT NULL,
            date TEXT NOT NULL,
            title TEXT NOT NULL,
            summary TEXT NOT NULL,
            sections TEXT NOT NULL,
            created_at TEXT NOT NULL,
            PRIMARY KEY (namespace, date)
        )""",
        """CREATE TABLE events (
            namespace TEXT NOT NULL,
            id TEXT NOT NULL,
            kind TEXT NOT NULL,
            memory_id TEXT,
            detail TEXT NOT NULL,
            created_at TEXT NOT NULL,
            PRIMARY KEY (namespace, id)
        )""",
        "CREATE INDEX events_by_created ON events (namespace, created_at, id)",
        "CREATE INDEX events_by_memory ON events (namespace, memory_id, created_at, id)",
        "CREATE INDEX events_by_kind ON events (namespace, kind, created_at, id)",
        """CREATE TABLE usage (
            namespace TEXT NOT NULL,
            id TEXT NOT NULL,
            model TEXT NOT NULL,
            input_tokens INTEGER NOT NULL,
            output_tokens INTEGER NOT NULL,
            cache_read_tokens INTEGER NOT NULL,
            cache_write_tokens INTEGER NOT NULL,
            created_at TEXT NOT NULL,
            PRIMARY KEY (namespace, id)
        )""",
        "CREATE INDEX usage_by_created ON usage (namespace, created_at, id)",
        """CREATE TABLE idempotency (
            namespace TEXT NOT NULL,
            key TEXT NOT NULL,
            value TEXT NOT NULL,
            created_at TEXT NOT NULL,
            PRIMARY KEY (namespace, key)
        )""",
        "CREATE INDEX idempotency_by_created ON idempotency (namespace, created_at)",
        """CREATE TABLE cursors (
            namespace TEXT NOT NULL,
            name TEXT NOT NULL,
            value TEXT NOT NULL,
            PRIMARY KEY (namespace, name)
        )""",
        """CREATE TABLE cache (
            namespace TEXT NOT NULL,
            key TEXT NOT NULL,
            value TEXT NOT NULL,
            expires_at TEXT,
            updated_at TEXT NOT NULL,
            PRIMARY KEY (namespace, key)
        )""",
    ),
    # 2: a stored chat turn notes why it got no answer (Message.error).
    ("ALTER TABLE messages ADD COLUMN error TEXT",),
    # 3: threads (docs/threads.md): one row per conversation, counted as messages arrive.
    (
        """CREATE TABLE threads (
            namespace TEXT NOT NULL,
            id TEXT NOT NULL,
            title TEXT,
            message_count INTEGER NOT NULL,
            last_message_at TEXT,
            created_at TEXT NOT NULL,
            deleted_at TEXT,
            PRIMARY KEY (namespace, id)
        )""",
        "CREATE INDEX messages_by_thread ON messages (namespace, conversation_id, created_at, id)",
        """INSERT INTO threads (namespace, id, title, message_count, last_message_at, created_at, deleted_at)
            SELECT namespace, conversation_id, NULL, COUNT(*), MAX(created_at), MIN(created_at), NULL
            FROM messages GROUP BY namespace, conversation_id""",
    ),
    # 4: reminders (docs/reminders.md): delivery state of each memory's remind_at.
    (
        """CREATE TABLE reminders (
            namespace TEXT NOT NULL,
            memory_id TEXT NOT NULL,
            remind_at TEXT NOT NULL,
            status TEXT NOT NULL,
            delivered_at TEXT,
            lease_owner TEXT,
            lease_until TEXT,
            PRIMARY KEY (namespace, memory_id)
        )""",
        "CREATE INDEX reminders_by_time ON reminders (namespace, status, remind_at, memory_id)",
    ),
    # 5: the order messages were stored in (extraction reads in it); older rows take created_at.
    (
        "ALTER TABLE messages ADD COLUMN stored_at TEXT",
        "UPDATE messages SET stored_at = created_at",
        "CREATE INDEX messages_by_stored ON messages (namespace, stored_at, id)",
    ),
    # 6: memory row versions (docs/ARCHITECTURE.md, "Write rules"); rows stored before read as version 1.
    ("ALTER TABLE memories ADD COLUMN version INTEGER NOT NULL DEFAULT 1",),
    # 7: the change journal in the event log (docs/journal.md): a run's record is the event whose id is
    # its run_id; the run's changes carry the run_id.
    (
        "ALTER TABLE events ADD COLUMN run_id TEXT",
        "CREATE INDEX events_by_run ON events (namespace, run_id, id) WHERE run_id IS NOT NULL",
        "CREATE INDEX events_runs ON events (namespace, created_at, id) WHERE id = run_id",
    ),
    # 8: the conversation a usage row was spent in (GET /v1/usage per thread); older rows have none.
    ("ALTER TABLE usage ADD COLUMN thread TEXT",),
    # 9: skills (README, "Skills"), which lived in a skills.db of their own before; sqlite/skills.py
    # copies such a file in on first start. Vectors are float32 bytes.
    (
        """CREATE TABLE skills (
            namespace TEXT NOT NULL,
            name TEXT NOT NULL,
            version INTEGER NOT NULL,
            description TEXT NOT NULL,
            tags TEXT NOT NULL,
            agents TEXT NOT NULL,
            created_at TEXT NOT NULL,
            updated_at TEXT NOT NULL,
            deleted_at TEXT,
            PRIMARY KEY (namespace, name)
        )""",
        """CREATE TABLE skill_versions (
            namespace TEXT NOT NULL,
            name TEXT NOT NULL,
            version INTEGER NOT NULL,
            content TEXT NOT NULL,
            description TEXT NOT NULL,
            tags TEXT NOT NULL,
            files TEXT NOT NULL,
            digest TEXT NOT NULL,
            restored_from INTEGER,
            created_at TEXT NOT NULL,
            PRIMARY KEY (namespace, name, version)
        )""",
        """CREATE TABLE skill_vectors (
            namespace TEXT NOT NULL,
            name TEXT NOT NULL,
            version INTEGER NOT NULL,
            model_id TEXT NOT NULL,
            vector BLOB NOT NULL,
            PRIMARY KEY (namespace, name)
        )""",
    ),
    # 10: the memory change log (sqlite/row_cache.py): every insert, update and delete of a memory row
    # appends its key, whoever writes; every thousandth change prunes it to its newest 10,000.
    (
        """CREATE TABLE memory_changes (
            seq INTEGER PRIMARY KEY AUTOINCREMENT,
            namespace TEXT NOT NULL,
            id TEXT NOT NULL
        )""",
        """CREATE TRIGGER memories_inserted AFTER INSERT ON memories BEGIN
            INSERT INTO memory_changes (namespace, id) VALUES (new.namespace, new.id);
        END""",
        """CREATE TRIGGER memories_updated AFTER UPDATE ON memories BEGIN
            INSERT INTO memory_changes (namespace, id) VALUES (old.namespace, old.id);
            INSERT INTO memory_changes (namespace, id) SELECT new.namespace, new.id
                WHERE new.namespace != old.namespace OR new.id != old.id;
        END""",
        """CREATE TRIGGER memories_deleted AFTER DELETE ON memories BEGIN
            INSERT INTO memory_changes (namespace, id) VALUES (old.namespace, old.id);
        END""",
        """CREATE TRIGGER memory_changes_pruned AFTER INSERT ON memory_changes WHEN new.seq % 1000 = 0 BEGIN
            DELETE FROM memory_changes WHERE seq <= new.seq - 10000;
        END""",
    ),
)
SCHEMA_VERSION = len(MIGRATIONS)


@contextmanager
def immediate(db: sqlite3.Connection) -> Iterator[sqlite3.Connection]:
    """One write transaction, taken up front so concurrent writers queue instead of deadlocking."""
    db.execute("BEGIN IMMEDIATE")
    try:
        yield db
    except BaseException:
        db.execute("ROLLBACK")
        raise
    db.execute("COMMIT")


def migrate(db: sqlite3.Connection, now: datetime) -> None:
    """Apply the migrations not applied yet, each stamped ``now`` (the store's clock)."""
    db.execute("CREATE TABLE IF NOT EXISTS schema_version (version INTEGER PRIMARY KEY, applied_at TEXT NOT NULL)")
    with immediate(db):
        (current,) = db.execute("SELECT COALESCE(MAX(version), 0) FROM schema_version").fetchone()
        for version, statements in enumerate(MIGRATIONS[current:], start=current + 1):
            for statement in statements:
                db.execute(statement)
            db.execute("INSERT INTO schema_version (version, applied_at) VALUES (?, ?)", (version, to_iso(now)))
