"""Reminders (docs/reminders.md): delivered once in the next chat turn after `remind_at`, on both
doors, streaming or not; marked delivered only after the upstream answered; once under concurrency;
missed ones listed, not injected; the REST surface."""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest

from tests.fakes.upstream import Reply
from tests.integration.chat_support import OWNER_KEY, Gateway, MakeGateway, make_gateway, upstream

__all__ = ["make_gateway", "upstream"]

AUTH = {"authorization": f"Bearer {OWNER_KEY}"}
DOORS = {"openai": "/v1/chat/completions", "anthropic": "/v1/messages"}


def _remember(gw: Gateway, content: str, when: datetime) -> str:
    resp = httpx.post(gw.url + "/v1/memories", json={"content": content, "remind_at": when.isoformat()}, headers=AUTH)
    assert resp.status_code == 201, resp.text
    return str(resp.json()["memory"]["id"])


def _chat(gw: Gateway, door: str, text: str, *, stream: bool = False, reply: Reply | None = None) -> httpx.Response:
    gw.upstream.script(reply or Reply(text="ok", chunks=3))
    body: dict[str, Any] = {"model": "companion", "messages": [{"role": "user", "content": text}]}
    if door == "anthropic":
        body["max_tokens"] = 64
    if stream:
        body["stream"] = True
    return httpx.post(gw.url + DOORS[door], json=body, headers=AUTH, timeout=10)


def _sent(gw: Gateway) -> str:
    return json.dumps(gw.upstream.requests[-1].json, ensure_ascii=False)


def _reminders(gw: Gateway, status: str) -> list[dict[str, Any]]:
    resp = httpx.get(gw.url + "/v1/reminders", params={"status": status}, headers=AUTH)
    assert resp.status_code == 200, resp.text
    return list(resp.json()["items"])


def _now() -> datetime:
    return datetime.now(UTC)


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
@pytest.mark.parametrize("door", ["openai", "anthropic"])
def test_a_due_reminder_is_delivered_once_in_the_next_turn(make_gateway: MakeGateway, door: str, stream: bool) -> None:
    # Given a reminder that came due a minute ago and one for tomorrow
    gw = make_gateway()
    due = _remember(gw, "call mum about the trip", _now() - timedelta(minutes=1))
    _remember(gw, "water the plants", _now() + timedelta(days=1))
    # When the user chats
    resp = _chat(gw, door, "good morning", stream=stream)
    # Then the upstream saw the due reminder (not tomorrow's), after the memories, and it is delivered
    assert resp.status_code == 200
    sent = _sent(gw)
    assert "Reminders due now" in sent and "call mum about the trip" in sent
    assert "water the plants" not in sent
    assert resp.headers["x-engram-reason"] == "injected"
    delivered = _reminders(gw, "delivered")
    assert [r["memory_id"] for r in delivered] == [due] and delivered[0]["delivered_at"]
    assert [r["content"] for r in _reminders(gw, "upcoming")] == ["water the plants"]
    # And the next turn does not repeat it
    _chat(gw, door, "anything else?", stream=stream)
    assert "call mum" not in _sent(gw)


@pytest.mark.parametrize(
    "failure",
    [
        Reply(status=500, error_body={"error": {"message": "boom"}}),
        Reply(text="a long answer that is cut", chunks=5, drop_after=2),
    ],
    ids=["error-status", "cut-stream"],
)
def test_a_failed_turn_marks_nothing_and_the_next_turn_delivers(make_gateway: MakeGateway, failure: Reply) -> None:
    # Given a due reminder and a turn whose upstream fails (an error status, or a stream cut midway)
    gw = make_gateway()
    _remember(gw, "renew the passport", _now() - timedelta(minutes=5))
    _chat(gw, "openai", "hi", stream=True, reply=failure)
    assert "renew the passport" in _sent(gw)
    # Then it is still upcoming, and the next (successful) turn delivers it
    assert [r["content"] for r in _reminders(gw, "upcoming")] == ["renew the passport"]
    assert _reminders(gw, "delivered") == []
    assert _chat(gw, "openai", "hi again").status_code == 200
    assert "renew the passport" in _sent(gw)
    assert [r["content"] for r in _reminders(gw, "delivered")] == ["renew the passport"]


