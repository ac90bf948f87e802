"""``JobQueue`` in process: each job runs in a background daemon thread (the local stand-in for SQS).

A throttled job (cleanup) runs at most once per ``min_interval`` for the same namespace; no job runs
twice at the same time for the same namespace. Extra requests are dropped, as a throttled queue would.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Collection
from typing import Any

from engram.domain.errors import InvalidInput
from engram.domain.ports import Clock

log = logging.getLogger(__name__)

Handler = Callable[[dict[str, Any]], Any]


class InlineJobQueue:
    def __init__(
        self,
        handlers: dict[str, Handler],
        *,
        clock: Clock,
        min_interval_seconds: float = 24 * 3600,
        throttled: Collection[str] | None = None,
    ) -> None:
        self._handlers = dict(handlers)
        self._min_interval = min_interval_seconds
        # Jobs the interval applies to (default: every job).
        self._throttled = set(handlers) if throttled is None else set(throttled)
        self._clock = clock  # the throttle's window (docs/ARCHITECTURE.md, "One clock")
        self._lock = threading.Lock()
        self._started: dict[tuple[str, str], float] = {}
        self._threads: list[threading.Thread] = []
        self._running: dict[tuple[str, str], threading.Thread] = {}

    def enqueue(self, job: str, payload: dict[str, Any]) -> None:
        handler = self._handlers.get(job)
        if handler is None:
            raise InvalidInput(f"unknown job {job!r}", code="unknown_job")
        key = (job, str(payload.get("namespace", "")))
        now = self._clock.now().timestamp()
        with self._lock:
            last = self._started.get(key)
            if job in self._throttled and last is not None and now - last < self._min_interval:
                return
            running = self._running.get(key)
            if running is not None and running.is_alive():
                return
            self._started[key] = now
            self._threads = [t for t in self._threads if t.is_alive()]
            thread = threading.Thread(target=self._run, args=(job, handler, payload), name=f"job-{job}", daemon=True)
            self._threads.append(thread)
            self._running[key] = thread
        thread.start()

    def join(self, timeout: float | None = None) -> None:
        """Wait for running jobs (tests, shutdown)."""
        with self._lock:
            threads = list(self._threads)
        for thread in threads:
            thread.join(timeout)

    @staticmethod
    def _run(job: str, handler: Handler, payload: dict[str, Any]) -> None:
        try:
            handler(payload)
        except Exception:  # a background job has no caller to tell; log it
            log.exception("queued %s job failed", job)
