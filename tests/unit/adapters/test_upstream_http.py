"""The forwarding client (adapters/llm/http.py): the request it builds itself is the one httpx's
``build_request`` would build, and it keeps no cookies between turns."""

from __future__ import annotations

import httpx
import pytest
from engram.adapters.llm.anthropic import AnthropicUpstream
from engram.adapters.llm.http import UpstreamClient
from engram.adapters.llm.openai_compat import OpenAICompatUpstream

Seen = list[httpx.Request]


def _client(seen: Seen, *, cookie: bool = False, headers: dict[str, str] | None = None) -> UpstreamClient:
    def answer(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        extra = {"set-cookie": "session=abc; Path=/"} if cookie else {}
        return httpx.Response(200, json={"ok": True}, headers=extra)

    return UpstreamClient(transport=httpx.MockTransport(answer), headers=headers, timeout=httpx.Timeout(7.0))


@pytest.mark.parametrize(
    ("forwarded", "body"),
    [
        ({}, {"model": "m", "messages": []}),
        ({"anthropic-beta": "tools-2024", "Anthropic-Version": "2099-01-01"}, b'{"model":"m"}'),
        ({}, None),
    ],
)
async def test_the_request_is_the_one_build_request_makes(forwarded: dict[str, str], body: object) -> None:
    seen: Seen = []
    upstream = AnthropicUpstream("http://up.test/v1", "sk-ant-secret")
    upstream._client = _client(seen, headers=upstream._auth_headers)
    reply = await upstream.send("POST", "/v1/messages", body, headers=forwarded)  # type: ignore[arg-type]
    await reply.aread()
    (sent,) = seen
    content = sent.content if body is not None else None
    expected = upstream.client.build_request(
        "POST",
        "http://up.test/v1/messages",
        content=content,
        headers={"content-type": "application/json", **forwarded} if body is not None else forwarded,
    )
    assert sent.url == expected.url
    assert sorted(sent.headers.multi_items()) == sorted(expected.headers.multi_items())
    assert sent.headers["anthropic-version"] == forwarded.get("Anthropic-Version", "2023-06-01")
    assert sent.headers["x-api-key"] == "sk-ant-secret"
    assert sent.extensions["timeout"] == expected.extensions["timeout"]


async def test_a_providers_cookie_is_not_sent_back() -> None:
    seen: Seen = []
    upstream = OpenAICompatUpstream("http://up.test/v1", "sk-1")
    upstream._client = _client(seen, cookie=True, headers=upstream._auth_headers)
    for _ in range(2):
        reply = await upstream.send("POST", "/chat/completions", {"model": "m"})
        await reply.aread()
    assert [r.headers.get("cookie") for r in seen] == [None, None]
    assert len(upstream.client.cookies) == 0
    assert seen[1].headers["authorization"] == "Bearer sk-1"
