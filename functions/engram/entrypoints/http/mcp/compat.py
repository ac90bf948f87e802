"""Tool calls written for other memory servers, read as Engram's (README, "Coming from ...").

The SDK's argument models ignore a name they do not know (pydantic's default ``extra="ignore"``), so a
call written for Aelios or cf-agent-memory would run with that argument silently dropped: a `key` not
keying, a `kind` not filtering, every `offset` page being page 1. ``StrictServer.call_tool`` reads each
call before the SDK does:

- an argument another system names differently is renamed (``ALIASES``: `key` -> `fact_key`,
  `kind`/`type` -> `type`/`types`, `limit` -> `top_k`, `min_score` -> `min_relevance`, `old_id` -> `id`);
- a value in another system's form is converted (``VALUES``: one status or type where a list is taken;
  cf-agent-memory's layers `l0`..`l3`; its dotted keys, ``dotted_key``);
- a tool another system names differently runs as Engram's (``RENAMED``: `memory_forget`;
  ``KEYED``: `memory_remember` with a key is `memory_upsert`), one that was retired says which tool to
  use (``RETIRED``: `memory_create`);
- any argument still unknown is refused with a tool error that lists the accepted ones.

The published input schemas stay Engram's own: these names are accepted, not advertised, so a model
reading tools/list sees one name per argument.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import CallToolResult, InputRequiredResult

# cf-agent-memory's layer field (l0 raw .. l3 core) in Engram's three layers.
CF_LAYERS = {"l0": "fragment", "l1": "fragment", "l2": "event", "l3": "core"}

_SEARCH = {"limit": "top_k", "min_score": "min_relevance", "type": "types", "kind": "types"}
ALIASES: Mapping[str, Mapping[str, str]] = {
    "memory_search": _SEARCH,
    "memory_recall": _SEARCH,
    "memory_list": {"type": "types", "kind": "types", "key": "fact_key"},
    "memory_upsert": {"key": "fact_key", "kind": "type"},
    "memory_remember": {"kind": "type"},
    "memory_update": {"key": "fact_key", "kind": "type"},
    "memory_supersede": {"old_id": "id", "key": "fact_key", "kind": "type"},
    "conversation_search": {"limit": "fragments", "min_score": "min_relevance"},
}
RENAMED: Mapping[str, str] = {"memory_forget": "memory_delete"}  # cf-agent-memory
# cf-agent-memory's memory_remember takes an optional key: with one, a later write of the key replaces
# the fact, which is Engram's memory_upsert (memory_remember itself takes no key: docs/mcp.md).
KEYED: Mapping[str, str] = {"memory_remember": "memory_upsert"}
RETIRED: Mapping[str, str] = {
    "memory_create": "memory_create was retired (as in Aelios v2): use memory_upsert with a fact_key "
    "(a later write of the key replaces the fact), or memory_remember for a memory without one",
}

_DOTTED = re.compile(r"^[A-Za-z][A-Za-z0-9_]*\.")


def dotted_key(key: Any) -> Any:
    """cf-agent-memory's dotted key (`project.database`) as Engram's `category:slug` (`project:database`):
    the first dot becomes the colon. A key with a colon already, or without a dot, is left for the
    fact-key rule to accept or refuse (domain/policies.normalize_fact_key)."""
    if isinstance(key, str) and ":" not in key and _DOTTED.match(key.strip()):
        return key.strip().replace(".", ":", 1)
    return key


def _listed(value: Any) -> Any:
    return [value] if isinstance(value, str) else value


def _layer(value: Any) -> Any:
    return CF_LAYERS.get(value.strip().lower(), value) if isinstance(value, str) else value


# Converters per tool and Engram argument name, applied to the value whichever name it came under.
_LAYER: Mapping[str, Callable[[Any], Any]] = {"layer": _layer}
VALUES: Mapping[str, Mapping[str, Callable[[Any], Any]]] = {
    "memory_list": {"types": _listed, "status": _listed, "layer": _layer},
    "memory_search": {"types": _listed},
    "memory_recall": {"types": _listed},
    "memory_upsert": _LAYER,
    "memory_remember": _LAYER,
    "memory_update": _LAYER,
    "memory_supersede": _LAYER,
}


def translate(tool: str, arguments: Mapping[str, Any], accepted: frozenset[str]) -> dict[str, Any]:
    """``arguments`` in Engram's names and forms for ``tool``; ``ToolError`` on an unknown or doubled one."""
    aliases = ALIASES.get(tool, {})
    values = VALUES.get(tool, {})
    out: dict[str, Any] = {}
    given_as: dict[str, str] = {}
    unknown: list[str] = []
    for name, value in arguments.items():
        target = name if name in accepted else aliases.get(name)
        if target is None or target not in accepted:
            unknown.append(name)
            continue
        if target in out:
            raise ToolError(f"{tool}: pass either {given_as[target]} or {name}, not both")
        given_as[target] = name
        if name == "key":
            value = dotted_key(value)
        out[target] = values[target](value) if target in values else value
    if unknown:
        raise ToolError(_unknown_message(tool, unknown, accepted, aliases))
    return out


def _unknown_message(tool: str, unknown: list[str], accepted: frozenset[str], aliases: Mapping[str, str]) -> str:
    names = ", ".join(repr(n) for n in sorted(unknown))
    also = [f"{theirs} (= {ours})" for theirs, ours in sorted(aliases.items()) if ours in accepted]
    text = f"{tool} has no argument {names}. Accepted: {', '.join(sorted(accepted)) or 'none'}"
    return text + (f"; also read: {', '.join(also)}" if also else "")


class StrictServer(MCPServer):
    """``MCPServer`` that reads other systems' tool calls as Engram's and refuses unknown arguments."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._accepted: dict[str, frozenset[str]] = {}

    async def call_tool(
        self, name: str, arguments: dict[str, Any], context: Context[Any, Any] | None = None
    ) -> CallToolResult | InputRequiredResult:
        if name in RETIRED:
            raise ToolError(RETIRED[name])
        name = RENAMED.get(name, name)
        if name in KEYED and ("key" in arguments or "fact_key" in arguments):
            name = KEYED[name]
        accepted = await self._accepted_arguments(name)
        if accepted is not None:
            arguments = translate(name, arguments, accepted)
        return await super().call_tool(name, arguments, context)

    async def _accepted_arguments(self, name: str) -> frozenset[str] | None:
        """The argument names of a tool's published input schema (``None``: no such tool, the SDK says so)."""
        if not self._accepted:
            for tool in await self.list_tools():
                self._accepted[tool.name] = frozenset((tool.input_schema.get("properties") or {}).keys())
        return self._accepted.get(name)
