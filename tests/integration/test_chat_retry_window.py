"""A repeated chat request is a retry only while it is one (issue 21, item 2; README "Chat gateway").

Through the real chat door with the scripted fake upstream and a manual clock: the same request within
``ENGRAM_CHAT_RETRY_WINDOW_MINUTES`` whose first attempt is still reflected in the store is stored once;
anything else (after the window, after the memory was deleted or the reminder cancelled, a new
conversation in thread ``default`` opening with the same words) is a new turn with its own rows."""

from __future__ import annotations

from datetime import UTC, datetime, time, timedelta
from typing import Any

import httpx
from engram.domain.models import MemoryFilter

from tests.fakes.clock import ManualClock
from tests.fakes.upstream import Reply
from tests.integration.chat_support import OWNER_KEY, Gateway, make_gateway, upstream

__all__ = ["make_gateway", "upstream"]

AUTH = {"authorization": f"Bearer {OWNER_KEY}"}


def _start() -> datetime:
    """Where the manual clock starts (the gateway and its store read only that clock)."""
    return datetime(2026, 3, 10, 8, 0, tzinfo=UTC)


def _nine(start: datetime, days: int) -> str:
    """9:00 UTC, ``days`` after ``start``'s date."""
    return datetime.combine(start.date() + timedelta(days=days), time(9), UTC).isoformat()


def _gateway(make_gateway: Any) -> tuple[Gateway, ManualClock]:
    clock = ManualClock(_start())
    return make_gateway(clock=clock, timezone="UTC", chat_retry_window_minutes=10), clock


def _say(gw: Gateway, *messages: str, answer: str = "ok", stream: bool = False) -> httpx.Response:
    """One chat request whose messages alternate user / assistant, ending with the user's."""
    gw.upstream.script(Reply(text=answer, chunks=2))
    roles = ["user", "assistant"]
    body: dict[str, Any] = {
        "model": "companion",
        "messages": [{"role": roles[i % 2], "content": text} for i, text in enumerate(messages)],
        "stream": stream,
    }
    resp = httpx.post(gw.url + "/v1/chat/completions", json=body, headers=AUTH, timeout=10)
    assert resp.status_code == 200, resp.text
    return resp


def _active(gw: Gateway) -> list[str]:
    return [m.content for m in gw.store.list_memories("default", MemoryFilter()).items]


def _upcoming(gw: Gateway, status: str = "upcoming") -> list[dict[str, Any]]:
    resp = httpx.get(gw.url + "/v1/reminders", params={"status": status}, headers=AUTH)
    assert resp.status_code == 200, resp.text
    return list(resp.json()["items"])


def _stored(gw: Gateway) -> list[tuple[str, str]]:
    return [(m.role, m.content) for m in gw.store.list_messages("default")]


def test_a_real_retry_within_the_window_is_stored_once(make_gateway: Any) -> None:
    # Given a "remember" turn, retried by the client two minutes later (whole, then streamed)
    gw, clock = _gateway(make_gateway)
    _say(gw, "remember: my bike is blue", answer="Noted.")
    clock.advance(minutes=2)
    _say(gw, "remember: my bike is blue", answer="Noted again.", stream=True)
    # Then the memory and the user's turn are stored once, with the first answer
    assert _active(gw) == ["my bike is blue"]
    assert _stored(gw) == [("user", "remember: my bike is blue"), ("assistant", "Noted.")]


def test_remember_again_after_deleting_stores_it_again(make_gateway: Any) -> None:
    # Given a remembered fact the person then deleted
    gw, clock = _gateway(make_gateway)
    _say(gw, "remember: my bike is blue")
    (memory,) = gw.store.list_memories("default", MemoryFilter()).items
    assert httpx.delete(f"{gw.url}/v1/memories/{memory.id}", headers=AUTH).status_code == 200
    # When they say the same words again a minute later (inside the retry window)
    clock.advance(minutes=1)
    _say(gw, "remember: my bike is blue")
    # Then it is remembered again, and the second turn is stored as its own
    assert _active(gw) == ["my bike is blue"]
    assert [role for role, _ in _stored(gw)] == ["user", "assistant", "user", "assistant"]


def test_remember_of_a_known_fact_then_deleted_is_remembered_again(make_gateway: Any) -> None:
    # Given a fact remembered over REST, then said again in a chat ("remember: ..." finds the look-alike)
    gw, clock = _gateway(make_gateway)
    made = httpx.post(gw.url + "/v1/memories", json={"content": "my bike is blue"}, headers=AUTH)
    assert made.status_code == 201, made.text
    _say(gw, "remember: my bike is blue")
    assert _active(gw) == ["my bike is blue"]
    # When the person deletes it and says the same words a minute later
    memory_id = made.json()["memory"]["id"]
    assert httpx.delete(f"{gw.url}/v1/memories/{memory_id}", headers=AUTH).status_code == 200
    clock.advance(minutes=1)
    _say(gw, "remember: my bike is blue")
    # Then it is remembered again
    assert _active(gw) == ["my bike is blue"]


def test_remind_again_after_cancelling_arms_a_new_reminder(make_gateway: Any) -> None:
    # Given a reminder asked for and then cancelled
    gw, clock = _gateway(make_gateway)
    _say(gw, "remind me tomorrow at 9 to call the dentist")
    (first,) = _upcoming(gw)
    resp = httpx.post(f"{gw.url}/v1/reminders/{first['memory_id']}/cancel", headers=AUTH)
    assert resp.status_code == 200, resp.text
    assert _upcoming(gw) == []
    # When the same request comes again two minutes later
    clock.advance(minutes=2)
    _say(gw, "remind me tomorrow at 9 to call the dentist")
    # Then a new reminder is armed for the same time
    (again,) = _upcoming(gw)
    assert again["memory_id"] != first["memory_id"]
    assert again["remind_at"] == first["remind_at"]


def test_the_same_request_the_next_day_is_a_new_turn(make_gateway: Any) -> None:
    # Given "remind me tomorrow at 9" on one day
    gw, clock = _gateway(make_gateway)
    start = clock.now()
    _say(gw, "remind me tomorrow at 9 to water the plants")
    # When the same words come the next day (no thread id: both in thread `default`)
    clock.advance(days=1)
    _say(gw, "remind me tomorrow at 9 to water the plants")
    # Then the day after's reminder is armed beside the first one, and both turns are stored
    armed = [r["remind_at"] for view in ("upcoming", "delivered") for r in _upcoming(gw, view)]
    assert sorted(armed) == [_nine(start, 1), _nine(start, 2)]
    assert len(_stored(gw)) == 4


def test_a_new_conversation_with_the_same_first_words_is_stored(make_gateway: Any) -> None:
    # Given a conversation opened with "good morning" in thread `default`
    gw, clock = _gateway(make_gateway)
    _say(gw, "good morning", answer="Morning! How did you sleep?")
    # When a new conversation opens with the same words an hour later
    clock.advance(hours=1)
    _say(gw, "good morning", answer="Good morning to you.")
    # Then both openings and both answers are stored
    assert _stored(gw) == [
        ("user", "good morning"),
        ("assistant", "Morning! How did you sleep?"),
        ("user", "good morning"),
        ("assistant", "Good morning to you."),
    ]


def test_a_window_of_zero_makes_every_request_a_new_turn(make_gateway: Any) -> None:
    gw = make_gateway(clock=ManualClock(_start()), chat_retry_window_minutes=0)
    _say(gw, "hello")
    _say(gw, "hello")
    assert len(_stored(gw)) == 4
