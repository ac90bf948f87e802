"""The chat gateway's HTTP surface: OpenAI chat completions, Anthropic Messages and OpenAI Responses
wires, guide-dog, models and usage.

One mapping table for errors (``errors.status_for``), rendered in the client's wire: OpenAI-style
``{"error": {...}}`` (chat completions and Responses) or Anthropic-style
``{"type": "error", "error": {...}}``. An upstream error status and body are passed through unchanged
when the body already speaks the door's wire; otherwise the provider's status and message are given the
door's shape (an OpenAI-compatible upstream's error on the Anthropic door, and the reverse).
Every chat response carries the ``x-engram-*`` headers.

The doors are FastAPI routes (``chat_routes``: their OpenAPI entries, and the answer to any other
method), but a POST to one is answered by ``ChatDoors`` before FastAPI and its middleware (the app's
outermost dispatch, ``EngramApp`` in app.py): the same handler (``_chat``), the same auth, limits, errors
and headers, without a dozen layers around every streamed chunk, without matching the request against
every route of the app and without a task group around the streamed body (bench/README.md, "Gateway
overhead"). So ``mount`` (the doors, with ``create_app``) builds no route: the routes are a lazy route
group (entrypoints/http/routes.py), mounted by the first request a door's POST does not answer (the
models and usage routes, another method, the OpenAPI document, or every request while OpenTelemetry
traces FastAPI) — a cold start whose first request is a chat turn builds none.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI, Request, Response
from starlette._utils import get_route_path
from starlette.responses import StreamingResponse
from starlette.types import Receive, Scope, Send

from engram.bootstrap import Container
from engram.domain.errors import EngramError, UpstreamRejected
from engram.domain.skills import agent_id
from engram.domain.wire.errors import error_message, error_wire
from engram.entrypoints.http.auth import authenticate
from engram.entrypoints.http.errors import error_headers, status_for
from engram.entrypoints.http.state import DOOR_KEY, container_of
from engram.entrypoints.http.streaming import StreamOut, stream_head
from engram.services.chat.gateway import ChatReply, ChatService
from engram.services.chat.stream_relay import INTERNAL, EarlyStart
from engram.services.chat.turn import Wire

log = logging.getLogger(__name__)

_DEFAULT_HEADERS = {
    "x-engram-injected": "0",
    "x-engram-reason": "disabled",
    "x-engram-recall-ms": "0.0",
    "x-engram-upstream-ms": "0.0",
}
_ANTHROPIC_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    503: "overloaded_error",
    529: "overloaded_error",  # Anthropic's own "overloaded" status
    504: "timeout_error",
}


def mount(app: FastAPI, container: Container) -> None:
    """The chat doors; the body-limit middleware answers their refusals in the door's shape, and
    ``create_app`` serves a POST to a door with ``ChatDoors`` ahead of the app's other layers."""
    _ = container.chat  # built with the doors, not by their first turn (the container builds it on first use)
    app.state.chat_doors = ChatDoors()
    app.state.door_refusal = door_refusal

    @asynccontextmanager
    async def close_clients(_: FastAPI) -> AsyncIterator[None]:
        yield
        chat = container.chat_if_built  # a process that served no turn never built it
        if chat is not None:
            await chat.aclose()

    app.state.startup_hooks.append(close_clients)


def _service(request: Request) -> ChatService:
    return container_of(request).chat


def _error_response(wire: Wire, exc: EngramError, headers: dict[str, str]) -> Response:
    status, type_ = status_for(exc)
    if isinstance(exc, UpstreamRejected) and exc.body is not None:
        if error_wire(exc.body) == ("anthropic" if wire == "anthropic" else "openai"):
            # The provider's own error, unchanged (its status and body), so clients show the real cause.
            return Response(exc.body, status_code=status, headers=headers, media_type="application/json")
        # The other wire's error (or not JSON): the provider's message and status, in the door's shape.
        exc = UpstreamRejected(f"upstream error: {error_message(exc.body)}", status=exc.status)
        status, type_ = status_for(exc)
    if wire == "anthropic":
        payload: dict[str, Any] = {
            "type": "error",
            # Anthropic's wire shape, plus the `code` every Engram error carries.
            "error": {"type": _ANTHROPIC_TYPES.get(status, "api_error"), "message": exc.message, "code": exc.code},
        }
    else:
        payload = {"error": {"message": exc.message, "type": type_, "code": exc.code}}
    extra = error_headers(exc, status)
    return Response(
        json.dumps(payload), status_code=status, headers={**headers, **extra}, media_type="application/json"
    )


