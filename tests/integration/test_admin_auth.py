"""Admin panel auth over plain HTTP (no browser): login, the session cookie as the owner principal,
Origin checks, the login rate limit, logout, runtime settings and reindex.

Real parts: uvicorn on loopback, SQLite store and index, the local embedder.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import httpx
import pytest

from tests.conftest import OTHER_KEY, OWNER_KEY, READONLY_KEY, EngramServer

PASSWORD = "a long admin password 42"


@pytest.fixture
def panel(make_server: Callable[..., EngramServer]) -> EngramServer:
    return make_server(admin_password=PASSWORD, default_namespace="alice")


@pytest.fixture
def proxied(make_server: Callable[..., EngramServer]) -> EngramServer:
    """A panel behind a reverse proxy on loopback: the tests' own requests play the proxy."""
    return make_server(admin_password=PASSWORD, default_namespace="alice", trusted_proxies=["127.0.0.1"])


def browser(server: EngramServer, **headers: str) -> httpx.Client:
    """A cookie-carrying client that sends the panel's own Origin, like the browser does."""
    return httpx.Client(base_url=server.url, headers={"origin": server.url, **headers}, timeout=30)


@contextmanager
def logged_in(server: EngramServer) -> Iterator[httpx.Client]:
    with browser(server) as client:
        resp = client.post("/admin/login", json={"password": PASSWORD})
        assert resp.status_code == 200, resp.text
        yield client


def test_panel_is_served_with_a_strict_content_security_policy(panel: EngramServer) -> None:
    # Given a server, When /admin is opened without a session
    with httpx.Client(base_url=panel.url, follow_redirects=True) as anon:
        page = anon.get("/admin")
        script = anon.get("/admin/assets/app.js")
        session = anon.get("/admin/session").json()
    # Then the page and its assets load, the CSP forbids inline script, and nobody is logged in
    assert page.status_code == 200 and page.url.path == "/admin/"
    assert "<title>Engram" in page.text
    assert "script-src 'self'" in page.headers["content-security-policy"]
    assert "unsafe-inline" not in page.headers["content-security-policy"]
    assert page.headers["x-frame-options"] == "DENY"
    assert script.status_code == 200 and "javascript" in script.headers["content-type"]
    assert session == {
        "configured": True,
        "authenticated": False,
        "expires_at": None,
        "namespace": None,
        "version": session["version"],
    }


def test_login_sets_a_signed_httponly_strict_cookie_for_12_hours(panel: EngramServer) -> None:
    # Given the right password, When logging in over plain HTTP
    with browser(panel) as client:
        resp = client.post("/admin/login", json={"password": PASSWORD})
        # Then the cookie is HttpOnly, SameSite=Strict, 12 h, and not Secure on http
        cookie = resp.headers["set-cookie"]
        assert resp.status_code == 200
        assert "engram_admin=" in cookie and "HttpOnly" in cookie and "SameSite=strict" in cookie
        assert "Max-Age=43200" in cookie and "Path=/" in cookie and "Secure" not in cookie
        # And the cookie acts as the owner of the default namespace with every scope
        assert client.get("/admin/session").json()["authenticated"] is True
        created = client.post("/v1/memories", json={"content": "Set from the panel"})
        assert created.status_code == 201 and created.json()["memory"]["namespace"] == "alice"
        assert client.get("/v1/export").status_code == 200
    with panel.client() as owner:
        assert [m["content"] for m in owner.get("/v1/memories").json()["items"]] == ["Set from the panel"]


def test_cookie_is_secure_behind_https(proxied: EngramServer, panel: EngramServer) -> None:
    # Given a request that came through a trusted TLS-terminating proxy
    with browser(proxied, **{"x-forwarded-proto": "https"}) as client:
        resp = client.post("/admin/login", json={"password": PASSWORD})
    # Then the cookie is marked Secure
    assert "Secure" in resp.headers["set-cookie"]
    # And the same header from a client that is no configured proxy changes nothing
    with browser(panel, **{"x-forwarded-proto": "https"}) as client:
        resp = client.post("/admin/login", json={"password": PASSWORD})
    assert resp.status_code == 200 and "Secure" not in resp.headers["set-cookie"]


