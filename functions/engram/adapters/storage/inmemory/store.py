"""``InMemoryMemoryStore``: the ``MemoryStore`` port in process memory, one part per concern."""

from __future__ import annotations

from engram.adapters.storage.inmemory.memories import InMemoryMemories
from engram.adapters.storage.inmemory.messages import InMemoryMessages
from engram.adapters.storage.inmemory.notes import InMemoryNotes
from engram.adapters.storage.inmemory.records import InMemoryRecords


class InMemoryMemoryStore(InMemoryMemories, InMemoryMessages, InMemoryNotes, InMemoryRecords):
    """Dicts keyed by namespace, then by id; one re-entrant lock makes every call atomic."""
