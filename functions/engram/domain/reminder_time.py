"""When a chat message asks to be reminded: "remind me tomorrow at 9 to call mum", "remember: dentist
tomorrow at 3pm", "明天上午9点提醒我给妈妈打电话" (docs/reminders.md). Pure: the caller gives now and the zone.

Only explicit day + time phrases count (today / tonight / tomorrow / 今天 / 明天 / 后天, with a clock
time), or a bare clock time after "remind me" (today, or tomorrow once that time has passed). Anything
vaguer ("next week", "in the evening") sets no time: no reminder is better than a wrong one.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime, time, timedelta
from zoneinfo import ZoneInfo

_CLOCK = r"(?P<h>\d{1,2})(?:[:.](?P<m>\d{2}))?\s*(?P<ampm>a\.?m\.?|p\.?m\.?)?"
_EN = re.compile(
    rf"\b(?:(?P<day>today|tonight|tomorrow)\s+)?at\s+{_CLOCK}(?![\w:])(?:\s+(?P<day2>today|tonight|tomorrow)\b)?",
    re.IGNORECASE,
)
_ZH = re.compile(
    r"(?P<day>今天|今晚|明天|明早|后天|後天)\s*(?P<part>上午|早上|中午|下午|晚上)?\s*"
    r"(?P<h>\d{1,2})\s*(?:[点點时時:：])\s*(?:(?P<m>\d{1,2})\s*分?|(?P<half>半))?"
)
_REMIND_EN = re.compile(r"^\s*(?:please\s+|pls\s+)?remind\s+me\b\s*(?P<x>.+)$", re.IGNORECASE | re.DOTALL)
_REMIND_ZH = re.compile(r"提醒我\s*(?P<x>.+)$", re.DOTALL)
_DAYS = {"today": 0, "tonight": 0, "tomorrow": 1, "今天": 0, "今晚": 0, "明天": 1, "明早": 1, "后天": 2, "後天": 2}


@dataclass(frozen=True)
class ReminderRequest:
    """What to remind of, and when (aware, in the user's zone)."""

    what: str
    when: datetime


def find_time(text: str, now: datetime, zone: ZoneInfo, *, bare_ok: bool = False) -> tuple[datetime, str] | None:
    """The first explicit reminder time in ``text`` and the text without that phrase."""
    local = now.astimezone(zone)
    match = _ZH.search(text)
    if match:
        hour, minute = int(match["h"]), int(match["m"] or (30 if match["half"] else 0))
        if match["part"] in ("下午", "晚上") and hour < 12:
            hour += 12
        day: str | None = match["day"]
    else:
        match = _EN.search(text)
        if match is None:
            return None
        day = (match["day"] or match["day2"] or "").lower() or None
        if day is None and not bare_ok:
            return None
        hour, minute = int(match["h"]), int(match["m"] or 0)
        ampm = (match["ampm"] or "").replace(".", "").lower()
        if (ampm == "pm" and hour < 12) or (not ampm and day == "tonight" and hour < 12):
            hour += 12
        elif ampm == "am" and hour == 12:
            hour = 0
    if hour > 23 or minute > 59:
        return None
    date = local.date() + timedelta(days=_DAYS.get(day or "", 0))
    when = datetime.combine(date, time(hour, minute), tzinfo=zone)
    if day is None and when <= local:
        when += timedelta(days=1)
    rest = " ".join((text[: match.start()] + " " + text[match.end() :]).split())
    return when, rest


def reminder_request(text: str, now: datetime, zone: ZoneInfo) -> ReminderRequest | None:
    """A "remind me ..." / "...提醒我..." message with a time: what to remind of and when."""
    match = _REMIND_EN.match(text)
    if match is None:
        zh = _REMIND_ZH.search(text)
        if zh is None:
            return None
        found = find_time(text, now, zone)
        if found is None:
            return None
        what = _REMIND_ZH.sub(lambda m: m["x"], found[1]).strip(" ，,。")
        return ReminderRequest(what, found[0]) if len(what) >= 2 else None
    found = find_time(match["x"], now, zone, bare_ok=True)
    if found is None:
        return None
    what = re.sub(r"^(?:to|that|about)\s+", "", found[1].strip(" ,.:"), flags=re.IGNORECASE).strip(" ,.")
    return ReminderRequest(what, found[0]) if len(what) >= 3 else None
