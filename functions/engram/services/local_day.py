"""The owner's local day: today, yesterday and today's start in ENGRAM_TIMEZONE, read per use (the admin
panel may change the time zone at run time)."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta
from zoneinfo import ZoneInfo

from engram.domain.ports import Clock


class LocalDay:
    def __init__(self, clock: Clock, timezone: str | Callable[[], str] = "UTC") -> None:
        self._clock = clock
        # A callable reads the time zone per use (runtime settings change it without a restart).
        if isinstance(timezone, str):
            zone = ZoneInfo(timezone)
            self._timezone: Callable[[], str] = lambda: zone.key
        else:
            self._timezone = timezone

    @property
    def zone(self) -> ZoneInfo:
        return ZoneInfo(self._timezone())

    def today(self) -> str:
        return self._clock.now().astimezone(self.zone).date().isoformat()

    def yesterday(self) -> str:
        return (self._clock.now().astimezone(self.zone).date() - timedelta(days=1)).isoformat()

    def start_of_today(self) -> datetime:
        local = self._clock.now().astimezone(self.zone)
        return local.replace(hour=0, minute=0, second=0, microsecond=0)
