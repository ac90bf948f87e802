"""The composition root: Settings -> adapters -> services. The only module that picks adapters."""

from __future__ import annotations

import json
import logging
import os
import secrets
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from engram.adapters.files import private_dir, readable_by_others
from engram.domain.access import ALL, ApiKey, KeyRing
from engram.domain.errors import InvalidInput, NotConfigured
from engram.domain.ports import Clock, Embedder, JobQueue, MemoryStore, RateLimiter, SearchIndex
from engram.services.gated_embedder import ClippedEmbedder, GatedEmbedder
from engram.services.search_guard import GuardedIndex
from engram.settings import Settings, load_settings

log = logging.getLogger(__name__)

LOCAL_DB_NAME = "engram.sqlite3"
LOCAL_KEYS_NAME = "keys.json"
LOCAL_CONVERSATIONS_NAME = "conversations.sqlite3"  # the conversation index (docs/conversations.md)


@dataclass
class Container:
    """Everything a process needs, built once."""

    settings: Settings
    store: MemoryStore
    index: GuardedIndex
    embedder: GatedEmbedder | None
    clock: Clock
    keys: KeyRing
    memories: Any
    candidates: Any
    library: Any
    transfer: Any
    recall: Any
    queue: JobQueue | None = None
    chat: Any = None  # the chat gateway (services.chat.ChatService)
    boot: Any = None  # services.boot.BootService: the boot package (chat block, REST, MCP)
    usage: Any = None  # services.usage_report.UsageReportService
    extraction: Any = None
    dreaming: Any = None
    cleanup: Any = None
    reindex: Any = None  # services.reindex.ReindexService
    threads: Any = None  # services.threads.ThreadService
    reminders: Any = None  # services.reminders.ReminderService
    conversations: Any = None  # services.conversations.ConversationService (recall of past conversations)
    moving_in: Any = None  # services.moving_in.MovingInService (imports from Aelios, Pawwake, mem0, text)
    skills: Any = None  # services.skills.SkillService
    # RuntimeSettings: the owner's overrides of the safe settings (admin panel); `.effective()`.
    runtime: Any = None
    limits: Any = None  # services.ratelimit.RequestLimits: requests per minute per key
    extras: dict[str, Any] = field(default_factory=dict)
    _closers: list[Any] = field(default_factory=list)

    def close(self) -> None:
        for closer in reversed(self._closers):
            try:
                closer()
            except Exception:  # closing is best effort at shutdown
                log.exception("error while closing")
        self._closers.clear()


def build_container(settings: Settings | None = None, **overrides: Any) -> Container:
    """Build the object graph. ``overrides`` replace adapters (tests pass fakes: ``store=...``;
    ``bedrock_runtime=...`` replaces the boto3 bedrock-runtime client of the gateway and the jobs)."""
    from engram.adapters.clock import SystemClock
    from engram.services.boot import BootService
    from engram.services.candidates import CandidateService
    from engram.services.library import LibraryService
    from engram.services.memories import MemoryRules, MemoryService
    from engram.services.reminders import ReminderConfig, ReminderService
    from engram.services.runtime_settings import RuntimeSettings
    from engram.services.threads import ThreadService
    from engram.services.transfer import TransferService
    from engram.services.usage_report import UsageReportService

    settings = _with_secret(settings or load_settings())
    closers: list[Any] = []
    clock: Clock = overrides.get("clock") or SystemClock()
    store: MemoryStore = overrides.get("store") or _build_store(settings, closers)
    # Every index call goes through the guard, and nothing here calls the index: building the app
    # touches no network (docs/aws.md, "Cold starts").
    index = GuardedIndex(
        overrides.get("index") or _build_index(settings, closers), retry_seconds=settings.search_retry_seconds
    )
    raw_embedder = overrides["embedder"] if "embedder" in overrides else _build_embedder(settings)
    embedder: GatedEmbedder | None = (
        GatedEmbedder(raw_embedder, index, max_tokens=settings.embedding_max_tokens)
        if raw_embedder is not None
        else None
    )
    keys = overrides.get("keys") or build_keyring(settings)

    runtime = RuntimeSettings(store, settings)
    rules = runtime.provider(MemoryRules.from_settings)
    memories = MemoryService(store, index, embedder, clock, rules)
    library = LibraryService(store, clock, runtime.provider(lambda s: s.timezone))
    recall = overrides.get("recall") or _build_recall(
        settings, runtime, store, index, embedder, clock, memories, overrides.get("compress_model")
    )
    # Skill vectors record their own model, so skills use the embedder directly, not the index's gate.
    skill_embedder = ClippedEmbedder(raw_embedder, settings.embedding_max_tokens) if raw_embedder is not None else None
    skills = overrides.get("skills") or _build_skills(settings, clock, closers, skill_embedder)
    conversations = overrides.get("conversations") or _build_conversations(
        settings, runtime, store, raw_embedder, clock, recall, overrides.get("conversation_index"), closers
    )
    container = Container(
        settings=settings,
        store=store,
        index=index,
        embedder=embedder,
        clock=clock,
        keys=keys,
        memories=memories,
        candidates=CandidateService(store, memories, clock),
        library=library,
        transfer=TransferService(store, memories, clock, skills),
        skills=skills,
        recall=recall,
        queue=overrides.get("queue") or _build_queue(settings),
        runtime=runtime,
        limits=_build_limits(settings, overrides.get("rate_limiter")),
        threads=ThreadService(store, clock),
        conversations=conversations,
        reminders=ReminderService(
            store,
            memories,
            clock,
            runtime.provider(ReminderConfig.from_settings),
        ),
    )
    container.boot = BootService(store, library, skills)
    container.usage = UsageReportService(store, clock)
    container._closers = closers
    _wire_jobs(container, overrides)
    container.chat = overrides.get("chat") or _build_chat(settings, container, overrides.get("bedrock_runtime"))
    return container


