"""A scripted in-process ``ChatModel`` (tests only): replies come from a queue, prompts are recorded.

    model = ScriptedChatModel()
    model.script('{"memories": []}', UpstreamUnavailable("down"), lambda messages: "...")

Each ``complete`` takes the next scripted item: a string is returned, an exception is raised, a
callable gets the messages and returns the text. With the queue empty, ``default`` is returned
(``None``: the call fails the test).
"""

from __future__ import annotations

import json
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

Scripted = str | BaseException | Callable[[list[dict[str, Any]]], str]


@dataclass
class ModelCall:
    messages: list[dict[str, Any]]
    json_mode: bool
    max_tokens: int | None

    @property
    def system(self) -> str:
        return "\n".join(str(m["content"]) for m in self.messages if m["role"] == "system")

    @property
    def user(self) -> str:
        return "\n".join(str(m["content"]) for m in self.messages if m["role"] == "user")


@dataclass
class ScriptedChatModel:
    default: str | None = None
    model_id: str = "scripted-fake"
    calls: list[ModelCall] = field(default_factory=list)
    _queue: deque[Scripted] = field(default_factory=deque)

    def script(self, *items: Scripted) -> ScriptedChatModel:
        self._queue.extend(items)
        return self

    def script_json(self, *objects: Any) -> ScriptedChatModel:
        return self.script(*(json.dumps(o, ensure_ascii=False) for o in objects))

    @property
    def pending(self) -> int:
        return len(self._queue)

    async def complete(
        self,
        messages: Sequence[dict[str, Any]],
        *,
        json_mode: bool = False,
        max_tokens: int | None = None,
        temperature: float | None = None,
    ) -> str:
        copied = [dict(m) for m in messages]
        self.calls.append(ModelCall(copied, json_mode, max_tokens))
        if not self._queue:
            if self.default is None:
                raise AssertionError("the scripted model was called more often than scripted")
            return self.default
        item = self._queue.popleft()
        if isinstance(item, BaseException):
            raise item
        if callable(item):
            return item(copied)
        return item
