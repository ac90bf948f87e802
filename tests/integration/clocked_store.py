"""A container on a real store (in-memory and SQLite) with a manual clock, for the import and export tests;
what of two exports must be equal."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

from engram.bootstrap import Container, Overrides, build_container
from engram.settings import Settings

from tests.fakes.clock import ManualClock


def clocked_container(store: str, data_dir: Path, start: datetime) -> Iterator[tuple[Container, ManualClock]]:
    """A container on ``store`` whose clock starts at ``start`` (UTC time zone, no embedder)."""
    clock = ManualClock(start)
    settings = Settings(store=store, search="memory", embedder="none", data_dir=data_dir, timezone="UTC")
    container = build_container(settings, Overrides(clock=clock, embedder=None))
    yield container, clock
    container.close()


def comparable(document: dict[str, Any]) -> dict[str, Any]:
    """An export without what names the copy (namespace, export time) or the index (``index_ref``)."""
    out = {k: v for k, v in document.items() if k not in ("namespace", "exported_at")}
    out["memories"] = [{k: v for k, v in m.items() if k != "index_ref"} for m in out["memories"]]
    return out
