"""The in-process scheduler: next-run math in UTC and local time zones (DST), runs, retries."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from engram.services.jobs.scheduler import Scheduler, daily_at, every_hours

from tests.fakes.clock import ManualClock


def test_every_four_hours_fires_at_whole_utc_hours_divisible_by_four() -> None:
    nxt = every_hours(4)
    assert nxt(datetime(2026, 3, 10, 1, 30, tzinfo=UTC)) == datetime(2026, 3, 10, 4, 0, tzinfo=UTC)
    assert nxt(datetime(2026, 3, 10, 4, 0, tzinfo=UTC)) == datetime(2026, 3, 10, 8, 0, tzinfo=UTC)
    assert nxt(datetime(2026, 3, 10, 22, 0, 1, tzinfo=UTC)) == datetime(2026, 3, 11, 0, 0, tzinfo=UTC)


def test_daily_at_uses_the_local_wall_clock() -> None:
    # 04:10 in Singapore is 20:10 UTC of the previous day
    nxt = daily_at(4, 10, "Asia/Singapore")
    assert nxt(datetime(2026, 3, 10, 12, 0, tzinfo=UTC)) == datetime(2026, 3, 10, 20, 10, tzinfo=UTC)
    assert nxt(datetime(2026, 3, 10, 20, 10, tzinfo=UTC)) == datetime(2026, 3, 11, 20, 10, tzinfo=UTC)


def test_daily_at_across_a_dst_change_keeps_local_time() -> None:
    # New York springs forward on 2026-03-08: 04:10 local is 09:10 UTC before, 08:10 UTC after
    nxt = daily_at(4, 10, "America/New_York")
    assert nxt(datetime(2026, 3, 7, 10, 0, tzinfo=UTC)) == datetime(2026, 3, 8, 8, 10, tzinfo=UTC)
    assert nxt(datetime(2026, 3, 6, 10, 0, tzinfo=UTC)) == datetime(2026, 3, 7, 9, 10, tzinfo=UTC)


async def test_jobs_run_when_due_and_failures_retry_sooner() -> None:
    # Given a scheduler with an hourly job that fails once and a daily job
    clock = ManualClock(datetime(2026, 3, 10, 0, 30, tzinfo=UTC))
    calls: list[str] = []
    outcomes = iter([False, True])

    async def flaky() -> bool:
        calls.append("flaky")
        return next(outcomes)

    async def nightly() -> bool:
        calls.append("nightly")
        raise RuntimeError("boom")

    scheduler = Scheduler(clock=clock, retry_after=timedelta(minutes=10))
    scheduler.add("flaky", every_hours(4), flaky)
    scheduler.add("nightly", daily_at(23, 0, "UTC"), nightly)
    # When nothing is due yet
    assert await scheduler.run_due() == []
    # When 04:00 comes, the 4-hourly job runs and fails -> retried 10 minutes later, not at 08:00
    clock.set(datetime(2026, 3, 10, 4, 0, tzinfo=UTC))
    assert await scheduler.run_due() == ["flaky"]
    assert scheduler.jobs[0].due == datetime(2026, 3, 10, 4, 10, tzinfo=UTC)
    clock.set(datetime(2026, 3, 10, 4, 10, tzinfo=UTC))
    assert await scheduler.run_due() == ["flaky"]
    assert scheduler.jobs[0].due == datetime(2026, 3, 10, 8, 0, tzinfo=UTC)
    # When the daily job raises, the scheduler survives and counts the failure
    clock.set(datetime(2026, 3, 10, 23, 0, tzinfo=UTC))
    assert "nightly" in await scheduler.run_due()
    assert scheduler.jobs[1].failures == 1 and calls.count("nightly") == 1


async def test_a_changed_time_zone_moves_the_next_daily_run_without_a_restart() -> None:
    # Given a scheduler started at 12:00 UTC with a 04:10 daily job in a time zone that can change
    clock = ManualClock(datetime(2026, 3, 10, 12, 0, tzinfo=UTC))
    zone = {"name": "UTC"}
    calls: list[datetime] = []

    async def nightly() -> bool:
        calls.append(clock.now())
        return True

    scheduler = Scheduler(clock=clock)
    scheduler.add("dream", daily_at(4, 10, lambda: zone["name"]), nightly)
    assert await scheduler.run_due() == []
    assert scheduler.jobs[0].due == datetime(2026, 3, 11, 4, 10, tzinfo=UTC)
    # When the owner switches to Singapore (04:10 there is 20:10 UTC)
    zone["name"] = "Asia/Singapore"
    clock.set(datetime(2026, 3, 10, 13, 0, tzinfo=UTC))
    # Then the next cycle already waits for 20:10 UTC, and the job runs then, not at 04:10 UTC
    assert await scheduler.run_due() == []
    assert scheduler.jobs[0].due == datetime(2026, 3, 10, 20, 10, tzinfo=UTC)
    clock.set(datetime(2026, 3, 10, 20, 10, tzinfo=UTC))
    assert await scheduler.run_due() == ["dream"]
    assert calls == [datetime(2026, 3, 10, 20, 10, tzinfo=UTC)]
    assert scheduler.jobs[0].due == datetime(2026, 3, 11, 20, 10, tzinfo=UTC)
