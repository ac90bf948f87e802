"""The process's container, as ``create_app`` left it on the app."""

from __future__ import annotations

from starlette.requests import HTTPConnection

from engram.bootstrap import Container

# The ASGI scope key under which ``EngramApp`` hands ``ChatDoors`` the door it matched for a POST (its
# wire, guide-dog, agent: ``chat.door_of``), so the path is matched once per chat turn.
DOOR_KEY = "engram.door"
# The scope key under which ``BodyLimitMiddleware`` leaves the principal of the API key it checked from the
# request's headers (before the body), so ``auth.authenticate`` does not look the same key up again.
KEY_PRINCIPAL = "engram.key_principal"


def container_of(request: HTTPConnection) -> Container:
    container: Container = request.app.state.container
    return container
