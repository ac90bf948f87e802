"""``MemoryStore`` in process memory: for tests and ``ENGRAM_STORE=memory`` (lost on exit).

Rows are frozen models, so they are kept and handed out as they are. Cache values are stored as
JSON text, like every other adapter does, so a value that cannot be persisted fails here too.

Modules: ``base.py`` (the dicts, the lock, ordering and paging); ``store.py`` composes
``InMemoryMemoryStore`` from one part per concern, as the SQLite and DynamoDB stores do:
``memories.py``, ``messages.py``, ``notes.py``, ``records.py``.
"""

from engram.adapters.storage.inmemory.store import InMemoryMemoryStore

__all__ = ["InMemoryMemoryStore"]
