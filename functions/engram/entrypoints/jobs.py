"""Run one job to completion from synchronous code (CLI, Lambda handlers): plain functions that
return JSON-serializable dicts.

Async jobs run on one event loop kept per container, so a warm Lambda reuses it (and the HTTP
client the model adapter opened on it) across invocations instead of binding a client to a closed loop.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")

_LOOP_KEY = "jobs_loop"


def _run(container: Any, coro: Coroutine[Any, Any, T]) -> T:
    loop = container.extras.get(_LOOP_KEY)
    if loop is None or loop.is_closed():
        loop = asyncio.new_event_loop()
        container.extras[_LOOP_KEY] = loop
        container._closers.insert(0, loop.close)
    return loop.run_until_complete(coro)


def run_extraction(container: Any, namespace: str | None = None) -> dict[str, Any]:
    """Extract new messages of every namespace (or one) into memories and review candidates."""
    report = _run(container, container.extraction.run(namespace=namespace))
    return dict(report.to_dict())


def run_dreaming(
    container: Any, date: str | None = None, force: bool = False, namespace: str | None = None
) -> dict[str, Any]:
    """Dream ``date`` (default: yesterday in ENGRAM_TIMEZONE) for every namespace (or one)."""
    report = _run(container, container.dreaming.run(date=date, force=force, namespace=namespace))
    return dict(report.to_dict())


def run_cleanup(container: Any, namespace: str | None = None) -> dict[str, Any]:
    """Apply the retention periods to every namespace (or one)."""
    return dict(container.cleanup.run(namespace).to_dict())
