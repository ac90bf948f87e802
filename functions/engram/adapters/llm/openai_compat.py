"""OpenAI-compatible providers (OpenAI, OpenRouter, DeepSeek, Ollama, vLLM): forwarding + ``ChatModel``."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from engram.adapters.llm.http import HttpxUpstream
from engram.domain.errors import UpstreamRateLimited, UpstreamRejected, UpstreamUnavailable


class OpenAICompatUpstream(HttpxUpstream):
    """``base_url`` includes the version prefix (``https://api.openai.com/v1``); paths are ``/chat/completions``."""

    name = "OpenAI-compatible upstream"

    def __init__(self, base_url: str, api_key: str | None, **kwargs: Any) -> None:
        headers = {"authorization": f"Bearer {api_key}"} if api_key else {}
        super().__init__(base_url, headers, **kwargs)


def _rate_limited(exc: UpstreamRejected) -> UpstreamRejected | UpstreamRateLimited:
    if exc.status == 429:
        return UpstreamRateLimited(exc.message)
    return exc


class OpenAICompatChatModel:
    """``ChatModel`` over an OpenAI-compatible provider (extraction, dreaming, compression)."""

    def __init__(self, upstream: OpenAICompatUpstream, model: str) -> None:
        self._upstream = upstream
        self._model = model

    @property
    def model_id(self) -> str:
        return self._model

    async def complete(
        self,
        messages: Sequence[dict[str, Any]],
        *,
        json_mode: bool = False,
        max_tokens: int | None = None,
        temperature: float | None = None,
    ) -> str:
        body: dict[str, Any] = {"model": self._model, "messages": list(messages), "stream": False}
        if json_mode:
            body["response_format"] = {"type": "json_object"}
        if max_tokens is not None:
            body["max_tokens"] = max_tokens
        if temperature is not None:
            body["temperature"] = temperature
        try:
            reply = await self._upstream.send("POST", "/chat/completions", body)
        except UpstreamRejected as exc:
            raise _rate_limited(exc) from exc
        raw = await reply.aread()
        try:
            data = json.loads(raw)
            content = data["choices"][0]["message"].get("content") or ""
        except (ValueError, KeyError, IndexError, TypeError, AttributeError, RecursionError) as exc:
            raise UpstreamUnavailable("OpenAI-compatible upstream sent an unreadable completion") from exc
        return str(content)
