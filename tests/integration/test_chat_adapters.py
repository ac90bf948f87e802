"""LLM adapters against the scripted fake upstream over real HTTP on loopback."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from engram.adapters.llm.anthropic import AnthropicChatModel, AnthropicUpstream
from engram.adapters.llm.openai_compat import OpenAICompatChatModel, OpenAICompatUpstream
from engram.domain.errors import UpstreamRateLimited, UpstreamRejected, UpstreamTimeout, UpstreamUnavailable

from tests.fakes.upstream import FakeUpstream, Reply
from tests.servers import free_port


@pytest.fixture(scope="module")
def upstream() -> Iterator[FakeUpstream]:
    with FakeUpstream() as up:
        yield up


@pytest.fixture(autouse=True)
def _reset(upstream: FakeUpstream) -> None:
    upstream.reset()


async def test_openai_complete_sends_key_model_and_json_mode(upstream: FakeUpstream) -> None:
    # Given a scripted reply
    upstream.script(Reply(text='{"ok": true}'))
    model = OpenAICompatChatModel(OpenAICompatUpstream(upstream.openai_base_url, "sk-up"), "fake-chat")
    # When completing in JSON mode
    out = await model.complete([{"role": "user", "content": "hi"}], json_mode=True, max_tokens=50)
    # Then the text comes back and the request carried key, model and response_format
    assert out == '{"ok": true}'
    req = upstream.last()
    assert req.headers["authorization"] == "Bearer sk-up"
    assert req.json["model"] == "fake-chat"
    assert req.json["response_format"] == {"type": "json_object"}
    assert req.json["max_tokens"] == 50


async def test_anthropic_complete_moves_system_and_sends_version(upstream: FakeUpstream) -> None:
    # Given a Claude model
    upstream.script(Reply(text="hello", reasoning="thinking..."))
    model = AnthropicChatModel(AnthropicUpstream(upstream.base_url + "/v1", "sk-ant"), "claude-x")
    # When completing with a system message in JSON mode
    out = await model.complete(
        [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}], json_mode=True
    )
    # Then only the text blocks are returned and the wire is the Messages API
    assert out == "hello"
    req = upstream.last("/v1/messages")
    assert req.headers["x-api-key"] == "sk-ant"
    assert req.headers["anthropic-version"] == "2023-06-01"
    assert req.json["system"].startswith("be brief")
    assert "JSON" in req.json["system"]
    assert req.json["messages"] == [{"role": "user", "content": "hi"}]


async def test_rate_limit_and_rejection_are_translated(upstream: FakeUpstream) -> None:
    # Given a 429 then a 400 with a body
    upstream.script(
        Reply(status=429, error_body={"error": {"message": "slow"}}),
        Reply(status=400, error_body={"error": {"message": "bad model"}}),
    )
    model = OpenAICompatChatModel(OpenAICompatUpstream(upstream.openai_base_url, None), "m")
    # Then 429 is a rate limit, 400 keeps status and body for pass-through
    with pytest.raises(UpstreamRateLimited):
        await model.complete([{"role": "user", "content": "x"}])
    with pytest.raises(UpstreamRejected) as info:
        await model.complete([{"role": "user", "content": "x"}])
    assert info.value.status == 400
    assert b"bad model" in (info.value.body or b"")


async def test_unreachable_is_unavailable_and_hang_is_timeout(upstream: FakeUpstream) -> None:
    # Given nothing listening, and an upstream that stalls past the read timeout
    dead = OpenAICompatChatModel(OpenAICompatUpstream(f"http://127.0.0.1:{free_port()}/v1", None), "m")
    slow = OpenAICompatChatModel(OpenAICompatUpstream(upstream.openai_base_url, None, read_timeout=0.2), "m")
    upstream.script(Reply(hang=3))
    # Then the errors are the domain's
    with pytest.raises(UpstreamUnavailable) as a:
        await dead.complete([{"role": "user", "content": "x"}])
    assert not isinstance(a.value, UpstreamTimeout)
    with pytest.raises(UpstreamTimeout):
        await slow.complete([{"role": "user", "content": "x"}])
