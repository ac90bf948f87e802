"""The Anthropic Messages API: forwarding + ``ChatModel``."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from engram.adapters.llm.http import HttpxUpstream
from engram.domain.errors import UpstreamRateLimited, UpstreamRejected, UpstreamUnavailable
from engram.domain.wire.anthropic import answer_text, messages_request

ANTHROPIC_VERSION = "2023-06-01"


class AnthropicUpstream(HttpxUpstream):
    """``base_url`` is the API root (``https://api.anthropic.com``); paths are ``/v1/messages``."""

    name = "Anthropic upstream"

    def __init__(self, base_url: str, api_key: str | None, **kwargs: Any) -> None:
        root = base_url.rstrip("/")
        if root.endswith("/v1"):
            root = root[:-3]
        headers = {"anthropic-version": ANTHROPIC_VERSION}
        if api_key:
            headers["x-api-key"] = api_key
        super().__init__(root, headers, **kwargs)


class AnthropicChatModel:
    """``ChatModel`` over the Messages API. Claude has no JSON mode: the system prompt asks for one object."""

    def __init__(self, upstream: AnthropicUpstream, model: str, *, default_max_tokens: int = 4096) -> None:
        self._upstream = upstream
        self._model = model
        self._default_max_tokens = default_max_tokens

    @property
    def model_id(self) -> str:
        return self._model

    def _body(self, messages: Sequence[dict[str, Any]], max_tokens: int | None, json_mode: bool) -> dict[str, Any]:
        return messages_request(messages, self._model, max_tokens or self._default_max_tokens, json_mode=json_mode)

    async def _send(self, body: dict[str, Any]) -> Any:
        try:
            return await self._upstream.send("POST", "/v1/messages", body)
        except UpstreamRejected as exc:
            if exc.status == 429:
                raise UpstreamRateLimited(exc.message) from exc
            raise

    async def complete(
        self,
        messages: Sequence[dict[str, Any]],
        *,
        json_mode: bool = False,
        max_tokens: int | None = None,
        temperature: float | None = None,
    ) -> str:
        body = self._body(messages, max_tokens, json_mode)
        if temperature is not None:
            body["temperature"] = temperature
        reply = await self._send(body)
        raw = await reply.aread()
        try:
            data = json.loads(raw)
            return answer_text(data["content"])
        except (ValueError, KeyError, TypeError, AttributeError, RecursionError) as exc:
            raise UpstreamUnavailable("Anthropic upstream sent an unreadable message") from exc
