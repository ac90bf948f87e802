"""The process's container, as ``create_app`` left it on the app."""

from __future__ import annotations

from starlette.requests import HTTPConnection

from engram.bootstrap import Container


def container_of(request: HTTPConnection) -> Container:
    container: Container = request.app.state.container
    return container
