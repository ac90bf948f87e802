"""The composition root: Settings -> adapters -> services. The only package that picks adapters.

``build_container`` (here) wires the services; ``bootstrap.adapters`` builds the storage, search,
embedding, queue and rate-limit adapters from the settings; ``bootstrap.models`` the model adapters and
the chat gateway; ``bootstrap.configs`` the service configs; ``bootstrap.keys`` the API keys.

Over 450 lines on purpose: the typed ``Container`` and ``Overrides`` (one field per service or part a
test may replace) and the wiring, split by concern (``_foundation``, ``_library``, ``_jobs``), read top
to bottom in one place.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Any

from engram.adapters.aws_clients import AwsClients
from engram.adapters.clock import SystemClock
from engram.adapters.files import write_private
from engram.adapters.queue.inline import InlineJobQueue
from engram.bootstrap import configs
from engram.bootstrap.adapters import (
    LOCAL_CONVERSATIONS_NAME,
    LOCAL_DB_NAME,
    Closers,
    build_embedder,
    build_index,
    build_limits,
    build_queue,
    build_skills,
    build_store,
    local_db_path,
    search_reconcile,
    search_snapshots,
    with_secret,
)
from engram.bootstrap.keys import LOCAL_KEYS_NAME, build_keyring, ensure_local_owner_key, load_keys_file
from engram.bootstrap.models import ChatParts, ModelUpstreams, RuntimeChatModel, build_chat, build_recall, runtime_model
from engram.domain.access import KeyRing
from engram.domain.once import Once
from engram.domain.ports import ChatModel, Clock, Embedder, JobQueue, MemoryStore, RateLimiter, SearchIndex
from engram.services.chat.history import CURSOR_PREFIX as HISTORY_KEY
from engram.services.chat.history import HistoryService
from engram.services.chat.usage_report import UsageReportService
from engram.services.index.gated_embedder import ClippedEmbedder, GatedEmbedder
from engram.services.index.guard import GuardedIndex
from engram.services.index.reindex import ReindexService
from engram.services.index.upkeep import IndexUpkeep
from engram.services.library.candidates import CandidateService
from engram.services.library.journal import Journal
from engram.services.library.journaled_store import journaled
from engram.services.library.memories import MemoryService
from engram.services.library.messages import MessageService
from engram.services.library.notes import NoteService
from engram.services.library.reminders import ReminderService
from engram.services.library.skills import SkillService
from engram.services.library.stats import NamespaceStats
from engram.services.library.threads import ThreadService
from engram.services.local_day import LocalDay
from engram.services.ratelimit import RequestLimits
from engram.services.recall.boot import BootService
from engram.services.recall.conversations import ConversationService
from engram.services.recall.pipeline import Recall
from engram.services.runtime_settings import RuntimeSettings
from engram.settings import Settings, load_settings

if TYPE_CHECKING:
    from engram.services.chat.gateway import ChatService
    from engram.services.jobs.cleanup import CleanupService
    from engram.services.jobs.consolidation import ConsolidationService
    from engram.services.jobs.dreaming import DreamingService
    from engram.services.jobs.extraction import ExtractionService
    from engram.services.jobs.registry import JobRunner
    from engram.services.library.curation import CurationService
    from engram.services.transfer.engram_format import TransferService
    from engram.services.transfer.other_systems import MovingInService

__all__ = [
    "LOCAL_CONVERSATIONS_NAME",
    "LOCAL_DB_NAME",
    "LOCAL_KEYS_NAME",
    "UNSET",
    "Container",
    "Overrides",
    "RuntimeChatModel",
    "build_container",
    "build_keyring",
    "ensure_local_owner_key",
    "index_model_mismatch",
    "load_keys_file",
    "local_db_path",
    "warm_search",
]

log = logging.getLogger(__name__)


@dataclass
class Container:
    """Everything a process needs, built once."""

    settings: Settings
    store: MemoryStore  # journaled: the writes of an open run are recorded (services/library/journal.py)
    index: GuardedIndex
    embedder: GatedEmbedder | None
    clock: Clock
    journal: Journal  # the change journal: runs, their changes, undo (docs/journal.md)
    keys: KeyRing
    runtime: RuntimeSettings[Settings]  # the owner's overrides of the safe settings (admin panel); `.effective()`
    limits: RequestLimits  # requests per minute per key
    queue: JobQueue
    memories: MemoryService
    upkeep: IndexUpkeep  # the index's mirror of the memories: sync, failed writes, repair, health
    candidates: CandidateService
    notes: NoteService  # precious notes, glossary, digest
    messages: MessageService  # message ingest
    local_day: LocalDay  # today and yesterday in ENGRAM_TIMEZONE
    stats: NamespaceStats  # the counts of a namespace
    recall: Recall
    conversations: ConversationService  # recall of past conversations
    boot: BootService  # the boot package (chat block, REST, MCP)
    usage: UsageReportService
    skills: SkillService
    threads: ThreadService
    history: HistoryService  # server-kept history of clients that send only their newest message
    reminders: ReminderService
    reindex: ReindexService
    # The parts a process may never need, each built by its first use, once, whichever thread asks first
    # (docs/aws.md, "Cold starts"). build_container makes every one a ``Once``; the job runner shares
    # ``job_parts`` and ``curation_parts`` (the consolidation job uses curation).
    chat_part: Once[ChatService]  # the chat gateway: ``chat``
    job_parts: Once[JobParts]  # extraction, dreaming, cleanup and the job runner: ``jobs`` and the three
    transfer_parts: Once[TransferParts]  # export/import and moving in: ``transfer``, ``moving_in``
    # merges by hand and core candidates (``curation``), consolidation drafts (``consolidation``)
    curation_parts: Once[CurationParts]
    _closers: Closers = field(default_factory=list)

    @property
    def chat(self) -> ChatService:
        """The chat gateway, built on first use (once, whichever thread asks first): a process that
        serves no chat door (the MCP function, the job functions) never builds it (docs/aws.md, "Cold
        starts")."""
        return self.chat_part.get()

    def _job_parts(self) -> JobParts:
        """Extraction, dreaming, cleanup and the runner, built on first use: an HTTP function on AWS
        queues its jobs to SQS and never runs one, and a job function builds them with its first
        invocation (docs/aws.md, "Cold starts")."""
        return self.job_parts.get()

    @property
    def extraction(self) -> ExtractionService:
        return self._job_parts().extraction

    @property
    def dreaming(self) -> DreamingService:
        return self._job_parts().dreaming

    @property
    def cleanup(self) -> CleanupService:
        return self._job_parts().cleanup

    @property
    def jobs(self) -> JobRunner:
        """Every job by name, and what follows a run (services/jobs/registry.py)."""
        return self._job_parts().runner

    @property
    def transfer(self) -> TransferService:
        """Export and import of Engram's own format, built on first use: only the transfer routes and
        tools and the CLI use it (docs/aws.md, "Cold starts")."""
        return self.transfer_parts.get().transfer

    @property
    def moving_in(self) -> MovingInService:
        """Imports from Aelios, Pawwake, mem0 and text, built with ``transfer``."""
        return self.transfer_parts.get().moving_in

    @property
    def curation(self) -> CurationService:
        """Merges by hand, core candidates (README, "Curating by hand"), built on first use (shared with
        the consolidation job)."""
        return self.curation_parts.get().curation

    @property
    def consolidation(self) -> ConsolidationService:
        """Consolidation drafts (a queued job), built with ``curation``."""
        return self.curation_parts.get().consolidation

    @property
    def chat_if_built(self) -> ChatService | None:
        """The chat gateway if something has used it (closing it must not build it)."""
        return self.chat_part.built

    def close(self) -> None:
        for closer in reversed(self._closers):
            try:
                closer()
            except Exception:  # closing is best effort at shutdown
                log.exception("error while closing")
        self._closers.clear()


class Unset(Enum):
    """An override not given (``None`` may be a value: no embedder, no model)."""

    UNSET = "unset"


UNSET = Unset.UNSET


@dataclass(frozen=True)
class Overrides:
    """The parts a test or a host replaces; every field left out is built from the settings. A
    frozen dataclass: a mistyped name is a ``TypeError``, never silently ignored."""

    clock: Clock | None = None
    store: MemoryStore | None = None
    index: SearchIndex | None = None
    conversation_index: SearchIndex | None = None  # the index of past conversations
    embedder: Embedder | Unset | None = UNSET  # None: no embedder
    keys: KeyRing | None = None
    queue: JobQueue | None = None
    rate_limiter: RateLimiter | None = None
    bedrock_runtime: Any = None  # a boto3 bedrock-runtime client for the gateway and the jobs
    extract_model: ChatModel | Unset | None = UNSET  # None: extraction not configured
    dream_model: ChatModel | Unset | None = UNSET  # None: dreaming not configured
    compress_model: ChatModel | None = None  # recall compression
    recall: Recall | None = None
    skills: SkillService | None = None
    conversations: ConversationService | None = None
    chat: ChatService | None = None


@dataclass(frozen=True)
class _Foundation:
    """The adapters and what every service shares."""

    clock: Clock
    store: MemoryStore
    journal: Journal
    index: GuardedIndex
    raw_embedder: Embedder | None
    embedder: GatedEmbedder | None
    runtime: RuntimeSettings[Settings]


@dataclass(frozen=True)
class _Library:
    """The use cases over the owner's rows, recall and the boot package."""

    memories: MemoryService
    candidates: CandidateService
    notes: NoteService
    messages: MessageService
    local_day: LocalDay
    stats: NamespaceStats
    recall: Recall
    conversations: ConversationService
    boot: BootService
    skills: SkillService
    reminders: ReminderService


@dataclass(frozen=True)
class JobParts:
    """The job services only a job runs, and their runner: built on first use (``Container.jobs``)."""

    extraction: ExtractionService
    dreaming: DreamingService
    cleanup: CleanupService
    runner: JobRunner


@dataclass(frozen=True)
class TransferParts:
    """Export/import and moving in: built on first use (``Container.transfer``)."""

    transfer: TransferService
    moving_in: MovingInService


@dataclass(frozen=True)
class CurationParts:
    """Curation by hand and consolidation drafts: built on first use (``Container.curation``)."""

    curation: CurationService
    consolidation: ConsolidationService


@dataclass(frozen=True)
class _Jobs:
    """The background jobs: the queue, what the routes and the chat use of them, and what builds the rest."""

    extract_model: ChatModel | None
    parts: Once[JobParts]
    reindex: ReindexService
    queue: JobQueue
    history: HistoryService
    curated: Once[CurationParts]


def build_container(settings: Settings | None = None, overrides: Overrides | None = None) -> Container:
    """Build the object graph from the settings; ``overrides`` replace parts (tests pass fakes)."""
    settings = with_secret(settings or load_settings())
    o = overrides or Overrides()
    closers: Closers = []
    # One client per AWS service for this container's adapters (adapters/aws_clients.py).
    clients = AwsClients(settings.aws_region)
    base = _foundation(settings, o, closers, clients)
    lib = _library(settings, o, base, closers, clients)
    jobs = _jobs(settings, o, base, lib, clients)

    def make_chat() -> ChatService:
        parts = ChatParts(
            runtime=base.runtime,
            store=base.store,
            messages=lib.messages,
            memories=lib.memories,
            recall=lib.recall,
            boot=lib.boot,
            clock=base.clock,
            queue=jobs.queue,
            reminders=lib.reminders,
            conversations=lib.conversations,
            history=jobs.history,
        )
        return build_chat(settings, parts, o.bedrock_runtime)

    def make_transfer() -> TransferParts:
        # Imported here: only export/import (REST, MCP, the CLI) use them; no first request needs them.
        from engram.services.transfer.engram_format import TransferService
        from engram.services.transfer.other_systems import MovingInService

        transfer = TransferService(base.store, lib.memories, base.clock, lib.skills, journal=base.journal)
        return TransferParts(transfer, MovingInService(transfer, jobs.extract_model))

    store, clock = base.store, base.clock
    return Container(
        settings=settings,
        store=store,
        index=base.index,
        embedder=base.embedder,
        clock=clock,
        journal=base.journal,
        keys=o.keys or build_keyring(settings),
        runtime=base.runtime,
        limits=build_limits(settings, clock, clients, o.rate_limiter),
        queue=jobs.queue,
        memories=lib.memories,
        upkeep=lib.memories.upkeep,
        candidates=lib.candidates,
        notes=lib.notes,
        messages=lib.messages,
        local_day=lib.local_day,
        stats=lib.stats,
        recall=lib.recall,
        conversations=lib.conversations,
        boot=lib.boot,
        usage=UsageReportService(store, clock),
        skills=lib.skills,
        threads=ThreadService(store, clock),
        history=jobs.history,
        reminders=lib.reminders,
        reindex=jobs.reindex,
        chat_part=Once(make_chat) if o.chat is None else Once.of(o.chat),
        job_parts=jobs.parts,
        transfer_parts=Once(make_transfer),
        curation_parts=jobs.curated,
        _closers=closers,
    )


def _foundation(settings: Settings, o: Overrides, closers: Closers, clients: AwsClients) -> _Foundation:
    clock = o.clock or SystemClock()
    # Every service gets the journaled store: a run's writes are recorded with it (docs/journal.md).
    journal, store = journaled(
        o.store or build_store(settings, closers, clock, clients), clock, cursor_prefixes=(HISTORY_KEY,)
    )
    # Every index call goes through the guard, and nothing here calls the index: building the app
    # touches no network (docs/aws.md, "Cold starts").
    index = GuardedIndex(
        o.index or build_index(settings, closers, clients), clock=clock, retry_seconds=settings.search_retry_seconds
    )
    raw_embedder = build_embedder(settings, clients) if isinstance(o.embedder, Unset) else o.embedder
    embedder = (
        GatedEmbedder(
            raw_embedder,
            index,
            max_tokens=settings.embedding_max_tokens,
            query_max_tokens=settings.embedding_query_max_tokens,
        )
        if raw_embedder is not None
        else None
    )
    runtime = RuntimeSettings(store, settings)
    return _Foundation(clock, store, journal, index, raw_embedder, embedder, runtime)


def _library(settings: Settings, o: Overrides, base: _Foundation, closers: Closers, clients: AwsClients) -> _Library:
    store, clock, runtime = base.store, base.clock, base.runtime
    upkeep = IndexUpkeep(store, base.index, base.embedder, clock)
    base.journal.on_memories_changed = upkeep.resync
    memories = MemoryService(
        store, base.index, base.embedder, clock, runtime.provider(configs.memory_rules), upkeep=upkeep
    )
    local_day = LocalDay(clock, runtime.provider(lambda s: s.timezone))
    stats = NamespaceStats(store, local_day)
    recall = o.recall or build_recall(
        settings, runtime, store, base.index, base.embedder, clock, clients, o.compress_model
    )
    # Skill vectors record their own model, so skills use the embedder directly, not the index's gate.
    raw = base.raw_embedder
    skill_embedder = (
        ClippedEmbedder(raw, settings.embedding_max_tokens, settings.embedding_query_max_tokens)
        if raw is not None
        else None
    )
    skills = o.skills or build_skills(settings, clock, closers, clients, skill_embedder)
    conversations = o.conversations or _build_conversations(
        settings, runtime, store, raw, clock, recall, o.conversation_index, closers, clients
    )
    return _Library(
        memories=memories,
        candidates=CandidateService(store, memories, clock),
        notes=NoteService(store, clock),
        # A stored turn is keyword-indexed for the other threads at once (docs/conversations.md).
        messages=MessageService(store, clock, on_stored=conversations.index_stored),
        local_day=local_day,
        stats=stats,
        recall=recall,
        conversations=conversations,
        boot=BootService(store, local_day, stats, skills, package_limits=configs.boot_package(settings)),
        skills=skills,
        reminders=ReminderService(store, memories, clock, runtime.provider(configs.reminders)),
    )


def _jobs(settings: Settings, o: Overrides, base: _Foundation, lib: _Library, clients: AwsClients) -> _Jobs:
    store, clock, index, runtime = base.store, base.clock, base.index, base.runtime
    # The jobs' models follow the runtime settings (admin panel); the upstream stays the environment's.
    upstreams = ModelUpstreams(bedrock_runtime=o.bedrock_runtime, clients=clients)

    def job_model(given: ChatModel | Unset | None, name: Callable[[Settings], str]) -> ChatModel | None:
        return runtime_model(settings, runtime, name, upstreams) if isinstance(given, Unset) else given

    extract_model = job_model(o.extract_model, lambda eff: eff.extract_model or eff.chat_model)
    history = HistoryService(store, clock, extract_model, runtime.provider(configs.history))
    memories = lib.memories
    conversations = lib.conversations

    def make_curation() -> CurationParts:
        # Imported here: only the curation routes and tools and the consolidation job use them.
        from engram.services.jobs.consolidation import ConsolidationService
        from engram.services.library.curation import CurationService

        # Drafts by hand use the extraction model (README, "Curating by hand").
        curation = CurationService(store, memories, clock, extract_model, journal=base.journal)
        return CurationParts(curation, ConsolidationService(store, curation, clock, extract_model, queue))

    # Built once, by the first use of either (``Container.curation``, the consolidation job).
    curated = Once(make_curation)

    def make_parts() -> JobParts:
        # Imported here: a process that runs no job (an HTTP function on AWS) never loads them.
        from engram.services.jobs.cleanup import CleanupService
        from engram.services.jobs.dreaming import DreamingService
        from engram.services.jobs.extraction import ExtractionService
        from engram.services.jobs.registry import JobRunner, JobServices
        from engram.services.jobs.runs import NamespaceLocks

        dream_model = job_model(o.dream_model, lambda eff: eff.dream_model or eff.chat_model)
        locks = NamespaceLocks()
        extraction = ExtractionService(
            store,
            memories,
            lib.candidates,
            extract_model,
            clock,
            runtime.provider(configs.extraction),
            locks,
            index,
            lib.conversations,
        )
        dreaming = DreamingService(
            store,
            memories,
            lib.notes,
            index,
            base.embedder,
            dream_model,
            clock,
            runtime.provider(configs.dreaming),
            locks,
        )
        cleanup = CleanupService(
            store,
            index,
            clock,
            configs.retention(settings),
            locks,
            upkeep=memories.upkeep,
            skills=lib.skills,
            conversations=lib.conversations,
            reconcile=search_reconcile(settings, lambda: (index, lib.conversations.index)),
        )
        runner = JobRunner(
            JobServices(
                extraction=extraction,
                dreaming=dreaming,
                cleanup=cleanup,
                upkeep=memories.upkeep,
                reindex=lambda: reindex,
                history=history,
                consolidation=curated.get().consolidation,
                # The conversation index is a replica beside the memory index (docs/conversations.md).
                snapshot=search_snapshots(settings, lambda: (index, conversations.index)),
                journal=base.journal,
            )
        )
        return JobParts(extraction, dreaming, cleanup, runner)

    # Built once, by the container's first use of a job (``Container.jobs``) or the in-process queue's first run.
    parts = Once(make_parts)

    def run_queued(job: str, payload: dict[str, Any]) -> Any:
        return parts.get().runner.run(job, payload)

    # The in-process queue runs reindex jobs, and the reindex service queues its continuations.
    queue: JobQueue = o.queue or build_queue(settings, clients) or _inline_queue(run_queued)
    reindex = ReindexService(store, memories.upkeep, base.embedder, clock, queue)
    queue_repairs_when_back(index, memories.upkeep, queue)
    history.attach_queue(queue)
    return _Jobs(extract_model, parts, reindex, queue, history, curated)


def _inline_queue(run: Callable[[str, dict[str, Any]], Any]) -> JobQueue:
    """The in-process queue (no ``ENGRAM_QUEUE``): it runs each job through the runner, and knows the job
    registry's schemas; imported only here, so a function whose jobs go to SQS never loads the registry."""
    from engram.services.jobs.registry import JOBS

    return InlineJobQueue(run, JOBS)


def _build_conversations(
    settings: Settings,
    runtime: RuntimeSettings[Settings],
    store: MemoryStore,
    raw_embedder: Embedder | None,
    clock: Clock,
    recall: Recall,
    index: SearchIndex | None,
    closers: Closers,
    clients: AwsClients,
) -> ConversationService:
    """Recall of past conversations: its own index of the messages (the memory index's backend, beside
    it), gated on its own embedding model (docs/conversations.md)."""
    guarded = GuardedIndex(
        index or build_index(settings, closers, clients, conversations=True),
        clock=clock,
        retry_seconds=settings.search_retry_seconds,
    )
    gate = (
        GatedEmbedder(
            raw_embedder,
            guarded,
            max_tokens=settings.embedding_max_tokens,
            query_max_tokens=settings.embedding_query_max_tokens,
        )
        if raw_embedder is not None
        else None
    )
    return ConversationService(
        store,
        guarded,
        gate,
        clock,
        runtime.provider(configs.conversations),
        query_vector=recall.query_vector,
    )


def queue_repairs_when_back(index: GuardedIndex, upkeep: IndexUpkeep, queue: JobQueue) -> None:
    """When the index answers again, queue a repair of the namespaces whose writes failed meanwhile."""

    def recovered() -> None:
        for namespace in upkeep.take_dirty():
            queue.enqueue("index_repair", {"namespace": namespace})

    index.on_recovered = recovered


def index_model_mismatch(container: Container) -> bool:
    """Whether the index is known to hold another model's vectors (asks the index; may raise)."""
    embedder = container.embedder
    return embedder is not None and not embedder.matches_index


def write_owner_only(path: Path, data: bytes) -> None:
    """Write a file an entry point produces (``engram export FILE``) the way every Engram file is written:
    owner-only from the first byte and atomic (``adapters/files.write_private``). Entry points reach
    adapters only through bootstrap (docs/ARCHITECTURE.md, "Layers")."""
    write_private(path, data)


def warm_search(container: Container) -> None:
    """Start loading the local memory index's big namespaces (vectors, keyword postings) on a helper thread
    (``engram serve`` at start), so the first queries do not load them on their own time (search/sqlite.py)."""
    if container.settings.search != "local":
        return
    from engram.adapters.search.sqlite import SqliteSearchIndex

    index = container.index.inner
    if isinstance(index, SqliteSearchIndex):
        index.warm_in_background()
