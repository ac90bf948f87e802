"""The in-process schedule of `engram serve`: extraction every N hours, nightly dreaming and cleanup, run in
the host app's lifespan (on AWS, EventBridge and the jobs queue run them instead: docs/ARCHITECTURE.md)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, suppress
from typing import TYPE_CHECKING, Any

from fastapi import FastAPI

from engram.bootstrap import Container

if TYPE_CHECKING:
    from engram.services.jobs.scheduler import JobRunner, Scheduler


def build_scheduler(container: Container) -> Scheduler:
    # Imported here: a process with the schedule off (every AWS function) never loads it.
    from engram.services.jobs.scheduler import Scheduler, daily_at, every_hours

    s = container.settings
    scheduler = Scheduler(clock=container.clock)

    def job(name: str, payload: dict[str, Any]) -> JobRunner:
        """A run of ``name`` through the container's job runner; False (retry soon) when it failed."""

        async def run() -> bool:
            result = await container.jobs.run_async(name, payload)
            return not result.failed

        return run

    extract, dream, cleanup = job("extract", {}), job("dream", {}), job("cleanup", {"all": True})

    def timezone() -> str:
        # The admin panel may change the time zone at run time; the daily schedules follow it.
        return str(container.runtime.get("timezone"))

    if container.extraction.configured:
        scheduler.add("extract", every_hours(s.extract_interval_hours), extract)
    if container.dreaming.configured:
        scheduler.add("dream", daily_at(s.dream_hour, s.dream_minute, timezone), dream)
    scheduler.add("cleanup", daily_at(s.cleanup_hour, s.cleanup_minute, timezone), cleanup)
    return scheduler


def install_schedule(app: FastAPI, container: Container) -> None:
    """Run the schedule in the app's lifespan when ``ENGRAM_SCHEDULER_ENABLED``."""
    if not container.settings.scheduler_enabled:
        return

    @asynccontextmanager
    async def scheduler_running(app: FastAPI) -> AsyncIterator[None]:
        scheduler = build_scheduler(container)
        app.state.scheduler = scheduler
        task = asyncio.create_task(scheduler.serve(), name="engram-scheduler")
        try:
            yield
        finally:
            task.cancel()
            with suppress(asyncio.CancelledError):
                await task

    app.state.startup_hooks.append(scheduler_running)


def mount(app: FastAPI, container: Container) -> None:
    """The schedule, with ``create_app`` (its routes, ``job_routes``, are a lazy route group)."""
    install_schedule(app, container)