def _wire_jobs(container: Container, overrides: dict[str, Any]) -> None:
    """Extraction, dreaming and cleanup services, their models and the local job queue.

    ``extract_model`` / ``dream_model`` overrides replace the models (tests pass a scripted fake).
    """
    from engram.services.cleanup import CleanupService, RetentionPolicy
    from engram.services.dreaming import DreamConfig, DreamingService
    from engram.services.extraction import ExtractionConfig, ExtractionService
    from engram.services.job_runs import NamespaceLocks
    from engram.services.moving_in import MovingInService
    from engram.services.reindex import ReindexService

    s = container.settings
    locks = NamespaceLocks()
    upstream: dict[str, Any] = {}
    if overrides.get("bedrock_runtime") is not None:
        upstream["bedrock-runtime"] = overrides["bedrock_runtime"]
    c = container

    def job_model(name: Callable[[Settings], str]) -> Any:
        # The model name follows the runtime settings (admin panel); the upstream stays the environment's.
        if _build_chat_model(s, name(s), upstream) is None:
            return None
        return RuntimeChatModel(c.runtime.provider(lambda eff: _build_chat_model(eff, name(eff), upstream)))

    extract_model = (
        overrides["extract_model"]
        if "extract_model" in overrides
        else job_model(lambda eff: eff.extract_model or eff.chat_model)
    )
    dream_model = (
        overrides["dream_model"]
        if "dream_model" in overrides
        else job_model(lambda eff: eff.dream_model or eff.chat_model)
    )
    extraction_config = c.runtime.provider(ExtractionConfig.from_settings)
    dream_config = c.runtime.provider(DreamConfig.from_settings)
    c.extraction = ExtractionService(
        c.store, c.memories, c.candidates, extract_model, c.clock, extraction_config, locks, c.index, c.conversations
    )
    c.dreaming = DreamingService(
        c.store, c.memories, c.library, c.index, c.embedder, dream_model, c.clock, dream_config, locks
    )
    c.cleanup = CleanupService(
        c.store,
        c.index,
        c.clock,
        RetentionPolicy.from_settings(s),
        locks,
        repair=c.memories.repair_index,
        skills=c.skills,
        conversations=c.conversations,
    )
    if c.queue is None and getattr(s, "queue", "inline") == "inline":
        from engram.adapters.queue.inline import InlineJobQueue

        cleanup, memories = c.cleanup, c.memories
        c.queue = InlineJobQueue(
            {
                "cleanup": lambda payload: cleanup.run(payload.get("namespace")),
                "index_repair": lambda payload: memories.repair_index(payload["namespace"]),
                "reindex": lambda payload: c.reindex.run(payload["namespace"], payload["run_id"]),
            },
            min_interval_seconds=s.cleanup_min_interval_hours * 3600,
            throttled=("cleanup",),
        )
    c.reindex = ReindexService(c.store, c.memories, c.embedder, c.clock, c.queue)
    c.moving_in = MovingInService(c.transfer, extract_model)
    _repair_when_back(c)


