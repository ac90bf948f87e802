"""The review queue (candidates): what jobs propose, the owner decides (REST `/v1/candidates`)."""

from __future__ import annotations

from collections.abc import Sequence

from engram.domain.errors import Conflict, NotFound
from engram.domain.models import Candidate, Memory, MemoryType, Page, new_id
from engram.domain.policies import clean_content, clean_tags, normalize_fact_key
from engram.domain.ports import CandidateRows, Clock
from engram.services.library.memories import MemoryService, MemoryWrite, WriteResult


class CandidateService:
    def __init__(self, store: CandidateRows, memories: MemoryService, clock: Clock) -> None:
        self._store = store
        self._memories = memories
        self._clock = clock

    def propose(
        self,
        namespace: str,
        content: str,
        *,
        type: MemoryType = "fact",
        fact_key: str | None = None,
        importance: float = 0.5,
        confidence: float = 0.5,
        tags: Sequence[str] = (),
        source: str = "extraction",
        source_message_ids: Sequence[str] = (),
        target_memory_id: str | None = None,
    ) -> Candidate:
        candidate = Candidate(
            id=new_id("cand"),
            namespace=namespace,
            content=clean_content(content),
            type=type,
            fact_key=normalize_fact_key(fact_key) if fact_key else None,
            importance=importance,
            confidence=confidence,
            tags=clean_tags(tags),
            source=source,
            source_message_ids=tuple(source_message_ids),
            target_memory_id=target_memory_id,
            created_at=self._clock.now(),
        )
        return self._store.insert_candidate(candidate)

    def list_candidates(
        self, namespace: str, status: str | None = "pending", *, limit: int = 50, cursor: str | None = None
    ) -> Page[Candidate]:
        return self._store.list_candidates(namespace, status, limit=limit, cursor=cursor)

    def get(self, namespace: str, candidate_id: str) -> Candidate:
        return self._store.get_candidate(namespace, candidate_id)

    def approve(
        self, namespace: str, candidate_id: str, *, content: str | None = None, note: str | None = None
    ) -> tuple[Candidate, WriteResult]:
        """Turn the candidate into a memory: a new version of the memory it targets while that one is
        active (keeping its pin and layer: how a change automation proposed to a pinned or core memory
        lands), else an upsert when it has a fact key, else a new memory."""
        candidate = self._pending(namespace, candidate_id)
        target = self._live_target(namespace, candidate)
        if target is not None:
            result = self._memories.supersede(namespace, target.id, self._as_write(candidate, content, target))
            return self._decide(candidate, "approved", result.memory.id, note, target=target.id), result
        result = self._memories.write(namespace, self._as_write(candidate, content))
        return self._decide(candidate, "approved", result.memory.id, note), result

    def discard(self, namespace: str, candidate_id: str, *, note: str | None = None) -> Candidate:
        candidate = self._pending(namespace, candidate_id)
        return self._decide(candidate, "discarded", None, note)

    def merge(
        self, namespace: str, candidate_id: str, target_id: str, *, content: str | None = None, note: str | None = None
    ) -> tuple[Candidate, WriteResult]:
        """Fold the candidate into ``target_id``: with ``content`` the target gets a new version with
        that merged text; without, the target is marked seen (the candidate confirmed it)."""
        candidate = self._pending(namespace, candidate_id)
        target = self._memories.get(namespace, target_id)
        if content:
            result = self._memories.supersede(namespace, target.id, self._as_write(candidate, content, target))
        else:
            result = WriteResult(self._memories.mark_seen(namespace, target.id), "seen", reason="merged candidate")
        return self._decide(candidate, "merged", result.memory.id, note, target=target.id), result

    def supersede(
        self, namespace: str, candidate_id: str, target_id: str, *, content: str | None = None, note: str | None = None
    ) -> tuple[Candidate, WriteResult]:
        """Replace ``target_id`` by the candidate's text (a new version of the target)."""
        candidate = self._pending(namespace, candidate_id)
        target = self._memories.get(namespace, target_id)
        result = self._memories.supersede(namespace, target.id, self._as_write(candidate, content, target))
        return self._decide(candidate, "approved", result.memory.id, note, target=target.id), result

    # -- internals --------------------------------------------------------------------------
    def _pending(self, namespace: str, candidate_id: str) -> Candidate:
        candidate = self._store.get_candidate(namespace, candidate_id)
        if candidate.status != "pending":
            raise Conflict(f"candidate {candidate_id} was already {candidate.status}")
        return candidate

    def _live_target(self, namespace: str, candidate: Candidate) -> Memory | None:
        if candidate.target_memory_id is None:
            return None
        try:
            target = self._memories.get(namespace, candidate.target_memory_id)
        except NotFound:
            return None
        return target if target.status == "active" else None

    def _as_write(self, candidate: Candidate, content: str | None, target: Memory | None = None) -> MemoryWrite:
        """The memory an accepted candidate writes; a new version of ``target`` keeps its fact key, pin and layer."""
        return MemoryWrite(
            content=content or candidate.content,
            type=candidate.type,
            fact_key=(target.fact_key if target else None) or candidate.fact_key,
            layer=target.layer if target else "fragment",
            pinned=target.pinned if target else False,
            importance=candidate.importance,
            confidence=max(candidate.confidence, 0.9),  # the owner vouched for it
            tags=list(candidate.tags),
            source="review",
            source_message_ids=list(candidate.source_message_ids),
        )

    def _decide(
        self, candidate: Candidate, status: str, result_id: str | None, note: str | None, *, target: str | None = None
    ) -> Candidate:
        decided = candidate.model_copy(
            update={
                "status": status,
                "result_memory_id": result_id,
                "target_memory_id": target or candidate.target_memory_id,
                "decision_note": note,
                "decided_at": self._clock.now(),
            }
        )
        return self._store.update_candidate(decided)
