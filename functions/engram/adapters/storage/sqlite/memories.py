"""Memories and review candidates in the SQLite store."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any

from engram.adapters.storage.common import check_limit, check_supersede, empty_memory_counts, replaced, to_iso
from engram.adapters.storage.sqlite.base import SqliteStoreBase
from engram.adapters.storage.sqlite.tables import CANDIDATES, IDS_PER_QUERY, ITER_CHUNK, MEMORIES, marks
from engram.domain.errors import NotFound, version_conflict
from engram.domain.models import MEMORY_COUNTERS, Candidate, Memory, MemoryFilter, Page

# A replace writes every column but the key, the counters and the version, at the version it read
# (docs/ARCHITECTURE.md, "Write rules").
_REPLACED = tuple(c for c in MEMORIES.columns if c not in ("namespace", "id", "version", *MEMORY_COUNTERS))
_REPLACE_SQL = (
    f"UPDATE memories SET {', '.join(f'{c} = ?' for c in _REPLACED)}, version = version + 1"
    " WHERE namespace = ? AND id = ? AND version = ?"
)


def _replace(db: sqlite3.Connection, memory: Memory) -> Memory:
    """Replace the row read at ``memory.version``, inside the caller's session or transaction."""
    row = MEMORIES.row(memory)
    params = [*(row[c] for c in _REPLACED), memory.namespace, memory.id, memory.version]
    if db.execute(_REPLACE_SQL, params).rowcount == 0:
        found = db.execute(
            "SELECT version FROM memories WHERE namespace = ? AND id = ?", (memory.namespace, memory.id)
        ).fetchone()
        if found is None:
            raise NotFound(f"memory {memory.id} not found")
        raise version_conflict(memory.id, memory.version, found[0])
    return replaced(memory)


def memory_filter_sql(filters: MemoryFilter) -> tuple[str, list[Any]]:
    statuses = filters.listed_statuses
    clauses = [f"status IN ({marks(len(statuses))})"]
    params: list[Any] = list(statuses)
    if filters.types:
        clauses.append(f"type IN ({marks(len(filters.types))})")
        params.extend(filters.types)
    if filters.layer is not None:
        clauses.append("layer = ?")
        params.append(filters.layer)
    if filters.tag is not None:
        clauses.append("EXISTS (SELECT 1 FROM json_each(memories.tags) WHERE json_each.value = ?)")
        params.append(filters.tag)
    if filters.pinned is not None:
        clauses.append("pinned = ?")
        params.append(filters.pinned)
    if filters.fact_key is not None:
        clauses.append("fact_key = ?")
        params.append(filters.fact_key)
    return " AND ".join(clauses), params


