"""``JobQueue`` in process: each job runs in a background daemon thread (the local stand-in for SQS).

The same job for the same namespace runs at most once per ``min_interval`` (cleanup: 24 h), and
never twice at the same time; extra requests are dropped, as a throttled queue would.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from engram.domain.errors import InvalidInput

log = logging.getLogger(__name__)

Handler = Callable[[dict[str, Any]], Any]


class InlineJobQueue:
    def __init__(
        self,
        handlers: dict[str, Handler],
        *,
        min_interval_seconds: float = 24 * 3600,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self._handlers = dict(handlers)
        self._min_interval = min_interval_seconds
        self._monotonic = monotonic
        self._lock = threading.Lock()
        self._started: dict[tuple[str, str], float] = {}
        self._threads: list[threading.Thread] = []

    def enqueue(self, job: str, payload: dict[str, Any]) -> None:
        handler = self._handlers.get(job)
        if handler is None:
            raise InvalidInput(f"unknown job {job!r}", code="unknown_job")
        key = (job, str(payload.get("namespace", "")))
        now = self._monotonic()
        with self._lock:
            last = self._started.get(key)
            if last is not None and now - last < self._min_interval:
                return
            self._started[key] = now
            self._threads = [t for t in self._threads if t.is_alive()]
            thread = threading.Thread(target=self._run, args=(job, handler, payload), name=f"job-{job}", daemon=True)
            self._threads.append(thread)
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
