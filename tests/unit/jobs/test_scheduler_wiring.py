"""The scheduler `engram serve` builds follows the runtime settings (admin panel) for its time zone."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

from engram.bootstrap import Overrides, build_container
from engram.domain.errors import UpstreamUnavailable
from engram.entrypoints.http.schedule import build_scheduler
from engram.settings import Settings

from tests.fakes.chat_model import ScriptedChatModel
from tests.fakes.clock import ManualClock
from tests.unit.jobs.conftest import Env, ago


async def test_the_daily_jobs_move_when_the_runtime_time_zone_changes(tmp_path: Path) -> None:
    # Given a container in UTC with a dream model, and its scheduler after a first cycle at 12:00 UTC
    clock = ManualClock(datetime(2026, 3, 10, 12, 0, tzinfo=UTC))
    settings = Settings(store="memory", search="memory", embedder="none", data_dir=tmp_path, timezone="UTC")
    model = ScriptedChatModel(default='{"memories": []}')
    container = build_container(settings, Overrides(clock=clock, extract_model=model, dream_model=model))
    try:
        scheduler = build_scheduler(container)
        assert await scheduler.run_due() == []
        due = {job.name: job.due for job in scheduler.jobs}
        assert due["dream"] == datetime(2026, 3, 11, 4, 10, tzinfo=UTC)
        assert due["cleanup"] == datetime(2026, 3, 11, 3, 30, tzinfo=UTC)
        # When the owner sets Asia/Shanghai (UTC+8) in the runtime settings
        container.runtime.update({"timezone": "Asia/Shanghai"})
        clock.set(datetime(2026, 3, 10, 12, 1, tzinfo=UTC))
        assert await scheduler.run_due() == []
        # Then 04:10 and 03:30 Shanghai time are 20:10 and 19:30 UTC the same day
        due = {job.name: job.due for job in scheduler.jobs}
        assert due["dream"] == datetime(2026, 3, 10, 20, 10, tzinfo=UTC)
        assert due["cleanup"] == datetime(2026, 3, 10, 19, 30, tzinfo=UTC)
        assert due["extract"] == datetime(2026, 3, 10, 16, 0, tzinfo=UTC)  # every 4 h in UTC, unchanged
    finally:
        container.close()


async def test_a_failed_extraction_run_is_retried_soon_not_at_the_next_interval(env: Env) -> None:
    # Given the scheduler after its first cycle
    scheduler = build_scheduler(env.container)
    assert await scheduler.run_due() == []
    extract = next(job for job in scheduler.jobs if job.name == "extract")
    due = extract.due
    assert due is not None
    # When the 4-hourly extraction comes due with a new message, and the model is down
    env.clock.set(due)
    env.message("I moved to Lisbon last week", at=ago(env, minutes=5))
    env.model.script(UpstreamUnavailable("the model is down"))
    assert "extract" in await scheduler.run_due()
    # Then the next try is the retry delay away, not the next 4-hour slot
    assert extract.due == due + scheduler.retry_after
