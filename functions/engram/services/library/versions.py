"""Replacing a memory row at the version read (docs/ARCHITECTURE.md, "Write rules": who retries).

Every versioned replace of a memory goes through ``replace_memory``: the memory service's edits and the
index upkeep's ``index_ref`` (``services/index/upkeep.py``).
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable

from engram.domain.errors import Conflict, is_version_conflict, version_conflict
from engram.domain.models import Memory
from engram.domain.ports import MemoryRows

VERSION_ATTEMPTS = 8  # fresh reads of a row other writers keep changing, before a clean 409


def read_at(store: MemoryRows, namespace: str, memory_id: str, version: int | None) -> Memory:
    """The memory, refused (``version_conflict``) if it is no longer at the ``version`` the caller read."""
    memory = store.get_memory(namespace, memory_id)
    if version is not None and memory.version != version:
        raise version_conflict(memory_id, version, memory.version)
    return memory


def replace_memory(
    store: MemoryRows,
    namespace: str,
    memory_id: str,
    change: Callable[[Memory], Memory | None],
    *,
    version: int | None,
) -> tuple[Memory, Memory]:
    """Read the row, ``change`` it and write it back at the version read: (as read, as written; the
    same object when ``change`` found nothing to do). With ``version`` (what a person or a job read
    before deciding) a row that moved on is refused; without, a lost race is retried from a fresh
    read (docs/ARCHITECTURE.md, "Write rules")."""
    for attempt in range(VERSION_ATTEMPTS):
        back_off(attempt)
        memory = read_at(store, namespace, memory_id, version)
        changed = change(memory)
        if changed is None:
            return memory, memory
        try:
            return memory, store.update_memory(changed)
        except Conflict as exc:
            if version is not None or not is_version_conflict(exc):
                raise
    raise kept_changing(memory_id)


def back_off(attempt: int) -> None:
    """Before another round of a write that lost a race: let the winner finish; spread the retries."""
    if attempt:
        time.sleep(random.uniform(0, 0.005 * attempt))


def kept_changing(memory_id: str) -> Conflict:
    return Conflict(
        f"memory {memory_id} was changed by other writes at the same time {VERSION_ATTEMPTS} times in a row; try again",
        code="version_conflict",
    )
