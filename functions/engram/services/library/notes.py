"""The notes beside the memories: precious notes (kept verbatim), the glossary and the digest."""

from __future__ import annotations

from collections.abc import Sequence

from pydantic import BaseModel, ConfigDict, Field

from engram.domain.models import Digest, GlossaryTerm, Precious, new_id
from engram.domain.policies import clean_content, clean_digest, clean_tags
from engram.domain.ports import Clock, NoteRows


class GlossaryIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    term: str = Field(min_length=1, max_length=200)
    aliases: list[str] = Field(default_factory=list, max_length=50)
    definition: str = Field(min_length=1, max_length=2000)


class NoteService:
    def __init__(self, store: NoteRows, clock: Clock) -> None:
        self._store = store
        self._clock = clock

    # -- precious ---------------------------------------------------------------------------
    def add_precious(
        self,
        namespace: str,
        content: str,
        *,
        reason: str | None = None,
        tags: Sequence[str] = (),
        source: str = "api",
        source_message_ids: Sequence[str] = (),
    ) -> Precious:
        return self._store.insert_precious(
            Precious(
                id=new_id("prc"),
                namespace=namespace,
                content=clean_content(content),
                reason=reason,
                tags=clean_tags(tags),
                source=source,
                source_message_ids=tuple(source_message_ids),
                created_at=self._clock.now(),
            )
        )

    def list_precious(self, namespace: str, limit: int = 100) -> list[Precious]:
        return self._store.list_precious(namespace, limit=limit)

    def delete_precious(self, namespace: str, precious_id: str) -> None:
        self._store.delete_precious(namespace, precious_id)

    # -- glossary ---------------------------------------------------------------------------
    def set_term(self, namespace: str, body: GlossaryIn, term_id: str | None = None) -> GlossaryTerm:
        """Create a term, or replace one: by ``term_id``, else the existing term of the same name."""
        now = self._clock.now()
        existing: GlossaryTerm | None = None
        if term_id:
            existing = self._store.get_glossary_term(namespace, term_id)
        else:
            folded = body.term.strip().casefold()
            existing = next((t for t in self._store.list_glossary(namespace) if t.term.casefold() == folded), None)
        aliases = tuple(dict.fromkeys(a.strip() for a in body.aliases if a.strip()))
        return self._store.put_glossary_term(
            GlossaryTerm(
                id=existing.id if existing else new_id("gls"),
                namespace=namespace,
                term=body.term.strip(),
                aliases=aliases,
                definition=body.definition.strip(),
                created_at=existing.created_at if existing else now,
                updated_at=now,
            )
        )

    def list_glossary(self, namespace: str) -> list[GlossaryTerm]:
        return self._store.list_glossary(namespace)

    def get_term(self, namespace: str, term_id: str) -> GlossaryTerm:
        return self._store.get_glossary_term(namespace, term_id)

    def delete_term(self, namespace: str, term_id: str) -> None:
        self._store.delete_glossary_term(namespace, term_id)

    # -- digest ---------------------------------------------------------------------------
    def get_digest(self, namespace: str) -> Digest | None:
        return self._store.get_digest(namespace)

    def set_digest(self, namespace: str, content: str) -> Digest:
        return self._store.put_digest(
            Digest(namespace=namespace, content=clean_digest(content), updated_at=self._clock.now())
        )