def _repair_when_back(c: Container) -> None:
    """When the index answers again, queue a repair of the namespaces whose writes failed meanwhile."""
    queue, memories = c.queue, c.memories

    def recovered() -> None:
        if queue is None:
            return
        for namespace in memories.take_dirty():
            queue.enqueue("index_repair", {"namespace": namespace})

    c.index.on_recovered = recovered


class RuntimeChatModel:
    """A ``ChatModel`` whose model name follows the runtime settings, rebuilt only when it changes."""

    def __init__(self, current: Callable[[], Any]) -> None:
        self._current = current

    def _model(self) -> Any:
        model = self._current()
        if model is None:
            raise NotConfigured("no model is configured for this job (set it in the admin panel's settings)")
        return model

    @property
    def model_id(self) -> str:
        return str(self._model().model_id)

    async def complete(self, messages: Any, **kwargs: Any) -> str:
        return str(await self._model().complete(messages, **kwargs))

    def stream(self, messages: Any, **kwargs: Any) -> Any:
        return self._model().stream(messages, **kwargs)


def _build_chat_model(settings: Settings, model: str, shared: dict[str, Any]) -> Any:
    """A ``ChatModel`` for Engram's own calls over the configured upstream; ``None`` when no model
    or upstream is configured (the jobs then answer ``NotConfigured``)."""
    if not model:
        return None
    try:
        if model.startswith("bedrock/"):
            from engram.adapters.llm.bedrock import BedrockChatModel

            if model not in shared:
                try:
                    shared[model] = BedrockChatModel(
                        model, region=settings.aws_region or None, client=shared.get("bedrock-runtime")
                    )
                except Exception as exc:  # botocore's NoRegionError: the jobs say so, the app still starts
                    log.warning("Bedrock model %s is unavailable to the jobs (%s): set ENGRAM_AWS_REGION", model, exc)
                    return None
            return shared[model]
        if settings.upstream_base_url:
            from engram.adapters.llm.openai_compat import OpenAICompatChatModel, OpenAICompatUpstream

            if "openai" not in shared:
                key = settings.upstream_api_key.get_secret_value() if settings.upstream_api_key else None
                shared["openai"] = OpenAICompatUpstream(settings.upstream_base_url, key)
            return OpenAICompatChatModel(shared["openai"], model)
        if settings.anthropic_base_url:
            from engram.adapters.llm.anthropic import AnthropicChatModel, AnthropicUpstream

            if "anthropic" not in shared:
                key = settings.anthropic_api_key.get_secret_value() if settings.anthropic_api_key else None
                shared["anthropic"] = AnthropicUpstream(settings.anthropic_base_url, key)
            return AnthropicChatModel(shared["anthropic"], model)
    except ModuleNotFoundError as exc:  # a build without the LLM adapters
        log.warning("no chat model adapter available (%s): extraction and dreaming are off", exc.name)
    return None


# -- adapters -------------------------------------------------------------------------------
def local_db_path(settings: Settings) -> Path:
    return Path(settings.data_dir).expanduser() / LOCAL_DB_NAME


def _build_skills(settings: Settings, clock: Clock, closers: list[Any], embedder: Embedder | None = None) -> Any:
    """The skills library: its rows beside the store's (memory / ``skills.db`` / the DynamoDB table),
    resource files in the data dir locally and in ``ENGRAM_SKILLS_BUCKET`` on AWS."""
    from engram.adapters.storage.skills import (
        DynamoSkillStore,
        InMemoryBlobStore,
        InMemorySkillStore,
        LocalBlobStore,
        S3BlobStore,
        SqliteSkillStore,
    )
    from engram.services.skills import SkillService

    region = settings.aws_region or None
    data_dir = Path(settings.data_dir).expanduser()
    store: Any
    if settings.store == "dynamodb":
        store = DynamoSkillStore(settings.table_name, region_name=region)
    elif settings.store == "sqlite":
        private_dir(data_dir)
        store = SqliteSkillStore(data_dir / "skills.db")
        closers.append(store.close)
    else:
        store = InMemorySkillStore()
    blobs: Any
    if settings.skills_bucket:
        blobs = S3BlobStore(settings.skills_bucket, region_name=region)
    elif settings.store == "memory":
        blobs = InMemoryBlobStore()
    else:
        blobs = LocalBlobStore(data_dir / "skills")
    return SkillService(store, blobs, clock, embedder)