_DOORS: tuple[tuple[str, Wire], ...] = (
    ("/v1/messages", "anthropic"),
    ("/chat/completions", "openai"),  # also guide-dog
    ("/v1/responses", "responses"),
)


# POST paths answered by ChatDoors: (wire, guide-dog) by path; under `/agents/{agent}` the
# three doors of `_AGENT_DOORS` (the routes below declare the same paths).
_FIXED_DOORS: dict[str, tuple[Wire, bool]] = {
    "/v1/chat/completions": ("openai", False),
    "/v1/messages": ("anthropic", False),
    "/v1/responses": ("responses", False),
    "/v1/guide-dog/chat/completions": ("openai", True),
}
_AGENT_DOORS: dict[str, Wire] = {
    "v1/chat/completions": "openai",
    "v1/messages": "anthropic",
    "v1/responses": "responses",
}


def door_of(path: str) -> tuple[Wire, bool, str | None] | None:
    """The door a POST to ``path`` (the app's route path) opens: its wire, whether it is guide-dog, and
    the agent its path names; None for any other path. The same paths as the routes: ``{agent}`` is one
    non-empty path segment, as Starlette matches it."""
    fixed = _FIXED_DOORS.get(path)
    if fixed is not None:
        return fixed[0], fixed[1], None
    if path.startswith("/agents/"):
        agent, slash, rest = path[len("/agents/") :].partition("/")
        wire = _AGENT_DOORS.get(rest) if agent and slash else None
        if wire is not None:
            return wire, False, agent
    return None


class ChatDoors:
    """The ASGI app of a POST to a chat door (``door_of``): the door's handler, its response sent
    directly. ``create_app`` runs it ahead of FastAPI and the app's middleware, behind only the layers a
    chat request needs (the request id, the body limit and key check from the headers): one turn's own
    CPU is what the gateway adds to every chat request (issue #23; bench/gateway.py). Any other request
    is not its to answer (``EngramApp`` dispatches)."""

    door_of = staticmethod(door_of)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        door = scope.get(DOOR_KEY) or door_of(get_route_path(scope))  # EngramApp matched it already
        assert door is not None  # EngramApp sends only a door's POST here
        wire, guide_dog, agent = door
        out = StreamOut(receive, send)  # a streamed answer, begun early if the upstream is slow to answer
        try:
            try:
                response = await _turn(Request(scope, receive), wire, guide_dog=guide_dog, path_agent=agent, early=out)
            except Exception:
                # A bug before the answer began: said in the door's shape, as the handler does for the turn's.
                log.exception("chat request failed")
                response = _error_response(wire, INTERNAL, dict(_DEFAULT_HEADERS))
            if isinstance(response, ChatReply):
                assert response.stream is not None
                await out.stream(response.status, stream_head(response.headers, response.media_type), response.stream)
            elif not out.started:
                await response(scope, receive, send)
            else:  # a bug after the head went out (a reply begun early is a stream): the body is ended
                log.error("chat answer begun, then not a stream")
                await send({"type": "http.response.body", "body": b"", "more_body": False})
        except asyncio.CancelledError:
            if not out.gone:
                raise
            asyncio.current_task().uncancel()  # type: ignore[union-attr]  # the client went away: the request ends
        finally:
            await out.close()


