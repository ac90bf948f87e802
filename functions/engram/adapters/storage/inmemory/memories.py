"""Memories and review candidates in process memory."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime

from engram.adapters.storage.common import check_limit, check_supersede, empty_memory_counts, memory_matches, replaced
from engram.adapters.storage.inmemory.base import InMemoryStoreBase, oldest_first, page
from engram.domain.errors import Conflict, NotFound, version_conflict
from engram.domain.models import MEMORY_COUNTERS, Candidate, Memory, MemoryFilter, Page


class InMemoryMemories(InMemoryStoreBase):
    # -- memories -------------------------------------------------------------------------
    @staticmethod
    def _check_memory_unique(memory: Memory, rows: dict[str, Memory]) -> None:
        """Raise ``Conflict`` if ``memory`` breaks a uniqueness rule among ``rows`` (its namespace)."""
        if memory.external_id is None and (memory.fact_key is None or memory.status != "active"):
            return  # no rule can apply: skip the scan (it ran on every write)
        for other in rows.values():
            if other.id == memory.id:
                continue
            same_key = memory.fact_key is not None and other.fact_key == memory.fact_key
            if same_key and memory.status == "active" and other.status == "active":
                raise Conflict(f"fact_key {memory.fact_key!r} already has an active memory ({other.id})")
            if memory.external_id is not None and other.external_id == memory.external_id:
                raise Conflict(f"external_id {memory.external_id!r} is already used by memory {other.id}")

    def insert_memory(self, memory: Memory) -> Memory:
        with self._lock:
            rows = self._memories.setdefault(memory.namespace, {})
            if memory.id in rows:
                raise Conflict(f"memory {memory.id} already exists")
            self._check_memory_unique(memory, rows)
            rows[memory.id] = memory
            return memory

    def _checked_replace(self, memory: Memory, rows: dict[str, Memory]) -> Memory:
        """The row to store for a replace of ``memory`` (read at its version): the stored counters
        kept, one version on. The caller holds the lock."""
        current = rows.get(memory.id)
        if current is None:
            raise NotFound(f"memory {memory.id} not found")
        if current.version != memory.version:
            raise version_conflict(memory.id, memory.version, current.version)
        counters = {name: getattr(current, name) for name in MEMORY_COUNTERS}
        return memory.model_copy(update={**counters, "version": memory.version + 1})

    def update_memory(self, memory: Memory) -> Memory:
        return self.update_memories([memory])[0]

    def update_memories(self, memories: Sequence[Memory]) -> list[Memory]:
        with self._lock:
            after: dict[str, dict[str, Memory]] = {}
            for memory in memories:
                rows = after.setdefault(memory.namespace, dict(self._memories.get(memory.namespace, {})))
                rows[memory.id] = self._checked_replace(memory, rows)
            # Check every row against the state after all the replaces before touching anything.
            for memory in memories:
                self._check_memory_unique(memory, after[memory.namespace])
            for namespace, rows in after.items():
                self._memories[namespace] = rows
            return [replaced(memory) for memory in memories]

    def record_injected(self, namespace: str, memory_ids: Sequence[str], at: datetime) -> None:
        with self._lock:
            rows = self._memories.get(namespace, {})
            for memory_id in dict.fromkeys(memory_ids):
                if (memory := rows.get(memory_id)) is not None:
                    rows[memory_id] = memory.model_copy(
                        update={"recall_count": memory.recall_count + 1, "last_injected_at": at}
                    )

    def record_seen(self, namespace: str, memory_id: str, at: datetime) -> Memory:
        with self._lock:
            memory = self.get_memory(namespace, memory_id)
            seen = memory.model_copy(update={"seen_count": memory.seen_count + 1, "last_seen_at": at})
            self._memories[namespace][memory_id] = seen
            return seen

    def get_memory(self, namespace: str, memory_id: str) -> Memory:
        with self._lock:
            memory = self._memories.get(namespace, {}).get(memory_id)
        if memory is None:
            raise NotFound(f"memory {memory_id} not found")
        return memory

    def get_memories(self, namespace: str, memory_ids: Sequence[str]) -> list[Memory]:
        with self._lock:
            rows = self._memories.get(namespace, {})
            return [rows[memory_id] for memory_id in memory_ids if memory_id in rows]

    def find_active_by_fact_key(self, namespace: str, fact_key: str) -> Memory | None:
        with self._lock:
            rows = self._memories.get(namespace, {}).values()
            return next((m for m in rows if m.status == "active" and m.fact_key == fact_key), None)

    def find_by_external_id(self, namespace: str, external_id: str) -> Memory | None:
        with self._lock:
            rows = self._memories.get(namespace, {}).values()
            return next((m for m in rows if m.external_id == external_id), None)

    def list_memories(
        self, namespace: str, filters: MemoryFilter, *, limit: int = 50, cursor: str | None = None
    ) -> Page[Memory]:
        with self._lock:
            rows = [m for m in self._memories.get(namespace, {}).values() if memory_matches(m, filters)]
        return page(rows, limit, cursor)

    def iter_memories(self, namespace: str, statuses: Sequence[str] = ()) -> Iterable[Memory]:
        with self._lock:
            rows = [m for m in self._memories.get(namespace, {}).values() if not statuses or m.status in statuses]
        return oldest_first(rows)

    def supersede(self, old: Memory, new: Memory) -> tuple[Memory, Memory]:
        stored, new = self.supersede_many([old], new)
        return stored[0], new

    def supersede_many(self, olds: Sequence[Memory], new: Memory) -> tuple[list[Memory], Memory]:
        check_supersede(olds, new)
        with self._lock:
            rows = self._memories.get(new.namespace, {})
            after = dict(rows)
            for old in olds:
                after[old.id] = self._checked_replace(old, after)
            if new.id in rows:
                raise Conflict(f"memory {new.id} already exists")
            after[new.id] = new
            # Check every row against the state after the swap before touching anything.
            for row in (*olds, new):
                self._check_memory_unique(row, after)
            rows.update({old.id: after[old.id] for old in olds})
            rows[new.id] = new
            return [replaced(old) for old in olds], new

    def delete_memory_row(self, namespace: str, memory_id: str, *, version: int | None = None) -> bool:
        with self._lock:
            rows = self._memories.get(namespace, {})
            current = rows.get(memory_id)
            if current is None:
                return False
            if version is not None and current.version != version:
                raise version_conflict(memory_id, version, current.version)
            del rows[memory_id]
            return True

    def count_memories(self, namespace: str) -> dict[str, dict[str, int]]:
        counts = empty_memory_counts()
        with self._lock:
            for memory in self._memories.get(namespace, {}).values():
                counts["status"][memory.status] += 1
                if memory.status == "active":
                    counts["type"][memory.type] += 1
                    counts["layer"][memory.layer] += 1
        return counts

    def memories_changed_before(
        self, namespace: str, statuses: Sequence[str], before: datetime, *, limit: int = 500
    ) -> list[Memory]:
        check_limit(limit)

        def changed_at(memory: Memory) -> datetime:
            return memory.status_changed_at or memory.updated_at

        with self._lock:
            rows = [
                m for m in self._memories.get(namespace, {}).values() if m.status in statuses and changed_at(m) < before
            ]
        return sorted(rows, key=lambda m: (changed_at(m), m.id))[:limit]

    def memories_unseen_since(
        self, namespace: str, before: datetime, *, limit: int = 500, after: tuple[datetime, str] | None = None
    ) -> list[Memory]:
        check_limit(limit)

        def order(memory: Memory) -> tuple[datetime, str]:
            return memory.last_seen_at or memory.created_at, memory.id

        with self._lock:
            rows = self._memories.get(namespace, {}).values()
            unseen = [m for m in rows if m.status == "active" and order(m)[0] < before]
        return sorted((m for m in unseen if after is None or order(m) > after), key=order)[:limit]

    # -- review candidates ----------------------------------------------------------------
    def insert_candidate(self, candidate: Candidate) -> Candidate:
        with self._lock:
            rows = self._candidates.setdefault(candidate.namespace, {})
            if candidate.id in rows:
                raise Conflict(f"candidate {candidate.id} already exists")
            rows[candidate.id] = candidate
            return candidate

    def update_candidate(self, candidate: Candidate) -> Candidate:
        with self._lock:
            self.get_candidate(candidate.namespace, candidate.id)
            self._candidates[candidate.namespace][candidate.id] = candidate
            return candidate

    def get_candidate(self, namespace: str, candidate_id: str) -> Candidate:
        with self._lock:
            candidate = self._candidates.get(namespace, {}).get(candidate_id)
        if candidate is None:
            raise NotFound(f"candidate {candidate_id} not found")
        return candidate

    def list_candidates(
        self, namespace: str, status: str | None = "pending", *, limit: int = 50, cursor: str | None = None
    ) -> Page[Candidate]:
        with self._lock:
            rows = [c for c in self._candidates.get(namespace, {}).values() if status is None or c.status == status]
        return page(rows, limit, cursor)
