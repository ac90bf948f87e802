"""Reminders: a memory's ``remind_at`` reaches the user once, in the next chat turn after it
(docs/reminders.md).

A chat turn asks ``claim_due``: the namespace's pending reminders whose time has come (and is not
older than ``missed_after_days``: those are listed as missed instead) are claimed with a lease, so a
concurrent turn cannot take them too; the turn injects them and, once the upstream answered, calls
``settle(delivered=True)`` before its last byte. A failed or cut turn releases them for the next one,
and a turn that vanished without settling leaves a lease that runs out after ``lease_seconds``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Literal, Protocol
from zoneinfo import ZoneInfo

from engram.domain.errors import InvalidInput, NotFound
from engram.domain.models import Memory, Reminder
from engram.domain.ports import Clock, MemoryRows, ReminderRows
from engram.domain.reminder_time import ReminderRequest, find_time, reminder_request
from engram.services.library.memories import MemoryPatch, MemoryService
from engram.services.runtime_settings import Live

ReminderView = Literal["upcoming", "delivered", "missed"]
MAX_PER_TURN = 5


@dataclass(frozen=True)
class ReminderConfig:
    """When a reminder counts as missed, how long a turn holds one, the user's time zone.

    ``settings.py`` holds the defaults (written once); ``bootstrap/configs.py`` maps them.
    """

    missed_after_days: float
    lease_seconds: float
    timezone: str


@dataclass(frozen=True)
class DueReminder:
    reminder: Reminder
    memory: Memory


class ReminderStore(ReminderRows, MemoryRows, Protocol):
    """Reminders and the memories they remind of."""


class ReminderService:
    def __init__(
        self,
        store: ReminderStore,
        memories: MemoryService,
        clock: Clock,
        config: ReminderConfig | Live[ReminderConfig],
    ) -> None:
        self._store = store
        self._memories = memories
        self._clock = clock
        self._config = Live.of(config)

    # -- the chat turn ------------------------------------------------------------------------
    def claim_due(self, namespace: str, owner: str) -> list[DueReminder]:
        """The due reminders this turn now holds (at most ``MAX_PER_TURN``), soonest first."""
        now = self._clock.now()
        cfg = self._config()
        due = self._store.list_reminders(
            namespace,
            "pending",
            due_after=now - timedelta(days=cfg.missed_after_days),
            due_before=now,
            limit=MAX_PER_TURN,
        )
        until = now + timedelta(seconds=cfg.lease_seconds)
        taken = [r for r in due if self._store.claim_reminder(namespace, r.memory_id, owner, now=now, until=until)]
        if not taken:
            return []
        memories = {m.id: m for m in self._store.get_memories(namespace, [r.memory_id for r in taken])}
        out: list[DueReminder] = []
        for reminder in taken:
            memory = memories.get(reminder.memory_id)
            if memory is None or memory.status != "active" or memory.remind_at != reminder.remind_at:
                # The memory was deleted, superseded or re-timed since: this reminder is void.
                self._store.put_reminder(
                    reminder.model_copy(update={"status": "cancelled", "lease_owner": None, "lease_until": None})
                )
                continue
            out.append(DueReminder(reminder, memory))
        return out

    def settle(self, namespace: str, owner: str, memory_ids: Sequence[str], *, delivered: bool) -> None:
        """Mark what this turn held as delivered (the upstream answered) or release it (it did not)."""
        at = self._clock.now() if delivered else None
        for memory_id in memory_ids:
            self._store.settle_reminder(namespace, memory_id, owner, delivered_at=at)

    def render(self, due: Sequence[DueReminder]) -> str:
        """The reminder lines of the per-turn patch, in the configured time zone."""
        if not due:
            return ""
        zone = ZoneInfo(self._config().timezone)
        lines = [
            f"- ({d.reminder.remind_at.astimezone(zone):%Y-%m-%d %H:%M}) {' '.join(d.memory.content.split())}"
            for d in due
        ]
        return "Reminders due now (the user asked to be reminded; mention them once):\n" + "\n".join(lines)

    def request_in(self, text: str) -> ReminderRequest | None:
        """A "remind me <when> to <what>" message, in the configured time zone."""
        return reminder_request(text, self._clock.now(), ZoneInfo(self._config().timezone))

    def time_in(self, text: str) -> datetime | None:
        """An explicit day and time ("tomorrow at 9") in a remembered fact, in the configured time zone."""
        found = find_time(text, self._clock.now(), ZoneInfo(self._config().timezone))
        return found[0] if found else None

    # -- REST / MCP ---------------------------------------------------------------------------
    def list(self, namespace: str, view: ReminderView, *, limit: int = 100) -> list[dict[str, Any]]:
        """``upcoming``: pending, not yet missed (due ones included, soonest first); ``missed``: pending
        and older than ``missed_after_days``; ``delivered``."""
        cutoff = self._clock.now() - timedelta(days=self._config().missed_after_days)
        if view == "upcoming":
            rows = self._store.list_reminders(namespace, "pending", due_after=cutoff, limit=limit)
        elif view == "missed":
            rows = self._store.list_reminders(
                namespace, "pending", due_before=cutoff - timedelta(microseconds=1), limit=limit
            )
        else:
            rows = self._store.list_reminders(namespace, "delivered", limit=limit)
        memories = {m.id: m for m in self._store.get_memories(namespace, [r.memory_id for r in rows])}
        return [
            {
                "memory_id": r.memory_id,
                "content": memories[r.memory_id].content if r.memory_id in memories else None,
                "remind_at": r.remind_at.isoformat(),
                "status": r.status,
                "delivered_at": r.delivered_at.isoformat() if r.delivered_at else None,
            }
            for r in rows
        ]

    def _reminder_of(self, namespace: str, memory_id: str) -> Reminder:
        self._memories.get(namespace, memory_id)  # NotFound for an unknown memory
        row = self._store.find_reminder(namespace, memory_id)
        if row is None or row.status == "cancelled":
            raise NotFound(f"memory {memory_id} has no reminder", code="no_reminder")
        return row

    def snooze(self, namespace: str, memory_id: str, until: datetime) -> Reminder:
        """Move the reminder to ``until`` (later than now); a delivered or missed one is armed again."""
        self._reminder_of(namespace, memory_id)
        if until.tzinfo is None:
            raise InvalidInput("until needs a time zone (e.g. 2026-05-01T09:00:00+02:00)", code="naive_datetime")
        if until <= self._clock.now():
            raise InvalidInput("until must be in the future", code="until_in_past")
        self._memories.update(namespace, memory_id, MemoryPatch(remind_at=until))
        row = self._store.find_reminder(namespace, memory_id)
        assert row is not None
        if row.remind_at != until or row.status != "pending":  # same time as before: re-arm explicitly
            row = self._store.put_reminder(Reminder(namespace=namespace, memory_id=memory_id, remind_at=until))
        return row

    def cancel(self, namespace: str, memory_id: str) -> Reminder:
        """Stop the reminder: ``remind_at`` is cleared on the memory, the reminder is cancelled."""
        row = self._reminder_of(namespace, memory_id)
        self._memories.update(namespace, memory_id, MemoryPatch(remind_at=None))
        cancelled = row.model_copy(update={"status": "cancelled", "lease_owner": None, "lease_until": None})
        return self._store.put_reminder(cancelled)
