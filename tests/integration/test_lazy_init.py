"""What ``create_app`` leaves to first use (issue #23 item 1, bench/init.py), and that nobody can tell:

- lazy route groups (entrypoints/http/routes.py): the plain REST modules are mounted on the first request
  under their paths; routing, the route order and the OpenAPI document are what mounting everything at
  once gives, and concurrent first requests mount each group once;
- the MCP tools (entrypoints/http/mcp): registered on the first request past the gate, the same tools;
- the chat gateway (``Container.chat``): built by the surface that serves the chat doors, never by the MCP
  function."""

from __future__ import annotations

import asyncio
import importlib
import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from engram.bootstrap import Container, build_container
from engram.entrypoints.http.app import EngramApp, create_app
from engram.entrypoints.http.routes import MOUNTS, Mount
from engram.settings import Settings
from fastapi import FastAPI
from starlette.testclient import TestClient

from tests.servers import app_routes, serve_app

KEY = "ek_lazy_routes_key_000000001"
AUTH = {"authorization": f"Bearer {KEY}"}
LAZY = [entry for entry in MOUNTS if entry.prefixes]


@pytest.fixture
def container(tmp_path: Path) -> Iterator[Container]:
    settings = Settings(
        store="memory", search="memory", embedder="none", data_dir=tmp_path, scheduler_enabled=False, api_key=KEY
    )
    built = build_container(settings)
    try:
        yield built
    finally:
        built.close()


def _served(app: FastAPI) -> list[tuple[str, list[str]]]:
    """The (path, methods) the router routes now, in its order (``app.routes`` would mount the rest)."""
    return list(app_routes(app.router))


def _eager(container: Container) -> FastAPI:
    """Every module of the surface mounted at once, in ``MOUNTS`` order, as create_app did before."""
    app = FastAPI()
    app.state.startup_hooks = []
    for entry in MOUNTS:
        if container.settings.surface in entry.surfaces:
            module = importlib.import_module(f"engram.entrypoints.http.{entry.module}")
            getattr(module, entry.function)(app, container)
    return app


@pytest.mark.parametrize("entry", LAZY, ids=lambda entry: f"{entry.module}.{entry.function}")
def test_a_lazy_group_declares_every_path_it_serves_and_holds_no_state(entry: Mount, container: Container) -> None:
    # Given a bare app with what create_app mounts of the group's module (the admin panel's sessions)
    app = FastAPI(openapi_url=None, docs_url=None, redoc_url=None)
    app.state.startup_hooks = []
    module = importlib.import_module(f"engram.entrypoints.http.{entry.module}")
    for eager in MOUNTS:
        if eager.module == entry.module and not eager.prefixes:
            getattr(module, eager.function)(app, container)
    middleware, state = list(app.user_middleware), dict(vars(app.state)["_state"])
    hooks = list(app.state.startup_hooks)
    # When the group is mounted on it
    getattr(module, entry.function)(app, container)
    # Then every path starts with one of its prefixes (a request for it mounts the group first)
    paths = [path for path, _ in app_routes(app)]
    assert paths
    for path in paths:
        assert any(path == p or path.startswith(p + "/") for p in entry.prefixes), (entry.module, path)
    # And it added only routes: no middleware, no startup hook, nothing in the app's state
    assert app.user_middleware == middleware and vars(app.state)["_state"] == state
    assert app.state.startup_hooks == hooks


def test_health_mounts_no_group_and_a_request_mounts_only_the_groups_of_its_path(container: Container) -> None:
    app = create_app(container)
    served = {path for path, _ in _served(app)}
    assert "/health" in served and not any(path.startswith("/v1/memories") for path in served)
    with TestClient(app) as client:
        # When the readiness check and the base URL are answered
        assert client.get("/health").status_code == 200
        assert client.head("/").status_code == 200
        # Then no group was mounted
        assert {path for path, _ in _served(app)} == served
        # When a request under /v1/memories comes
        assert client.get("/v1/memories", params={"limit": 1}, headers=AUTH).status_code == 200
        now = {path for path, _ in _served(app)}
        # Then the two groups with paths under it are in (curation's fixed paths too), and no other
        assert {"/v1/memories", "/v1/memories/check", "/v1/search/memories", "/v1/consolidations"} <= now
        assert not any(path.startswith(("/v1/skills", "/v1/threads", "/v1/glossary")) for path in now)
        # And curation's fixed path still wins over memories' `/memories/{id}` (422: check's body is missing)
        response = client.post("/v1/memories/check", json={}, headers=AUTH)
        assert response.status_code == 422 and "content" in response.text


