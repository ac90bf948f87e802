"""Requests per minute per key on a real server: 429 with Retry-After in each door's error shape."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx
import pytest
from engram.domain.access import ApiKey, KeyRing
from engram.services.ratelimit import RequestLimits

from tests.conftest import EngramServer
from tests.integration.test_mcp import ACCEPT as MCP_HEADERS
from tests.integration.test_mcp import INIT

KEY = "ek_rate_limited_key_00001"
TIGHT = "ek_rate_tight_key_000002"
CHAT = {"model": "companion", "messages": [{"role": "user", "content": "hi"}]}
ANTHROPIC = {"model": "companion", "max_tokens": 10, "messages": [{"role": "user", "content": "hi"}]}


@pytest.fixture
def limited(make_server: Callable[..., EngramServer]) -> EngramServer:
    # Defaults of 2 chats and 3 other requests a minute; a key of the keys file with its own limit of 1
    keys = KeyRing(
        [
            ApiKey.create(KEY, name="k", namespace="alice", scopes=["*"]),
            ApiKey.create(TIGHT, name="t", namespace="alice", scopes=["*"], chat_per_minute=1, requests_per_minute=1),
        ]
    )
    return make_server(
        embedder="none",
        rate_limit_chat_per_minute=2,
        rate_limit_requests_per_minute=3,
        overrides={"keys": keys},
    )


def _limited(resp: httpx.Response) -> dict[str, Any]:
    assert resp.status_code == 429, resp.text
    assert 1 <= int(resp.headers["retry-after"]) <= 60
    body: dict[str, Any] = resp.json()
    return body


def test_chat_doors_answer_429_in_their_own_wire(limited: EngramServer) -> None:
    with limited.client(KEY) as client:
        # When a key sends two chats (no upstream is configured: 503), then a third on each door
        first = [client.post("/v1/chat/completions", json=CHAT).status_code for _ in range(2)]
        openai = client.post("/v1/chat/completions", json=CHAT)
        anthropic = client.post("/v1/messages", json=ANTHROPIC)
        # And a REST request, which counts against the other limit
        rest = client.get("/v1/stats")
    # Then the first two reached the gateway, the rest are 429 in the OpenAI and Anthropic shapes
    assert first == [503, 503]
    err = _limited(openai)["error"]
    assert (err["type"], err["code"]) == ("rate_limit_error", "rate_limited") and "2 chat requests" in err["message"]
    assert openai.headers["x-engram-injected"] == "0"  # the headers every chat response carries
    body = _limited(anthropic)
    assert body["type"] == "error" and body["error"]["type"] == "rate_limit_error"
    assert rest.status_code == 200


def test_rest_and_mcp_share_the_other_limit_with_rest_shaped_errors(limited: EngramServer) -> None:
    with limited.client(KEY) as client:
        codes = [client.get("/v1/stats").status_code, client.get("/v1/memories").status_code]
        mcp_ok = client.post("/mcp", json=INIT, headers=MCP_HEADERS)
        rest = client.get("/v1/stats")
        mcp = client.post("/mcp", json=INIT, headers=MCP_HEADERS)
    assert codes == [200, 200] and mcp_ok.status_code == 200
    assert _limited(rest)["error"] == {
        "message": "rate limit reached: this key may send 3 requests per minute; retry in "
        + rest.headers["retry-after"]
        + " s",
        "type": "rate_limit_error",
        "code": "rate_limited",
    }
    assert _limited(mcp)["error"]["code"] == "rate_limited"


def test_a_keys_own_limit_overrides_the_default(limited: EngramServer) -> None:
    with limited.client(TIGHT) as tight, limited.client(KEY) as other:
        assert tight.get("/v1/stats").status_code == 200
        assert tight.get("/v1/stats").status_code == 429
        assert tight.post("/v1/chat/completions", json=CHAT).status_code == 503
        assert tight.post("/v1/chat/completions", json=CHAT).status_code == 429
        # And another key of the same namespace is not affected
        assert other.get("/v1/stats").status_code == 200


def test_a_broken_counter_lets_requests_through() -> None:
    from engram.domain.access import Principal

    class Broken:
        def hit(self, key: str, limit: int, window_seconds: int) -> float | None:
            raise RuntimeError("table unreachable")

        def reset(self, key: str, window_seconds: int) -> None:
            raise RuntimeError("table unreachable")

    limits = RequestLimits(Broken(), chat_per_minute=1, requests_per_minute=1)
    who = Principal(namespace="n", scopes=frozenset({"*"}), key_name="k", rate_key="r")
    for _ in range(3):
        limits.check(who, "chat")  # no exception: the limiter's outage is not Engram's