def test_wrong_password_missing_and_forged_cookies_are_refused(panel: EngramServer) -> None:
    with browser(panel) as client:
        # When the password is wrong
        wrong = client.post("/admin/login", json={"password": PASSWORD + "x"})
        # Then 401 and no cookie
        assert wrong.status_code == 401 and "set-cookie" not in wrong.headers
        assert wrong.json()["error"]["code"] == "wrong_password"
        # When the API is called without any cookie or key
        assert client.get("/v1/stats").status_code == 401
        # When the cookie is forged or tampered with
        client.post("/admin/login", json={"password": PASSWORD})
        token = client.cookies["engram_admin"]
        sid, expires, sig = token.split(".")
        for forged in (f"{sid}.{int(expires) + 86400}.{sig}", f"{sid}.{expires}.{sig[:-2]}AA", "x.1.y", ""):
            client.cookies.set("engram_admin", forged)
            # Then it is refused like no cookie at all
            assert client.get("/v1/stats").status_code == 401, forged


def test_state_changing_cookie_requests_need_the_panel_origin(panel: EngramServer) -> None:
    with logged_in(panel) as client:
        # When a write comes with another site's Origin, or no Origin at all
        evil = client.post("/v1/memories", json={"content": "csrf"}, headers={"origin": "https://evil.example"})
        client.headers.pop("origin")
        missing = client.post("/v1/memories", json={"content": "csrf"})
        none_origin = client.put("/v1/digest", json={"content": "csrf"}, headers={"origin": "null"})
        # Then it is refused with 403, while reads without Origin still work
        assert evil.status_code == 403 and evil.json()["error"]["code"] == "bad_origin"
        assert missing.status_code == 403
        assert none_origin.status_code == 403
        assert client.get("/v1/stats").status_code == 200
        # And a Referer from the panel is accepted when Origin is absent
        ok = client.put("/v1/digest", json={"content": "ok"}, headers={"referer": f"{panel.url}/admin/"})
        assert ok.status_code == 200
    with panel.client() as owner:
        assert owner.get("/v1/memories").json()["items"] == []
        assert owner.get("/v1/digest").json()["content"] == "ok"


def test_bearer_keys_need_no_origin_and_keep_their_own_scopes(panel: EngramServer) -> None:
    # Given an API key client (no cookie), When it writes without an Origin header
    with panel.client() as owner:
        assert owner.post("/v1/memories", json={"content": "from a script"}).status_code == 201
    # Then it works; and a read-only key cannot touch the admin routes
    with panel.client(READONLY_KEY) as reader:
        assert reader.get("/v1/admin/settings").status_code == 403
    with panel.client(OWNER_KEY) as owner:
        assert owner.get("/v1/admin/settings").status_code == 200


def test_login_itself_checks_origin(panel: EngramServer) -> None:
    with httpx.Client(base_url=panel.url) as client:
        evil = client.post("/admin/login", json={"password": PASSWORD}, headers={"origin": "https://evil.example"})
        bare = client.post("/admin/login", json={"password": PASSWORD})
    assert evil.status_code == 403 and bare.status_code == 403
    assert "set-cookie" not in evil.headers


def test_login_attempts_are_rate_limited_per_client(panel: EngramServer) -> None:
    with browser(panel) as client:
        # When five wrong passwords are tried within a minute
        codes = [client.post("/admin/login", json={"password": f"guess {i}"}).status_code for i in range(5)]
        # Then the sixth attempt is refused even with the right password
        sixth = client.post("/admin/login", json={"password": PASSWORD})
    assert codes == [401] * 5
    assert sixth.status_code == 429 and int(sixth.headers["retry-after"]) >= 1
    assert "set-cookie" not in sixth.headers


def test_forwarded_for_from_a_client_does_not_escape_the_login_limit(panel: EngramServer) -> None:
    # Given no configured proxy, When each guess claims another address in X-Forwarded-For
    with browser(panel) as client:
        codes = [
            client.post(
                "/admin/login", json={"password": f"guess {i}"}, headers={"x-forwarded-for": f"203.0.113.{i}"}
            ).status_code
            for i in range(8)
        ]
    # Then the claims are ignored: the peer address is limited after five
    assert codes == [401] * 5 + [429] * 3


