"""The ASGI app: REST API, chat gateway, MCP and admin panel on one FastAPI instance.

`create_app()` is a factory (uvicorn `--factory`, the Lambda Web Adapter's run.sh): it builds the
container from the environment unless one is passed in (tests, `engram serve`).
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import re
import threading
import time
from collections.abc import AsyncIterator, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from http.cookies import SimpleCookie
from urllib.parse import parse_qsl

from fastapi import FastAPI
from fastapi.routing import APIRoute
from starlette._utils import get_route_path
from starlette.datastructures import Headers
from starlette.responses import Response
from starlette.routing import BaseRoute
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from engram import __version__
from engram.bootstrap import Container, build_container
from engram.domain.access import KeyRing
from engram.domain.errors import EngramError, Unauthorized
from engram.entrypoints.http import public
from engram.entrypoints.http.aliases import PathAliasMiddleware
from engram.entrypoints.http.auth import token_from_headers
from engram.entrypoints.http.errors import engram_error_response, error_body, install_error_handlers
from engram.entrypoints.http.hand_edits import HandEditMiddleware
from engram.entrypoints.http.openapi import install_openapi
from engram.entrypoints.http.redact import install_redaction
from engram.entrypoints.http.routes import LazyRoutesMiddleware, RouteGroups, mount_all
from engram.entrypoints.http.session import COOKIE_NAME
from engram.entrypoints.http.state import DOOR_KEY, KEY_PRINCIPAL
from engram.entrypoints.logs import bind_request, configure_logging, unbind
from engram.settings import load_settings

log = logging.getLogger(__name__)


# A JSON string escape that is a surrogate pair (kept), a lone surrogate (replaced), or an escaped
# backslash (consumed, so the "\\ud800" of a literal backslash is never mistaken for an escape).
_SURROGATE_ESCAPE = re.compile(
    rb"(\\u[dD][89abAB][0-9a-fA-F]{2}\\u[dD][c-fC-F][0-9a-fA-F]{2})|(\\u[dD][89a-fA-F][0-9a-fA-F]{2})|\\\\"
)


def scrub_lone_surrogates(payload: bytes) -> bytes:
    """JSON text with every lone UTF-16 surrogate escape (``"\\ud800"``) replaced by U+FFFD.

    Python decodes such an escape into a string no UTF-8 encoder (SQLite, httpx, logs) accepts; a client
    that sent one (a cut emoji) gets its text stored with a replacement character instead of a 500.
    Same length, so a declared Content-Length stays true.
    """
    if b"\\u" not in payload:
        return payload

    def fix(match: re.Match[bytes]) -> bytes:
        return b"\\ufffd" if match.group(2) else match.group(0)

    return _SURROGATE_ESCAPE.sub(fix, payload)


class BodyLimitMiddleware:
    """Refuse request bodies over ``limit`` bytes with 413, and bodies that do not arrive within
    ``timeout`` seconds with 408 (closing the connection), before any handler reads them; hand on the
    body with lone surrogate escapes replaced (``scrub_lone_surrogates``), for every surface at once.

    With ``keys``, the key is checked from the headers first: a request to any path but ``open_paths``
    with no key (and no panel session cookie) or a wrong one gets its 401 before a byte of its body is
    read, so a client without a key cannot hold a connection for the body timeout (README, "Limits").
    Scopes and rate limits are still checked by the route."""

    def __init__(
        self,
        app: ASGIApp,
        limit: int,
        timeout: float = 60.0,
        keys: KeyRing | None = None,
        open_paths: frozenset[str] = frozenset(),
        door_refusal: Callable[[str, EngramError], Response | None] | None = None,
    ) -> None:
        self.app = app
        self.limit = limit
        self.timeout = timeout
        self.keys = keys
        self.open_paths = open_paths
        self.door_refusal = door_refusal

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] in ("GET", "HEAD", "OPTIONS"):
            await self.app(scope, receive, send)
            return
        refused = self._unauthenticated(scope)
        if refused is not None:
            await self._refuse(scope, receive, send, refused)
            return
        declared = dict(scope["headers"]).get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.limit:
            await self._reject(send)
            return
        # Count even when a length was declared: a client may send more than it declared.
        chunks: list[bytes] = []
        size = 0
        more = True
        try:
            # One deadline for the whole body: a client trickling a byte at a time is no exception. (One
            # timer, not a task per read as ``wait_for`` would start: every request passes here.)
            async with asyncio.timeout(self.timeout):
                while more:
                    message = await receive()
                    if message["type"] == "http.disconnect":
                        return
                    body = message.get("body", b"")
                    size += len(body)
                    if size > self.limit:
                        break
                    chunks.append(body)
                    more = message.get("more_body", False)
        except TimeoutError:
            await self._reply(send, 408, f"the request body did not arrive within {self.timeout:g} s", "body_timeout")
            return
        if size > self.limit:
            await self._reject(send)
            return
        payload = scrub_lone_surrogates(b"".join(chunks))
        sent = False

        async def replay() -> Message:
            nonlocal sent
            if not sent:
                sent = True
                return {"type": "http.request", "body": payload, "more_body": False}
            return await receive()

        await self.app(scope, replay, send)

    def _unauthenticated(self, scope: Scope) -> Unauthorized | None:
        """Why this request cannot be served by its headers alone, or None (checked again by the route)."""
        if self.keys is None or scope["path"] in self.open_paths:
            return None
        headers = Headers(scope=scope)
        token = token_from_headers(headers)
        in_headers = token is not None
        if token is None and scope["path"].startswith("/mcp"):
            token = dict(parse_qsl(scope.get("query_string", b"").decode("latin-1"))).get("token") or None
        if token is None and COOKIE_NAME in SimpleCookie(headers.get("cookie", "")):
            return None  # the panel's session: verified by the route
        try:
            principal = self.keys.authenticate(token)
        except Unauthorized as exc:
            return exc
        if in_headers:  # the key the route's ``authenticate`` would look up: it takes this one (auth.py)
            scope[KEY_PRINCIPAL] = principal
        return None

    async def _refuse(self, scope: Scope, receive: Receive, send: Send, exc: Unauthorized) -> None:
        # In the door's shape and headers for a chat door, Engram's elsewhere.
        door = self.door_refusal(scope["path"], exc) if self.door_refusal is not None else None
        response = door or engram_error_response(exc)
        response.headers["connection"] = "close"  # the body is not read: the connection cannot carry another request
        await response(scope, receive, send)

    async def _reject(self, send: Send) -> None:
        await self._reply(send, 413, f"request body is larger than {self.limit} bytes", "body_too_large")

    @staticmethod
    async def _reply(send: Send, status: int, message: str, code: str) -> None:
        kind = "request_too_large" if status == 413 else "invalid_request_error"
        body = json.dumps(error_body(message, kind, code)).encode()
        headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
        # The rest of the body is not read: the connection cannot carry another request.
        headers.append((b"connection", b"close"))
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": body})


class RequestIdMiddleware:
    """``x-request-id`` on every response (the client's, or a new one), kept in ``request.state``.

    Pure ASGI on purpose: ``BaseHTTPMiddleware`` costs ~0.6 ms CPU per request and re-wraps every
    chunk of a streamed chat response (measured with bench/gateway.py).
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = dict(scope["headers"])
        rid = (headers.get(b"x-request-id") or b"").decode("latin-1")[:64] or os.urandom(8).hex()
        scope.setdefault("state", {})["request_id"] = rid
        # Under the Lambda Web Adapter, x-amzn-request-id is the invocation's id (as in the REPORT line).
        lambda_id = (headers.get(b"x-amzn-request-id") or b"").decode("latin-1")[:64]
        bound = bind_request(request_id=rid, function_request_id=lambda_id)
        started = time.perf_counter()
        status = 0

        async def send_with_id(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                message = {**message, "headers": [*message.get("headers", []), (b"x-request-id", rid.encode())]}
            await send(message)

        try:
            await self.app(scope, receive, send_with_id)
        finally:
            # The path only: query strings may carry keys (entrypoints/http/redact.py).
            log.info(
                "%s %s -> %s in %.1f ms", scope["method"], scope["path"], status, (time.perf_counter() - started) * 1000
            )
            unbind(bound)


class EngramApp(FastAPI):
    """The app, with a POST to a chat door answered ahead of FastAPI's and the app's own layers.

    A chat turn is the request the gateway adds to every message a person sends, so its own cost is
    kept near a bare proxy's (issue #23; bench/gateway.py): ``door_stack`` is the request id, the body
    limit and key check, and the door itself (``ChatDoors``, entrypoints/http/chat.py), the same classes
    the app's middleware stack is built of. The layers it leaves out do nothing for a door's path (path
    aliases, hand edits, the panel's headers: tests/unit/test_chat_doors.py checks that each passes a
    door by) or are FastAPI's own (exception and telemetry wrappers, when OpenTelemetry is not set up:
    with it, the doors are served as routes, traced as every other request).
    """

    door_of: Callable[[str], object | None] | None = None
    door_stack: ASGIApp | None = None
    _traced_on = False  # FastAPI's telemetry found on: stays on (OpenTelemetry's providers are set once)
    _traced_next = 0.0  # while off, looked at again from this monotonic time on (at most once a second)
    route_groups: RouteGroups | None = None  # the lazy route groups (entrypoints/http/routes.py)
    # Behind API Gateway the stage (/prod) prefixes every URL a browser loads; the app never sees it. Set in
    # the scope here, as a server's --root-path would (FastAPI 0.165 deprecates its root_path parameter).
    stage_prefix = ""

    @property
    def routes(self) -> list[BaseRoute]:
        """Every route, the lazy groups mounted first: whatever reads the app's routes (the OpenAPI
        document) sees them all. Requests are routed by ``self.router``, which mounts a group when needed."""
        if self.route_groups is not None:
            self.route_groups.build_all()
        return self.router.routes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if self.stage_prefix:
            scope["root_path"] = self.stage_prefix
        if self.door_stack is not None and scope["type"] == "http" and scope["method"] == "POST":
            assert self.door_of is not None
            door = self.door_of(get_route_path(scope))
            if door is not None and not self._traced_now():
                scope["app"] = self
                scope[DOOR_KEY] = door  # ChatDoors reads it instead of matching the path again
                await self.door_stack(scope, receive, send)
                return
        await super().__call__(scope, receive, send)

    def _traced_now(self) -> bool:
        """``_traced``, read at most once a second while telemetry is off: the reading looks at three
        OpenTelemetry providers and the environment (~4 µs), on every chat turn otherwise."""
        if self._traced_on:
            return True
        now = time.monotonic()
        if now >= self._traced_next:
            self._traced_on = _traced(self)
            self._traced_next = now + 1.0
        return self._traced_on


def _traced(app: FastAPI) -> bool:
    """Whether FastAPI's own OpenTelemetry instrumentation is on for this request (a provider is set up)."""
    telemetry = getattr(app, "_native_telemetry", None)  # FastAPI >= 0.135; older ones trace nothing here
    return telemetry is not None and bool(telemetry.enabled())


def create_app(container: Container | None = None) -> FastAPI:
    if container is None:
        # The factory path (run.sh on Lambda, `uvicorn --factory`): this process's logging is ours to set.
        base = load_settings()
        configure_logging(base.log_level)
        container = build_container(base)
    settings = container.settings

    install_redaction()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        install_redaction()  # again: the server may have (re)configured logging since create_app
        async with _lifespan_hooks(app):
            yield

    app = EngramApp(
        title="Engram",
        version=__version__,
        description="Long-term memory for AI chat clients: REST API. Authenticate with `Authorization: Bearer <key>`.",
        lifespan=lifespan,
    )
    app.stage_prefix = settings.root_path
    app.state.container = container
    app.state.startup_hooks = []
    install_error_handlers(app)

    app.route_groups = mount_all(app, container, settings.surface)
    door_refusal: Callable[[str, EngramError], Response | None] | None = getattr(app.state, "door_refusal", None)
    public_paths = {route.path for route in public.public.routes if isinstance(route, APIRoute)}
    install_openapi(app, public_paths=public_paths)
    open_paths = frozenset(public_paths | {"/admin/login", "/admin/logout"})

    def body_limit(inner: ASGIApp) -> ASGIApp:
        return BodyLimitMiddleware(
            inner,
            limit=settings.max_body_bytes,
            timeout=settings.body_timeout,
            keys=container.keys,
            open_paths=open_paths,
            door_refusal=door_refusal,
        )

    app.add_middleware(LazyRoutesMiddleware, groups=app.route_groups)  # innermost: after the key check
    app.add_middleware(body_limit)
    app.add_middleware(HandEditMiddleware, journal=container.journal)  # docs/journal.md
    app.add_middleware(RequestIdMiddleware)
    app.add_middleware(PathAliasMiddleware)  # outermost: every layer sees Engram's own path
    doors = getattr(app.state, "chat_doors", None)  # the chat surface's (entrypoints/http/chat.py)
    if doors is not None:
        app.door_of = doors.door_of
        app.door_stack = RequestIdMiddleware(body_limit(doors))
    return app


def warm_first_use(app: FastAPI) -> threading.Thread:
    """Mount every lazy route group and register the MCP tools on a helper thread, now (``engram serve``,
    after ``create_app``): a local server is started once and serves for long, so what a Lambda instance
    leaves to its first requests (docs/aws.md, "Cold starts") is done in the background here, and no
    first request waits for it. The same locks as a first request's: a request meanwhile waits for the
    group it needs, or finds it mounted. Never on Lambda, whose init would pay for it."""

    def warm() -> None:
        try:
            if isinstance(app, EngramApp) and app.route_groups is not None:
                app.route_groups.build_all()
            register = getattr(app.state, "register_mcp_tools", None)
            if register is not None:
                register()
        except Exception:  # a first request mounts or registers it again, and says why
            log.exception("could not prepare the routes and MCP tools in the background")

    thread = threading.Thread(target=warm, name="engram-warm-routes", daemon=True)
    thread.start()
    return thread


@asynccontextmanager
async def _lifespan_hooks(app: FastAPI) -> AsyncIterator[None]:
    """Run the async context managers surfaces registered in ``app.state.startup_hooks``."""
    async with AsyncExitStack() as stack:
        for hook in app.state.startup_hooks:
            await stack.enter_async_context(hook(app))
        yield
