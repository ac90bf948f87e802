"""Where Claude prompt-cache markers go in a request, and writing them (pure; every wire that carries Claude).

One decision, two writers: ``plan_markers`` looks at a request's shape (how many tools and system
blocks, the messages as ``{"role", "content": [blocks]}``) and says which positions get a marker;
``place_cache_control`` writes them as Anthropic Messages ``cache_control`` fields (the chat gateway's
injection, ``services/chat/injection.py``) and ``place_cache_points`` as Bedrock Converse ``cachePoint``
blocks (``converse.openai_to_converse``).

The positions, at most four (Claude's limit):

- the last tool definition;
- the system anchor: the last system block (Engram's boot block when there is one);
- the tail: the last cacheable block of the message before the current user turn (the previous turn's
  end, the last point two consecutive requests share byte for byte);
- the bridge: the previous request's tail, two messages earlier, when the new turn added at least
  ``lookback`` blocks (Claude only looks back about 20 blocks from a marker for an earlier cache entry).

The current user turn, which carries the per-turn memory patch, is never marked, nor are the system
messages some clients send after it (they follow the patch).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

_UNCACHEABLE = frozenset({"thinking", "redacted_thinking"})

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


TRAILING_ROLES = frozenset({"system", "developer"})


def current_turn(messages: Sequence[Mapping[str, Any]]) -> int | None:
    """The index of the message the current turn ends with: the last one past the system/developer
    messages a client puts after it (Claude Code 2.1 sends ``[..., user, system]``); None if none."""
    index = len(messages) - 1
    while index >= 0 and messages[index].get("role") in TRAILING_ROLES:
        index -= 1
    return index if index >= 0 else None


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
    # The current turn is the last user message (system messages after it aside); the tail is the
    # message before it. Messages after the current turn follow the per-turn patch: never marked.
    turn = current_turn(messages)
    n = -1 if turn is None else turn + 1
    if n >= 2 and messages[n - 1].get("role") == "user":
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


# -- Anthropic Messages: cache_control ---------------------------------------------------------------
def _anthropic_cacheable(block: Any) -> bool:
    """A block that may carry ``cache_control`` (not thinking, not an empty text)."""
    if not isinstance(block, dict) or block.get("type") in _UNCACHEABLE:
        return False
    return not (block.get("type") == "text" and not block.get("text"))


def place_cache_control(body: dict[str, Any], cache: CachePolicy) -> int:
    """Strip the client's markers and write ours where ``plan_markers`` says (<= 4)."""
    tools: list[dict[str, Any]] = body.get("tools") or []
    system: list[dict[str, Any]] = body.get("system") or []
    messages: list[dict[str, Any]] = body.get("messages") or []
    for item in tools:
        item.pop("cache_control", None)
    for block in system:
        block.pop("cache_control", None)
    for msg in messages:
        for block in msg["content"]:
            block.pop("cache_control", None)
            if block.get("type") == "tool_result" and isinstance(block.get("content"), list):
                block["content"] = [
                    {k: v for k, v in b.items() if k != "cache_control"} if isinstance(b, dict) else b
                    for b in block["content"]
                ]
    plan = plan_markers(
        tools=len(tools), system=len(system), messages=messages, cacheable=_anthropic_cacheable, lookback=cache.lookback
    )
    marker = cache.marker()
    if plan.last_tool:
        tools[-1]["cache_control"] = dict(marker)
    if plan.system:
        system[-1]["cache_control"] = dict(marker)
    for at_message, at_block in plan.in_messages:
        messages[at_message]["content"][at_block]["cache_control"] = dict(marker)
    return plan.count


def count_cache_control(body: dict[str, Any]) -> int:
    """Every ``cache_control`` in a Messages request (tests and sanity checks)."""
    count = sum(1 for t in body.get("tools") or [] if "cache_control" in t)
    system = body.get("system")
    if isinstance(system, list):
        count += sum(1 for b in system if "cache_control" in b)
    for msg in body.get("messages") or []:
        content = msg.get("content")
        if isinstance(content, list):
            for block in content:
                count += int("cache_control" in block)
                if block.get("type") == "tool_result" and isinstance(block.get("content"), list):
                    count += sum(1 for b in block["content"] if isinstance(b, dict) and "cache_control" in b)
    return count


