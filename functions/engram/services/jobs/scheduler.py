"""The in-process scheduler of `engram serve`: extraction every N hours, dreaming and cleanup daily.

On AWS, EventBridge Scheduler plays this part (set ``ENGRAM_SCHEDULER_ENABLED=false`` there). The
schedule math is pure (``every_hours``, ``daily_at``) so the time-zone rules are unit-tested; the
loop sleeps in short steps so shutdown is prompt and a test clock can drive it.

A job's next run is recomputed on every cycle from the time of its last run (or the scheduler's
start), so a time zone changed in the admin panel's runtime settings moves the daily schedules
without a restart.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, time, timedelta
from zoneinfo import ZoneInfo

from engram.domain.ports import Clock

log = logging.getLogger(__name__)

NextRun = Callable[[datetime], datetime]
# A job returns whether its run succeeded; a failed run (False, or an exception) is retried after
# ``retry_after`` instead of at its next regular time.
JobRunner = Callable[[], Awaitable[bool]]


def every_hours(hours: int) -> NextRun:
    """The next whole UTC hour divisible by ``hours`` strictly after ``t`` (cron ``0 */N * * *``)."""

    def next_run(t: datetime) -> datetime:
        base = t.astimezone(UTC).replace(minute=0, second=0, microsecond=0)
        candidate = base + timedelta(hours=hours - base.hour % hours)
        while candidate <= t:
            candidate += timedelta(hours=hours)
        return candidate

    return next_run


def daily_at(hour: int, minute: int, timezone: str | Callable[[], str]) -> NextRun:
    """The next ``hour:minute`` wall-clock time in ``timezone`` strictly after ``t``.

    ``timezone`` may be a callable, read on every call (the runtime settings' current time zone).
    """
    current_zone = timezone if callable(timezone) else (lambda: timezone)

    def next_run(t: datetime) -> datetime:
        tz = ZoneInfo(current_zone())
        local = t.astimezone(tz)
        day = local.date()
        for offset in range(3):
            candidate = datetime.combine(day + timedelta(days=offset), time(hour, minute), tz)
            if candidate > t:
                return candidate.astimezone(UTC)
        raise AssertionError("unreachable: a wall-clock time occurs at least every other day")

    return next_run


@dataclass
class ScheduledJob:
    name: str
    next_after: NextRun
    run: JobRunner
    due: datetime | None = None
    # The schedule counts from here (the last run, or the scheduler's start); ``retry_at`` brings a failed run forward.
    anchor: datetime | None = None
    retry_at: datetime | None = None
    runs: int = 0
    failures: int = 0


@dataclass
class Scheduler:
    clock: Clock
    jobs: list[ScheduledJob] = field(default_factory=list)
    retry_after: timedelta = timedelta(minutes=30)
    tick_seconds: float = 30.0

    def add(self, name: str, next_after: NextRun, run: JobRunner) -> None:
        self.jobs.append(ScheduledJob(name, next_after, run))

    async def run_due(self) -> list[str]:
        """Run every job whose time has come; returns their names (one pass, for tests)."""
        now = self.clock.now()
        ran: list[str] = []
        for job in self.jobs:
            if job.anchor is None:
                job.anchor = now
            job.due = self._due(job)
            if job.due > now:
                continue
            ran.append(job.name)
            ok = await self._run(job)
            job.anchor = self.clock.now()
            job.retry_at = None if ok else job.anchor + self.retry_after
            job.due = self._due(job)
        return ran

    @staticmethod
    def _due(job: ScheduledJob) -> datetime:
        assert job.anchor is not None
        due = job.next_after(job.anchor)  # recomputed each cycle: follows a changed time zone
        return min(due, job.retry_at) if job.retry_at is not None else due

    async def serve(self) -> None:
        """Run forever (until cancelled)."""
        log.info("scheduler started: %s", ", ".join(j.name for j in self.jobs))
        while True:
            await self.run_due()
            now = self.clock.now()
            wait = min(((j.due or now) - now).total_seconds() for j in self.jobs) if self.jobs else self.tick_seconds
            await asyncio.sleep(max(0.05, min(wait, self.tick_seconds)))

    async def _run(self, job: ScheduledJob) -> bool:
        job.runs += 1
        try:
            outcome = await job.run()
        except asyncio.CancelledError:
            raise
        except Exception:  # a failing job must not stop the scheduler
            job.failures += 1
            log.exception("scheduled %s failed", job.name)
            return False
        return outcome
