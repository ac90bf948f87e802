"""The HTTP error contract over real HTTP: every route that is not public authenticates, every error
is JSON `{"error": {"message", "type", "code"}}` (404 and 405 included), and no secret reaches the logs.

Routes are enumerated from the app itself, so a route added later is covered without editing this file.
"""

from __future__ import annotations

import logging
import re
from typing import Any

import httpx
import openai
import pytest

from tests.integration.chat_support import ANTHROPIC_KEY, OWNER_KEY, UPSTREAM_KEY, make_gateway, upstream
from tests.servers import app_routes

__all__ = ["make_gateway", "upstream"]

ADMIN_PASSWORD = "correct-horse-battery-staple-77"
# Public on purpose: the root (what this server is), health, the OpenAPI docs, and the admin panel's
# page, assets and cookie login.
PUBLIC = {
    "/",
    "/health",
    "/openapi.json",
    "/docs",
    "/docs/oauth2-redirect",
    "/redoc",
    "/admin",
    "/admin/",
    "/admin/session",
    "/admin/login",
    "/admin/logout",
    "/admin/assets",
}


def assert_error_shape(resp: httpx.Response) -> dict[str, Any]:
    assert resp.headers["content-type"].startswith("application/json"), resp.text
    error = resp.json()["error"]
    assert {"message", "type", "code"} <= set(error), error
    assert all(isinstance(error[k], str) and error[k] for k in ("message", "type", "code")), error
    return dict(error)


def test_every_route_that_is_not_public_answers_401_without_a_key(make_gateway: Any) -> None:
    # Given the whole app (REST, chat, jobs, MCP, admin) with an owner key and an admin password
    gw = make_gateway(admin_password=ADMIN_PASSWORD)
    app = gw.app
    routes = [(path, methods) for path, methods in app_routes(app) if path not in PUBLIC]
    assert len(routes) > 40 and any(p == "/mcp" for p, _ in routes)  # the enumeration found every surface
    checked = 0
    with httpx.Client(base_url=gw.url, timeout=10) as http:
        for path, methods in routes:
            url = re.sub(r"\{[^}]+\}", "x1", path)
            for method in (m for m in methods if m != "HEAD"):
                # When it is called with no key, and with a wrong key
                for headers in ({}, {"authorization": "Bearer ek_wrong_key_0000000"}):
                    resp = http.request(method, url, json={}, headers=headers)
                    # Then it is 401 with the JSON error shape, before anything else is looked at
                    assert resp.status_code == 401, f"{method} {path} with {headers}: {resp.status_code} {resp.text}"
                    assert assert_error_shape(resp)["type"] == "authentication_error"
                    checked += 1
    assert checked >= 2 * len(routes)


def test_models_list_needs_a_key_like_the_openai_api(make_gateway: Any) -> None:
    # Given a gateway; When a client lists models without and with a key
    gw = make_gateway()
    anonymous = httpx.get(gw.url + "/v1/models", timeout=10)
    listed = httpx.get(gw.url + "/v1/models", headers={"authorization": f"Bearer {OWNER_KEY}"}, timeout=10)
    # Then a client's "check key" via /v1/models fails on a bad key and works with a good one
    assert anonymous.status_code == 401
    assert listed.status_code == 200 and "companion" in {m["id"] for m in listed.json()["data"]}


@pytest.mark.parametrize(
    ("method", "path", "status", "code"),
    [
        ("GET", "/no/such/route", 404, "not_found"),
        ("GET", "/v1/no-such-thing", 404, "not_found"),
        ("GET", "/admin/assets/missing.js", 404, "not_found"),
        ("DELETE", "/health", 405, "method_not_allowed"),
        ("PUT", "/v1/memories", 405, "method_not_allowed"),
        ("POST", "/v1/models", 405, "method_not_allowed"),
    ],
)
def test_unknown_routes_and_methods_are_json_errors(
    make_gateway: Any, method: str, path: str, status: int, code: str
) -> None:
    # Given a gateway and the owner key; When a route or method that does not exist is called
    gw = make_gateway()
    resp = httpx.request(method, gw.url + path, headers={"authorization": f"Bearer {OWNER_KEY}"}, timeout=10)
    # Then the status is right and the body is the JSON error shape
    assert resp.status_code == status
    assert assert_error_shape(resp)["code"] == code


