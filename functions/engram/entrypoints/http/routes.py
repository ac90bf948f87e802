"""Every route module of the HTTP app, in mounting order, and the surfaces that serve it: the one place a
route module is mounted (docs/ARCHITECTURE.md, "One change, one place").

Each module exposes ``mount(app, container)``: a module of plain routes includes its router (under
``/v1`` where its paths are relative); one that holds state builds it there (the chat doors, the jobs'
schedule, the admin sessions, the MCP server), and its routes, if any, are a lazy group of their own
(``chat_routes``; the admin panel's ``mount_routes``). A module is imported only when ``ENGRAM_SURFACE`` serves
it, so the MCP function never loads the REST modules and the API function never loads the MCP SDK
(docs/aws.md, "Cold starts"; ``tests/integration/test_surfaces.py``). Order matters where paths overlap:
fixed paths (``curation``'s ``/memories/check``) before patterns (``memories``' ``/memories/{id}``).

A module of plain routes that declares its path ``prefixes`` is a lazy route group: it is imported and
mounted on the first request under one of them (``RouteGroups.serve``), or when anything reads
``app.routes`` (the OpenAPI document), never by ``create_app``: FastAPI builds a route's dependency and
response models when the module's decorators run, the largest part of building the app (bench/README.md,
"Cold start"). Its routes take their place in ``MOUNTS`` order whenever they are built, so routing and
the OpenAPI document are what mounting everything at once gives. Only ``/`` and ``/health`` (the Lambda Web
Adapter's readiness check: ``public``) and the modules' state are built by ``create_app``, and they
build no model field: FastAPI's first one imports ``pydantic.v1`` (~25 ms of CPU, its own check), so a
cold start whose first request is a chat turn (answered ahead of the routes) or ``/health`` never does.
"""

from __future__ import annotations

import importlib
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from fastapi import FastAPI
from starlette._utils import get_route_path
from starlette.concurrency import run_in_threadpool
from starlette.routing import BaseRoute
from starlette.types import ASGIApp, Receive, Scope, Send

from engram.bootstrap import Container

Surface = Literal["all", "api", "mcp"]
EVERY: frozenset[Surface] = frozenset({"all", "api", "mcp"})
REST: frozenset[Surface] = frozenset({"all", "api"})
MCP: frozenset[Surface] = frozenset({"all", "mcp"})


@dataclass(frozen=True)
class Mount:
    module: str  # under engram.entrypoints.http
    surfaces: frozenset[Surface]
    function: str = "mount"
    # A lazy group's paths start with one of these (whole segments); none: mounted by create_app.
    prefixes: tuple[str, ...] = ()


# The chat doors' routes (chat_routes.py); a door's POST is answered ahead of them (chat.py).
CHAT_PATHS = ("/v1/chat", "/v1/messages", "/v1/responses", "/v1/guide-dog", "/v1/models", "/v1/usage", "/agents")

MOUNTS: tuple[Mount, ...] = (
    Mount("public", EVERY),  # `/`, `/health`
    # its fixed paths before `/memories/{id}`
    Mount("curation", REST, prefixes=("/v1/memories", "/v1/consolidations")),
    Mount("memories", REST, prefixes=("/v1/memories", "/v1/search")),
    Mount("notes", REST, prefixes=("/v1/digest", "/v1/glossary", "/v1/memory_boot", "/v1/precious")),
    Mount("candidates", REST, prefixes=("/v1/candidates",)),
    Mount("rest", REST, prefixes=("/v1/ingest", "/v1/stats")),
    Mount("transfer", REST, prefixes=("/v1/export", "/v1/import")),
    Mount("rest", REST, "mount_cache", prefixes=("/v1/cache",)),
    Mount("threads", REST, prefixes=("/v1/threads",)),
    Mount("reminders", REST, prefixes=("/v1/reminders",)),
    Mount("runs", REST, prefixes=("/v1/runs",)),  # the change journal (docs/journal.md)
    Mount("skills", REST, prefixes=("/v1/skills",)),
    Mount("chat", REST),  # the doors (ahead of the routes)
    Mount("chat_routes", REST, prefixes=CHAT_PATHS),
    Mount("schedule", REST),  # the in-process schedule (engram serve)
    Mount("job_routes", REST, prefixes=("/v1/jobs",)),
    Mount("mcp", MCP),
    Mount("admin", REST),  # the panel's sessions and headers
    Mount("admin", REST, "mount_routes", prefixes=("/admin", "/v1/admin")),
)


