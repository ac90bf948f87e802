"""Token usage: read from each provider's answer into ``TokenUsage``, written out in each wire (pure)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class TokenUsage:
    """Normalized usage: ``input`` counts every prompt token (cached ones included)."""

    input: int = 0
    output: int = 0
    cache_read: int = 0
    cache_write: int = 0


def _count(value: Any) -> int:
    """A token count from an upstream's usage field; anything that is not a number counts as 0
    (a provider's odd usage must not cost the user their answer)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value != value:
        return 0
    return max(0, int(min(value, 2**53)))


# -- reading ------------------------------------------------------------------------------------------
def usage_from_openai(u: Any) -> TokenUsage:
    if not isinstance(u, dict):
        return TokenUsage()
    details = u.get("prompt_tokens_details")
    details = details if isinstance(details, dict) else {}
    read = _count(details.get("cached_tokens")) or _count(u.get("prompt_cache_hit_tokens"))
    write = (
        _count(u.get("cache_write_tokens"))
        or _count(details.get("cache_write_tokens"))
        or _count(u.get("cache_creation_input_tokens"))
    )
    return TokenUsage(_count(u.get("prompt_tokens")), _count(u.get("completion_tokens")), read, write)


def usage_from_anthropic(u: Any) -> TokenUsage:
    """Anthropic's ``input_tokens`` leaves out cache reads and writes: they are added back."""
    if not isinstance(u, dict):
        return TokenUsage()
    read = _count(u.get("cache_read_input_tokens"))
    write = _count(u.get("cache_creation_input_tokens"))
    return TokenUsage(_count(u.get("input_tokens")) + read + write, _count(u.get("output_tokens")), read, write)


def usage_from_responses(u: Any) -> TokenUsage:
    """The Responses API's ``usage``: ``input_tokens`` counts every prompt token, cached ones included."""
    if not isinstance(u, dict):
        return TokenUsage()
    details = u.get("input_tokens_details")
    read = _count(details.get("cached_tokens")) if isinstance(details, dict) else 0
    return TokenUsage(_count(u.get("input_tokens")), _count(u.get("output_tokens")), read, 0)


def usage_from_converse(u: Any) -> TokenUsage:
    """Bedrock Converse's ``inputTokens`` leaves out cache reads and writes: they are added back."""
    if not isinstance(u, dict):
        return TokenUsage()
    read = _count(u.get("cacheReadInputTokens"))
    write = _count(u.get("cacheWriteInputTokens"))
    return TokenUsage(_count(u.get("inputTokens")) + read + write, _count(u.get("outputTokens")), read, write)


# -- writing ------------------------------------------------------------------------------------------
def openai_usage(t: TokenUsage) -> dict[str, Any]:
    """The OpenAI ``usage`` object (``prompt_tokens`` counts every prompt token)."""
    return {
        "prompt_tokens": t.input,
        "completion_tokens": t.output,
        "total_tokens": t.input + t.output,
        "prompt_tokens_details": {"cached_tokens": t.cache_read},
        "cache_write_tokens": t.cache_write,
    }


def anthropic_usage(t: TokenUsage) -> dict[str, Any]:
    """The Anthropic ``usage`` object (``input_tokens`` without the cached ones)."""
    return {
        "input_tokens": max(0, t.input - t.cache_read - t.cache_write),
        "output_tokens": t.output,
        "cache_read_input_tokens": t.cache_read,
        "cache_creation_input_tokens": t.cache_write,
    }
