"""Settings -> every service config, in one typed place (docs/ARCHITECTURE.md, "One change, one place").

A service config (``RecallConfig``, ``ChatConfig``, ...) is a frozen dataclass in the service's module
with no defaults for what a setting decides: ``settings.py`` writes each default once
(``tests/unit/test_config_defaults.py`` fails on a repeated one), and the functions below map the
typed ``Settings`` to each config by name, so mypy checks every field read and every field filled.

A service gets its config as a ``Live`` (``services/runtime_settings.py``): ``runtime.provider(recall)``
rebuilds it from the owner's runtime settings (admin panel) when they change; a plain config is fixed.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from engram.domain.wire.cache_markers import CachePolicy
from engram.services.chat.config import ChatConfig
from engram.services.chat.history import HistoryConfig
from engram.services.chat.routing import RouteConfig
from engram.services.library.memories import MemoryRules
from engram.services.library.reminders import ReminderConfig
from engram.services.recall.boot import BootLimits
from engram.services.recall.conversations import ConversationConfig
from engram.services.recall.pipeline import RecallConfig
from engram.settings import Settings

if TYPE_CHECKING:  # the job services' modules are imported by the jobs' first use (bootstrap.Container.jobs)
    from engram.services.jobs.cleanup import RetentionPolicy
    from engram.services.jobs.dreaming import DreamConfig
    from engram.services.jobs.extraction import ExtractionConfig


def recall(s: Settings) -> RecallConfig:
    return RecallConfig(
        top_k=s.recall_top_k,
        candidates=s.recall_candidates,
        fusion=s.recall_fusion,
        rrf_k=s.recall_rrf_k,
        keyword_weight=s.recall_keyword_weight,
        vector_weight=s.recall_vector_weight,
        importance_weight=s.recall_importance_weight,
        recency_weight=s.recall_recency_weight,
        recency_half_life_days=s.recall_recency_half_life_days,
        min_score=s.recall_min_score,
        min_relevance=s.recall_min_relevance,
        budget_tokens=s.recall_budget_tokens,
        sure_relevance=s.recall_sure_relevance,
        repeat_window_minutes=s.recall_repeat_window_minutes,
        repeat_decay=s.recall_repeat_decay,
        dedup_jaccard=s.recall_dedup_jaccard,
        diversity=s.recall_diversity,
        hubness=s.recall_hubness,
        rerank_candidates=s.recall_rerank_candidates,
        compress=s.recall_compress,
        compress_model=s.recall_compress_model,
        compress_timeout_s=s.recall_compress_timeout_s,
        max_query_chars=s.recall_max_query_chars,
    )


def conversations(s: Settings) -> ConversationConfig:
    return ConversationConfig(
        enabled=s.conversation_recall_enabled,
        threads=s.conversation_recall_threads,
        fragments=s.conversation_recall_fragments,
        neighbours=s.conversation_recall_neighbours,
        seen_ttl_hours=s.conversation_recall_seen_ttl_hours,
        min_relevance=s.conversation_recall_min_relevance,
        message_chars=s.conversation_recall_message_chars,
        recency_half_life_days=s.recall_recency_half_life_days,
    )


def boot_package(s: Settings) -> BootLimits:
    """The boot package of REST and MCP (the chat block's limits are ``CHAT_BLOCK``, not settings)."""
    return BootLimits(precious=20, glossary=None, longtail=s.boot_longtail, today=s.boot_today_messages)


def memory_rules(s: Settings) -> MemoryRules:
    return MemoryRules(dedup_cosine=s.dedup_cosine)


def reminders(s: Settings) -> ReminderConfig:
    return ReminderConfig(
        missed_after_days=s.reminder_missed_after_days, lease_seconds=s.reminder_lease_seconds, timezone=s.timezone
    )


def history(s: Settings) -> HistoryConfig:
    return HistoryConfig(
        rotate_turns=s.history_rotate_turns,
        rotate_minutes=s.history_rotate_minutes,
        budget_chars=s.history_budget_chars,
        summary_max_chars=s.history_summary_max_chars,
    )


def extraction(s: Settings) -> ExtractionConfig:
    from engram.services.jobs.extraction import ExtractionConfig

    return ExtractionConfig(
        window_hours=s.extract_window_hours,
        max_messages=s.extract_max_messages,
        max_batches=s.extract_max_batches,
        max_tokens=s.extract_max_tokens,
        max_message_chars=s.extract_max_message_chars,
        review_confidence=s.review_confidence,
        min_importance=s.memory_min_importance,
        interval_hours=s.extract_interval_hours,
    )


def dreaming(s: Settings) -> DreamConfig:
    from engram.services.jobs.dreaming import DreamConfig

    return DreamConfig(
        timezone=s.timezone,
        max_messages=s.dream_max_messages,
        max_tokens=s.dream_max_tokens,
        memory_context_limit=s.dream_memory_context_limit,
        excerpt_limit=s.dream_excerpt_limit,
        max_message_chars=s.extract_max_message_chars,
    )


def retention(s: Settings) -> RetentionPolicy:
    from engram.services.jobs.cleanup import RetentionPolicy

    return RetentionPolicy(
        messages_days=s.retention_messages_days,
        usage_days=s.retention_usage_days,
        events_days=s.retention_events_days,
        journal_days=s.retention_journal_days,
        idempotency_days=s.retention_idempotency_days,
        memory_unseen_days=s.memory_expire_unseen_days,
        hard_delete_days=s.hard_delete_after_days,
        empty_min_chars=s.empty_memory_min_chars,
    )


def chat(
    s: Settings, *, openai_configured: bool, anthropic_configured: bool, bedrock_configured: bool = False
) -> ChatConfig:
    """The gateway's config; which upstreams are configured is known only once they are built."""
    return ChatConfig(
        routing=RouteConfig(
            public_model=s.public_model_name,
            chat_model=s.chat_model,
            vision_model=s.vision_model,
            allow_passthrough=s.chat_allow_model_passthrough,
            openai_configured=openai_configured,
            anthropic_configured=anthropic_configured,
            bedrock_configured=bedrock_configured,
        ),
        inject_enabled=s.chat_inject_enabled,
        inject_max_body_bytes=s.chat_inject_max_body_bytes,
        boot_max_chars=s.chat_boot_max_chars,
        patch_max_tokens=s.chat_patch_max_tokens,
        boot_cache_seconds=s.chat_boot_cache_seconds,
        keepalive_seconds=s.chat_keepalive_seconds,
        context_deadline_seconds=s.chat_context_deadline_seconds,
        store_messages=s.chat_store_messages,
        default_max_tokens=s.chat_default_max_tokens,
        cleanup_interval=timedelta(hours=s.cleanup_min_interval_hours),
        retry_window=timedelta(minutes=s.chat_retry_window_minutes),
        cache=CachePolicy(ttl=s.anthropic_cache_ttl) if s.anthropic_cache_enabled else None,
        responses_native=s.upstream_responses_api,
    )


def _chat_with_every_upstream(s: Settings) -> ChatConfig:
    return chat(s, openai_configured=True, anthropic_configured=True)


def by_type() -> dict[type, Callable[[Settings], Any]]:
    """Every config by its type: what a test builds at the setting defaults (``tests/configs.py``) and what
    ``tests/unit/test_config_defaults.py`` checks. A new config joins here. (A function: the job configs'
    modules are imported only where a job runs.)"""
    from engram.services.jobs.cleanup import RetentionPolicy
    from engram.services.jobs.dreaming import DreamConfig
    from engram.services.jobs.extraction import ExtractionConfig

    return {
        RecallConfig: recall,
        ConversationConfig: conversations,
        BootLimits: boot_package,
        MemoryRules: memory_rules,
        ReminderConfig: reminders,
        HistoryConfig: history,
        ExtractionConfig: extraction,
        DreamConfig: dreaming,
        RetentionPolicy: retention,
        ChatConfig: _chat_with_every_upstream,
    }
