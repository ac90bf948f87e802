"""The chat gateway's config, apart from the gateway: ``bootstrap/configs.py`` maps every service config
at import, and a process that serves no chat door (the MCP function, the job functions) imports this
module, not the gateway's (docs/aws.md, "Cold starts")."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from engram.domain.wire.cache_markers import CachePolicy
from engram.services.chat.routing import RouteConfig


@dataclass(frozen=True)
class ChatConfig:
    """The chat gateway's settings.

    ``settings.py`` holds the defaults (written once); ``bootstrap/configs.py`` maps them.
    """

    routing: RouteConfig
    inject_enabled: bool
    inject_max_body_bytes: int
    boot_max_chars: int
    patch_max_tokens: int
    boot_cache_seconds: float
    keepalive_seconds: float
    context_deadline_seconds: float
    store_messages: bool
    default_max_tokens: int
    cleanup_interval: timedelta
    retry_window: timedelta
    cache: CachePolicy | None  # None: no prompt-cache markers
    responses_native: bool  # the OpenAI-compatible upstream takes `/responses` requests as they are
