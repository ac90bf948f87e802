"""Paths other memory servers serve, answered as Engram's own (README, "Coming from Aelios").

Aelios users have these in scripts and client settings; each is rewritten to Engram's path before
routing, so it is the same handler with the same auth, scopes and rate limit, and it is left out of
the OpenAPI document (the canonical path is there). A path is an alias as a whole or up to a ``/``:
``/v1/memory`` and ``/v1/memory/{id}`` are aliases, ``/v1/memory_boot`` is Engram's own route.
"""

from __future__ import annotations

from starlette.types import ASGIApp, Receive, Scope, Send

# their path -> Engram's (a prefix: the rest of the path is kept)
PATH_ALIASES: tuple[tuple[str, str], ...] = (
    ("/v1/memory", "/v1/memories"),
    ("/v1/messages/ingest", "/v1/ingest/messages"),
    ("/memory-mcp", "/mcp"),
    ("/memory-admin", "/admin"),
    ("/api/memories/export", "/v1/export"),
)


def alias_of(path: str) -> tuple[str, str] | None:
    """The ``(their prefix, Engram's prefix)`` pair ``path`` falls under, if any."""
    for theirs, ours in PATH_ALIASES:
        if path == theirs or path.startswith(theirs + "/"):
            return theirs, ours
    return None


def canonical_path(path: str) -> str:
    """Engram's path for ``path`` (``path`` itself when it is no alias)."""
    pair = alias_of(path)
    return path if pair is None else pair[1] + path[len(pair[0]) :]


class PathAliasMiddleware:
    """Rewrites an aliased request path (``PATH_ALIASES``) before anything else sees it."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        pair = alias_of(scope.get("path", "")) if scope["type"] == "http" else None
        if pair is not None:
            theirs, ours = pair
            raw = scope.get("raw_path") or scope["path"].encode()
            scope = {
                **scope,
                "path": ours + scope["path"][len(theirs) :],
                "raw_path": ours.encode() + raw[len(theirs.encode()) :],
            }
        await self.app(scope, receive, send)
