"""Ports: what the services need from the outside world (docs/ARCHITECTURE.md, "Ports and their adapters").

Each port is a ``typing.Protocol``; every adapter of a port passes the same contract suite in
``tests/contract``. Ports are synchronous except ``ChatModel`` and ``ChatUpstream`` (network calls).
Invariants are stated in the docstrings; the contract tests check them. Over 400 lines on purpose:
signatures and invariants only, every port in one file, so the whole seam between the layers reads in one place.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any, Protocol, runtime_checkable

from engram.domain.models import (
    Candidate,
    DailyLog,
    Digest,
    GlossaryTerm,
    IdempotencyRecord,
    IndexedDoc,
    IndexInfo,
    Memory,
    MemoryEvent,
    MemoryFilter,
    Message,
    Page,
    Precious,
    Reminder,
    SearchHit,
    Thread,
    UsageRecord,
)
from engram.domain.skills import Skill, SkillVector, SkillVersion

# -- the store: one protocol per kind of row --------------------------------------------------
# Every store adapter (SQLite, DynamoDB, in-memory) implements all of them: ``MemoryStore`` is their
# union. A service asks only for the protocols it uses (e.g. ``services/recall/pipeline.RecallStore``). For all:
# - A read with namespace ``A`` never returns a row of namespace ``B``; ids are only unique within the
#   store, so a lookup by id is always scoped by namespace.
# - Listings are ordered newest first (``created_at`` desc, then id desc) unless a method says otherwise,
#   and paginate with an opaque cursor; a cursor from one listing is only valid for the same filters.
# - Writes are visible to the next read at once (read-your-writes).
# - ``get_*`` raise ``NotFound`` for unknown ids; ``find_*`` return ``None``.


@runtime_checkable
class MemoryRows(Protocol):
    """Memories. At most one ``active`` memory per (namespace, fact_key): ``insert_memory`` raises
    ``Conflict`` if the key is taken, ``supersede`` swaps the two rows atomically; ``insert_memory``
    with an ``external_id`` already used in the namespace raises ``Conflict``.

    Write rules (docs/ARCHITECTURE.md, "Write rules"):
    - Versions. A row carries ``version`` (rows stored before versions existed read as 1). Every write
      that replaces a row (``update_memory``, ``update_memories``, the old row of ``supersede``, a
      ``delete_memory_row`` given a version) is conditional on the stored row still being at the
      ``version`` of the ``Memory`` passed in — the one the caller read — and stores it at
      ``version + 1``. If the row moved on, nothing is written and ``Conflict`` with code
      ``version_conflict`` is raised (``NotFound`` if the row is gone). The returned rows are the
      arguments at their new version.
    - Counters. ``seen_count``, ``last_seen_at``, ``recall_count`` and ``last_injected_at``
      (``models.MEMORY_COUNTERS``) change only through ``record_injected`` and ``record_seen``: atomic
      increments of those attributes alone, which never change the version, the status or the content.
      A replace never writes them (the stored counters stay as they are; the returned row holds the
      caller's), so a replace and a bump never undo each other. ``insert_memory`` stores them as given.
    - Transactions. ``supersede`` and ``update_memories`` write all their rows or none.
    """

    def insert_memory(self, memory: Memory) -> Memory:
        """Store a new row as given (its version and counters included; new rows start at version 1)."""
        ...

    def update_memory(self, memory: Memory) -> Memory:
        """Replace the row with the same (namespace, id), read at ``memory.version``; ``NotFound`` if
        absent, ``Conflict`` (``version_conflict``) if it changed since, ``Conflict`` if the new row
        takes a fact_key or external_id another row holds."""
        ...

    def update_memories(self, memories: Sequence[Memory]) -> list[Memory]:
        """Replace several rows in one transaction, each as ``update_memory`` would (all or none). The
        uniqueness rules hold for the state after all of them (a row that frees a fact_key and the one
        that takes it can go together: ``restore`` revives an old version and supersedes the holder)."""
        ...

    def record_injected(self, namespace: str, memory_ids: Sequence[str], at: datetime) -> None:
        """``recall_count + 1`` and ``last_injected_at = at`` on each memory that exists (unknown ids are
        skipped): one atomic increment per row, whatever its status."""
        ...

    def record_seen(self, namespace: str, memory_id: str, at: datetime) -> Memory:
        """``seen_count + 1`` and ``last_seen_at = at``, atomically; the row after it. ``NotFound`` if absent."""
        ...

    def get_memory(self, namespace: str, memory_id: str) -> Memory: ...

    def get_memories(self, namespace: str, memory_ids: Sequence[str]) -> list[Memory]:
        """The memories with these ids in the namespace, in the given order; unknown ids skipped."""
        ...

    def find_active_by_fact_key(self, namespace: str, fact_key: str) -> Memory | None: ...

    def find_by_external_id(self, namespace: str, external_id: str) -> Memory | None: ...

    def list_memories(
        self, namespace: str, filters: MemoryFilter, *, limit: int = 50, cursor: str | None = None
    ) -> Page[Memory]: ...

    def iter_memories(self, namespace: str, statuses: Sequence[str] = ()) -> Iterable[Memory]:
        """Every memory of the namespace (all statuses when ``statuses`` is empty), oldest first."""
        ...

    def supersede(self, old: Memory, new: Memory) -> tuple[Memory, Memory]:
        """Atomically replace ``old`` (now superseded; read at ``old.version``) and insert ``new``
        (active). Both or neither."""
        ...

    def supersede_many(self, olds: Sequence[Memory], new: Memory) -> tuple[list[Memory], Memory]:
        """``supersede`` of several rows by one (a merge): every row of ``olds`` replaced, each read at
        its ``version``, and ``new`` inserted, in one transaction; the fact_key one of them frees may go
        to ``new``. All or none."""
        ...

    def delete_memory_row(self, namespace: str, memory_id: str, *, version: int | None = None) -> bool:
        """Hard-delete the row (retention only); ``False`` for an unknown id. With ``version``, only the
        row still at that version (else ``Conflict``, ``version_conflict``, and the row stays)."""
        ...

    def count_memories(self, namespace: str) -> dict[str, dict[str, int]]:
        """Counts by ``status``, by ``type`` (active) and by ``layer`` (active)."""
        ...

    def memories_changed_before(
        self, namespace: str, statuses: Sequence[str], before: datetime, *, limit: int = 500
    ) -> list[Memory]:
        """Memories in ``statuses`` whose status changed before ``before`` (hard-delete sweep)."""
        ...

    def memories_unseen_since(
        self, namespace: str, before: datetime, *, limit: int = 500, after: tuple[datetime, str] | None = None
    ) -> list[Memory]:
        """Active memories whose last sighting (``last_seen_at`` or ``created_at``) is before ``before``,
        oldest first (by sighting, then id); ``after``: the (sighting, id) of the previous page's last row,
        so a sweep pages past rows it leaves alone (pinned, identity)."""
        ...


@runtime_checkable
class CandidateRows(Protocol):
    """Review candidates: what extraction was not sure enough of to store as a memory."""

    def insert_candidate(self, candidate: Candidate) -> Candidate: ...

    def update_candidate(self, candidate: Candidate) -> Candidate: ...

    def get_candidate(self, namespace: str, candidate_id: str) -> Candidate: ...

    def list_candidates(
        self, namespace: str, status: str | None = "pending", *, limit: int = 50, cursor: str | None = None
    ) -> Page[Candidate]: ...


@runtime_checkable
class MessageRows(Protocol):
    """Chat messages, in the order they were written and in the order they were stored."""

    def insert_message(self, message: Message) -> tuple[Message, bool]:
        """Store a message; if ``external_id`` was stored before in the namespace, return that
        one and ``False`` (idempotent ingest), else the new one and ``True``. ``stored_at`` (when it
        was stored: the caller's clock) defaults to ``created_at``."""
        ...

    def insert_messages(self, messages: Sequence[Message]) -> list[tuple[Message, bool]]:
        """``insert_message`` for each, in order (a later one with an ``external_id`` an earlier one of the
        batch took returns that one), the results in the same order. One transaction where the store has
        them across rows (SQLite: all or none); elsewhere message by message, so a failure leaves the
        earlier ones stored (DynamoDB: a transaction may not touch the thread row twice). A chat turn
        stores its two sides with one call."""
        ...

    def list_messages_stored(
        self,
        namespace: str,
        *,
        after: tuple[datetime, str] | None = None,
        since: datetime | None = None,
        until: datetime | None = None,
        limit: int = 100,
    ) -> list[Message]:
        """Messages in the order they were stored (``stored_at``, then id), with ``since <= stored_at <
        until``, strictly after the position ``after``. Rows stored before ``stored_at`` existed are
        not listed on DynamoDB (SQLite takes their ``created_at``)."""
        ...

    def list_messages(
        self,
        namespace: str,
        *,
        since: datetime | None = None,
        until: datetime | None = None,
        limit: int = 100,
        after_id: str | None = None,
    ) -> list[Message]:
        """Messages with ``since <= created_at < until``, oldest first (then by id);
        ``after_id`` continues after that message within the same bounds."""
        ...

    def get_messages(self, namespace: str, message_ids: Sequence[str]) -> list[Message]:
        """The messages with these ids in the namespace, in the given order; unknown ids skipped."""
        ...

    def count_messages(self, namespace: str, *, since: datetime | None = None) -> int: ...

    def delete_messages_before(self, namespace: str, before: datetime) -> int: ...


@runtime_checkable
class ThreadRows(Protocol):
    """Threads (conversations). ``MessageRows.insert_message`` keeps the thread of its
    ``conversation_id``: creates the row, counts the message, moves ``last_message_at`` to its time and
    takes the thread out of the recycle bin."""

    def get_thread(self, namespace: str, thread_id: str) -> Thread: ...

    def list_threads(
        self, namespace: str, *, deleted: bool = False, limit: int = 50, cursor: str | None = None
    ) -> Page[Thread]:
        """Live threads (or, with ``deleted``, those in the recycle bin), the most recently active first
        (``last_message_at``, else ``created_at``, desc; then id desc)."""
        ...

    def update_thread(
        self, namespace: str, thread_id: str, *, title: str | None, deleted_at: datetime | None
    ) -> Thread:
        """Set the title and the recycle-bin mark; ``NotFound`` if the thread does not exist."""
        ...

    def list_thread_messages(
        self, namespace: str, thread_id: str, *, limit: int = 100, cursor: str | None = None
    ) -> Page[Message]:
        """The thread's messages, oldest first (``created_at``, then id)."""
        ...

    def messages_around(self, namespace: str, message: Message, *, before: int, after: int) -> list[Message]:
        """Up to ``before`` messages of ``message``'s thread just before it, the message itself and up to
        ``after`` just after it, oldest first (``created_at``, then id): the context of a recalled message."""
        ...

    def move_thread(self, namespace: str, source: str, target: str) -> int:
        """Move every message of ``source`` into ``target`` (whose row must exist) and drop ``source``'s
        row; the number of messages moved. Safe to repeat after a partial failure."""
        ...

    def purge_thread(self, namespace: str, thread_id: str) -> int:
        """Hard-delete the thread and its messages (cleanup); the number of messages deleted."""
        ...


@runtime_checkable
class ReminderRows(Protocol):
    """The reminder of a memory (one per memory), claimed by one chat at a time."""

    def put_reminder(self, reminder: Reminder) -> Reminder:
        """Insert or replace the row of (namespace, memory_id)."""
        ...

    def find_reminder(self, namespace: str, memory_id: str) -> Reminder | None: ...

    def list_reminders(
        self,
        namespace: str,
        status: str,
        *,
        due_after: datetime | None = None,
        due_before: datetime | None = None,
        limit: int = 100,
    ) -> list[Reminder]:
        """Rows in ``status`` with ``due_after <= remind_at <= due_before``, soonest first (then memory id).
        May lag writes by about a second (DynamoDB: a secondary index); ``claim_reminder`` does not."""
        ...

    def claim_reminder(self, namespace: str, memory_id: str, owner: str, *, now: datetime, until: datetime) -> bool:
        """Take a ``pending`` row whose lease is free or ran out before ``now``, for ``owner`` until
        ``until``; ``True`` if this call took it. Atomic: of concurrent claims, one wins."""
        ...

    def settle_reminder(self, namespace: str, memory_id: str, owner: str, *, delivered_at: datetime | None) -> bool:
        """If ``owner`` holds the lease: with ``delivered_at`` mark the row delivered, else release the
        lease. ``False`` (and nothing changes) if the lease is someone else's or gone."""
        ...


@runtime_checkable
class NoteRows(Protocol):
    """Precious notes, glossary terms, the digest and the daily logs."""

    def insert_precious(self, precious: Precious) -> Precious: ...

    def list_precious(self, namespace: str, *, limit: int = 100) -> list[Precious]: ...

    def delete_precious(self, namespace: str, precious_id: str) -> None:
        """``NotFound`` if the note does not exist in the namespace."""
        ...

    def put_glossary_term(self, term: GlossaryTerm) -> GlossaryTerm:
        """Insert or replace by (namespace, id)."""
        ...

    def get_glossary_term(self, namespace: str, term_id: str) -> GlossaryTerm: ...

    def list_glossary(self, namespace: str) -> list[GlossaryTerm]: ...

    def delete_glossary_term(self, namespace: str, term_id: str) -> None:
        """``NotFound`` if the term does not exist in the namespace."""
        ...

    def get_digest(self, namespace: str) -> Digest | None: ...

    def put_digest(self, digest: Digest) -> Digest: ...

    def get_daily_log(self, namespace: str, date: str) -> DailyLog | None: ...

    def put_daily_log(self, log: DailyLog) -> DailyLog: ...

    def list_daily_logs(self, namespace: str, *, limit: int = 30) -> list[DailyLog]:
        """Newest date first."""
        ...


@runtime_checkable
class AuditRows(Protocol):
    """What happened: memory events (job runs among them) and model usage."""

    def append_event(self, event: MemoryEvent) -> None: ...

    def list_events(
        self, namespace: str, *, memory_id: str | None = None, kind: str | None = None, limit: int = 50
    ) -> list[MemoryEvent]:
        """Newest first."""
        ...

    def delete_events_before(self, namespace: str, before: datetime) -> int:
        """Retention of the event log; the journal's rows (events with a ``run_id``) are left to
        ``JournalRows.delete_journal_before``."""
        ...

    def append_usage(self, usage: UsageRecord) -> None: ...

    def list_usage(self, namespace: str, *, since: datetime | None = None) -> list[UsageRecord]: ...

    def delete_usage_before(self, namespace: str, before: datetime) -> int: ...


@runtime_checkable
class JournalRows(Protocol):
    """The change journal, kept in the event log (docs/journal.md): a run's record is the event whose id
    is its ``run_id``; its changes are the other events carrying that ``run_id``.

    - ``list_runs``: the run records, newest first (``created_at`` desc, then id desc), paged.
    - ``list_run_changes``: one run's changes in the order they were written (id ascending: ids are
      time-ordered), paged; the run's own record is not among them.
    - ``delete_journal_before``: retention of the journal (run records and changes created before
      ``before``); ``AuditRows.delete_events_before`` leaves journal rows alone.
    - ``delete_memory_events``: every event about one memory (journal changes included), for the
      erasure of that memory for good.
    """

    def get_run(self, namespace: str, run_id: str) -> MemoryEvent | None: ...

    def list_runs(self, namespace: str, *, limit: int = 50, cursor: str | None = None) -> Page[MemoryEvent]: ...

    def list_run_changes(
        self, namespace: str, run_id: str, *, limit: int = 100, cursor: str | None = None
    ) -> Page[MemoryEvent]: ...

    def delete_journal_before(self, namespace: str, before: datetime) -> int: ...

    def delete_memory_events(self, namespace: str, memory_id: str) -> int: ...


@runtime_checkable
class KeyValueRows(Protocol):
    """Small keyed values: idempotency records, job cursors and an expiring cache."""

    def get_idempotency(self, namespace: str, key: str) -> IdempotencyRecord | None:
        """The record of ``key`` (the jobs queue's consumer skips a message it already processed)."""
        ...

    def put_idempotency(self, record: IdempotencyRecord) -> bool:
        """Store the record unless the key exists; ``True`` if this call stored it."""
        ...

    def delete_idempotency(self, namespace: str, key: str) -> None:
        """Forget ``key`` (a claim given up: the job it guarded failed and will be retried)."""
        ...

    def delete_idempotency_before(self, namespace: str, before: datetime) -> int: ...

    def get_cursor(self, namespace: str, name: str) -> str | None: ...

    def set_cursor(self, namespace: str, name: str, value: str) -> None: ...

    def replace_cursor(self, namespace: str, name: str, value: str, *, expected: str | None) -> bool:
        """Set the cursor only if it still holds ``expected`` (``None``: absent) — a read-modify-write
        of a cursor row (a thread's kept history) never replaces a value it did not read; ``True`` if set."""
        ...

    def get_cache(self, namespace: str, key: str) -> Any | None:
        """The cached value, or ``None`` if absent or expired."""
        ...

    def put_cache(self, namespace: str, key: str, value: Any, *, expires_at: datetime | None = None) -> None: ...

    def add_cache(
        self, namespace: str, key: str, value: Any, *, expires_at: datetime | None = None
    ) -> tuple[bool, Any]:
        """Cache ``value`` only if ``key`` holds no unexpired value, in one call (a put-if-absent):
        ``(True, None)`` if this call stored it, else ``(False, the value held)`` and nothing is written.
        A chat turn's mark is noted this way (services/chat/exchange.py, ``turn_of``): one store call
        instead of a read and a write, and of two concurrent first attempts only one names the turn."""
        ...

    def delete_cache(self, namespace: str, key: str) -> None: ...


@runtime_checkable
class StoreAdmin(Protocol):
    """The store as a whole: its namespaces and its health."""

    def list_namespaces(self) -> list[str]:
        """Every namespace that has any row (jobs iterate over these)."""
        ...

    def ping(self) -> None:
        """Raise if the store cannot be reached (the admin health check, ``GET /v1/admin/health``)."""
        ...


@runtime_checkable
class MemoryStore(
    MemoryRows,
    CandidateRows,
    MessageRows,
    ThreadRows,
    ReminderRows,
    NoteRows,
    AuditRows,
    JournalRows,
    KeyValueRows,
    StoreAdmin,
    Protocol,
):
    """The source of truth for every row kind, partitioned by namespace: the union of the row protocols
    (what a store adapter implements, and what the entry points and bootstrap hold)."""


@runtime_checkable
class MessageIndexBackfill(Protocol):
    """A store whose older message rows may lack index entries written by later versions (DynamoDB: the
    thread and stored-order keys; ``engram migrate``). Other stores upgrade their schema when opened."""

    def backfill_message_indexes(self, namespace: str, *, after: str | None, limit: int) -> tuple[int, int, str | None]:
        """Up to ``limit`` messages after position ``after`` (opaque; ``None`` to start) given the index
        entries they lack: (read, fixed, the next position or ``None`` when done). Idempotent: a message
        already complete, or completed by a concurrent run, is not changed (nor counted) again."""
        ...


@runtime_checkable
class SearchIndex(Protocol):
    """Keyword + vector search over the active memories of each namespace.

    A mirror of the store, rebuildable from it. Invariants:
    - Search with namespace ``A`` never returns a document of namespace ``B``.
    - Scores are higher-is-better; keyword scores are positive, vector scores are cosine in [-1, 1].
    - ``upsert`` replaces the document of the same (namespace, memory_id) and returns the
      index's own reference for it (may equal the memory id); ``delete`` takes that reference.
      Deleting an unknown document is not an error.
    - ``upsert`` with a vector whose length differs from ``info().dimension`` (once recorded)
      raises ``InvalidInput``; ``reset(model_id, dimension)`` drops every vector and records the new model.
    - Keyword search may lag writes (OpenSearch: ~60 s); the local index sees them at once.
    """

    def upsert(self, doc: IndexedDoc) -> str: ...

    def upsert_many(self, docs: Sequence[IndexedDoc]) -> None:
        """``upsert`` each document, in order (a later one of the same (namespace, memory_id) wins); one
        transaction on the SQLite index, one by one elsewhere. Returns no references: a caller that keeps
        them (OpenSearch's differ from the memory id) upserts one by one. The conversation index takes a
        stored turn's messages this way."""
        ...

    def delete(self, namespace: str, memory_id: str, ref: str | None = None) -> None: ...

    def keyword_search(
        self, namespace: str, query: str, *, k: int = 50, types: Sequence[str] = ()
    ) -> list[SearchHit]: ...

    def vector_search(
        self, namespace: str, vector: Sequence[float], *, k: int = 50, types: Sequence[str] = ()
    ) -> list[SearchHit]: ...

    def info(self, namespace: str | None = None) -> IndexInfo:
        """The recorded model, with the documents and vectors of ``namespace`` (of all when None)."""
        ...

    def reset(self, model_id: str, dimension: int) -> None: ...

    def ping(self) -> None: ...


@runtime_checkable
class NeighbourDensity(Protocol):
    """A search index that can say how crowded a vector's neighbourhood is (optional; recall's hubness
    correction, docs/recall.md). Indexes that keep no vectors at hand (OpenSearch) do not offer it."""

    def neighbour_density(self, namespace: str, memory_ids: Sequence[str], *, k: int = 10) -> dict[str, float]:
        """For each of ``memory_ids`` with a vector in ``namespace``: its mean cosine to its ``k`` most
        similar others among ``memory_ids``. Ids without a vector are left out."""
        ...


@runtime_checkable
class Embedder(Protocol):
    """Texts -> unit-length vectors of ``dimension`` floats from model ``model_id``.

    ``embed_query`` and ``embed_documents`` may differ (e5 prefixes). Raises ``UpstreamUnavailable``
    when a remote model cannot be reached.
    """

    @property
    def model_id(self) -> str: ...

    @property
    def dimension(self) -> int: ...

    def embed_documents(self, texts: Sequence[str]) -> list[list[float]]: ...

    def embed_query(self, text: str) -> list[float]: ...


@runtime_checkable
class Reranker(Protocol):
    """Scores (query, document) pairs; returns one relevance in [0, 1] per document, same order."""

    def rerank(self, query: str, documents: Sequence[str]) -> list[float]: ...


@runtime_checkable
class ChatModel(Protocol):
    """A chat model used by Engram itself (extraction, dreaming, compression).

    ``complete`` returns the assistant text; with ``json_mode`` the model is asked for one JSON
    object (callers still validate it). Provider errors become ``Upstream*`` errors.
    """

    @property
    def model_id(self) -> str: ...

    async def complete(
        self,
        messages: Sequence[dict[str, Any]],
        *,
        json_mode: bool = False,
        max_tokens: int | None = None,
        temperature: float | None = None,
    ) -> str: ...


@runtime_checkable
class UpstreamReply(Protocol):
    """An open 2xx HTTP response from a model provider. Read it once (``aread`` or ``aiter_bytes``),
    then ``aclose`` (also on cancellation). Reading raises ``UpstreamUnavailable`` if the connection
    drops and ``UpstreamTimeout`` if the provider stalls longer than the read timeout."""

    status: int
    content_type: str

    async def aread(self) -> bytes: ...

    def aiter_bytes(self) -> AsyncIterator[bytes]: ...

    async def aclose(self) -> None: ...


@runtime_checkable
class ChatUpstream(Protocol):
    """A model provider's HTTP API that the chat gateway forwards to (OpenAI-compatible or Anthropic).

    ``send`` returns an open 2xx reply, or raises ``UpstreamRejected`` (status and body kept for
    pass-through) for an error status, ``UpstreamUnavailable`` when the provider cannot be reached and
    ``UpstreamTimeout`` when it does not answer in time. The adapter adds the provider key itself; the
    key is never part of what it returns or raises.
    """

    @property
    def configured(self) -> bool:
        """Whether a base URL (or region) is set: bootstrap routes the gateway only to configured ones."""
        ...

    async def send(
        self,
        method: str,
        path: str,
        body: Mapping[str, Any] | bytes | None = None,
        *,
        headers: Mapping[str, str] | None = None,
    ) -> UpstreamReply: ...

    async def aclose(self) -> None:
        """Close the provider's client (app shutdown)."""
        ...


@runtime_checkable
class JobQueue(Protocol):
    """Fire-and-forget jobs (``cleanup``, ...). ``enqueue`` must not block the caller for long."""

    def enqueue(self, job: str, payload: dict[str, Any]) -> None: ...


@runtime_checkable
class Clock(Protocol):
    def now(self) -> datetime:
        """Timezone-aware UTC now."""
        ...


@runtime_checkable
class SkillStore(Protocol):
    """Skills and every version of each, partitioned by namespace (``domain/skills.py``).

    Invariants:
    - A read with namespace ``A`` never returns a row of namespace ``B``.
    - ``add_version`` stores the version and the head together, or neither; it raises ``Conflict``
      when that (namespace, name, version) exists (two imports raced), so versions are never replaced.
    - Versions are never changed once written; ``purge`` (hard delete of a skill after its restore
      window) removes the head, every version and the vector.
    """

    def find_skill(self, namespace: str, name: str) -> Skill | None: ...

    def list_skills(self, namespace: str) -> list[Skill]:
        """Every skill of the namespace (deleted ones included), by name."""
        ...

    def add_version(self, skill: Skill, version: SkillVersion) -> None: ...

    def put_skill(self, skill: Skill) -> None:
        """Replace the head (allocation, deletion); the skill's versions are unchanged."""
        ...

    def get_version(self, namespace: str, name: str, version: int) -> SkillVersion | None: ...

    def get_versions(self, namespace: str, wanted: Sequence[tuple[str, int]]) -> dict[tuple[str, int], SkillVersion]:
        """The versions among ``wanted`` (name, version) that exist, by (name, version): one read for many
        (skill search reads every live skill's body; a batch read on DynamoDB, not one per skill)."""
        ...

    def list_versions(self, namespace: str, name: str) -> list[SkillVersion]:
        """Oldest first."""
        ...

    def purge(self, namespace: str, name: str) -> None: ...

    def list_namespaces(self) -> list[str]:
        """Every namespace that has a skill (the cleanup job visits them), sorted; may list more."""
        ...

    def put_vector(self, namespace: str, vector: SkillVector) -> None:
        """Replace the skill's vector (``purge`` removes it with the skill)."""
        ...

    def list_vectors(self, namespace: str) -> dict[str, SkillVector]:
        """The namespace's skill vectors by skill name (one read: a namespace has few skills)."""
        ...


@runtime_checkable
class BlobStore(Protocol):
    """Small binary objects by key (skill resource files): the data dir locally, S3 on AWS.

    Keys are ``/``-separated safe names the caller builds; ``get`` returns ``None`` for an unknown key;
    ``delete`` of an unknown key does nothing; ``list_keys(prefix)`` gives every key starting with
    ``prefix`` and when it was last written (UTC), in key order.
    """

    def put(self, key: str, data: bytes) -> None: ...

    def get(self, key: str) -> bytes | None: ...

    def delete(self, key: str) -> None: ...

    def list_keys(self, prefix: str) -> list[tuple[str, datetime]]: ...


@runtime_checkable
class RateLimiter(Protocol):
    """Fixed-window request counters (README, section Keys: rate limits).

    Invariants:
    - ``hit(key, limit, window_seconds)`` counts one request for ``key`` in the current window
      (``floor(now / window_seconds)``) and returns ``None`` while the count stays within ``limit``;
      otherwise it counts nothing and returns the seconds until the window ends (> 0).
    - Counters of different keys, and of different windows, are independent; a new window starts at 0.
    - Counting is atomic: ``n`` concurrent hits on a fresh window allow exactly ``min(n, limit)``.
    - ``reset(key, window_seconds)`` forgets the current window's count of ``key`` (other keys keep theirs).
    """

    def hit(self, key: str, limit: int, window_seconds: int) -> float | None: ...

    def reset(self, key: str, window_seconds: int) -> None: ...