def _build_store(settings: Settings, closers: list[Any]) -> MemoryStore:
    if settings.store == "memory":
        from engram.adapters.storage.inmemory import InMemoryMemoryStore

        return InMemoryMemoryStore()
    if settings.store == "sqlite":
        from engram.adapters.storage.sqlite import SqliteMemoryStore

        path = local_db_path(settings)
        private_dir(path.parent)
        sqlite_store = SqliteMemoryStore(path)
        closers.append(sqlite_store.close)
        return sqlite_store
    if settings.store == "dynamodb":
        from engram.adapters.storage.dynamodb import DynamoMemoryStore

        if not settings.table_name:
            raise NotConfigured("ENGRAM_STORE=dynamodb needs ENGRAM_TABLE_NAME")
        return DynamoMemoryStore(
            settings.table_name,
            region_name=settings.aws_region or None,
            message_ttl_days=settings.retention_messages_days,
            log_ttl_days=settings.retention_events_days,
            idempotency_ttl_days=settings.retention_idempotency_days,
        )
    raise NotConfigured(f"store {settings.store!r} is not available in this build")


def _build_index(settings: Settings, closers: list[Any], *, conversations: bool = False) -> SearchIndex:
    """The memory index, or (``conversations``) the index of conversation messages beside it: its own
    SQLite file, OpenSearch index, or replica log."""
    if settings.search == "memory":
        from engram.adapters.search.inmemory import InMemorySearchIndex

        return InMemorySearchIndex()
    if settings.search == "local":
        from engram.adapters.search.sqlite import SqliteSearchIndex

        path = local_db_path(settings)
        private_dir(path.parent)
        index = SqliteSearchIndex(path.with_name(LOCAL_CONVERSATIONS_NAME) if conversations else path)
        closers.append(index.close)
        return index
    if settings.search == "opensearch":
        from engram.adapters.search.opensearch import OpenSearchIndex

        if not settings.opensearch_endpoint:
            raise NotConfigured("ENGRAM_SEARCH=opensearch needs ENGRAM_OPENSEARCH_ENDPOINT")
        opensearch = OpenSearchIndex(
            settings.opensearch_endpoint,
            settings.opensearch_conversation_index if conversations else settings.opensearch_index,
            region=settings.aws_region or None,
            timeout=settings.search_timeout,
        )
        closers.append(opensearch.close)
        return opensearch
    if settings.search == "replica":
        replica = _build_replica(settings, conversations=conversations)
        closers.append(replica.close)
        return replica
    raise NotConfigured(f"search index {settings.search!r} is not available in this build")


def _build_conversations(
    settings: Settings,
    runtime: Any,
    store: MemoryStore,
    raw_embedder: Embedder | None,
    clock: Clock,
    recall: Any,
    index: SearchIndex | None,
    closers: list[Any],
) -> Any:
    """Recall of past conversations: its own index of the messages (the memory index's backend, beside
    it), gated on its own embedding model (docs/conversations.md)."""
    from engram.services.conversations import ConversationConfig, ConversationService

    guarded = GuardedIndex(
        index or _build_index(settings, closers, conversations=True), retry_seconds=settings.search_retry_seconds
    )
    gate = (
        GatedEmbedder(raw_embedder, guarded, max_tokens=settings.embedding_max_tokens)
        if raw_embedder is not None
        else None
    )
    query_vector = getattr(recall, "query_vector", None)
    return ConversationService(
        store, guarded, gate, clock, runtime.provider(ConversationConfig.from_settings), query_vector=query_vector
    )