def test_behind_a_trusted_proxy_each_client_address_has_its_own_limit(proxied: EngramServer) -> None:
    # Given a proxy that appends the client's address, When one client guesses, rotating what it writes itself
    with browser(proxied) as client:
        codes = [
            client.post(
                "/admin/login",
                json={"password": f"guess {i}"},
                headers={"x-forwarded-for": f"10.9.9.{i}, 198.51.100.9"},
            ).status_code
            for i in range(6)
        ]
        # And another client behind the same proxy logs in
        other = client.post("/admin/login", json={"password": PASSWORD}, headers={"x-forwarded-for": "203.0.113.7"})
    # Then the guesser is limited by the address the proxy saw, and the other client is not
    assert codes == [401] * 5 + [429]
    assert other.status_code == 200


def test_right_passwords_do_not_add_up_to_a_lockout(panel: EngramServer) -> None:
    # When an owner mistypes four times, logs in, and does it again
    with browser(panel) as client:
        codes = []
        for _ in range(2):
            codes += [client.post("/admin/login", json={"password": "typo"}).status_code for _ in range(4)]
            codes.append(client.post("/admin/login", json={"password": PASSWORD}).status_code)
    # Then every right password works (a success clears the address's count)
    assert codes == [401] * 4 + [200] + [401] * 4 + [200]


def test_forwarded_host_counts_only_from_a_trusted_proxy(panel: EngramServer, proxied: EngramServer) -> None:
    # Given a request from another site that claims that site as the forwarded host
    headers = {"origin": "https://evil.example", "x-forwarded-host": "evil.example"}
    # When it comes straight from a client, Then the Origin check refuses it
    with httpx.Client(base_url=panel.url) as client:
        refused = client.post("/admin/login", json={"password": PASSWORD}, headers=headers)
    assert refused.status_code == 403 and refused.json()["error"]["code"] == "bad_origin"
    # When a trusted proxy forwarded it for that public host name, Then it counts
    with httpx.Client(base_url=proxied.url) as client:
        assert client.post("/admin/login", json={"password": PASSWORD}, headers=headers).status_code == 200


def test_logout_revokes_the_session(panel: EngramServer) -> None:
    with logged_in(panel) as client:
        token = client.cookies["engram_admin"]
        # When logging out
        out = client.post("/admin/logout")
        assert out.status_code == 200 and "engram_admin=" in out.headers["set-cookie"]
        # Then a copy of the old cookie no longer works
        client.cookies.set("engram_admin", token)
        assert client.get("/v1/stats").status_code == 401
        assert client.get("/admin/session").json()["authenticated"] is False


def test_without_a_password_login_explains_how_to_set_one(make_server: Callable[..., EngramServer]) -> None:
    server = make_server()
    with browser(server) as client:
        session = client.get("/admin/session").json()
        resp = client.post("/admin/login", json={"password": ""})
    assert session["configured"] is False
    assert resp.status_code == 503 and "ENGRAM_ADMIN_PASSWORD" in resp.json()["error"]["message"]
    # And an empty cookie cannot log in either
    with httpx.Client(base_url=server.url, cookies={"engram_admin": "a.1.b"}) as client:
        assert client.get("/v1/stats").status_code == 401