def test_anthropic_wire_errors_carry_the_same_fields(make_gateway: Any) -> None:
    # Given a gateway; When the Anthropic door gets a bad key and then invalid JSON
    gw = make_gateway()
    bad_key = httpx.post(gw.url + "/v1/messages", json={}, headers={"x-api-key": "ek_wrong_key_0000000"}, timeout=10)
    bad_json = httpx.post(gw.url + "/v1/messages", content=b"{nope", headers={"x-api-key": OWNER_KEY}, timeout=10)
    # Then both keep Anthropic's shape (`type: error`) and carry message, type and code
    assert bad_key.status_code == 401 and bad_key.json()["type"] == "error"
    assert assert_error_shape(bad_key)["code"] == "invalid_key"
    assert bad_json.status_code == 400 and assert_error_shape(bad_json)["code"] == "invalid_json"


def test_no_secret_reaches_the_logs_at_info(make_gateway: Any, caplog: pytest.LogCaptureFixture) -> None:
    # Given a gateway holding an owner key, both upstream keys and an admin password, logging at INFO
    caplog.set_level(logging.INFO)
    gw = make_gateway(admin_password=ADMIN_PASSWORD, chat_store_messages=True)
    auth = {"authorization": f"Bearer {OWNER_KEY}"}
    # When it serves chats (ok and failing), REST calls, wrong keys, admin logins and MCP calls
    client = openai.OpenAI(base_url=gw.url + "/v1", api_key=OWNER_KEY, max_retries=0, timeout=10)
    client.chat.completions.create(model="companion", messages=[{"role": "user", "content": "remember: I like tea"}])
    with httpx.Client(base_url=gw.url, timeout=10) as http:
        http.post("/v1/messages", json={"model": "claude-x", "messages": []}, headers={"x-api-key": OWNER_KEY})
        http.post("/v1/memories", json={"content": "I live in Lisbon"}, headers=auth)
        http.get("/v1/memories", headers={"authorization": f"Bearer {OWNER_KEY}x"})
        http.get("/v1/stats", headers={"x-api-key": ANTHROPIC_KEY})  # a secret used as if it were a key
        http.post("/admin/login", json={"password": ADMIN_PASSWORD + "-wrong"}, headers={"origin": gw.url})
        http.post("/admin/login", json={"password": ADMIN_PASSWORD}, headers={"origin": gw.url})
        http.post("/mcp", params={"token": OWNER_KEY}, json={"jsonrpc": "2.0", "id": 1, "method": "ping"})
    gw.wait_for(lambda: gw.upstream.requests)
    # Then no log record at INFO or above contains any of the secrets
    # (the server runs in its own threads; MainThread records are this test's own clients logging their URLs)
    server_records = [r for r in caplog.records if r.levelno >= logging.INFO and r.threadName != "MainThread"]
    logged = "\n".join(f"{r.getMessage()} {r.__dict__}" for r in server_records)
    assert any(r.name.startswith("engram") for r in server_records), "no server log: the check would be empty"
    for secret in (OWNER_KEY, UPSTREAM_KEY, ANTHROPIC_KEY, ADMIN_PASSWORD):
        assert secret not in logged, f"a secret ({secret[:6]}...) was logged"


CHAT_HEADERS = ("x-engram-injected", "x-engram-reason", "x-engram-recall-ms", "x-engram-upstream-ms")


@pytest.mark.parametrize("door", ["/v1/chat/completions", "/v1/messages", "/v1/guide-dog/chat/completions"])
@pytest.mark.parametrize("stream", [False, True])
def test_every_chat_response_carries_the_engram_headers(make_gateway: Any, door: str, stream: bool) -> None:
    from tests.fakes.upstream import Reply

    # Given a gateway whose upstream first fails with 500, then answers
    gw = make_gateway()
    gw.upstream.script(Reply(status=500, error_body={"error": {"message": "boom"}}), Reply(text="fine"))
    body = {"model": "companion", "stream": stream, "max_tokens": 20, "messages": [{"role": "user", "content": "hi"}]}
    auth = {"x-api-key": OWNER_KEY}
    with httpx.Client(base_url=gw.url, timeout=10) as http:
        # When the door answers an upstream error, a success, a bad key, bad JSON and an unknown model
        responses = {
            "upstream_error": http.post(door, json=body, headers=auth),
            "ok": http.post(door, json=body, headers=auth),
            "bad_key": http.post(door, json=body, headers={"x-api-key": "ek_wrong_key_0000000"}),
            "bad_json": http.post(door, content=b"{", headers=auth),
            "unknown_model": http.post(door, json={**body, "model": "nope"}, headers=auth),
        }
    # Then each carries all four headers, whatever its status
    assert responses["upstream_error"].status_code == 500 and responses["ok"].status_code == 200
    for outcome, resp in responses.items():
        missing = [h for h in CHAT_HEADERS if h not in resp.headers]
        assert not missing, f"{door} {outcome} ({resp.status_code}) lacks {missing}"
