"""What every job Lambda shares: Powertools logger/tracer/metrics and one container per process.

Handlers stay thin: parse the event, call one service, return its report. The container is built
on the first invocation (not at import) from ENGRAM_* settings by ``engram.bootstrap`` and reused by
later invocations of the same execution environment.
"""

from __future__ import annotations

import inspect
import threading
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from aws_lambda_powertools import Logger, Metrics, Tracer

from engram.domain.errors import NotConfigured
from engram.services import loop

T = TypeVar("T")

# Service and namespace defaults keep local runs and tests working without POWERTOOLS_* variables.
logger = Logger(service="engram")
tracer = Tracer(service="engram")
metrics = Metrics(namespace="Engram", service="engram")

_lock = threading.Lock()
_container: Any = None
_factory: Callable[[], Any] | None = None


def set_container_factory(factory: Callable[[], Any] | None) -> None:
    """Replace how the container is built (tests), and forget the one built so far."""
    global _container, _factory
    with _lock:
        _factory, _container = factory, None


def get_container() -> Any:
    global _container
    with _lock:
        if _container is None:
            if _factory is not None:
                _container = _factory()
            else:
                from engram.bootstrap import build_container
                from engram.entrypoints.logs import configure_logging
                from engram.settings import load_settings

                # ENGRAM_LOG_LEVEL rules the `engram` loggers, whose records Powertools writes as JSON.
                base = load_settings()
                configure_logging(base.log_level)
                _container = build_container(base)
        return _container


def job_service(container: Any, name: str) -> Any:
    """The container's ``extraction`` / ``dreaming`` / ``cleanup`` service, or ``NotConfigured``."""
    service = getattr(container, name, None)
    if service is None:
        raise NotConfigured(f"the {name} service is not configured in this deployment (see ENGRAM_* settings)")
    return service


def run_sync(result: Awaitable[T] | T) -> T:
    """Services' ``run`` may be async (model calls) or not; a Lambda handler is synchronous. Async runs
    go to the process's one loop (``engram.services.loop``), which a warm environment keeps open."""
    if inspect.isawaitable(result):
        return loop.run_sync(result)
    return result


def report_dict(report: Any) -> dict[str, Any]:
    """The job's report as JSON-ready data (per-namespace detail kept; it is small)."""
    to_dict = getattr(report, "to_dict", None)
    return to_dict() if callable(to_dict) else dict(report or {})