def _build_replica(settings: Settings, *, conversations: bool = False) -> Any:
    """The ``replica`` index: a private copy per process of the document log in the store (docs/aws.md).
    The conversation index has its own log (``replica_conv_*`` tables / ``CDOC`` items), snapshots and
    replica directory (``<replica dir>-conversations``)."""
    from engram.adapters.search.document_log import SearchLog, SnapshotStore
    from engram.adapters.search.replica import ReplicaSearchIndex
    from engram.adapters.search.replica_log import DynamoSearchLog, SqliteSearchLog
    from engram.adapters.storage.snapshots import DirSnapshotStore, S3SnapshotStore

    data_dir = Path(settings.data_dir).expanduser()
    suffix = "-conversations" if conversations else ""
    search_log: SearchLog
    snapshots: SnapshotStore | None = None
    if settings.store == "sqlite":
        path = local_db_path(settings)
        private_dir(path.parent)
        search_log = SqliteSearchLog(path, prefix="replica_conv" if conversations else "replica")
        snapshots = DirSnapshotStore(data_dir / f"snapshots{suffix}")
    elif settings.store == "dynamodb":
        if not settings.table_name:
            raise NotConfigured("ENGRAM_SEARCH=replica needs ENGRAM_TABLE_NAME with ENGRAM_STORE=dynamodb")
        search_log = DynamoSearchLog(
            settings.table_name, region_name=settings.aws_region or None, kind="CDOC" if conversations else "SDOC"
        )
        if settings.snapshot_bucket:
            snapshots = S3SnapshotStore(
                settings.snapshot_bucket,
                region_name=settings.aws_region or None,
                **({"prefix": "search/conversations/"} if conversations else {}),
            )
    else:
        raise NotConfigured("ENGRAM_SEARCH=replica needs ENGRAM_STORE=sqlite or dynamodb")
    directory = settings.replica_dir
    if directory is None:
        on_lambda = bool(os.environ.get("AWS_LAMBDA_FUNCTION_NAME"))
        # Lambda's only writable place is /tmp (``TMPDIR`` where set).
        directory = Path(tempfile.gettempdir()) / "engram-replica" if on_lambda else data_dir / "replica"
    return ReplicaSearchIndex(
        search_log,
        Path(f"{directory}{suffix}"),
        snapshots=snapshots,
        sync_seconds=settings.replica_sync_seconds,
    )


def _build_embedder(settings: Settings) -> Embedder | None:
    if settings.embedder == "none":
        return None
    if settings.embedder == "local":
        from engram.adapters.embed.local import LocalEmbedder

        instances = settings.embedding_instances or min(4, os.cpu_count() or 1)
        return LocalEmbedder(num_threads=settings.embedding_threads or None, instances=instances)
    if settings.embedder == "openai":
        from engram.adapters.embed.openai_compat import OpenAIEmbedder

        if not settings.embedding_base_url or not settings.embedding_model:
            raise NotConfigured("ENGRAM_EMBEDDER=openai needs ENGRAM_EMBEDDING_BASE_URL and ENGRAM_EMBEDDING_MODEL")
        return OpenAIEmbedder(
            base_url=settings.embedding_base_url,
            api_key=settings.embedding_api_key.get_secret_value() if settings.embedding_api_key else None,
            model=settings.embedding_model,
            dimensions=settings.embedding_dimensions,
        )
    if settings.embedder == "bedrock":
        from engram.adapters.embed.bedrock import TITAN_V2, BedrockEmbedder

        return BedrockEmbedder(
            settings.embedding_model or TITAN_V2, settings.embedding_dimensions, region=settings.aws_region or None
        )
    raise NotConfigured(f"embedder {settings.embedder!r} is not available in this build")


def _build_limits(settings: Settings, limiter: RateLimiter | None = None) -> Any:
    """Per-key request limits: counters in process locally, in the DynamoDB table on AWS (every Lambda
    instance shares them)."""
    from engram.services.ratelimit import RequestLimits

    if limiter is None:
        if settings.store == "dynamodb" and settings.table_name:
            from engram.adapters.ratelimit.dynamodb import DynamoRateLimiter

            limiter = DynamoRateLimiter(settings.table_name, region_name=settings.aws_region or None)
        else:
            from engram.adapters.ratelimit.inprocess import InProcessRateLimiter

            limiter = InProcessRateLimiter()
    return RequestLimits(
        limiter,
        chat_per_minute=settings.rate_limit_chat_per_minute,
        requests_per_minute=settings.rate_limit_requests_per_minute,
    )


