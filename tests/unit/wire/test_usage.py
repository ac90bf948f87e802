"""Token usage: three readers (OpenAI, Anthropic, Converse) into one TokenUsage, two writers (domain/wire/usage.py)."""

from __future__ import annotations

import pytest
from engram.domain.wire.usage import (
    TokenUsage,
    anthropic_usage,
    openai_usage,
    usage_from_anthropic,
    usage_from_converse,
    usage_from_openai,
)

# The same exchange as each provider reports it: 100 prompt tokens of which 60 read from and 10
# written to the cache, 7 output tokens.
SAME = TokenUsage(input=100, output=7, cache_read=60, cache_write=10)


def test_each_provider_report_reads_as_the_same_usage() -> None:
    openai = {
        "prompt_tokens": 100,
        "completion_tokens": 7,
        "prompt_tokens_details": {"cached_tokens": 60},
        "cache_write_tokens": 10,
    }
    anthropic = {
        "input_tokens": 30,
        "output_tokens": 7,
        "cache_read_input_tokens": 60,
        "cache_creation_input_tokens": 10,
    }
    converse = {"inputTokens": 30, "outputTokens": 7, "cacheReadInputTokens": 60, "cacheWriteInputTokens": 10}
    assert usage_from_openai(openai) == usage_from_anthropic(anthropic) == usage_from_converse(converse) == SAME


def test_writers_round_trip_through_the_readers() -> None:
    assert usage_from_openai(openai_usage(SAME)) == SAME
    assert usage_from_anthropic(anthropic_usage(SAME)) == SAME
    assert openai_usage(SAME)["total_tokens"] == 107
    assert anthropic_usage(SAME)["input_tokens"] == 30


def test_openai_compatible_cache_field_variants() -> None:
    # DeepSeek's prompt_cache_hit_tokens; Anthropic-style cache_creation_input_tokens on a proxy
    u = usage_from_openai({"prompt_tokens": 5, "prompt_cache_hit_tokens": 3, "cache_creation_input_tokens": 1})
    assert (u.cache_read, u.cache_write) == (3, 1)


@pytest.mark.parametrize("reader", [usage_from_openai, usage_from_anthropic, usage_from_converse])
@pytest.mark.parametrize(
    "odd", [None, "x", [], {"inputTokens": "5", "input_tokens": -3, "prompt_tokens": float("nan")}]
)
def test_odd_usage_reads_as_zero_never_an_error(reader: object, odd: object) -> None:
    assert reader(odd) == TokenUsage()  # type: ignore[operator]