# -- OpenAI chat completions: markers only Claude reads ------------------------------------------------
def reads_cache_control(model: str) -> bool:
    """Whether an OpenAI-compatible upstream's model takes ``cache_control`` parts: Claude behind a
    router (OpenRouter's ``anthropic/claude-*``) does; other models may refuse the field or lose context."""
    return "claude" in model.lower()


def strip_cache_control(body: dict[str, Any]) -> dict[str, Any]:
    """An OpenAI chat request without the client's ``cache_control`` fields (top level, messages, content
    parts, tools); the client's body is left as it was."""

    def clean(item: Any) -> Any:
        return {k: v for k, v in item.items() if k != "cache_control"} if isinstance(item, dict) else item

    out: dict[str, Any] = clean(body)
    messages = []
    for message in body.get("messages") or []:
        message = clean(message)
        if isinstance(message, dict) and isinstance(message.get("content"), list):
            message["content"] = [clean(part) for part in message["content"]]
        messages.append(message)
    if "messages" in body:
        out["messages"] = messages
    if isinstance(body.get("tools"), list):
        out["tools"] = [clean(tool) for tool in body["tools"]]
    return out


# -- Bedrock Converse: cachePoint ------------------------------------------------------------------------
def supports_prompt_cache(model_id: str) -> bool:
    """Anthropic Claude on Bedrock (``anthropic.claude-*``, also behind ``us.``/``eu.``/``global.`` inference
    profiles and their ARNs). An application inference profile ARN does not name its model: no cache points."""
    return "anthropic.claude" in model_id.lower()


def _converse_cacheable(block: Any) -> bool:
    """A content block a ``cachePoint`` may follow (not reasoning, not a cache point, not an empty text)."""
    if not isinstance(block, dict) or "reasoningContent" in block or "cachePoint" in block:
        return False
    return not ("text" in block and not block["text"])


def cache_point(ttl: str) -> dict[str, Any]:
    """A Converse ``cachePoint`` block. ``5m`` is Bedrock's default and is not sent (older Claude models
    take no ``ttl`` field); ``1h`` is sent as ``ttl`` (Claude 4.5 models and later)."""
    point: dict[str, Any] = {"type": "default"}
    if ttl == "1h":
        point["ttl"] = "1h"
    return {"cachePoint": point}


def place_cache_points(request: dict[str, Any], *, ttl: str = "5m", lookback: int = LOOKBACK_BLOCKS) -> int:
    """Add ``cachePoint`` blocks to a Converse request where ``plan_markers`` says; returns how many."""
    tools: list[dict[str, Any]] = (request.get("toolConfig") or {}).get("tools") or []
    system: list[dict[str, Any]] = request.get("system") or []
    messages: list[dict[str, Any]] = request.get("messages") or []
    plan = plan_markers(
        tools=len(tools), system=len(system), messages=messages, cacheable=_converse_cacheable, lookback=lookback
    )
    if plan.last_tool:
        tools.append(cache_point(ttl))
    if plan.system:
        system.append(cache_point(ttl))
    for message, block in plan.in_messages:  # last first: an insertion leaves earlier positions valid
        messages[message]["content"].insert(block + 1, cache_point(ttl))
    return plan.count


def count_cache_points(request: dict[str, Any]) -> int:
    """Every ``cachePoint`` in a Converse request (tests and sanity checks)."""
    tools = (request.get("toolConfig") or {}).get("tools") or []
    blocks = [*tools, *(request.get("system") or [])]
    for message in request.get("messages") or []:
        blocks += message.get("content") or []
    return sum(1 for block in blocks if isinstance(block, dict) and "cachePoint" in block)
