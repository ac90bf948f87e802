"""What every job Lambda shares: Powertools logger/tracer/metrics and one container per process.

Handlers stay thin: parse the event, call one service, return its report. The container is built
on the first invocation (not at import) from ENGRAM_* settings by ``engram.bootstrap`` and reused by
later invocations of the same execution environment.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, Protocol

from aws_lambda_powertools import Logger, Metrics, Tracer

from engram.bootstrap import Container, build_container
from engram.entrypoints.logs import configure_logging
from engram.settings import load_settings

# Service and namespace defaults keep local runs and tests working without POWERTOOLS_* variables.
logger = Logger(service="engram")
tracer = Tracer(service="engram")
metrics = Metrics(namespace="Engram", service="engram")

_lock = threading.Lock()
_container: Container | None = None
_factory: Callable[[], Container] | None = None


def set_container_factory(factory: Callable[[], Container] | None) -> None:
    """Replace how the container is built (tests), and forget the one built so far."""
    global _container, _factory
    with _lock:
        _factory, _container = factory, None


def get_container() -> Container:
    global _container
    with _lock:
        if _container is None:
            if _factory is not None:
                _container = _factory()
            else:
                # ENGRAM_LOG_LEVEL rules the `engram` loggers, whose records Powertools writes as JSON.
                base = load_settings()
                configure_logging(base.log_level)
                _container = build_container(base)
        return _container


class Report(Protocol):
    """A job's report (extraction, dreaming, cleanup)."""

    def to_dict(self) -> dict[str, Any]: ...


def report_dict(report: Report) -> dict[str, Any]:
    """The job's report as JSON-ready data (per-namespace detail kept; it is small)."""
    return report.to_dict()