def mount_all(app: FastAPI, container: Container, surface: Surface) -> RouteGroups:
    """Mount every module ``surface`` serves, in ``MOUNTS`` order: the eager ones now, the lazy groups
    when first needed (the returned ``RouteGroups``)."""
    groups = RouteGroups(app, container)
    for entry in MOUNTS:
        if surface in entry.surfaces:
            groups.add(entry)
    return groups


def _mount(entry: Mount, app: FastAPI, container: Container) -> None:
    module = importlib.import_module(f"engram.entrypoints.http.{entry.module}")
    mount: Callable[[FastAPI, Container], None] = getattr(module, entry.function)
    mount(app, container)


class RouteGroups:
    """The app's routes in ``MOUNTS`` order, the lazy groups mounted on first use.

    Each entry owns a slot: the routes its ``mount`` added. Mounting a lazy group later (under a lock: the
    first requests may come at once, from several threads) fills its slot, and the router gets a new list
    (the routes ``create_app`` found, then every slot in order, then any route added since), swapped in
    whole, so a request being routed meanwhile reads the old list to its end."""

    def __init__(self, app: FastAPI, container: Container) -> None:
        self._app = app
        self._container = container
        self._head = list(app.router.routes)  # FastAPI's own (the OpenAPI document, the docs pages)
        self._slots: list[list[BaseRoute]] = []
        self._lazy: dict[int, Mount] = {}  # slot -> entry, while not mounted
        self._lock = threading.Lock()

    @property
    def pending(self) -> bool:
        """Whether some group is not mounted yet."""
        return bool(self._lazy)

    def add(self, entry: Mount) -> None:
        slot = len(self._slots)
        self._slots.append([])
        if entry.prefixes:
            self._lazy[slot] = entry
        else:
            self._mount(slot, entry)

    def wanted(self, path: str) -> bool:
        """Whether a group not mounted yet may route ``path`` (a look at the pending prefixes only)."""
        return any(_under(path, entry.prefixes) for entry in list(self._lazy.values()))

    def serve(self, path: str) -> None:
        """Mount the groups that may route ``path`` (Engram's own path, below the root path)."""
        wanted = [slot for slot, entry in list(self._lazy.items()) if _under(path, entry.prefixes)]
        if wanted:
            self._build(wanted)

    def build_all(self) -> None:
        if self._lazy:
            self._build(list(self._lazy))

    def _build(self, slots: list[int]) -> None:
        with self._lock:
            for slot in slots:
                entry = self._lazy.get(slot)
                if entry is not None:
                    self._mount(slot, entry)
                    del self._lazy[slot]  # after its routes are in: another thread reads this unlocked

    def _mount(self, slot: int, entry: Mount) -> None:
        router = self._app.router
        before = {id(route) for route in router.routes}
        _mount(entry, self._app, self._container)
        self._slots[slot] = [route for route in router.routes if id(route) not in before]
        ordered = [*self._head, *(route for routes in self._slots for route in routes)]
        placed = {id(route) for route in ordered}
        router.routes = [*ordered, *(route for route in router.routes if id(route) not in placed)]
        router._mark_routes_changed()  # FastAPI keys its cached OpenAPI document on this


def _under(path: str, prefixes: tuple[str, ...]) -> bool:
    return any(path == prefix or path.startswith(prefix + "/") for prefix in prefixes)


class LazyRoutesMiddleware:
    """Mount the route groups a request's path may need before the router sees it (innermost layer: a
    request refused by the key check from its headers builds nothing). A pass-through once all are in.

    The mount (~0.1-0.2 s of CPU for a group's module and routes) runs on a worker thread, never on the
    event loop: the other requests of a process (a local ``engram serve``'s chat turns, ``/health``) go on
    meanwhile, and a request under the same paths waits for the group on the lock in ``RouteGroups``.
    A request no pending group may route does not leave the loop."""

    def __init__(self, app: ASGIApp, groups: RouteGroups) -> None:
        self.app = app
        self.groups = groups

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if self.groups.pending and scope["type"] in ("http", "websocket"):
            path = get_route_path(scope)
            if self.groups.wanted(path):
                await run_in_threadpool(self.groups.serve, path)
        await self.app(scope, receive, send)
