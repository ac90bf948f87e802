"""The composition root: Settings -> adapters -> services. The only package that picks adapters.

``build_container`` (here) wires the services; ``bootstrap.adapters`` builds the storage, search,
embedding, queue and rate-limit adapters from the settings; ``bootstrap.models`` the model adapters and
the chat gateway; ``bootstrap.keys`` the API keys.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from engram.adapters.clock import SystemClock
from engram.adapters.queue.inline import InlineJobQueue
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
    with_secret,
)
from engram.bootstrap.keys import LOCAL_KEYS_NAME, build_keyring, ensure_local_owner_key, load_keys_file
from engram.bootstrap.models import ChatParts, ModelUpstreams, RuntimeChatModel, build_chat, build_recall, runtime_model
from engram.domain.access import KeyRing
from engram.domain.ports import ChatModel, Clock, Embedder, JobQueue, MemoryStore, SearchIndex
from engram.services.boot import BootLimits, BootService
from engram.services.candidates import CandidateService
from engram.services.chat import ChatService
from engram.services.cleanup import CleanupService, RetentionPolicy
from engram.services.conversations import ConversationConfig, ConversationService
from engram.services.dreaming import DreamConfig, DreamingService
from engram.services.extraction import ExtractionConfig, ExtractionService
from engram.services.gated_embedder import ClippedEmbedder, GatedEmbedder
from engram.services.history import HistoryConfig, HistoryService
from engram.services.job_runs import NamespaceLocks
from engram.services.local_day import LocalDay
from engram.services.loop import run_sync
from engram.services.memories import MemoryRules, MemoryService
from engram.services.messages import MessageService
from engram.services.moving_in import MovingInService
from engram.services.notes import NoteService
from engram.services.ratelimit import RequestLimits
from engram.services.recall import RecallService
from engram.services.reindex import ReindexService
from engram.services.reminders import ReminderConfig, ReminderService
from engram.services.runtime_settings import RuntimeSettings
from engram.services.search_guard import GuardedIndex
from engram.services.skills import SkillService
from engram.services.stats import NamespaceStats
from engram.services.threads import ThreadService
from engram.services.transfer import TransferService
from engram.services.usage_report import UsageReportService
from engram.settings import Settings, load_settings

__all__ = [
    "LOCAL_CONVERSATIONS_NAME",
    "LOCAL_DB_NAME",
    "LOCAL_KEYS_NAME",
    "Container",
    "RuntimeChatModel",
    "build_container",
    "build_keyring",
    "ensure_local_owner_key",
    "index_model_mismatch",
    "load_keys_file",
    "local_db_path",
    "snapshot_search",
]

log = logging.getLogger(__name__)


@dataclass
class Container:
    """Everything a process needs, built once."""

    settings: Settings
    store: MemoryStore
    index: GuardedIndex
    embedder: GatedEmbedder | None
    clock: Clock
    keys: KeyRing
    runtime: RuntimeSettings[Settings]  # the owner's overrides of the safe settings (admin panel); `.effective()`
    limits: RequestLimits  # requests per minute per key
    queue: JobQueue
    memories: MemoryService
    candidates: CandidateService
    notes: NoteService  # precious notes, glossary, digest
    messages: MessageService  # message ingest
    local_day: LocalDay  # today and yesterday in ENGRAM_TIMEZONE
    stats: NamespaceStats  # the counts of a namespace
    transfer: TransferService
    recall: RecallService
    conversations: ConversationService  # recall of past conversations
    boot: BootService  # the boot package (chat block, REST, MCP)
    usage: UsageReportService
    skills: SkillService
    threads: ThreadService
    history: HistoryService
    reminders: ReminderService
    extraction: ExtractionService
    dreaming: DreamingService
    cleanup: CleanupService
    reindex: ReindexService
    moving_in: MovingInService  # imports from Aelios, Pawwake, mem0, text
    chat: ChatService  # the chat gateway
    _closers: Closers = field(default_factory=list)

    def close(self) -> None:
        for closer in reversed(self._closers):
            try:
                closer()
            except Exception:  # closing is best effort at shutdown
                log.exception("error while closing")
        self._closers.clear()


def build_container(settings: Settings | None = None, **overrides: Any) -> Container:
    """Build the object graph. ``overrides`` replace adapters (tests pass fakes: ``store=...``;
    ``bedrock_runtime=...`` replaces the boto3 bedrock-runtime client of the gateway and the jobs;
    ``extract_model`` / ``dream_model`` / ``compress_model`` replace the models Engram calls itself)."""
    settings = with_secret(settings or load_settings())
    closers: Closers = []
    clock: Clock = overrides.get("clock") or SystemClock()
    store: MemoryStore = overrides.get("store") or build_store(settings, closers, clock)
    # Every index call goes through the guard, and nothing here calls the index: building the app
    # touches no network (docs/aws.md, "Cold starts").
    index = GuardedIndex(
        overrides.get("index") or build_index(settings, closers),
        clock=clock,
        retry_seconds=settings.search_retry_seconds,
    )
    raw_embedder = overrides["embedder"] if "embedder" in overrides else build_embedder(settings)
    embedder: GatedEmbedder | None = (
        GatedEmbedder(raw_embedder, index, max_tokens=settings.embedding_max_tokens)
        if raw_embedder is not None
        else None
    )
    keys: KeyRing = overrides.get("keys") or build_keyring(settings)

    runtime = RuntimeSettings(store, settings)
    rules = runtime.provider(MemoryRules.from_settings)
    memories = MemoryService(store, index, embedder, clock, rules)
    local_day = LocalDay(clock, runtime.provider(lambda s: s.timezone))
    stats = NamespaceStats(store, local_day)
    notes = NoteService(store, clock)
    recall: RecallService = overrides.get("recall") or build_recall(
        settings, runtime, store, index, embedder, clock, overrides.get("compress_model")
    )
    # Skill vectors record their own model, so skills use the embedder directly, not the index's gate.
    skill_embedder = ClippedEmbedder(raw_embedder, settings.embedding_max_tokens) if raw_embedder is not None else None
    skills: SkillService = overrides.get("skills") or build_skills(settings, clock, closers, skill_embedder)
    conversations: ConversationService = overrides.get("conversations") or _build_conversations(
        settings, runtime, store, raw_embedder, clock, recall, overrides.get("conversation_index"), closers
    )
    # A stored turn is keyword-indexed for the other threads at once (docs/conversations.md).
    messages = MessageService(store, clock, on_stored=conversations.index_stored)
    boot = BootService(store, local_day, stats, skills, package_limits=BootLimits.package(settings))
    candidates = CandidateService(store, memories, clock)
    transfer = TransferService(store, memories, clock, skills)
    reminders = ReminderService(
        store,
        memories,
        clock,
        runtime.provider(ReminderConfig.from_settings),
    )

    # The jobs: their models follow the runtime settings (admin panel); the upstream stays the environment's.
    upstreams = ModelUpstreams(bedrock_runtime=overrides.get("bedrock_runtime"))

    def job_model(kind: str, name: Callable[[Settings], str]) -> ChatModel | None:
        if kind in overrides:
            model: ChatModel | None = overrides[kind]
            return model
        return runtime_model(settings, runtime, name, upstreams)

    extract_model = job_model("extract_model", lambda eff: eff.extract_model or eff.chat_model)
    dream_model = job_model("dream_model", lambda eff: eff.dream_model or eff.chat_model)
    history = HistoryService(store, clock, extract_model, runtime.provider(HistoryConfig.from_settings))
    locks = NamespaceLocks()
    extraction = ExtractionService(
        store,
        memories,
        candidates,
        extract_model,
        clock,
        runtime.provider(ExtractionConfig.from_settings),
        locks,
        index,
        conversations,
    )
    dreaming = DreamingService(
        store,
        memories,
        notes,
        index,
        embedder,
        dream_model,
        clock,
        runtime.provider(DreamConfig.from_settings),
        locks,
    )
    cleanup = CleanupService(
        store,
        index,
        clock,
        RetentionPolicy.from_settings(settings),
        locks,
        repair=memories.repair_index,
        skills=skills,
        conversations=conversations,
    )
    queue: JobQueue = (
        overrides.get("queue")
        or build_queue(settings)
        # The inline queue runs reindex jobs, and the reindex service queues its continuations.
        or _inline_queue(settings, clock, cleanup, memories, lambda: reindex, history)
    )
    history.attach_queue(queue)
    reindex = ReindexService(store, memories, embedder, clock, queue)
    queue_repairs_when_back(index, memories, queue)

    chat: ChatService = overrides.get("chat") or build_chat(
        settings,
        ChatParts(
            runtime=runtime,
            store=store,
            messages=messages,
            memories=memories,
            recall=recall,
            boot=boot,
            clock=clock,
            queue=queue,
            reminders=reminders,
            conversations=conversations,
            history=history,
        ),
        overrides.get("bedrock_runtime"),
    )
    return Container(
        settings=settings,
        store=store,
        index=index,
        embedder=embedder,
        clock=clock,
        keys=keys,
        runtime=runtime,
        limits=build_limits(settings, clock, overrides.get("rate_limiter")),
        queue=queue,
        memories=memories,
        candidates=candidates,
        notes=notes,
        messages=messages,
        local_day=local_day,
        stats=stats,
        transfer=transfer,
        recall=recall,
        conversations=conversations,
        boot=boot,
        usage=UsageReportService(store, clock),
        skills=skills,
        threads=ThreadService(store, clock),
        history=history,
        reminders=reminders,
        extraction=extraction,
        dreaming=dreaming,
        cleanup=cleanup,
        reindex=reindex,
        moving_in=MovingInService(transfer, extract_model),
        chat=chat,
        _closers=closers,
    )


def _build_conversations(
    settings: Settings,
    runtime: RuntimeSettings[Settings],
    store: MemoryStore,
    raw_embedder: Embedder | None,
    clock: Clock,
    recall: RecallService,
    index: SearchIndex | None,
    closers: Closers,
) -> ConversationService:
    """Recall of past conversations: its own index of the messages (the memory index's backend, beside
    it), gated on its own embedding model (docs/conversations.md)."""
    guarded = GuardedIndex(
        index or build_index(settings, closers, conversations=True),
        clock=clock,
        retry_seconds=settings.search_retry_seconds,
    )
    gate = (
        GatedEmbedder(raw_embedder, guarded, max_tokens=settings.embedding_max_tokens)
        if raw_embedder is not None
        else None
    )
    return ConversationService(
        store,
        guarded,
        gate,
        clock,
        runtime.provider(ConversationConfig.from_settings),
        query_vector=recall.query_vector,
    )


def _inline_queue(
    settings: Settings,
    clock: Clock,
    cleanup: CleanupService,
    memories: MemoryService,
    reindex: Callable[[], ReindexService],
    history: HistoryService,
) -> InlineJobQueue:
    """The in-process job queue of `engram serve` (``ENGRAM_QUEUE=inline``)."""
    return InlineJobQueue(
        {
            "cleanup": lambda payload: cleanup.run(payload.get("namespace")),
            "index_repair": lambda payload: memories.repair_index(payload["namespace"]),
            "reindex": lambda payload: reindex().run(payload["namespace"], payload["run_id"]),
            "history": lambda payload: run_sync(history.rotate(payload["namespace"], payload["thread"])),
        },
        clock=clock,
        min_interval_seconds=settings.cleanup_min_interval_hours * 3600,
        throttled=("cleanup",),
    )


def queue_repairs_when_back(index: GuardedIndex, memories: MemoryService, queue: JobQueue) -> None:
    """When the index answers again, queue a repair of the namespaces whose writes failed meanwhile."""

    def recovered() -> None:
        for namespace in memories.take_dirty():
            queue.enqueue("index_repair", {"namespace": namespace})

    index.on_recovered = recovered


def snapshot_search(container: Container, *, min_changes: int = 1) -> int:
    """Write the ``replica`` index's snapshot of each namespace that changed by at least ``min_changes``
    rows since its last one (the jobs call it; docs/aws.md). Other indexes: 0."""
    if container.settings.search != "replica":
        return 0  # and the replica module (numpy) is never imported where no replica runs
    from engram.adapters.search.replica import ReplicaSearchIndex

    written = 0
    # The conversation index is a replica beside the memory index (docs/conversations.md).
    for guarded in (container.index, container.conversations.index):
        index = guarded.inner if isinstance(guarded, GuardedIndex) else guarded
        if not isinstance(index, ReplicaSearchIndex):
            continue
        try:
            written += index.snapshot_all(min_changes=min_changes)
        except Exception:  # a snapshot only speeds up cold starts: never fail the job for it
            log.exception("writing the search snapshots failed")
    return written


def index_model_mismatch(container: Container) -> bool:
    """Whether the index is known to hold another model's vectors (asks the index; may raise)."""
    embedder = container.embedder
    return embedder is not None and not embedder.matches_index