class SqliteMemories(SqliteStoreBase):
    # -- memories -------------------------------------------------------------------------
    def insert_memory(self, memory: Memory) -> Memory:
        self._execute(MEMORIES.insert_sql, MEMORIES.insert_params(memory))
        return memory

    def update_memory(self, memory: Memory) -> Memory:
        with self._session() as db:
            return _replace(db, memory)

    def update_memories(self, memories: Sequence[Memory]) -> list[Memory]:
        # In the given order: a row that frees a fact_key goes before the one that takes it.
        with self._transaction() as db:
            return [_replace(db, memory) for memory in memories]

    def record_injected(self, namespace: str, memory_ids: Sequence[str], at: datetime) -> None:
        unique_ids = list(dict.fromkeys(memory_ids))
        with self._session() as db:
            for start in range(0, len(unique_ids), IDS_PER_QUERY):
                chunk = unique_ids[start : start + IDS_PER_QUERY]
                db.execute(
                    "UPDATE memories SET recall_count = recall_count + 1, last_injected_at = ?"
                    f" WHERE namespace = ? AND id IN ({marks(len(chunk))})",
                    [to_iso(at), namespace, *chunk],
                )

    def record_seen(self, namespace: str, memory_id: str, at: datetime) -> Memory:
        with self._session() as db:
            row = db.execute(
                "UPDATE memories SET seen_count = seen_count + 1, last_seen_at = ?"
                " WHERE namespace = ? AND id = ? RETURNING *",
                (to_iso(at), namespace, memory_id),
            ).fetchone()
        if row is None:
            raise NotFound(f"memory {memory_id} not found")
        return MEMORIES.load(row)

    def get_memory(self, namespace: str, memory_id: str) -> Memory:
        memory = self._select_one(MEMORIES, "namespace = ? AND id = ?", (namespace, memory_id))
        if memory is None:
            raise NotFound(f"memory {memory_id} not found")
        return memory

    def get_memories(self, namespace: str, memory_ids: Sequence[str]) -> list[Memory]:
        with self._reading() as db:
            if db.in_transaction:  # a row read here could still be rolled back: not cached (row_cache.py)
                return self._by_ids(MEMORIES, namespace, memory_ids)
            found = self._memory_rows.get(db, namespace, memory_ids, lambda ids: self._by_ids(MEMORIES, namespace, ids))
        return [found[memory_id] for memory_id in memory_ids if memory_id in found]

    def find_active_by_fact_key(self, namespace: str, fact_key: str) -> Memory | None:
        return self._select_one(MEMORIES, "namespace = ? AND fact_key = ? AND status = 'active'", (namespace, fact_key))

    def find_by_external_id(self, namespace: str, external_id: str) -> Memory | None:
        return self._select_one(MEMORIES, "namespace = ? AND external_id = ?", (namespace, external_id))

    def list_memories(
        self, namespace: str, filters: MemoryFilter, *, limit: int = 50, cursor: str | None = None
    ) -> Page[Memory]:
        where, params = memory_filter_sql(filters)
        return self._page(MEMORIES, f"namespace = ? AND {where}", [namespace, *params], limit, cursor)

    def iter_memories(self, namespace: str, statuses: Sequence[str] = ()) -> Iterable[Memory]:
        # Keyset-paginated so a large namespace is never held in memory nor the lock held between chunks.
        where = "namespace = ?"
        params: list[Any] = [namespace]
        if statuses:
            where += f" AND status IN ({marks(len(statuses))})"
            params.extend(statuses)
        after: list[Any] = []
        while True:
            clause = f"{where} AND (created_at, id) > (?, ?)" if after else where
            chunk = self._select(MEMORIES, f"{clause} ORDER BY created_at, id LIMIT ?", [*params, *after, ITER_CHUNK])
            yield from chunk
            if len(chunk) < ITER_CHUNK:
                return
            after = [to_iso(chunk[-1].created_at), chunk[-1].id]

    def supersede(self, old: Memory, new: Memory) -> tuple[Memory, Memory]:
        stored, new = self.supersede_many([old], new)
        return stored[0], new

    def supersede_many(self, olds: Sequence[Memory], new: Memory) -> tuple[list[Memory], Memory]:
        check_supersede(olds, new)
        with self._transaction() as db:
            # The old rows go first: they free the fact_key the new row takes.
            stored = [_replace(db, old) for old in olds]
            db.execute(MEMORIES.insert_sql, MEMORIES.insert_params(new))
        return stored, new

    def delete_memory_row(self, namespace: str, memory_id: str, *, version: int | None = None) -> bool:
        with self._session() as db:
            sql = "DELETE FROM memories WHERE namespace = ? AND id = ?"
            params: list[Any] = [namespace, memory_id]
            if version is not None:
                sql += " AND version = ?"
                params.append(version)
            if db.execute(sql, params).rowcount:
                return True
            found = db.execute(
                "SELECT version FROM memories WHERE namespace = ? AND id = ?", (namespace, memory_id)
            ).fetchone()
        if found is None:
            return False
        raise version_conflict(memory_id, version or 0, found[0])

    def count_memories(self, namespace: str) -> dict[str, dict[str, int]]:
        counts = empty_memory_counts()
        with self._reading() as db:
            rows = db.execute(
                "SELECT status, type, layer, COUNT(*) FROM memories WHERE namespace = ? GROUP BY status, type, layer",
                (namespace,),
            ).fetchall()
        for status, memory_type, layer, count in rows:
            counts["status"][status] += count
            if status == "active":
                counts["type"][memory_type] += count
                counts["layer"][layer] += count
        return counts

    def memories_changed_before(
        self, namespace: str, statuses: Sequence[str], before: datetime, *, limit: int = 500
    ) -> list[Memory]:
        check_limit(limit)
        if not statuses:
            return []
        changed_at = "COALESCE(status_changed_at, updated_at)"
        return self._select(
            MEMORIES,
            f"namespace = ? AND status IN ({marks(len(statuses))}) AND {changed_at} < ?"
            f" ORDER BY {changed_at}, id LIMIT ?",
            [namespace, *statuses, to_iso(before), limit],
        )

    def memories_unseen_since(
        self, namespace: str, before: datetime, *, limit: int = 500, after: tuple[datetime, str] | None = None
    ) -> list[Memory]:
        check_limit(limit)
        seen_at = "COALESCE(last_seen_at, created_at)"
        where, params = f"namespace = ? AND status = 'active' AND {seen_at} < ?", [namespace, to_iso(before)]
        if after is not None:
            where += f" AND ({seen_at} > ? OR ({seen_at} = ? AND id > ?))"
            params += [to_iso(after[0]), to_iso(after[0]), after[1]]
        return self._select(MEMORIES, f"{where} ORDER BY {seen_at}, id LIMIT ?", [*params, limit])

    # -- review candidates ----------------------------------------------------------------
    def insert_candidate(self, candidate: Candidate) -> Candidate:
        self._execute(CANDIDATES.insert_sql, CANDIDATES.insert_params(candidate))
        return candidate

    def update_candidate(self, candidate: Candidate) -> Candidate:
        if self._execute(CANDIDATES.update_sql, CANDIDATES.update_params(candidate)) == 0:
            raise NotFound(f"candidate {candidate.id} not found")
        return candidate

    def get_candidate(self, namespace: str, candidate_id: str) -> Candidate:
        candidate = self._select_one(CANDIDATES, "namespace = ? AND id = ?", (namespace, candidate_id))
        if candidate is None:
            raise NotFound(f"candidate {candidate_id} not found")
        return candidate

    def list_candidates(
        self, namespace: str, status: str | None = "pending", *, limit: int = 50, cursor: str | None = None
    ) -> Page[Candidate]:
        if status is None:
            return self._page(CANDIDATES, "namespace = ?", [namespace], limit, cursor)
        return self._page(CANDIDATES, "namespace = ? AND status = ?", [namespace, status], limit, cursor)
