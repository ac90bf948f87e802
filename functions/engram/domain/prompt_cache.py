"""Where Claude prompt-cache markers go in a request (pure; shared by every wire that carries Claude).

One decision, several writers: ``plan_markers`` looks at a request's shape (how many tools and system
blocks, the messages as ``{"role", "content": [blocks]}``) and says which positions get a marker; the
Anthropic Messages writer (``services/injection.py``) turns that into ``cache_control`` fields and the
Bedrock Converse writer (``adapters/llm/converse.py``) into ``cachePoint`` blocks.

The positions, at most four (Claude's limit):

- the last tool definition;
- the system anchor: the last system block (Engram's boot block when there is one);
- the tail: the last cacheable block of the message before the current user turn (the previous turn's
  end, the last point two consecutive requests share byte for byte);
- the bridge: the previous request's tail, two messages earlier, when the new turn added at least
  ``lookback`` blocks (Claude only looks back about 20 blocks from a marker for an earlier cache entry).

The current user turn, which carries the per-turn memory patch, is never marked.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

LOOKBACK_BLOCKS = 20
MAX_MARKERS = 4


@dataclass(frozen=True)
class CachePolicy:
    """Claude prompt-cache markers: ``ttl`` ``5m`` or ``1h``; ``lookback`` blocks before a bridge is added."""

    ttl: Literal["5m", "1h"] = "5m"
    lookback: int = LOOKBACK_BLOCKS

    def marker(self) -> dict[str, str]:
        """The Anthropic ``cache_control`` value."""
        return {"type": "ephemeral", "ttl": self.ttl}


@dataclass(frozen=True)
class MarkerPlan:
    """Which positions get a marker; ``tail``/``bridge`` are ``(message index, block index)``."""

    last_tool: bool = False
    system: bool = False
    tail: tuple[int, int] | None = None
    bridge: tuple[int, int] | None = None

    @property
    def count(self) -> int:
        return int(self.last_tool) + int(self.system) + int(self.tail is not None) + int(self.bridge is not None)

    @property
    def in_messages(self) -> list[tuple[int, int]]:
        """Message positions, last first (so a writer that inserts blocks keeps earlier indices valid)."""
        return [spot for spot in (self.tail, self.bridge) if spot is not None]


def _last_cacheable(blocks: Sequence[Any], cacheable: Callable[[Any], bool]) -> int | None:
    for index in range(len(blocks) - 1, -1, -1):
        if cacheable(blocks[index]):
            return index
    return None


def plan_markers(
    *,
    tools: int,
    system: int,
    messages: Sequence[Mapping[str, Any]],
    cacheable: Callable[[Any], bool],
    lookback: int = LOOKBACK_BLOCKS,
) -> MarkerPlan:
    """Where the (at most four) markers go. ``tools``/``system``: how many of each the request has;
    ``messages``: ``{"role", "content": [blocks]}`` with roles alternating; ``cacheable(block)``: whether
    a marker may sit on (or right after) that block on this wire."""
    tail: tuple[int, int] | None = None
    bridge: tuple[int, int] | None = None
    n = len(messages)
    # The current turn is the last message (a user turn); the tail is the message before it.
    if n >= 2 and messages[-1].get("role") == "user":
        index = _last_cacheable(messages[n - 2]["content"], cacheable)
        if index is not None:
            tail = (n - 2, index)
        # The previous request's tail was two messages earlier. If this turn added more blocks than
        # Claude looks back from a marker, repeat that tail as a bridge so it is still read.
        if n >= 4 and tail is not None:
            added = len(messages[n - 3]["content"]) + len(messages[n - 2]["content"])
            if added >= lookback:
                index = _last_cacheable(messages[n - 4]["content"], cacheable)
                if index is not None:
                    bridge = (n - 4, index)
    return MarkerPlan(last_tool=tools > 0, system=system > 0, tail=tail, bridge=bridge)
