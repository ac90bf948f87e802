"""What every MCP tool module shares: scopes, tool annotations, argument types, the caller check, the error
mapping (the MCP row of the house table) and the JSON shapes of rows.

Argument types live at module level: the SDK evaluates a tool's annotations against its module's globals,
so a tool module imports the types it names.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from datetime import datetime
from typing import Annotated, Any, Literal, TypeVar, cast

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import ToolAnnotations
from pydantic import AfterValidator, Field, ValidationError
from pydantic_core import to_jsonable_python
from starlette.requests import Request

from engram.bootstrap import Container
from engram.domain.access import Principal
from engram.domain.errors import EngramError, Forbidden, is_version_conflict
from engram.domain.models import Memory, MemoryLayer, MemoryType
from engram.domain.policies import MAX_CONTENT_CHARS, MAX_TAGS, instant_in_range
from engram.entrypoints.http.state import container_of as request_container
from engram.services.library.memories import WriteResult

PRINCIPAL_KEY = "engram.principal"  # where the gate leaves the Principal in the ASGI scope

READ, WRITE, EXPORT = "memory:read", "memory:write", "export:read"

READ_ONLY = ToolAnnotations(read_only_hint=True, destructive_hint=False, open_world_hint=False)
WRITES = ToolAnnotations(read_only_hint=False, destructive_hint=False, open_world_hint=False)
DESTROYS = ToolAnnotations(read_only_hint=False, destructive_hint=True, open_world_hint=False)

MemoryId = Annotated[
    str, Field(min_length=1, max_length=200, description="A memory id (`mem_...`) from search, list or a write.")
]
Content = Annotated[
    str,
    Field(
        min_length=1,
        max_length=MAX_CONTENT_CHARS,
        description="One self-contained statement, written so it makes sense without the conversation "
        '("The user\'s cat is called Mochi", not "it is Mochi").',
    ),
]
FactKey = Annotated[
    str,
    Field(
        min_length=3,
        max_length=161,
        description="Stable key `category:slug`, lower case (e.g. `home:city`, `pref:editor`, `project:engram_stack`). "
        "At most one active memory holds a key; writing the key again updates that fact.",
    ),
]
Type = Annotated[MemoryType, Field(description="Kind of memory (default `fact`).")]
Version = Annotated[
    int,
    Field(
        ge=1,
        description="The memory's `version` as you last read it: the change is refused if the memory changed "
        "since (then read it again). Leave out to change the memory as it is now.",
    ),
]
Layer = Annotated[MemoryLayer, Field(description="`fragment` (default), `event` or `core` (always relevant).")]
Importance = Annotated[float, Field(ge=0.0, le=1.0, description="How much this matters, 0-1 (default 0.5).")]
Confidence = Annotated[float, Field(ge=0.0, le=1.0, description="How sure you are, 0-1 (default 0.8).")]
Tags = Annotated[
    list[Annotated[str, Field(min_length=1, max_length=64)]],
    Field(max_length=MAX_TAGS, description="Short labels for filtering."),
]
Query = Annotated[str, Field(min_length=1, max_length=8000, description="What to look for, in natural language.")]
TopK = Annotated[int, Field(ge=1, le=50, description="How many memories to return (default: the server's top_k).")]
Types = Annotated[list[MemoryType], Field(max_length=20, description="Only these memory types (empty: all).")]
MinRelevance = Annotated[
    float,
    Field(
        ge=0,
        le=1,
        description="Leave out hits whose relevance (0-1, estimated probability that the memory helps) is "
        "below this. memory_search default 0 (everything); memory_recall default: the server's floor.",
    ),
]
Status = Literal["active", "superseded", "archived", "deleted", "expired", "all"]

RemindAt = Annotated[
    datetime,
    Field(description="When to remind, ISO 8601 with the user's UTC offset (e.g. `2026-05-01T09:00:00+02:00`)."),
    AfterValidator(instant_in_range),
]

_F = TypeVar("_F", bound=Callable[..., Any])


class ToolList:
    """A tool module's tools, in the order they are listed (``tools/list``): each is a module-level
    function decorated ``@TOOLS.tool(annotations)``; ``register`` puts them on a server. A tool reaches
    the services through ``container_of(ctx)`` and its caller through ``caller(ctx, scope)``."""

    def __init__(self) -> None:
        self._tools: list[tuple[Callable[..., Any], ToolAnnotations]] = []

    def tool(self, annotations: ToolAnnotations) -> Callable[[_F], _F]:
        """Add the decorated function as a tool named after it (unchanged: tests may call it directly)."""

        def add(fn: _F) -> _F:
            self._tools.append((fn, annotations))
            return fn

        return add

    def register(self, server: MCPServer) -> None:
        """Every tool on ``server``, with the error mapping applied."""
        for fn, marks in self._tools:
            call = model_errors(fn) if marks is READ_ONLY else hand_edit(model_errors(fn))
            server.add_tool(call, name=fn.__name__, annotations=marks, structured_output=True)


def container_of(ctx: Context) -> Container:
    """The services of the process serving this call (the app's container, as for a REST request)."""
    request = ctx.request_context.request
    if not isinstance(request, Request):
        raise ToolError("not authenticated: send 'Authorization: Bearer <key>'")
    return request_container(request)


def aware(when: datetime | None) -> datetime | None:
    """A reminder time needs its zone: a naive one is refused rather than guessed."""
    if when is not None and when.tzinfo is None:
        raise ToolError("remind_at/until needs a UTC offset, e.g. 2026-05-01T09:00:00+02:00")
    return when


def caller(ctx: Context, scope: str) -> Principal:
    """The caller, who must hold ``scope``; a missing scope is a tool error that names it."""
    request = ctx.request_context.request
    principal = request.scope.get(PRINCIPAL_KEY) if isinstance(request, Request) else None
    if not isinstance(principal, Principal):
        raise ToolError("not authenticated: send 'Authorization: Bearer <key>'")
    try:
        principal.require(scope)
    except Forbidden as exc:
        raise ToolError(exc.message) from exc
    return principal


def model_errors(fn: _F) -> _F:
    """Turn Engram errors and request-model validation errors into tool errors the model can act on."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except EngramError as exc:
            if is_version_conflict(exc):
                raise ToolError(f"{exc.message}; read it again (memory_get) and decide on what it says now") from exc
            raise ToolError(exc.message) from exc
        except ValidationError as exc:
            first = exc.errors()[0] if exc.errors() else {"loc": (), "msg": str(exc)}
            where = ".".join(str(p) for p in first.get("loc", ()))
            raise ToolError(f"{where}: {first['msg']}" if where else str(first["msg"])) from exc

    return cast(_F, wrapper)  # functools.wraps keeps the signature the SDK reads


def hand_edit(fn: _F) -> _F:
    """A tool call that may write is a hand edit: one ``edit`` run of the change journal, recorded if it
    changed a row (docs/journal.md; the HTTP routes' runs: ``entrypoints/http/hand_edits.py``)."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        ctx = kwargs.get("ctx", args[0] if args else None)
        if not isinstance(ctx, Context):  # not a served call (a test calling the function): no run
            return fn(*args, **kwargs)
        journal = container_of(ctx).journal
        with journal.run("edit", source="mcp", detail={"tool": fn.__name__}, always_record=False):
            return fn(*args, **kwargs)

    return cast(_F, wrapper)  # functools.wraps keeps the signature the SDK reads


def memory_json(memory: Memory) -> dict[str, Any]:
    return dict(memory.model_dump(mode="json", exclude={"namespace", "index_ref"}))


def written_json(result: WriteResult) -> dict[str, Any]:
    return {
        "memory": memory_json(result.memory),
        "action": result.action,
        "created": result.created,
        "reason": result.reason,
        "superseded": memory_json(result.previous) if result.previous else None,
    }


def jsonable(value: Any) -> Any:
    return to_jsonable_python(value, exclude_none=False)


def drop_namespace(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: drop_namespace(v) for k, v in value.items() if k != "namespace"}
    if isinstance(value, list):
        return [drop_namespace(v) for v in value]
    return value
