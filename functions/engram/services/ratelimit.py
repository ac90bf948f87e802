"""Requests per minute per key, for chat and for everything else (README, section Keys: rate limits).

A leaked or looping client must not run up the owner's model bill. Each key has two fixed one-minute
windows: chat (the two chat doors and guide-dog) and requests (REST, MCP, models). A key's own limits
come from the keys file, the defaults from settings; 0 means no limit. Counting goes through the
``RateLimiter`` port (in process locally, a DynamoDB counter on AWS). When the counter cannot be
reached the request goes through: an outage of the limiter must not become an outage of Engram.
"""

from __future__ import annotations

import logging
import math
from typing import Literal

from engram.domain.access import Principal
from engram.domain.errors import RateLimited
from engram.domain.ports import RateLimiter

log = logging.getLogger(__name__)

WINDOW_SECONDS = 60
Kind = Literal["chat", "requests"]


class RequestLimits:
    def __init__(self, limiter: RateLimiter, *, chat_per_minute: int, requests_per_minute: int) -> None:
        self._limiter = limiter
        self._defaults: dict[Kind, int] = {"chat": chat_per_minute, "requests": requests_per_minute}

    def limit_for(self, principal: Principal, kind: Kind) -> int:
        own = principal.chat_per_minute if kind == "chat" else principal.requests_per_minute
        return self._defaults[kind] if own is None else own

    def check(self, principal: Principal, kind: Kind) -> None:
        """Count this request; raise ``RateLimited`` (with the seconds to wait) over the key's limit."""
        limit = self.limit_for(principal, kind)
        if limit <= 0:
            return
        key = f"{principal.rate_key or principal.namespace + ':' + principal.key_name}:{kind}"
        try:
            retry_after = self._limiter.hit(key, limit, WINDOW_SECONDS)
        except Exception as exc:  # fail open: see the module docstring
            log.warning("rate limiter unavailable, request allowed: %s", exc.__class__.__name__)
            return
        if retry_after is not None:
            wait = max(1, math.ceil(retry_after))
            what = "chat requests" if kind == "chat" else "requests"
            raise RateLimited(
                f"rate limit reached: this key may send {limit} {what} per minute; retry in {wait} s",
                retry_after=wait,
            )

    def login(self, client: str, *, attempts: int, window_seconds: int) -> float | None:
        """Count one admin login attempt from ``client`` in the shared counter (every Lambda instance sees
        it); the seconds to wait when the window is full. Fails open like ``check``: the panel's own
        per-process limit still applies."""
        try:
            return self._limiter.hit(f"login:{client}", attempts, window_seconds)
        except Exception as exc:  # fail open: see the module docstring
            log.warning("rate limiter unavailable, login attempt counted in process only: %s", exc.__class__.__name__)
            return None

    def login_succeeded(self, client: str, *, window_seconds: int) -> None:
        """A right password: forget ``client``'s attempts, so only wrong passwords add up."""
        try:
            self._limiter.reset(f"login:{client}", window_seconds)
        except Exception as exc:  # fail open: see the module docstring
            log.warning("rate limiter unavailable, login count not cleared: %s", exc.__class__.__name__)
