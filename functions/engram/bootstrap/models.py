"""Settings -> model adapters: the chat gateway's upstreams and the models Engram calls itself
(extraction, dreaming, recall compression, reranking).

The Bedrock adapters are imported inside the functions that build them: they import botocore, which
is in the optional `aws` extra (a local install without it still serves every other provider).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from engram.adapters.aws_clients import AwsClients
from engram.adapters.llm.anthropic import AnthropicChatModel, AnthropicUpstream
from engram.adapters.llm.openai_compat import OpenAICompatChatModel, OpenAICompatUpstream
from engram.bootstrap import configs
from engram.bootstrap.adapters import on_lambda
from engram.domain.errors import NotConfigured
from engram.domain.ports import ChatModel, ChatUpstream, Clock, Embedder, JobQueue, MemoryStore, Reranker, SearchIndex
from engram.services.chat.history import HistoryService
from engram.services.library.memories import MemoryService
from engram.services.library.messages import MessageService
from engram.services.library.reminders import ReminderService
from engram.services.recall.boot import BootService
from engram.services.recall.conversations import ConversationService
from engram.services.recall.pipeline import Recall, RecallService
from engram.services.runtime_settings import RuntimeSettings
from engram.settings import Settings

if TYPE_CHECKING:
    from engram.services.chat.gateway import ChatService

log = logging.getLogger(__name__)


class RuntimeChatModel:
    """A ``ChatModel`` whose model name follows the runtime settings, rebuilt only when it changes."""

    def __init__(self, current: Callable[[], ChatModel | None]) -> None:
        self._current = current

    def _model(self) -> ChatModel:
        model = self._current()
        if model is None:
            raise NotConfigured("no model is configured for this job (set it in the admin panel's settings)")
        return model

    @property
    def model_id(self) -> str:
        return self._model().model_id

    async def complete(
        self,
        messages: Sequence[dict[str, Any]],
        *,
        json_mode: bool = False,
        max_tokens: int | None = None,
        temperature: float | None = None,
    ) -> str:
        return await self._model().complete(
            messages, json_mode=json_mode, max_tokens=max_tokens, temperature=temperature
        )


@dataclass
class ModelUpstreams:
    """The clients Engram's own model calls share: one per provider, and one Bedrock model per name."""

    bedrock_runtime: Any = None  # a boto3 bedrock-runtime client to use (tests pass a fake); None: built on use
    clients: AwsClients | None = None  # the container's AWS clients (the models' Bedrock client among them)
    openai: OpenAICompatUpstream | None = None
    anthropic: AnthropicUpstream | None = None
    bedrock: dict[str, ChatModel] = field(default_factory=dict)


def build_chat_model(settings: Settings, model: str, shared: ModelUpstreams) -> ChatModel | None:
    """A ``ChatModel`` for Engram's own calls over the configured upstream; ``None`` when no model
    or upstream is configured (the jobs then answer ``NotConfigured``)."""
    if not model:
        return None
    if model.startswith("bedrock/"):
        if model not in shared.bedrock:
            try:
                from engram.adapters.llm.bedrock import BedrockChatModel

                shared.bedrock[model] = BedrockChatModel(
                    model, region=settings.aws_region or None, client=_jobs_bedrock_client(settings, shared)
                )
            except ModuleNotFoundError as exc:  # an install without the `aws` extra (botocore)
                log.warning("no Bedrock adapter (%s is not installed): extraction and dreaming are off", exc.name)
                return None
            except Exception as exc:  # botocore's NoRegionError: the jobs say so, the app still starts
                log.warning("Bedrock model %s is unavailable to the jobs (%s): set ENGRAM_AWS_REGION", model, exc)
                return None
        return shared.bedrock[model]
    if settings.upstream_base_url:
        if shared.openai is None:
            key = settings.upstream_api_key.get_secret_value() if settings.upstream_api_key else None
            shared.openai = OpenAICompatUpstream(settings.upstream_base_url, key)
        return OpenAICompatChatModel(shared.openai, model)
    if settings.anthropic_base_url:
        if shared.anthropic is None:
            key = settings.anthropic_api_key.get_secret_value() if settings.anthropic_api_key else None
            shared.anthropic = AnthropicUpstream(settings.anthropic_base_url, key)
        return AnthropicChatModel(shared.anthropic, model)
    return None


def _jobs_bedrock_client(settings: Settings, shared: ModelUpstreams) -> Any:
    """The Bedrock client of Engram's own model calls: the given one, else the container's, built on first
    use (on the HTTP functions few requests call the jobs' model; the worker's jobs do). Without a
    region setting the adapter builds its own now, so a missing region is said at start."""
    if shared.bedrock_runtime is not None or shared.clients is None or not settings.aws_region:
        return shared.bedrock_runtime
    from engram.adapters.llm.bedrock import CHAT_MODEL_OPTIONS

    return shared.clients.lazy("bedrock-runtime", CHAT_MODEL_OPTIONS)


def runtime_model(
    settings: Settings, runtime: RuntimeSettings[Settings], name: Callable[[Settings], str], shared: ModelUpstreams
) -> RuntimeChatModel | None:
    """A model whose name follows the runtime settings (admin panel) over the environment's upstream;
    ``None`` when the environment's settings configure none."""
    if build_chat_model(settings, name(settings), shared) is None:
        return None
    return RuntimeChatModel(runtime.provider(lambda eff: build_chat_model(eff, name(eff), shared)))


