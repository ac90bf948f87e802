"""Reminder times in chat messages (domain/reminder_time.py)."""

from __future__ import annotations

from datetime import UTC, datetime
from zoneinfo import ZoneInfo

import pytest
from engram.domain.reminder_time import find_time, reminder_request

BERLIN = ZoneInfo("Europe/Berlin")
SHANGHAI = ZoneInfo("Asia/Shanghai")
NOW = datetime(2026, 3, 10, 14, 30, tzinfo=UTC)  # 15:30 in Berlin, 22:30 in Shanghai


@pytest.mark.parametrize(
    ("text", "what", "local"),
    [
        ("remind me tomorrow at 9 to call mum", "call mum", "2026-03-11 09:00"),
        ("Remind me to call mum tomorrow at 9am", "call mum", "2026-03-11 09:00"),
        ("please remind me at 5pm to take the cake out", "take the cake out", "2026-03-10 17:00"),
        ("remind me at 9 to stretch", "stretch", "2026-03-11 09:00"),  # 9 today has passed
        ("remind me tonight at 8 to water the plants", "water the plants", "2026-03-10 20:00"),
        ("remind me today at 12:15 pm about lunch", "lunch", "2026-03-10 12:15"),
    ],
)
def test_remind_me_in_english(text: str, what: str, local: str) -> None:
    request = reminder_request(text, NOW, BERLIN)
    assert request is not None
    assert request.what == what
    assert request.when.astimezone(BERLIN).strftime("%Y-%m-%d %H:%M") == local


def test_remind_me_in_chinese() -> None:
    request = reminder_request("明天上午9点提醒我给妈妈打电话", NOW, SHANGHAI)
    assert request is not None and request.what == "给妈妈打电话"
    assert request.when.astimezone(SHANGHAI).strftime("%Y-%m-%d %H:%M") == "2026-03-11 09:00"
    later = reminder_request("提醒我后天下午3点半交房租", NOW, SHANGHAI)
    assert later is not None and later.when.astimezone(SHANGHAI).strftime("%Y-%m-%d %H:%M") == "2026-03-12 15:30"


@pytest.mark.parametrize(
    "text",
    ["remind me to call mum", "remind me next week to call mum", "remind me at 25 to x y z", "what time is it at 9?"],
)
def test_no_explicit_time_no_reminder(text: str) -> None:
    assert reminder_request(text, NOW, BERLIN) is None


def test_a_remembered_fact_with_a_day_and_time() -> None:
    found = find_time("the dentist is tomorrow at 3pm", NOW, BERLIN)
    assert found is not None and found[0].astimezone(BERLIN).strftime("%d %H:%M") == "11 15:00"
    assert find_time("my shop opens at 9", NOW, BERLIN) is None  # no day: a habit, not an appointment