def test_runtime_settings_apply_without_restart_and_persist(panel: EngramServer) -> None:
    with panel.client() as owner:
        for text in ("Alice likes tea", "Alice likes cats", "Alice likes kites"):
            owner.post("/v1/memories", json={"content": text})
        assert len(owner.post("/v1/search/memories", json={"query": "Alice likes"}).json()["items"]) == 3
    with logged_in(panel) as client:
        # When the injection count and time zone are changed
        resp = client.put("/v1/admin/settings", json={"values": {"recall_top_k": 2, "timezone": "Asia/Tokyo"}})
        assert resp.status_code == 200
        items = {i["name"]: i for i in resp.json()["items"]}
        assert items["recall_top_k"]["value"] == 2 and items["recall_top_k"]["overridden"] is True
        assert items["recall_top_k"]["default"] == 5
        # Then recall uses them at once
        with panel.client() as owner:
            assert len(owner.post("/v1/search/memories", json={"query": "Alice likes"}).json()["items"]) == 2
        # And bad values, unknown or unsafe names are refused without changing anything
        for bad in (
            {"recall_top_k": 0},
            {"timezone": "Nowhere/City"},
            {"admin_password": "x"},
            {"store": "memory"},
            {"recall_top_k": "many"},
        ):
            refused = client.put("/v1/admin/settings", json={"values": {**bad, "dedup_cosine": 0.5}})
            assert refused.status_code == 400, bad
        assert panel.container.runtime.effective().dedup_cosine == panel.container.runtime.base.dedup_cosine
    # And a new process on the same data reads the stored overrides
    from engram.bootstrap import build_container

    restarted = build_container(panel.container.settings)
    try:
        assert restarted.runtime.effective().recall_top_k == 2
        assert restarted.runtime.effective().timezone == "Asia/Tokyo"
        assert restarted.runtime.base.recall_top_k == 5
    finally:
        restarted.close()


def test_reindex_runs_in_the_background_with_progress(panel: EngramServer) -> None:
    with panel.client() as owner:
        for i in range(40):
            owner.post("/v1/memories", json={"content": f"memory number {i} about topic {i % 7}"})
    with logged_in(panel) as client:
        # When a reindex is started
        started = client.post("/v1/admin/reindex")
        assert started.status_code == 202 and started.json()["state"] in ("running", "done")
        # Then polling reports progress up to every active memory
        deadline = time.monotonic() + 60
        state: dict[str, Any] = started.json()
        while state["state"] == "running" and time.monotonic() < deadline:
            time.sleep(0.1)
            state = client.get("/v1/admin/reindex").json()
        assert state["state"] == "done" and state["done"] == state["total"] == 40
    with panel.client() as owner:
        assert owner.post("/v1/search/memories", json={"query": "topic 3"}).json()["items"]


def test_runtime_settings_are_global_so_only_the_default_namespace_admin_changes_them(
    make_server: Callable[..., EngramServer],
) -> None:
    # Given the owner's namespace "alice" (the default) and an admin key of namespace "bob"
    server = make_server(default_namespace="alice", embedder="none", chat_model="alice-model")
    with server.client() as alice, server.client(OTHER_KEY) as bob:
        for text in ("Alice likes tea", "Alice likes cats", "Alice likes kites"):
            alice.post("/v1/memories", json={"content": text})
        bob.post("/v1/memories", json={"content": "Bob likes chess"})
        # When bob tries to change the chat model every namespace uses
        refused = bob.put("/v1/admin/settings", json={"values": {"chat_model": "bobs-model"}})
        # Then it is refused and alice's chat model is unchanged
        assert refused.status_code == 403 and refused.json()["error"]["code"] == "owner_only"
        assert server.container.runtime.effective().chat_model == "alice-model"
        # And the default namespace's admin can change it
        assert alice.put("/v1/admin/settings", json={"values": {"recall_top_k": 3}}).status_code == 200
        # When each reads the settings, Then the index counts are their own namespace's
        bob_info = bob.get("/v1/admin/settings").json()["info"]
        alice_info = alice.get("/v1/admin/settings").json()["info"]
    assert (bob_info["namespace"], bob_info["index_documents"]) == ("bob", 1)
    assert (alice_info["namespace"], alice_info["index_documents"]) == ("alice", 3)


def test_a_reindex_is_seen_only_by_its_namespace(make_server: Callable[..., EngramServer]) -> None:
    # Given alice ran a reindex
    server = make_server(default_namespace="alice", embedder="none")
    with server.client() as alice, server.client(OTHER_KEY) as bob:
        alice.post("/v1/memories", json={"content": "Alice likes tea"})
        assert alice.post("/v1/admin/reindex").status_code == 202
        deadline = time.monotonic() + 30
        while alice.get("/v1/admin/reindex").json()["state"] == "running" and time.monotonic() < deadline:
            time.sleep(0.05)
        # When bob polls the reindex status, Then he sees no run of his, nothing of alice's
        assert alice.get("/v1/admin/reindex").json()["namespace"] == "alice"
        assert bob.get("/v1/admin/reindex").json() == {"state": "idle", "done": 0, "total": 0}
