"""An imported reminder fires (issue 21, item 4): moved in over `POST /v1/import?from=pawwake` and restored
from Engram's own export, it is listed by `/v1/reminders` and told in the first chat turn after it comes
due, through the real chat door with the scripted fake upstream and a manual clock."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx

from tests.fakes.clock import ManualClock
from tests.fakes.upstream import Reply
from tests.integration.chat_support import OWNER_KEY, make_gateway, upstream

__all__ = ["make_gateway", "upstream"]

AUTH = {"authorization": f"Bearer {OWNER_KEY}"}
NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)


def test_a_moved_in_and_a_restored_reminder_are_listed_and_told_when_due(make_gateway: Any) -> None:
    clock = ManualClock(NOW)
    gw = make_gateway(clock=clock, timezone="UTC")
    due = NOW + timedelta(hours=1)
    backup = {
        "schema_version": 5,
        "memories": [
            {
                "backup_id": 1,
                "content": "Pick up the parcel",
                "importance": 6,
                "layer": 2,
                "created_at": "2026-11-29 10:00:00.000000+00:00",
                "remind_at": due.isoformat(sep=" "),
            },
        ],
    }
    moved = httpx.post(gw.url + "/v1/import?from=pawwake", json=backup, headers=AUTH)
    assert moved.status_code == 200 and moved.json()["reminders_armed"] == 1, moved.text
    restore = {
        "memories": [
            {
                "id": "mem_restored",
                "content": "Water the plants",
                "remind_at": due.isoformat(),
                "reminder": {"remind_at": due.isoformat(), "status": "pending", "delivered_at": None},
            }
        ]
    }
    restored = httpx.post(gw.url + "/v1/import", json=restore, headers=AUTH)
    assert restored.status_code == 200 and restored.json()["reminders_armed"] == 1, restored.text
    # Then both are listed as upcoming
    listed = httpx.get(gw.url + "/v1/reminders", params={"status": "upcoming"}, headers=AUTH).json()["items"]
    assert sorted(r["content"] for r in listed) == ["Pick up the parcel", "Water the plants"]
    # When the first chat turn after they came due goes through the gateway
    clock.set(due + timedelta(minutes=5))
    gw.upstream.script(Reply(text="Sure."))
    body = {"model": "companion", "messages": [{"role": "user", "content": "good afternoon"}]}
    assert httpx.post(gw.url + "/v1/chat/completions", json=body, headers=AUTH, timeout=10).status_code == 200
    # Then the upstream was told both, and they are delivered
    sent = json.dumps(gw.upstream.requests[-1].json, ensure_ascii=False)
    assert "Reminders due now" in sent and "Pick up the parcel" in sent and "Water the plants" in sent
    delivered = httpx.get(gw.url + "/v1/reminders", params={"status": "delivered"}, headers=AUTH).json()["items"]
    assert len(delivered) == 2
