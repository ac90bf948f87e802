"""Run one job to completion from synchronous code (CLI, Lambda handlers): plain functions that
return JSON-serializable dicts.

Async jobs run on the process's one event loop (``engram.services.loop``), so consecutive runs reuse
it (and the HTTP client the model adapter opened on it) instead of binding a client to a closed loop.
"""

from __future__ import annotations

from typing import Any

from engram.bootstrap import Container, snapshot_search
from engram.services.loop import run_sync

# The cleanup job runs often (after chats); it snapshots the replica index only once this many rows changed.
CLEANUP_SNAPSHOT_CHANGES = 200


def run_extraction(container: Container, namespace: str | None = None) -> dict[str, Any]:
    """Extract new messages of every namespace (or one) into memories and review candidates."""
    report = run_sync(container.extraction.run(namespace=namespace))
    snapshot_search(container)
    return dict(report.to_dict())


def run_dreaming(
    container: Container, date: str | None = None, force: bool = False, namespace: str | None = None
) -> dict[str, Any]:
    """Dream ``date`` (default: yesterday in ENGRAM_TIMEZONE) for every namespace (or one)."""
    report = run_sync(container.dreaming.run(date=date, force=force, namespace=namespace))
    snapshot_search(container)
    return dict(report.to_dict())


def run_cleanup(container: Container, namespace: str | None = None) -> dict[str, Any]:
    """Apply the retention periods to every namespace (or one)."""
    report = dict(container.cleanup.run(namespace).to_dict())
    snapshot_search(container, min_changes=CLEANUP_SNAPSHOT_CHANGES)
    return report