def build_recall(
    settings: Settings,
    runtime: RuntimeSettings[Settings],
    store: MemoryStore,
    index: SearchIndex,
    embedder: Embedder | None,
    clock: Clock,
    clients: AwsClients,
    compressor: ChatModel | None = None,
) -> RecallService:
    config = runtime.provider(configs.recall)
    reranker: Reranker | None = None
    if settings.reranker == "bedrock":
        from engram.adapters.llm.bedrock import BedrockReranker, rerank_options

        region = settings.rerank_region or settings.aws_region
        reranker = BedrockReranker(
            settings.rerank_model,
            region=region,
            # Built now: recall reranks most chat turns' hits.
            client=clients.client("bedrock-agent-runtime", rerank_options(settings.rerank_timeout_s), region=region)
            if region
            else None,
            timeout_s=settings.rerank_timeout_s,
        )
    elif settings.reranker == "http":
        from engram.adapters.llm.rerank_http import HttpReranker

        key = settings.rerank_api_key.get_secret_value() if settings.rerank_api_key else None
        reranker = HttpReranker(settings.rerank_url, settings.rerank_model, key, timeout_s=settings.rerank_timeout_s)
    if compressor is None and settings.recall_compress_model:
        # Like the jobs' models: the name follows the runtime settings, the upstream is the environment's.
        upstreams = ModelUpstreams(clients=clients)
        compressor = runtime_model(settings, runtime, lambda eff: eff.recall_compress_model, upstreams)
        if compressor is None:
            log.warning("ENGRAM_RECALL_COMPRESS_MODEL is set but no upstream is configured: compression is off")
    # On Lambda no thread may run past a response (the instance freezes after the last byte).
    return RecallService(store, index, embedder, reranker, compressor, clock, config, helper_threads=not on_lambda())


@dataclass(frozen=True)
class ChatParts:
    """What the chat gateway works with, besides its upstreams."""

    runtime: RuntimeSettings[Settings]
    store: MemoryStore
    messages: MessageService
    memories: MemoryService
    recall: Recall
    boot: BootService
    clock: Clock
    queue: JobQueue
    reminders: ReminderService
    conversations: ConversationService
    history: HistoryService


def build_chat(settings: Settings, parts: ChatParts, bedrock_runtime: Any = None) -> ChatService:
    """The chat gateway: one shared HTTP client per upstream (closed by the app's lifespan); Bedrock
    (``bedrock/<model-id>``) through one boto3 client built on first use. Its modules are imported here:
    a process that serves no chat door never builds it (``Container.chat``) nor imports them."""
    from engram.services.chat.exchange import ExchangeRecorder
    from engram.services.chat.gateway import ChatService
    from engram.services.chat.turn_context import TurnContextSource

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
    bedrock: ChatUpstream | None = None
    try:
        from engram.adapters.llm.bedrock import BedrockChatUpstream

        bedrock = BedrockChatUpstream(
            region=settings.aws_region or None,
            client=bedrock_runtime,
            connect_timeout=settings.upstream_connect_timeout,
            read_timeout=settings.upstream_timeout,
        )
    except ModuleNotFoundError as exc:  # an install without the `aws` extra: bedrock/ models answer 503
        log.info("no Bedrock chat upstream (%s)", exc.name)
    config = parts.runtime.provider(
        lambda eff: configs.chat(
            eff,
            openai_configured=openai.configured,
            anthropic_configured=anthropic.configured,
            bedrock_configured=bedrock is not None and (bedrock.configured or not _names_bedrock(eff)),
        )
    )
    # The store and the indexes in this process (not DynamoDB, OpenSearch, the replica's DynamoDB reads):
    # a turn's reads go to a worker thread in one hop (services/chat/turn_context.py).
    in_process = settings.store in ("memory", "sqlite") and settings.search in ("memory", "local")
    record = ExchangeRecorder(
        store=parts.store,
        messages=parts.messages,
        memories=parts.memories,
        clock=parts.clock,
        cleanup_interval=lambda: config().cleanup_interval,
        retry_window=lambda: config().retry_window,
        queue=parts.queue,
        reminders=parts.reminders,
        conversations=parts.conversations,
        record_injection=parts.recall.record_injected,
        # Store and index in this process's memory: the exchange's writes cost less than a thread hop.
        instant_writes=settings.store == "memory" and settings.search == "memory",
    )
    context = TurnContextSource(
        boot=parts.boot,
        recall=parts.recall,
        reminders=parts.reminders,
        conversations=parts.conversations,
        in_process=in_process,
    )
    return ChatService(
        openai=openai,
        anthropic=anthropic,
        context=context,
        record=record,
        config=config,
        bedrock=bedrock,
        history=parts.history,
    )


def _names_bedrock(settings: Settings) -> bool:
    """Whether the gateway may route to Bedrock; only then is the AWS config read (it takes ~0.1 s).
    Otherwise a ``bedrock/`` name still fails cleanly: the adapter names the missing region setting."""
    models = (settings.chat_model, settings.vision_model)
    return settings.chat_allow_model_passthrough or any(m.startswith("bedrock/") for m in models)
