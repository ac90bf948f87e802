"""``SqliteMemoryStore``: the ``MemoryStore`` port in one SQLite file, one part per concern."""

from __future__ import annotations

from engram.adapters.storage.sqlite.memories import SqliteMemories
from engram.adapters.storage.sqlite.messages import SqliteMessages
from engram.adapters.storage.sqlite.notes import SqliteNotes
from engram.adapters.storage.sqlite.records import SqliteRecords


class SqliteMemoryStore(SqliteMemories, SqliteMessages, SqliteNotes, SqliteRecords):
    """The store in one SQLite file at ``path`` (parent directories are created on first use)."""
