"""The chat doors' fast path (``ChatDoorsMiddleware``) takes exactly the POST paths the chat routes
declare, so a request is answered by the same handler whichever way it arrives."""

from __future__ import annotations

import pytest
from engram.entrypoints.http.chat import door_of, router
from fastapi.routing import APIRoute


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
