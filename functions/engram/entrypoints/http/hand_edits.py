"""Hand edits are runs of the change journal (docs/journal.md): each REST request or panel action that
may write (any method but GET, HEAD and OPTIONS) is one run of kind ``edit``, recorded only if it changed
a row, so a memory's history lists a person's edits beside the jobs' changes and any of them can be
undone like a job run. MCP tool calls are runs of their own (``mcp/toolkit.py``).

Paths whose writes are not hand edits pass through: the chat doors (a chat turn's own writes), jobs and
imports (runs of their own), the undo of a run (a run of its own), and the panel's login.
"""

from __future__ import annotations

from starlette.types import ASGIApp, Receive, Scope, Send

from engram.services.library.journal import Journal

_READS = frozenset({"GET", "HEAD", "OPTIONS"})
_NOT_EDITS = (
    "/v1/chat/",
    "/v1/messages",
    "/v1/responses",
    "/v1/guide-dog/",
    "/agents/",
    "/v1/ingest/",
    "/v1/jobs",
    "/v1/runs",
    "/v1/import",
    "/v1/cache/",
    "/mcp",
    "/admin/login",
    "/admin/logout",
)


class HandEditMiddleware:
    """Opens an ``edit`` run around each request that may write; pure ASGI (no per-chunk cost)."""

    def __init__(self, app: ASGIApp, journal: Journal) -> None:
        self.app = app
        self.journal = journal

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = str(scope.get("path", ""))
        if scope["type"] != "http" or scope["method"] in _READS or path.startswith(_NOT_EDITS):
            await self.app(scope, receive, send)
            return
        headers = dict(scope["headers"])
        # The panel calls the same routes with its session cookie, without a key.
        keyed = b"authorization" in headers or b"x-api-key" in headers
        source = "rest" if keyed else "panel"
        detail = {"route": f"{scope['method']} {path}"[:300]}
        with self.journal.run("edit", source=source, detail=detail, always_record=False):
            await self.app(scope, receive, send)
