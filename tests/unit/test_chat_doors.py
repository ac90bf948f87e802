"""The chat doors' fast path (``ChatDoors``, served by ``EngramApp`` ahead of FastAPI's stack) takes
exactly the POST paths the chat routes declare, so a request is answered by the same handler whichever
way it arrives, and with the same edge rules (request id, key check from the headers, body limit)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx
import pytest
from engram.bootstrap import build_container
from engram.entrypoints.http import hand_edits
from engram.entrypoints.http.aliases import alias_of, canonical_path
from engram.entrypoints.http.app import create_app
from engram.entrypoints.http.chat import _read_headers, door_of
from engram.entrypoints.http.chat_routes import router
from engram.settings import Settings
from fastapi.routing import APIRoute
from starlette.datastructures import Headers

from tests.fakes.upstream import FakeUpstream, Reply

KEY = "ek-doors-test-key"


def _post_paths() -> list[str]:
    return [r.path for r in router.routes if isinstance(r, APIRoute) and "POST" in (r.methods or ())]


def test_every_chat_post_route_is_a_door_and_only_those() -> None:
    paths = _post_paths()
    assert len(paths) == 7
    for path in paths:
        door = door_of(path.replace("{agent}", "codex"))
        assert door is not None, path
        assert door[2] == ("codex" if "{agent}" in path else None)
    get_paths = [r.path for r in router.routes if isinstance(r, APIRoute) and "POST" not in (r.methods or ())]
    assert get_paths and all(door_of(p.replace("{agent}", "codex")) is None for p in get_paths)


@pytest.mark.parametrize(
    ("path", "door"),
    [
        ("/v1/chat/completions", ("openai", False, None)),
        ("/v1/messages", ("anthropic", False, None)),
        ("/v1/responses", ("responses", False, None)),
        ("/v1/guide-dog/chat/completions", ("openai", True, None)),
        ("/agents/claude-code/v1/messages", ("anthropic", False, "claude-code")),
        ("/agents/x y/v1/responses", ("responses", False, "x y")),
        # what the routes do not match either (Starlette's `{agent}` is one non-empty segment)
        ("/v1/chat/completions/", None),
        ("/v1/messages/ingest", None),
        ("/agents//v1/messages", None),
        ("/agents/a/b/v1/messages", None),
        ("/agents/a/v1/guide-dog/chat/completions", None),
        ("/agents/a/v1/models", None),
        ("/v1/chat/completion", None),
    ],
)
def test_door_of(path: str, door: tuple[str, bool, str | None] | None) -> None:
    assert door_of(path) == door


# Every door path, as a client may send it (the agent doors with an agent id in the path).
DOOR_PATHS = [p.replace("{agent}", "codex") for p in _post_paths()]


@pytest.mark.parametrize("path", DOOR_PATHS)
def test_the_layers_the_door_stack_leaves_out_pass_every_door_by(path: str) -> None:
    # EngramApp answers a door's POST behind the request id and body limit only (entrypoints/http/app.py):
    # the other middleware must have nothing to do for these paths.
    assert alias_of(path) is None  # no path alias is a door, nor rewritten into one
    assert canonical_path(path) == path
    assert path.startswith(hand_edits._NOT_EDITS)  # a chat turn is no hand edit
    assert not (path == "/admin" or path.startswith(("/admin/", "/v1/admin/")))  # no panel headers


@pytest.fixture(scope="module")
def app() -> Any:
    settings = Settings(
        store="memory", search="memory", embedder="none", api_key=KEY, scheduler_enabled=False, max_body_bytes=4096
    )
    return create_app(build_container(settings))


async def test_a_doors_post_is_answered_ahead_of_fastapis_stack_with_the_same_edge_rules(app: Any) -> None:
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://engram.test") as client:
        # No key: refused from the headers, in the door's shape, with the request id and Engram's headers.
        refused = await client.post("/v1/messages", content=b"{}", headers={"x-request-id": "rid-1"})
        assert refused.status_code == 401
        assert refused.json()["type"] == "error" and refused.json()["error"]["code"] == "missing_key"
        assert refused.headers["x-request-id"] == "rid-1"
        assert refused.headers["x-engram-reason"] == "disabled"
        assert refused.headers["connection"] == "close"
        keyed = {"authorization": f"Bearer {KEY}"}
        # Over the body limit: 413 before the handler reads it; a request id made up when none is sent.
        big = await client.post("/v1/chat/completions", content=b"x" * 5000, headers=keyed)
        assert big.status_code == 413 and big.json()["error"]["code"] == "body_too_large"
        assert len(big.headers["x-request-id"]) == 16
        # A body the door reads: the handler's own answer, in its shape.
        answered = await client.post(
            "/agents/codex/v1/chat/completions",
            json={"model": "m", "messages": [{"role": "user", "content": "hi"}]},
            headers=keyed,
        )
        assert answered.status_code == 400 and answered.json()["error"]["code"] == "model_not_found"
        assert answered.headers["x-request-id"]
    # None of them went through FastAPI's middleware stack: it is built on the first other request.
    assert app.middleware_stack is None


def _forwarding_app(up: FakeUpstream) -> Any:
    """The app as a pure forwarder (no recall, nothing stored) to ``up``."""
    settings = Settings(
        store="memory",
        search="memory",
        embedder="none",
        api_key=KEY,
        scheduler_enabled=False,
        upstream_base_url=up.openai_base_url,
        chat_model="fake-chat",
        chat_inject_enabled=False,
        chat_store_messages=False,
    )
    return create_app(build_container(settings))


async def _door_messages(app: Any, body: dict[str, Any]) -> list[dict[str, Any]]:
    """The ASGI messages the app sends for one POST to the OpenAI door (the server's side of the wire)."""
    raw = json.dumps(body).encode()
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": "/v1/chat/completions",
        "raw_path": b"/v1/chat/completions",
        "root_path": "",
        "query_string": b"",
        "headers": [(b"authorization", f"Bearer {KEY}".encode()), (b"content-length", str(len(raw)).encode())],
        "client": ("127.0.0.1", 1),
        "server": ("127.0.0.1", 2),
    }
    messages: list[dict[str, Any]] = []
    ended = asyncio.Event()
    received = False

    async def receive() -> dict[str, Any]:
        nonlocal received
        if not received:
            received = True
            return {"type": "http.request", "body": raw, "more_body": False}
        await ended.wait()  # as a server does: the disconnect once the response is over
        return {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        messages.append(message)
        if message["type"] == "http.response.body" and not message.get("more_body", False):
            ended.set()

    await app(scope, receive, send)
    return messages


@pytest.mark.parametrize(
    ("reply", "last"),
    [
        (Reply(text="abcdef", chunks=3), b"data: [DONE]\n\n"),
        (Reply(text="abcdef", chunks=3, drop_after=2), b'"code":"upstream_unavailable"}}\n\ndata: [DONE]\n\n'),
    ],
)
async def test_a_streams_last_bytes_go_out_with_the_end_of_the_body(reply: Reply, last: bytes) -> None:
    # The closing event the relay holds back (or the error event of a failed stream) is sent in the message
    # that ends the body (one write), and every event before it in its own message, as it came.
    with FakeUpstream() as up:
        up.script(reply)
        app = _forwarding_app(up)
        try:
            body = {"model": "companion", "stream": True, "messages": [{"role": "user", "content": "hi"}]}
            messages = await _door_messages(app, body)
        finally:
            await app.state.container.chat.aclose()
    assert messages[0]["type"] == "http.response.start" and messages[0]["status"] == 200
    bodies = messages[1:]
    assert [m.get("more_body", False) for m in bodies] == [True] * (len(bodies) - 1) + [False]
    assert bodies[-1]["body"].endswith(last)
    assert all(m["body"] for m in bodies)  # no empty write: the end of the body carries the last event
    assert b"".join(m["body"] for m in bodies).count(b"data: [DONE]") == 1


def test_the_doors_read_each_header_as_starlettes_headers_do() -> None:
    # _read_headers reads the chat headers in one pass: the first of a repeated x-engram-* header (what
    # `request.headers.get` gives), the last of a repeated anthropic-* one (what a dict of its items keeps).
    raw = [
        (b"x-engram-thread", b"t-1"),
        (b"anthropic-beta", b"one"),
        (b"x-engram-thread", b"t-2"),
        (b"x-engram-memory", b"off"),
        (b"anthropic-beta", b"two"),
        (b"anthropic-version", b"2023-06-01"),
        (b"x-other", b"x"),
    ]
    engram, forward = _read_headers({"type": "http", "headers": raw})
    headers = Headers(raw=raw)
    for name in ("x-engram-thread", "x-engram-memory", "x-engram-agent", "x-engram-history"):
        assert engram.get(name) == headers.get(name)
    assert forward == {k: v for k, v in headers.items() if k.startswith("anthropic-")}


@pytest.mark.parametrize(
    ("headers", "media_type"),
    [
        ({"x-engram-reason": "disabled", "cache-control": "no-cache", "x-accel-buffering": "no"}, "text/event-stream"),
        ({"X-Engram-History": "3"}, "text/event-stream; charset=latin-1"),
        ({"content-type": "text/event-stream"}, "text/event-stream"),
        ({}, "application/json"),
    ],
)
def test_a_streams_head_is_the_one_starlette_sends(headers: dict[str, str], media_type: str) -> None:
    # ChatDoors sends a streamed reply's head itself: the bytes StreamingResponse would have sent.
    from engram.entrypoints.http.streaming import stream_head
    from engram.services.chat.gateway import ChatReply
    from starlette.responses import StreamingResponse

    async def nothing() -> Any:
        yield b""

    reply = ChatReply(status=200, headers=headers, stream=nothing(), media_type=media_type)
    starlette = StreamingResponse(nothing(), status_code=200, headers=headers, media_type=media_type)
    assert stream_head(reply.headers, reply.media_type) == starlette.raw_headers


async def test_a_chat_turn_looks_its_key_up_once(monkeypatch: pytest.MonkeyPatch) -> None:
    # The body limit checks the key from the headers before the body is read (issue #23 item 3); the
    # door's authenticate takes that principal instead of looking the key up again. The rate limit is
    # still counted once per turn.
    from engram.domain.access import KeyRing

    looked_up: list[str | None] = []
    real = KeyRing.authenticate

    def counting(self: KeyRing, token: str | None) -> Any:
        looked_up.append(token)
        return real(self, token)

    monkeypatch.setattr(KeyRing, "authenticate", counting)
    with FakeUpstream() as up:
        up.script(Reply(text="abcdef", chunks=3))
        app = _forwarding_app(up)
        checked: list[str] = []
        limits = app.state.container.limits
        real_check = limits.check

        def check(principal: Any, kind: str) -> None:
            checked.append(kind)
            real_check(principal, kind)

        monkeypatch.setattr(limits, "check", check)
        try:
            body = {"model": "companion", "stream": True, "messages": [{"role": "user", "content": "hi"}]}
            messages = await _door_messages(app, body)
        finally:
            await app.state.container.chat.aclose()
    assert messages[0]["status"] == 200
    assert looked_up == [KEY]
    assert checked == ["chat"]
