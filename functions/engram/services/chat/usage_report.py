"""The token usage report (``GET /v1/usage``): what the chat gateway recorded, summed per model."""

from __future__ import annotations

from datetime import UTC, timedelta
from typing import Any

from engram.domain.ports import AuditRows, Clock

_COLUMNS = ("requests", "input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens")


class UsageReportService:
    def __init__(self, store: AuditRows, clock: Clock) -> None:
        self._store = store
        self._clock = clock

    def report(self, namespace: str, *, days: int = 30) -> dict[str, Any]:
        """Requests and tokens (input, output, cache read/write) per model over the last ``days``, and the
        same per day (UTC dates, oldest first), per day and model (``per_day``) and per thread."""
        since = self._clock.now() - timedelta(days=days)
        per_model: dict[str, dict[str, int]] = {}
        per_day: dict[str, dict[str, int]] = {}
        per_day_model: dict[tuple[str, str], dict[str, int]] = {}
        per_thread: dict[str, dict[str, int]] = {}
        for rec in self._store.list_usage(namespace, since=since):
            day = rec.created_at.astimezone(UTC).date().isoformat()
            for row in (
                per_model.setdefault(rec.model, dict.fromkeys(_COLUMNS, 0)),
                per_day.setdefault(day, dict.fromkeys(_COLUMNS, 0)),
                per_day_model.setdefault((day, rec.model), dict.fromkeys(_COLUMNS, 0)),
                per_thread.setdefault(rec.thread or "", dict.fromkeys(_COLUMNS, 0)),
            ):
                row["requests"] += 1
                row["input_tokens"] += rec.input_tokens
                row["output_tokens"] += rec.output_tokens
                row["cache_read_tokens"] += rec.cache_read_tokens
                row["cache_write_tokens"] += rec.cache_write_tokens
        return {
            "since": since.isoformat(),
            "days": days,
            "models": [{"model": m, **v} for m, v in sorted(per_model.items())],
            "daily": [{"date": d, **v} for d, v in sorted(per_day.items())],
            "per_day": [{"date": d, "model": m, **v} for (d, m), v in sorted(per_day_model.items())],
            # The most spent first; ``thread`` null: rows from before the thread was kept with them.
            "threads": [{"thread": t or None, **v} for t, v in sorted(per_thread.items(), key=_most_spent)],
        }


def _most_spent(item: tuple[str, dict[str, int]]) -> tuple[int, str]:
    thread, row = item
    return -(row["input_tokens"] + row["output_tokens"]), thread