def door_refusal(path: str, exc: EngramError) -> Response | None:
    """A chat door's answer to a request refused from its headers, before its body is read (the app's
    BodyLimitMiddleware): the door's error shape and Engram headers; None for any other path."""
    for suffix, wire in _DOORS:
        if path.endswith(suffix):
            return _error_response(wire, exc, dict(_DEFAULT_HEADERS))
    return None


async def _chat(request: Request, wire: Wire, *, guide_dog: bool = False, path_agent: str | None = None) -> Response:
    """A door's turn as a route answers it (``ChatDoors`` sends a streamed reply itself)."""
    reply = await _turn(request, wire, guide_dog=guide_dog, path_agent=path_agent)
    if isinstance(reply, Response):
        return reply
    assert reply.stream is not None
    return StreamingResponse(reply.stream, status_code=reply.status, headers=reply.headers, media_type=reply.media_type)


async def _turn(
    request: Request,
    wire: Wire,
    *,
    guide_dog: bool = False,
    path_agent: str | None = None,
    early: EarlyStart | None = None,
) -> Response | ChatReply:
    """A door's turn: its whole answer, or the ``ChatReply`` of a stream (sent by the caller; with
    ``early``, the caller's to begin while the upstream has not answered yet)."""
    try:
        principal = authenticate(request, "chat")
        principal.require("chat:proxy")
        chat = _service(request)
        # Which agent's skills the boot block lists: the header, else the base URL's `/agents/{id}`
        # (a client setting), else the key's `agent` (README, "Skills for coding agents").
        # An empty header is no header; any other value must be an agent id (400 invalid_agent_id).
        engram, forward = _read_headers(request.scope)
        header = engram.get("x-engram-agent") or ""
        in_header = agent_id(header) if header else None
        in_path = agent_id(path_agent) if path_agent is not None else None  # checked even when the header wins
        agent = in_header or in_path or principal.agent
    except EngramError as exc:
        return _error_response(wire, exc, dict(_DEFAULT_HEADERS))
    raw = await request.body()
    try:
        reply: ChatReply = await chat.handle(
            principal.namespace,
            wire,
            raw,
            guide_dog=guide_dog,
            # `x-engram-conversation` is the header's older name, still accepted.
            conversation_id=engram.get("x-engram-thread") or engram.get("x-engram-conversation"),
            agent=agent,
            memory_off=engram.get("x-engram-memory", "").lower() in ("off", "0", "false"),
            forward_headers=forward,
            server_history=_server_history(engram.get("x-engram-history"), principal.server_history),
            early=early,
        )
    except Exception:
        # A bug, not a client or upstream fault; still answered in the door's shape with its headers.
        log.exception("chat request failed")
        return _error_response(wire, INTERNAL, dict(_DEFAULT_HEADERS))
    if reply.error is not None:
        return _error_response(wire, reply.error, reply.headers)
    if reply.stream is not None:
        return reply
    return Response(reply.body, status_code=reply.status, headers=reply.headers, media_type=reply.media_type)


def _read_headers(scope: Scope) -> tuple[dict[str, str], dict[str, str]]:
    """The request's ``x-engram-*`` headers (the first of each name, as ``request.headers.get`` reads
    them) and its ``anthropic-*`` ones (the last of each name, as a dict of ``request.headers.items()``
    keeps them), in one pass over the ASGI headers (lower-case names) instead of a scan per header."""
    engram: dict[str, str] = {}
    forward: dict[str, str] = {}
    for key, value in scope["headers"]:
        if key.startswith(b"x-engram-"):
            engram.setdefault(key.decode("latin-1"), value.decode("latin-1"))
        elif key.startswith(b"anthropic-"):
            forward[key.decode("latin-1")] = value.decode("latin-1")
    return engram, forward


def _server_history(header: str | None, key_default: bool) -> bool:
    """Whether the server places the thread's kept history (README, "Server-kept history"): the
    ``x-engram-history`` header (`on` / `off`), else the key's ``server_history``."""
    value = (header or "").strip().lower()
    if value in ("on", "1", "true", "server", "keep"):
        return True
    if value in ("off", "0", "false", "client"):
        return False
    return key_default