def test_two_concurrent_turns_deliver_it_once(make_gateway: MakeGateway) -> None:
    # Given a due reminder and two chats arriving at once (the upstream answers slowly)
    gw = make_gateway()
    _remember(gw, "take the medicine", _now() - timedelta(minutes=1))
    gw.upstream.script(Reply(text="a", first_byte_delay=0.5), Reply(text="b", first_byte_delay=0.5))
    body = {"model": "companion", "messages": [{"role": "user", "content": "hello"}]}
    with ThreadPoolExecutor(2) as pool:
        results = list(
            pool.map(lambda _: httpx.post(gw.url + DOORS["openai"], json=body, headers=AUTH, timeout=10), range(2))
        )
    # Then both answered, exactly one carried the reminder, and it is delivered
    assert [r.status_code for r in results] == [200, 200]
    carried = [req for req in gw.upstream.requests if "take the medicine" in json.dumps(req.json)]
    assert len(carried) == 1
    assert [r["content"] for r in _reminders(gw, "delivered")] == ["take the medicine"]


def test_a_long_past_due_reminder_is_listed_as_missed_not_injected(make_gateway: MakeGateway) -> None:
    gw = make_gateway()
    _remember(gw, "dentist appointment", _now() - timedelta(days=8))
    _chat(gw, "openai", "hello")
    assert "dentist" not in _sent(gw)
    assert [r["content"] for r in _reminders(gw, "missed")] == ["dentist appointment"]
    assert _reminders(gw, "upcoming") == []


def test_a_turn_with_memory_off_delivers_nothing(make_gateway: MakeGateway) -> None:
    gw = make_gateway()
    _remember(gw, "feed the cat", _now() - timedelta(minutes=1))
    gw.upstream.script(Reply(text="ok"))
    body = {"model": "companion", "messages": [{"role": "user", "content": "hi"}]}
    httpx.post(gw.url + DOORS["openai"], json=body, headers={**AUTH, "x-engram-memory": "off"}, timeout=10)
    assert "feed the cat" not in _sent(gw)
    assert [r["content"] for r in _reminders(gw, "upcoming")] == ["feed the cat"]


def test_snooze_and_cancel(make_gateway: MakeGateway) -> None:
    # Given a delivered reminder and a pending one
    gw = make_gateway()
    done = _remember(gw, "book the train", _now() - timedelta(minutes=1))
    _chat(gw, "openai", "hi")
    later = _remember(gw, "pay rent", _now() + timedelta(days=2))
    api = httpx.Client(base_url=gw.url, headers=AUTH)
    # When the delivered one is snoozed to the past... it is refused; to the future it fires again
    assert api.post(f"/v1/reminders/{done}/snooze", json={"until": "2001-01-01T00:00:00Z"}).status_code == 400
    until = (_now() + timedelta(hours=3)).replace(microsecond=0)
    snoozed = api.post(f"/v1/reminders/{done}/snooze", json={"until": until.isoformat()})
    assert snoozed.status_code == 200 and snoozed.json()["status"] == "pending"
    assert api.get(f"/v1/memories/{done}").json()["remind_at"] == until.isoformat().replace("+00:00", "Z")
    assert {r["content"] for r in _reminders(gw, "upcoming")} == {"book the train", "pay rent"}
    # And a cancelled one is gone from the lists, its memory stays without remind_at
    assert api.post(f"/v1/reminders/{later}/cancel").json()["status"] == "cancelled"
    assert [r["content"] for r in _reminders(gw, "upcoming")] == ["book the train"]
    assert api.get(f"/v1/memories/{later}").json()["remind_at"] is None
    # And errors are clear
    assert api.post(f"/v1/reminders/{later}/cancel").json()["error"]["code"] == "no_reminder"
    assert api.post("/v1/reminders/mem_nope/cancel").status_code == 404
    assert api.post(f"/v1/reminders/{done}/snooze", json={"until": 5}).status_code == 422
    assert api.get("/v1/reminders", params={"status": "soon"}).status_code == 422


def test_remind_me_in_chat_sets_a_reminder(make_gateway: MakeGateway) -> None:
    # Given a gateway in Berlin time
    gw = make_gateway(timezone="Europe/Berlin")
    # When the user asks in chat
    assert _chat(gw, "openai", "remind me tomorrow at 9 to call mum").status_code == 200
    # Then a reminder is set for 09:00 Berlin time tomorrow, stored before the answer ended
    [reminder] = _reminders(gw, "upcoming")
    assert reminder["content"] == "call mum"
    from zoneinfo import ZoneInfo

    berlin = ZoneInfo("Europe/Berlin")
    when = datetime.fromisoformat(reminder["remind_at"]).astimezone(berlin)
    assert (when.date() - _now().astimezone(berlin).date()).days == 1 and (when.hour, when.minute) == (9, 0)
    # And a plain "remember" without a day and time sets none
    _chat(gw, "openai", "remember that my shop opens at 9")
    assert len(_reminders(gw, "upcoming")) == 1