def _build_queue(settings: Settings) -> JobQueue | None:
    """SQS on AWS; ``None`` otherwise (the jobs wiring supplies the in-process queue)."""
    if settings.queue != "sqs":
        return None
    from engram.adapters.queue.sqs import SqsJobQueue

    if not settings.cleanup_queue_url:
        raise NotConfigured("ENGRAM_QUEUE=sqs needs ENGRAM_CLEANUP_QUEUE_URL")
    return SqsJobQueue(settings.cleanup_queue_url, region_name=settings.aws_region or None)


def _with_secret(settings: Settings) -> Settings:
    """Settings with the fields of the ``ENGRAM_SECRET_ARN`` secret applied (keys stay out of env)."""
    if not settings.secret_arn:
        return settings
    from engram.adapters.secrets import read_secret_json

    values = read_secret_json(settings.secret_arn, region=settings.aws_region or None)
    updates = {k: v for k, v in values.items() if k in Settings.model_fields and k != "secret_arn"}
    return Settings.model_validate({**dict(settings), **updates}) if updates else settings


def _build_recall(
    settings: Settings,
    runtime: Any,
    store: MemoryStore,
    index: SearchIndex,
    embedder: Embedder | None,
    clock: Clock,
    memories: Any,
    compressor: Any = None,
) -> Any:
    from engram.services.recall import RecallConfig, RecallService

    config = runtime.provider(RecallConfig.from_settings)
    reranker = None
    if settings.reranker == "bedrock":
        from engram.adapters.llm.bedrock import BedrockReranker

        reranker = BedrockReranker(settings.rerank_model, region=settings.rerank_region or settings.aws_region)
    if compressor is None and settings.recall_compress_model:
        # Like the jobs' models: the name follows the runtime settings, the upstream is the environment's.
        shared: dict[str, Any] = {}
        if _build_chat_model(settings, settings.recall_compress_model, shared) is None:
            log.warning("ENGRAM_RECALL_COMPRESS_MODEL is set but no upstream is configured: compression is off")
        else:
            compressor = RuntimeChatModel(
                runtime.provider(lambda eff: _build_chat_model(eff, eff.recall_compress_model, shared))
            )
    return RecallService(store, index, embedder, reranker, compressor, clock, config)


def _build_chat(settings: Settings, container: Container, bedrock_runtime: Any = None) -> Any:
    """The chat gateway: one shared HTTP client per upstream (closed by the app's lifespan); Bedrock
    (``bedrock/<model-id>``) through one boto3 client built on first use."""
    from engram.adapters.llm.anthropic import AnthropicUpstream
    from engram.adapters.llm.openai_compat import OpenAICompatUpstream
    from engram.services.chat import ChatConfig, ChatService
    from engram.services.exchange import ExchangeRecorder
    from engram.services.turn_context import TurnContextSource

    timeouts = {"connect_timeout": settings.upstream_connect_timeout, "read_timeout": settings.upstream_timeout}
    openai = OpenAICompatUpstream(
        settings.upstream_base_url,
        settings.upstream_api_key.get_secret_value() if settings.upstream_api_key else None,
        **timeouts,
    )
    anthropic = AnthropicUpstream(
        settings.anthropic_base_url,
        settings.anthropic_api_key.get_secret_value() if settings.anthropic_api_key else None,
        **timeouts,
    )
    bedrock: Any = None
    try:
        from engram.adapters.llm.bedrock import BedrockChatUpstream

        bedrock = BedrockChatUpstream(
            region=settings.aws_region or None,
            client=bedrock_runtime,
            connect_timeout=settings.upstream_connect_timeout,
            read_timeout=settings.upstream_timeout,
        )
    except ModuleNotFoundError as exc:  # a build without boto3: bedrock/ models answer 503
        log.info("no Bedrock chat upstream (%s)", exc.name)
    config = container.runtime.provider(
        lambda eff: ChatConfig.from_settings(
            eff,
            openai_configured=openai.configured,
            anthropic_configured=anthropic.configured,
            bedrock_configured=bedrock is not None and (bedrock.configured or not _names_bedrock(eff)),
        )
    )
    record = ExchangeRecorder(
        store=container.store,
        library=container.library,
        memories=container.memories,
        clock=container.clock,
        cleanup_interval=lambda: config().cleanup_interval,
        queue=container.queue,
        reminders=container.reminders,
        conversations=container.conversations,
    )
    context = TurnContextSource(
        boot=container.boot, recall=container.recall, record=record, conversations=container.conversations
    )
    return ChatService(
        openai=openai, anthropic=anthropic, context=context, record=record, config=config, bedrock=bedrock
    )


