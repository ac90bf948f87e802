"""``JobQueue`` in process: each job runs in a background daemon thread (the local stand-in for SQS),
through ``run(job, payload)`` (the container's job runner, services/jobs/registry.py).

No job runs twice at the same time for the same namespace: a request while one runs is dropped (the
chat path's cleanup requests are throttled where they are made: services/chat/exchange.py).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Collection
from typing import Any

from engram.domain.errors import InvalidInput

log = logging.getLogger(__name__)

Run = Callable[[str, dict[str, Any]], Any]


class InlineJobQueue:
    def __init__(self, run: Run, jobs: Collection[str]) -> None:
        self._run_job = run
        self._jobs = frozenset(jobs)
        self._lock = threading.Lock()
        self._threads: list[threading.Thread] = []
        self._running: dict[tuple[str, str], threading.Thread] = {}

    def enqueue(self, job: str, payload: dict[str, Any]) -> None:
        if job not in self._jobs:
            raise InvalidInput(f"unknown job {job!r}", code="unknown_job")
        key = (job, str(payload.get("namespace", "")))
        with self._lock:
            running = self._running.get(key)
            if running is not None and running.is_alive():
                return
            self._threads = [t for t in self._threads if t.is_alive()]
            thread = threading.Thread(target=self._run, args=(job, payload), name=f"job-{job}", daemon=True)
            self._threads.append(thread)
            self._running[key] = thread
        thread.start()

    def join(self, timeout: float | None = None) -> None:
        """Wait for running jobs (tests, shutdown)."""
        with self._lock:
            threads = list(self._threads)
        for thread in threads:
            thread.join(timeout)

    def _run(self, job: str, payload: dict[str, Any]) -> None:
        try:
            self._run_job(job, payload)
        except Exception:  # a background job has no caller to tell; log it
            log.exception("queued %s job failed", job)