def test_routes_mounted_in_any_order_are_the_eager_routes_in_the_eager_order(container: Container) -> None:
    app = create_app(container)
    with TestClient(app) as client:
        # Given groups mounted out of MOUNTS order by their first requests (skills, then threads, memories)
        for path in ("/v1/skills", "/v1/threads", "/v1/memories", "/v1/precious"):
            assert client.get(path, headers=AUTH).status_code == 200
        # When the rest is mounted (reading app.routes, as the OpenAPI document does)
        lazy_order = list(app_routes(app))
        # Then the routes and their order are what mounting everything at once gives
        eager = _eager(container)
        assert lazy_order == list(app_routes(eager))
        # And the OpenAPI document lists the same operations as the eager app's
        document = client.get("/openapi.json").json()
        eager_paths = {path for path in eager.openapi()["paths"]}
        assert set(document["paths"]) == eager_paths


def test_the_openapi_document_mounts_every_group_first(container: Container) -> None:
    app = create_app(container)
    with TestClient(app) as client:
        document = client.get("/openapi.json").json()
    assert {"/v1/memories", "/v1/skills/{name}", "/v1/threads/{thread_id}", "/v1/runs", "/v1/export"} <= set(
        document["paths"]
    )
    assert isinstance(app, EngramApp) and app.route_groups is not None and not app.route_groups.pending


def test_an_unauthenticated_post_mounts_nothing(container: Container) -> None:
    # The key is checked from the headers before the lazy layer (BodyLimitMiddleware is outside it)
    app = create_app(container)
    before = _served(app)
    with TestClient(app) as client:
        assert client.post("/v1/skills", json={}).status_code == 401
    assert _served(app) == before


@pytest.mark.real_monotonic
def test_concurrent_first_requests_mount_each_group_once(container: Container) -> None:
    # Given a real server (uvicorn on a thread) and 12 clients whose first requests hit groups at once
    app = create_app(container)
    paths = ["/v1/memories", "/v1/skills", "/v1/threads", "/v1/reminders", "/v1/runs", "/v1/candidates"] * 2
    barrier = threading.Barrier(len(paths))
    statuses: list[int] = []
    with serve_app(app) as url:

        def first_request(path: str) -> None:
            with httpx.Client(base_url=url, headers=AUTH, timeout=60) as client:
                barrier.wait()
                statuses.append(client.get(path).status_code)

        threads = [threading.Thread(target=first_request, args=(path,)) for path in paths]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(120)
    # Then every request was served, and no route was mounted twice
    assert statuses == [200] * len(paths)
    served = _served(app)
    assert len(served) == len(set((path, tuple(methods)) for path, methods in served))
    # And the routes are in the eager order once the rest is mounted
    assert list(app_routes(app)) == list(app_routes(_eager(container)))


def test_groups_mounted_from_many_threads_at_once_are_mounted_once(container: Container) -> None:
    app = create_app(container)
    assert isinstance(app, EngramApp)
    groups = app.route_groups
    assert groups is not None
    barrier = threading.Barrier(8)

    def serve(path: str) -> None:
        barrier.wait()
        groups.serve(path)

    threads = [threading.Thread(target=serve, args=(p,)) for p in ["/v1/memories/x", "/v1/skills"] * 4]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    served = _served(app)
    assert len(served) == len(set((path, tuple(methods)) for path, methods in served))
    assert any(path == "/v1/memories/{memory_id}" for path, _ in served)
    assert any(path == "/v1/skills/{name}" for path, _ in served)