def _names_bedrock(settings: Settings) -> bool:
    """Whether the gateway may route to Bedrock; only then is the AWS config read (it takes ~0.1 s).
    Otherwise a ``bedrock/`` name still fails cleanly: the adapter names the missing region setting."""
    models = (settings.chat_model, settings.vision_model)
    return settings.chat_allow_model_passthrough or any(m.startswith("bedrock/") for m in models)


def snapshot_search(container: Container, *, min_changes: int = 1) -> int:
    """Write the ``replica`` index's snapshot of each namespace that changed by at least ``min_changes``
    rows since its last one (the jobs call it; docs/aws.md). Other indexes: 0."""
    from engram.adapters.search.replica import ReplicaSearchIndex

    # Job handlers also run with stand-in containers; the conversation index is a replica beside it.
    conversations = getattr(getattr(container, "conversations", None), "index", None)
    written = 0
    for guarded in (getattr(container, "index", None), conversations):
        index = getattr(guarded, "inner", guarded)
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
    return isinstance(embedder, GatedEmbedder) and not embedder.matches_index


# -- keys -----------------------------------------------------------------------------------
def build_keyring(settings: Settings) -> KeyRing:
    keys: list[ApiKey] = []
    if settings.api_key is not None:
        keys.append(
            ApiKey.create(
                settings.api_key.get_secret_value(), name="owner", namespace=settings.default_namespace, scopes=[ALL]
            )
        )
    if settings.keys_file is not None:
        keys.extend(load_keys_file(Path(settings.keys_file)))
    return KeyRing(keys)


def load_keys_file(path: Path) -> list[ApiKey]:
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError as exc:
        raise NotConfigured(f"keys file {path} does not exist") from exc
    except json.JSONDecodeError as exc:
        raise InvalidInput(f"keys file {path} is not valid JSON: {exc.msg} (line {exc.lineno})") from exc
    if readable_by_others(path):
        log.warning("keys file %s is readable by other users of this machine: run `chmod 600 %s`", path, path)
    entries = raw.get("keys", raw) if isinstance(raw, dict) else raw
    if not isinstance(entries, list):
        raise InvalidInput(f"keys file {path} must hold a list of keys")
    out: list[ApiKey] = []
    for i, entry in enumerate(entries):
        if not isinstance(entry, dict) or not isinstance(entry.get("key"), str):
            raise InvalidInput(f"keys file {path}: entry {i} needs a string 'key'")
        name = str(entry.get("name") or f"key{i}")
        # Scopes are never implied: a missing list is a mistake, an empty one grants nothing.
        if "scopes" not in entry:
            raise InvalidInput(
                f"keys file {path}: key {name!r} has no 'scopes' (list what it may do, e.g. [\"chat:proxy\"], "
                "or [] for nothing)",
                code="missing_scopes",
            )
        scopes = entry["scopes"]
        if not isinstance(scopes, list) or not all(isinstance(s, str) for s in scopes):
            raise InvalidInput(f"keys file {path}: key {name!r}: 'scopes' must be a list of strings", code="bad_scopes")
        out.append(
            ApiKey.create(
                entry["key"],
                name=name,
                namespace=str(entry.get("namespace") or "default"),
                scopes=scopes,
                chat_per_minute=entry.get("chat_per_minute"),
                requests_per_minute=entry.get("requests_per_minute"),
                agent=entry.get("agent"),
            )
        )
    return out


def ensure_local_owner_key(settings: Settings) -> tuple[Settings, str | None]:
    """For `engram serve` with no key configured: create an owner key in the data dir once.

    Returns the settings pointing at the keys file and the new secret (only when just created).
    """
    if settings.api_key is not None or settings.keys_file is not None:
        return settings, None
    path = Path(settings.data_dir).expanduser() / LOCAL_KEYS_NAME
    created: str | None = None
    if not path.exists():
        private_dir(path.parent)
        created = "ek_" + secrets.token_urlsafe(24)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            json.dump(
                [{"name": "owner", "key": created, "namespace": settings.default_namespace, "scopes": [ALL]}],
                fh,
                indent=2,
            )
    return settings.model_copy(update={"keys_file": path}), created
