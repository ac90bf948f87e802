"""Opt-in checks against a deployed stack (`cdk deploy`): skipped unless ENGRAM_E2E_URL and ENGRAM_E2E_KEY
are set. ENGRAM_E2E_URL is the stack's ApiUrl; ENGRAM_E2E_MCP_URL (optional) its McpUrl; set
ENGRAM_E2E_CHAT=1 to also stream one chat completion through the configured upstream.

    ENGRAM_E2E_URL=https://....execute-api.eu-west-1.amazonaws.com/prod ENGRAM_E2E_KEY=ek_... \
        .venv/bin/python -m pytest tests/e2e -m aws
"""

from __future__ import annotations

import os
import uuid

import httpx
import pytest

URL = os.environ.get("ENGRAM_E2E_URL", "").rstrip("/")
KEY = os.environ.get("ENGRAM_E2E_KEY", "")
MCP_URL = os.environ.get("ENGRAM_E2E_MCP_URL", "")

pytestmark = [
    pytest.mark.aws,
    pytest.mark.skipif(not (URL and KEY), reason="set ENGRAM_E2E_URL and ENGRAM_E2E_KEY to test a deployed stack"),
]


@pytest.fixture
def api() -> httpx.Client:
    return httpx.Client(base_url=URL, headers={"authorization": f"Bearer {KEY}"}, timeout=60)


def test_health(api: httpx.Client) -> None:
    # Given a deployed stack / When its health is read / Then the store answers
    response = api.get("/health")
    assert response.status_code == 200, response.text


def test_memory_round_trip_through_api_gateway(api: httpx.Client) -> None:
    # Given a unique memory written through the REST API
    marker = f"e2e-{uuid.uuid4().hex[:8]}"
    created = api.post("/v1/memories", json={"content": f"The e2e marker is {marker}", "external_id": marker})
    assert created.status_code in (200, 201), created.text
    memory_id = created.json()["memory"]["id"]
    try:
        # Then it reads back at once (DynamoDB is the source of truth)
        assert api.get(f"/v1/memories/{memory_id}").json()["content"].endswith(marker)
    finally:
        api.delete(f"/v1/memories/{memory_id}")


def test_unauthenticated_requests_are_refused() -> None:
    response = httpx.get(f"{URL}/v1/memories", timeout=30)
    assert response.status_code == 401


def test_models_list_for_openai_clients(api: httpx.Client) -> None:
    response = api.get("/v1/models")
    assert response.status_code == 200
    assert response.json()["data"]


@pytest.mark.skipif(os.environ.get("ENGRAM_E2E_CHAT") != "1", reason="set ENGRAM_E2E_CHAT=1 (costs a model call)")
def test_chat_streams_through_api_gateway(api: httpx.Client) -> None:
    # Given a streaming chat request / Then SSE chunks arrive and the stream ends with [DONE]
    body = {"model": "companion", "stream": True, "messages": [{"role": "user", "content": "Say OK."}]}
    with api.stream("POST", "/v1/chat/completions", json=body) as response:
        assert response.status_code == 200
        lines = [line for line in response.iter_lines() if line.startswith("data:")]
    assert lines and lines[-1].strip() == "data: [DONE]"


@pytest.mark.skipif(not MCP_URL, reason="set ENGRAM_E2E_MCP_URL to test the MCP Function URL")
def test_mcp_function_url_lists_tools() -> None:
    headers = {
        "authorization": f"Bearer {KEY}",
        "accept": "application/json, text/event-stream",
        "content-type": "application/json",
    }
    init = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "e2e", "version": "1"}},
    }
    response = httpx.post(MCP_URL, json=init, headers=headers, timeout=60)
    assert response.status_code == 200, response.text
    listed = httpx.post(MCP_URL, json={"jsonrpc": "2.0", "id": 2, "method": "tools/list"}, headers=headers, timeout=60)
    assert "memory_search" in listed.text
