"""Export every row kind of a namespace as JSON, and import the same format.

Import gives rows new ids (references between them are remapped), so one export can be imported
into any namespace of any store. Messages keep their idempotency key, so importing the same file
twice stores each message once; memories are skipped when an active memory already holds their
fact key or external id.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from engram.domain.errors import Conflict
from engram.domain.models import (
    Candidate,
    DailyLog,
    Digest,
    GlossaryTerm,
    Memory,
    Message,
    Precious,
    new_id,
)
from engram.domain.ports import Clock, MemoryStore
from engram.services.memories import MemoryService

EXPORT_VERSION = 1


class ExportRow(BaseModel):
    """Rows inside an export carry every field but the namespace."""

    model_config = ConfigDict(extra="allow")

    id: str | None = None


class ExportDocument(BaseModel):
    model_config = ConfigDict(extra="forbid")

    version: int = EXPORT_VERSION
    namespace: str | None = None
    exported_at: str | None = None
    memories: list[dict[str, Any]] = Field(default_factory=list)
    candidates: list[dict[str, Any]] = Field(default_factory=list)
    messages: list[dict[str, Any]] = Field(default_factory=list)
    precious: list[dict[str, Any]] = Field(default_factory=list)
    glossary: list[dict[str, Any]] = Field(default_factory=list)
    digest: dict[str, Any] | None = None
    daily_logs: list[dict[str, Any]] = Field(default_factory=list)


def _dump(row: BaseModel) -> dict[str, Any]:
    data = row.model_dump(mode="json")
    data.pop("namespace", None)
    return data


class TransferService:
    def __init__(self, store: MemoryStore, memories: MemoryService, clock: Clock) -> None:
        self._store = store
        self._memories = memories
        self._clock = clock

    def export(self, namespace: str) -> dict[str, Any]:
        candidates = []
        cursor = None
        while True:
            page = self._store.list_candidates(namespace, None, limit=500, cursor=cursor)
            candidates.extend(page.items)
            if not page.next_cursor:
                break
            cursor = page.next_cursor
        digest = self._store.get_digest(namespace)
        return ExportDocument(
            namespace=namespace,
            exported_at=self._clock.now().isoformat(),
            memories=[_dump(m) for m in self._store.iter_memories(namespace)],
            candidates=[_dump(c) for c in sorted(candidates, key=lambda c: (c.created_at, c.id))],
            messages=[_dump(m) for m in self._all_messages(namespace)],
            precious=[
                _dump(p)
                for p in sorted(
                    self._store.list_precious(namespace, limit=1_000_000), key=lambda p: (p.created_at, p.id)
                )
            ],
            glossary=[_dump(g) for g in self._store.list_glossary(namespace)],
            digest=_dump(digest) if digest else None,
            daily_logs=[_dump(d) for d in self._store.list_daily_logs(namespace, limit=100_000)],
        ).model_dump()

    def _all_messages(self, namespace: str) -> list[Message]:
        out: list[Message] = []
        after: str | None = None
        while True:
            batch = self._store.list_messages(namespace, limit=1000, after_id=after)
            out.extend(batch)
            if len(batch) < 1000:
                return out
            after = batch[-1].id

    def import_(self, namespace: str, document: ExportDocument) -> dict[str, Any]:
        """Validate every row first (nothing is written if one is invalid), then write."""
        ids: dict[str, str] = {}

        def remap(old: str | None, prefix: str) -> str:
            if old is None:
                return new_id(prefix)
            if old not in ids:
                ids[old] = new_id(prefix)
            return ids[old]

        def ref(old: str | None) -> str | None:
            return ids.get(old) if old else None

        def parse(model: type[BaseModel], rows: list[dict[str, Any]], prefix: str) -> list[Any]:
            return [
                model.model_validate({**row, "namespace": namespace, "id": remap(row.get("id"), prefix)})
                for row in rows
            ]

        memories: list[Memory] = parse(Memory, document.memories, "mem")
        messages: list[Message] = parse(Message, document.messages, "msg")
        candidates: list[Candidate] = parse(Candidate, document.candidates, "cand")
        precious: list[Precious] = parse(Precious, document.precious, "prc")
        glossary: list[GlossaryTerm] = parse(GlossaryTerm, document.glossary, "gls")
        logs = [DailyLog.model_validate({**row, "namespace": namespace}) for row in document.daily_logs]
        digest = Digest.model_validate({**document.digest, "namespace": namespace}) if document.digest else None

        counts = {k: 0 for k in ("memories", "messages", "candidates", "precious", "glossary", "daily_logs", "digest")}
        skipped = dict.fromkeys(counts, 0)

        def put(kind: str, write: Callable[[Any], Any], row: Any) -> Any:
            try:
                result = write(row)
            except Conflict:
                skipped[kind] += 1
                return None
            counts[kind] += 1
            return result

        for msg in messages:
            row = msg.model_copy(update={"external_id": msg.external_id or f"import:{msg.id}"})
            _, created = self._store.insert_message(row)
            counts["messages"] += int(created)
            skipped["messages"] += int(not created)
        inserted: list[str] = []
        for memory in memories:
            fixed = memory.model_copy(
                update={
                    "supersedes_id": ref(memory.supersedes_id),
                    "superseded_by_id": ref(memory.superseded_by_id),
                    "source_message_ids": tuple(ids.get(i, i) for i in memory.source_message_ids),
                    "index_ref": None,
                }
            )
            if put("memories", self._store.insert_memory, fixed) is not None:
                inserted.append(fixed.id)
        for cand in candidates:
            fixed_c = cand.model_copy(
                update={"target_memory_id": ref(cand.target_memory_id), "result_memory_id": ref(cand.result_memory_id)}
            )
            put("candidates", self._store.insert_candidate, fixed_c)
        for note in precious:
            put("precious", self._store.insert_precious, note)
        for term in glossary:
            put("glossary", self._store.put_glossary_term, term)
        for log in logs:
            put("daily_logs", self._store.put_daily_log, log)
        if digest is not None:
            put("digest", self._store.put_digest, digest)
        indexed = self._memories.reindex_ids(namespace, inserted)
        return {"imported": counts, "skipped": skipped, "indexed": indexed}
