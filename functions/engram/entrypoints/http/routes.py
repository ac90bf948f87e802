"""Every route module of the HTTP app, in mounting order, and the surfaces that serve it: the one place a
route module is mounted (docs/ARCHITECTURE.md, "One change, one place").

Each module exposes ``mount(app, container)``: a module of plain routes includes its router (under
``/v1`` where its paths are relative); one that holds state builds it there (the chat doors, the jobs'
schedule, the admin sessions, the MCP server). A module is imported only when ``ENGRAM_SURFACE`` serves
it, so the MCP function never loads the REST modules and the API function never loads the MCP SDK
(docs/aws.md, "Cold starts"; ``tests/integration/test_surfaces.py``). Order matters where paths overlap:
fixed paths (``curation``'s ``/memories/check``) before patterns (``memories``' ``/memories/{id}``).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from fastapi import FastAPI

from engram.bootstrap import Container

Surface = Literal["all", "api", "mcp"]
EVERY: frozenset[Surface] = frozenset({"all", "api", "mcp"})
REST: frozenset[Surface] = frozenset({"all", "api"})
MCP: frozenset[Surface] = frozenset({"all", "mcp"})


@dataclass(frozen=True)
class Mount:
    module: str  # under engram.entrypoints.http
    surfaces: frozenset[Surface]
    function: str = "mount"


MOUNTS: tuple[Mount, ...] = (
    Mount("rest", EVERY, "mount_public"),  # `/`, `/health`
    Mount("curation", REST),  # its fixed paths before `/memories/{id}`
    Mount("memories", REST),
    Mount("notes", REST),
    Mount("candidates", REST),
    Mount("rest", REST),  # ingest, stats
    Mount("transfer", REST),
    Mount("rest", REST, "mount_cache"),
    Mount("threads", REST),
    Mount("reminders", REST),
    Mount("runs", REST),  # the change journal (docs/journal.md)
    Mount("skills", REST),
    Mount("chat", REST),
    Mount("job_routes", REST),
    Mount("mcp", MCP),
    Mount("admin", REST),
)


def mount_all(app: FastAPI, container: Container, surface: Surface) -> None:
    """Mount every route module ``surface`` serves, in ``MOUNTS`` order."""
    for entry in MOUNTS:
        if surface in entry.surfaces:
            module = importlib.import_module(f"engram.entrypoints.http.{entry.module}")
            mount: Callable[[FastAPI, Container], None] = getattr(module, entry.function)
            mount(app, container)
