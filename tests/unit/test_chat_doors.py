"""The chat doors' fast path (``ChatDoors``, served by ``EngramApp`` ahead of FastAPI's stack) takes
exactly the POST paths the chat routes declare, so a request is answered by the same handler whichever
way it arrives, and with the same edge rules (request id, key check from the headers, body limit)."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from engram.bootstrap import build_container
from engram.entrypoints.http import hand_edits
from engram.entrypoints.http.aliases import alias_of, canonical_path
from engram.entrypoints.http.app import create_app
from engram.entrypoints.http.chat import door_of, router
from engram.settings import Settings
from fastapi.routing import APIRoute

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
