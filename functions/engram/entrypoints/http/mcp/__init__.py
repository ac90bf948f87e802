"""The MCP server at `/mcp`: Engram's memory as tools for Claude Code, Codex, Cursor and any MCP client.

This module builds the server and mounts it; the tools live one module per concern (``memories``,
``notes``, ``conversations``, ``reminders``, ``overview``, ``skills``; what they share: ``toolkit``);
the host/auth gate in front of the SDK: ``gate``.

Built on the official `mcp` SDK (2.x): streamable HTTP, stateless, JSON responses. Every tool is one
call into the same services as the REST API and needs the scope of its REST twin. Requests pass a gate
first (host allowlist, API key -> Principal, 401 JSON before any MCP handling); tools read the
principal from the ASGI scope, so a key only ever touches its own namespace.

Error mapping (the MCP row of the house table): Engram errors a model can fix (not found, conflict,
invalid input, missing scope, too long) -> ``ToolError`` with the message; an argument no tool takes
-> a ``ToolError`` listing the accepted ones (``compat``: other systems' names are read as Engram's);
argument-schema failures and unknown tools -> the SDK's own tool errors; anything else -> the SDK's generic
"Error executing tool X" (logged with its traceback); the server keeps running.
"""

from __future__ import annotations

import logging
import threading

from fastapi import FastAPI
from starlette.concurrency import run_in_threadpool
from starlette.types import ASGIApp, Receive, Scope, Send

from engram import __version__
from engram.bootstrap import Container
from engram.entrypoints.http.mcp import conversations, curation, memories, notes, overview, reminders, runs, skills
from engram.entrypoints.http.mcp.compat import StrictServer
from engram.entrypoints.http.mcp.gate import McpGate, security_settings

PATH = "/mcp"

INSTRUCTIONS = """\
Engram is the user's long-term memory, shared across chat windows, clients and models.
- At the start of a session call memory_boot once: who the user is, pinned facts, the digest, glossary.
- Before answering anything that may depend on the user's history, preferences or projects, call
  memory_recall with the user's request as the query (it returns ready-to-use context text).
- Save durable facts: memory_upsert when the fact has a natural key (home:city, pref:editor) so a
  later change replaces it; memory_remember for everything else (near-duplicates are merged).
- Correct a wrong or outdated memory with memory_supersede (keeps history) or memory_update (in place).
- Never store secrets (passwords, API keys, tokens).
- Skills: the user's playbooks (SKILL.md). skill_search or skill_list finds one, skill_get loads it
  when a task calls for it; skill_import saves a new or changed one.
"""

# The order tools are listed in (tools/list): each module registers a contiguous run of it.
TOOL_MODULES = (memories, curation, notes, conversations, reminders, runs, overview, skills)


def build_server(container: Container, *, tools: bool = True) -> StrictServer:
    """An MCP server whose tools call ``container``'s services (``StrictServer``: other systems' argument
    names read as Engram's, unknown ones refused; ``compat``); with ``tools=False``, none registered yet
    (``ToolsOnFirstRequest``)."""
    # MCPServer() calls logging.basicConfig(); logging belongs to the entry point, so undo it.
    root = logging.getLogger()
    root_handlers, root_level = list(root.handlers), root.level
    server = StrictServer(
        "engram", title="Engram memory", version=__version__, instructions=INSTRUCTIONS, log_level="WARNING"
    )
    root.handlers[:] = root_handlers
    root.setLevel(root_level)
    if tools:
        register_tools(server)
    return server


def register_tools(server: StrictServer) -> None:
    for module in TOOL_MODULES:
        module.TOOLS.register(server)


class ToolsOnFirstRequest:
    """The SDK's handler, with the tools registered on the first request it gets (once, under a lock),
    not when the app is built: the SDK builds a pydantic model and JSON schemas per tool (39 tools), a
    large part of the MCP function's own init (bench/README.md, "Cold start"). Every answer a client
    gets (tools/list, tools/call, and the SDK's check of a call's arguments) comes from a request, so
    it sees the same tools; a request the gate refuses registers nothing."""

    def __init__(self, app: ASGIApp, server: StrictServer) -> None:
        self.app = app
        self.server = server
        self._registered = False
        self._lock = threading.Lock()

    def register(self) -> None:
        if not self._registered:
            with self._lock:
                if not self._registered:
                    register_tools(self.server)
                    self._registered = True

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if not self._registered:  # on a worker thread: the event loop serves the other requests meanwhile
            await run_in_threadpool(self.register)
        await self.app(scope, receive, send)


def mount(app: FastAPI, container: Container) -> None:
    """Serve the MCP server at ``/mcp`` and run its session manager inside the host app's lifespan."""
    settings = container.settings
    server = build_server(container, tools=False)
    hosts = list(settings.mcp_allowed_hosts)
    server.streamable_http_app(
        streamable_http_path=PATH, stateless_http=True, json_response=True, transport_security=security_settings(hosts)
    )
    manager = server.session_manager
    tools = ToolsOnFirstRequest(manager.handle_request, server)
    app.state.register_mcp_tools = tools.register  # what warm_first_use calls (entrypoints/http/app.py)
    gate = McpGate(
        tools,
        container.keys,
        hosts=hosts,
        allow_query_token=settings.mcp_allow_query_token,
        limits=container.limits,
    )
    # Routes (not a Mount) so `/mcp` itself answers without a redirect to `/mcp/`.
    # The gate is an ASGI app, which a Route serves as such (Starlette's stubs only name request handlers).
    app.add_route(PATH, gate, include_in_schema=False)  # type: ignore[arg-type]
    app.add_route(PATH + "/", gate, include_in_schema=False)  # type: ignore[arg-type]
    app.state.startup_hooks.append(lambda _app: manager.run())
    app.state.mcp_server = server