# -- the MCP tools ---------------------------------------------------------------------------------
MCP_HEADERS = {**AUTH, "accept": "application/json, text/event-stream", "content-type": "application/json"}


def _mcp(client: TestClient, method: str, params: dict[str, object], headers: dict[str, str] = MCP_HEADERS) -> Any:
    body = {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}
    return client.post("/mcp", json=body, headers=headers)


@pytest.fixture
def mcp_container(tmp_path: Path) -> Iterator[Container]:
    settings = Settings(
        store="memory", search="memory", embedder="none", data_dir=tmp_path, scheduler_enabled=False, api_key=KEY,
        surface="mcp", mcp_allowed_hosts=["testserver"],
    )  # fmt: skip
    built = build_container(settings)
    try:
        yield built
    finally:
        built.close()


def test_mcp_tools_are_registered_by_the_first_request_past_the_gate_and_are_the_same_tools(
    mcp_container: Container,
) -> None:
    from engram.entrypoints.http.mcp import build_server

    app = create_app(mcp_container)
    server = app.state.mcp_server
    # Given the app built: no tool registered yet
    assert asyncio.run(server.list_tools()) == []
    with TestClient(app) as client:
        # When a request without a key comes / Then it is refused and registers nothing
        refused = _mcp(client, "tools/list", {}, headers={k: v for k, v in MCP_HEADERS.items() if k != "authorization"})
        assert refused.status_code == 401
        assert asyncio.run(server.list_tools()) == []
        # When a client lists the tools
        listed = _mcp(client, "tools/list", {})
        assert listed.status_code == 200
        tools = listed.json()["result"]["tools"]
        # Then it gets every tool, as a server built with its tools at once lists them
        eager = asyncio.run(build_server(mcp_container).list_tools())
        assert tools == [tool.model_dump(mode="json", by_alias=True, exclude_none=True) for tool in eager]
        assert len(tools) == 39
        # And a call is served
        call = _mcp(client, "tools/call", {"name": "memory_list", "arguments": {"limit": 1}})
        assert call.status_code == 200 and "error" not in call.json()
        assert call.json()["result"]["isError"] is False


def test_a_call_as_the_first_request_is_checked_against_the_tools_arguments(mcp_container: Container) -> None:
    # The SDK checks a call's arguments against the tool's schema before the tool runs: that check
    # finds the tool too when the call is the first request
    with TestClient(create_app(mcp_container)) as client:
        bad = _mcp(client, "tools/call", {"name": "memory_list", "arguments": {"limit": "many"}})
    assert bad.status_code == 200
    result = bad.json()["result"]
    assert result["isError"] is True and "limit" in json.dumps(result)


