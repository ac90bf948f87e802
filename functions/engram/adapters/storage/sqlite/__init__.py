"""``MemoryStore`` in one SQLite file: the local default (``ENGRAM_STORE=sqlite``).

Writes run on one connection in autocommit mode, shared across threads and guarded by a re-entrant
lock (the HTTP app calls the store from a thread pool); reads on a small pool of read connections
without that lock (``readers.py``): WAL lets them, and other connections (the local search index keeps
its ``search_*`` tables in the same file), read while the writer writes. Filterable fields are plain
columns named like the model fields; list and dict fields are JSON text. Timestamps are fixed-width
ISO-8601 UTC text, so text order is time order. The schema is created on first use and upgraded by
``schema.MIGRATIONS``: append a new tuple of statements to change it, never edit a released one.

Modules: ``schema.py`` (migrations), ``tables.py`` (model <-> row mapping), ``base.py`` (the writing
connection, sessions, selects, paging), ``readers.py`` (the read connections), ``row_cache.py`` (the
memory rows ``get_memories`` serves from memory); ``store.py`` composes ``SqliteMemoryStore`` from one
part per concern: ``memories.py`` (memories, candidates), ``messages.py`` (messages, threads),
``notes.py`` (reminders, precious, glossary, digest, daily logs), ``records.py`` (events, usage,
idempotency, cursors, cache).
"""

from engram.adapters.storage.sqlite.schema import SCHEMA_VERSION
from engram.adapters.storage.sqlite.store import SqliteMemoryStore

__all__ = ["SCHEMA_VERSION", "SqliteMemoryStore"]