def test_mcp_tools_registered_from_many_threads_at_once_are_registered_once(
    mcp_container: Container, monkeypatch: pytest.MonkeyPatch
) -> None:
    import engram.entrypoints.http.mcp as mcp_entry

    calls: list[int] = []
    register = mcp_entry.register_tools

    def counted(server: object) -> None:
        calls.append(1)
        register(server)  # type: ignore[arg-type]

    monkeypatch.setattr(mcp_entry, "register_tools", counted)
    server = mcp_entry.build_server(mcp_container, tools=False)
    first = mcp_entry.ToolsOnFirstRequest(lambda scope, receive, send: None, server)  # type: ignore[arg-type,return-value]
    barrier = threading.Barrier(8)

    def race() -> None:
        barrier.wait()
        first.register()

    threads = [threading.Thread(target=race) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert calls == [1]
    assert len(asyncio.run(server.list_tools())) == 39


# -- the chat gateway ------------------------------------------------------------------------------
def test_the_mcp_function_never_builds_the_chat_gateway(mcp_container: Container) -> None:
    with TestClient(create_app(mcp_container)) as client:
        call = _mcp(client, "tools/call", {"name": "memory_recall", "arguments": {"query": "what do I like"}})
        assert call.status_code == 200 and call.json()["result"]["isError"] is False
    assert mcp_container.chat_if_built is None


def test_the_surface_with_the_chat_doors_builds_the_gateway_with_them(container: Container) -> None:
    assert container.chat_if_built is None  # the container alone builds nothing
    create_app(container)
    assert container.chat_if_built is not None
    assert container.chat is container.chat_if_built  # built once


def test_the_chat_gateway_is_built_once_when_many_threads_ask_at_once(container: Container) -> None:
    barrier = threading.Barrier(8)
    seen: list[object] = []

    def ask() -> None:
        barrier.wait()
        seen.append(container.chat)

    threads = [threading.Thread(target=ask) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert len(seen) == 8 and len({id(chat) for chat in seen}) == 1


# -- off the event loop, and ahead of time on a local server ------------------------------------------
@pytest.mark.parametrize("surface", ["api", "mcp"])
def test_a_first_mount_or_tool_registration_leaves_the_event_loop_serving(
    surface: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a real server whose first request under /v1/skills (a lazy group) or to /mcp (the tools) is
    # held inside the mount / the registration until the test lets it go
    import engram.entrypoints.http.mcp as mcp_entry
    import engram.entrypoints.http.routes as routes

    inside, release = threading.Event(), threading.Event()

    def held(build: Any) -> Any:
        def slow(*args: Any) -> None:
            inside.set()
            assert release.wait(30)
            build(*args)

        return slow

    settings = Settings(
        store="memory", search="memory", embedder="none", data_dir=tmp_path, scheduler_enabled=False, api_key=KEY,
        surface=surface, mcp_allowed_hosts=["*"],
    )  # fmt: skip
    container = build_container(settings)
    app = create_app(container)
    if surface == "api":
        monkeypatch.setattr(routes, "_mount", held(routes._mount))
        path, body, headers = "/v1/skills", None, AUTH
    else:
        monkeypatch.setattr(mcp_entry, "register_tools", held(mcp_entry.register_tools))
        path, body, headers = "/mcp", {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}, MCP_HEADERS
    first: list[httpx.Response] = []
    try:
        with serve_app(app) as url, httpx.Client(base_url=url, timeout=30) as client:
            request = threading.Thread(
                target=lambda: first.append(
                    client.post(path, json=body, headers=headers) if body else client.get(path, headers=headers)
                )
            )
            request.start()
            assert inside.wait(30)
            # When the readiness path is asked meanwhile / Then it is answered while the first is held
            assert client.get("/health", timeout=5).status_code == 200
            assert not release.is_set() and request.is_alive()
            release.set()
            request.join(30)
    finally:
        release.set()
        container.close()
    # And the held request is served once the mount / registration is done
    assert [response.status_code for response in first] == [200]


def test_a_local_server_mounts_every_group_and_registers_the_tools_in_the_background(container: Container) -> None:
    from engram.entrypoints.http.app import warm_first_use

    # Given the local default's app (every surface), as `engram serve` builds it
    app = create_app(container)
    assert isinstance(app, EngramApp) and app.route_groups is not None and app.route_groups.pending
    # When it is warmed (engram serve does it after create_app)
    warm_first_use(app).join(60)
    # Then every group is mounted, in the eager order, and the tools are registered
    assert not app.route_groups.pending
    assert list(app_routes(app.router)) == list(app_routes(_eager(container)))
    assert len(asyncio.run(app.state.mcp_server.list_tools())) == 39


# -- the job services -------------------------------------------------------------------------------
def test_the_job_services_are_built_once_on_first_use_whichever_thread_asks(container: Container) -> None:
    # Given a container (the HTTP app built on it): no job service was built
    create_app(container)
    barrier = threading.Barrier(8)
    seen: list[tuple[object, ...]] = []

    def ask() -> None:
        barrier.wait()
        seen.append((container.jobs, container.extraction, container.dreaming, container.cleanup))

    # When eight threads ask at once / Then they all get the same services, built once
    threads = [threading.Thread(target=ask) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert len(seen) == 8 and len({tuple(id(part) for part in parts) for parts in seen}) == 1
    # And the runner runs a job with them
    assert container.jobs.run("cleanup", {"namespace": "default"}).failed is False
