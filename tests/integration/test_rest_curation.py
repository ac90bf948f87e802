"""Curation by hand over real HTTP (README, "Curating by hand"): the duplicate check, a merge drafted by the
extraction model (the scripted fake upstream on loopback, through the real OpenAI-compatible adapter),
confirmed and undone, the core candidates, and a consolidation draft run as a queued job."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest

from tests.conftest import READONLY_KEY, EngramServer
from tests.fakes import upstream


@pytest.fixture
def fake_upstream() -> Iterator[upstream.FakeUpstream]:
    with upstream.FakeUpstream() as up:
        yield up


@pytest.fixture
def with_model(make_server: Callable[..., EngramServer], fake_upstream: upstream.FakeUpstream) -> EngramServer:
    return make_server(
        upstream_base_url=fake_upstream.openai_base_url, chat_model="fake-chat", extract_model="fake-extract"
    )


def _remember(client: httpx.Client, content: str, **fields: Any) -> dict[str, Any]:
    resp = client.post("/v1/memories", json={"content": content, **fields})
    assert resp.status_code == 201, resp.text
    return dict(resp.json()["memory"])


def _until(client: httpx.Client, path: str, done: Callable[[dict[str, Any]], bool]) -> dict[str, Any]:
    deadline = time.monotonic() + 20
    while True:
        body = dict(client.get(path).json())
        if done(body) or time.monotonic() > deadline:
            return body
        time.sleep(0.05)


def test_check_says_what_a_save_would_do_and_writes_nothing(owner: httpx.Client) -> None:
    # Given a keyed memory
    city = _remember(owner, "Alice lives in Lyon", fact_key="profile:city")
    # When a changed value, the same value and a new text are checked
    changed = owner.post("/v1/memories/check", json={"content": "Alice lives in Paris", "fact_key": "profile:city"})
    same = owner.post("/v1/memories/check", json={"content": "alice lives in lyon", "fact_key": "profile:city"})
    new = owner.post("/v1/memories/check", json={"content": "Alice plays the cello"})
    # Then each answer names the action and the memory it would touch, with the nearest memories
    assert changed.status_code == 200, changed.text
    assert (changed.json()["action"], changed.json()["memory"]["id"]) == ("superseded", city["id"])
    assert same.json()["action"] == "seen"
    assert new.json()["action"] == "created" and new.json()["memory"] is None
    near = changed.json()["near"]
    assert near[0]["memory"]["id"] == city["id"] and 0 < near[0]["similarity"] <= 1
    # And nothing was written
    assert [m["id"] for m in owner.get("/v1/memories").json()["items"]] == [city["id"]]
    # And a bad body is a clear 422
    assert owner.post("/v1/memories/check", json={"content": ""}).status_code == 422
    # And a bad fact key is refused as a save refuses it, even with an external id already stored
    # (the save checks the key first; the check answered "existing" for it)
    owner.post("/v1/memories", json={"content": "Alice has a cat", "external_id": "check-ext-1"}).raise_for_status()
    for path in ("/v1/memories/check", "/v1/memories"):
        bad = owner.post(path, json={"content": "x", "external_id": "check-ext-1", "fact_key": "no colon here"})
        assert (bad.status_code, bad.json()["error"]["code"]) == (400, "invalid_fact_key"), path


def test_merge_drafted_by_the_model_confirmed_and_undone(
    with_model: EngramServer, fake_upstream: upstream.FakeUpstream
) -> None:
    with with_model.client() as owner:
        # Given two memories
        a = _remember(owner, "Alice drinks tea in the morning", tags=["tea"])
        b = _remember(owner, "Alice prefers green tea", importance=0.7)
        sources = [{"id": a["id"], "version": a["version"]}, {"id": b["id"], "version": b["version"]}]
        # When a merge is drafted
        fake_upstream.script(upstream.Reply(text=json.dumps({"content": "Alice drinks green tea each morning"})))
        draft = owner.post("/v1/memories/merge/draft", json={"sources": sources})
        # Then the model's text comes back with the fields suggested from the sources
        assert draft.status_code == 200, draft.text
        assert (draft.json()["content"], draft.json()["drafted_by"]) == ("Alice drinks green tea each morning", "model")
        assert (draft.json()["importance"], draft.json()["tags"]) == (0.7, ["tea"])
        assert "Alice prefers green tea" in fake_upstream.last().json["messages"][1]["content"]
        # When the person edits and confirms it
        merged = owner.post(
            "/v1/memories/merge",
            json={"sources": sources, "content": "Alice drinks green tea at 7", "type": "preference"},
        )
        # Then the sources are superseded by it
        assert merged.status_code == 201, merged.text
        memory = merged.json()["memory"]
        assert (memory["content"], memory["type"]) == ("Alice drinks green tea at 7", "preference")
        assert {s["superseded_by_id"] for s in merged.json()["sources"]} == {memory["id"]}
        assert [m["id"] for m in owner.get("/v1/memories").json()["items"]] == [memory["id"]]
        # When the same merge is sent again (the versions read are stale now)
        again = owner.post("/v1/memories/merge", json={"sources": sources, "content": "x"})
        assert again.status_code == 409 and again.json()["error"]["code"] == "version_conflict"
        # When it is undone
        undone = owner.post(f"/v1/memories/{memory['id']}/unmerge")
        # Then the sources are back as they were and the merged memory is gone
        assert undone.status_code == 200, undone.text
        listed = {m["id"]: m for m in owner.get("/v1/memories").json()["items"]}
        assert set(listed) == {a["id"], b["id"]}
        assert listed[a["id"]]["content"] == a["content"] and listed[a["id"]]["tags"] == ["tea"]
        assert owner.get(f"/v1/memories/{memory['id']}").status_code == 404
        # And a memory no merge made cannot be unmerged
        assert owner.post(f"/v1/memories/{a['id']}/unmerge").json()["error"]["code"] == "not_merged"


def test_merge_without_a_model_joins_the_texts_and_reads_need_write_scope(
    server: EngramServer, owner: httpx.Client
) -> None:
    # Given two memories on a server without a model
    a, b = _remember(owner, "Runs on Sundays"), _remember(owner, "Runs 10 km")
    sources = [{"id": a["id"]}, {"id": b["id"]}]
    # When a merge is drafted
    draft = owner.post("/v1/memories/merge/draft", json={"sources": sources}).json()
    # Then the texts are joined, and it says why
    assert (draft["content"], draft["drafted_by"]) == ("Runs on Sundays\nRuns 10 km", "joined")
    assert "no extraction model" in draft["note"]
    # And one source or a read-only key is refused
    assert owner.post("/v1/memories/merge/draft", json={"sources": sources[:1]}).status_code == 422
    with server.client(key=READONLY_KEY) as reader:
        assert reader.post("/v1/memories/merge", json={"sources": sources, "content": "x"}).status_code == 403
    # And a consolidation needs a model
    assert owner.post("/v1/consolidations", json={"memory_ids": [a["id"]]}).status_code == 503


def test_core_candidates_list_the_often_recalled(server: EngramServer, owner: httpx.Client) -> None:
    # Given a memory recalled into many chats and one not
    often, rare = _remember(owner, "Works as a nurse"), _remember(owner, "Visited Oslo once")
    store, clock = server.container.store, server.container.clock
    for _ in range(3):
        store.record_injected("alice", [often["id"]], clock.now())
    # When the candidates are listed
    items = owner.get("/v1/memories/core_candidates").json()["items"]
    # Then only the often recalled one is offered for promotion
    assert [i["memory"]["id"] for i in items] == [often["id"]]
    assert items[0]["why"] == "recalled into 3 chat turns"
    assert rare["id"] not in {i["memory"]["id"] for i in items}


def test_consolidation_draft_runs_as_a_job_and_applies_only_when_confirmed(
    with_model: EngramServer, fake_upstream: upstream.FakeUpstream
) -> None:
    with with_model.client() as owner:
        # Given three memories and a model that proposes one merge
        rows = [_remember(owner, t) for t in ("Tea at 7", "Drinks tea at seven", "Has a cat")]
        item = {"source_ids": [rows[0]["id"], rows[1]["id"]], "content": "Drinks tea at 7", "reason": "repeats"}
        fake_upstream.script(upstream.Reply(text=json.dumps({"items": [item]})))
        # When a draft of the day is started
        started = owner.post("/v1/consolidations", json={"since": "2000-01-01T00:00:00Z"})
        assert started.status_code == 202, started.text
        draft_id = started.json()["id"]
        ready = _until(owner, f"/v1/consolidations/{draft_id}", lambda d: d["state"] != "running")
        # Then the job drafted it with its progress, and every memory is still as it was
        assert (ready["state"], ready["done"], ready["total"], ready["memories"]) == ("ready", 1, 1, 3), ready
        assert ready["items"][0]["sources"][0]["memory"]["content"] == "Tea at 7"
        listed = owner.get("/v1/memories").json()["items"]
        assert sorted(m["version"] for m in listed) == [1, 1, 1]
        assert owner.get("/v1/consolidations").json()["items"][0]["item_count"] == 1
        # When the person accepts the item with an edit
        applied = owner.post(
            f"/v1/consolidations/{draft_id}/apply", json={"items": [{"id": "it1", "content": "Drinks tea at 7 sharp"}]}
        )
        # Then it is one merge
        assert applied.status_code == 200, applied.text
        result = applied.json()["results"][0]
        assert result["status"] == "applied"
        contents = sorted(m["content"] for m in owner.get("/v1/memories").json()["items"])
        assert contents == ["Drinks tea at 7 sharp", "Has a cat"]
        # And it cannot be applied again
        assert owner.post(f"/v1/consolidations/{draft_id}/apply", json={"items": []}).status_code == 409


def test_erase_for_good_needs_the_memory_or_thread_out_of_use_first(owner: httpx.Client) -> None:
    # Given an active memory and a live thread
    memory = _remember(owner, "Old address: Rue de la Paix")
    owner.post("/v1/ingest/messages", json={"messages": [{"role": "user", "content": "hi", "conversation_id": "t1"}]})
    # When they are erased while in use, Then it is refused and both stay
    assert owner.post(f"/v1/memories/{memory['id']}/erase", json={}).status_code == 422  # no confirmation
    still = owner.post(f"/v1/memories/{memory['id']}/erase", json={"confirm": True})
    assert still.status_code == 409 and still.json()["error"]["code"] == "still_active"
    assert owner.post("/v1/threads/t1/erase", json={"confirm": True}).json()["error"]["code"] == "not_deleted"
    # When they are deleted first, then erased (the memory at the version read)
    deleted = owner.delete(f"/v1/memories/{memory['id']}").json()
    confirm = {"confirm": True}
    assert (
        owner.post(
            f"/v1/memories/{memory['id']}/erase", params={"version": memory["version"]}, json=confirm
        ).status_code
        == 409
    )
    assert (
        owner.post(
            f"/v1/memories/{memory['id']}/erase", params={"version": deleted["version"]}, json=confirm
        ).status_code
        == 200
    )
    owner.delete("/v1/threads/t1").raise_for_status()
    assert owner.post("/v1/threads/t1/erase", json={"confirm": True}).json() == {"erased": "t1"}
    # Then both are gone for good
    assert owner.get(f"/v1/memories/{memory['id']}").status_code == 404
    assert owner.get("/v1/threads/t1").status_code == 404


def test_usage_is_reported_per_day_too(server: EngramServer, owner: httpx.Client) -> None:
    from datetime import timedelta

    from engram.domain.models import UsageRecord, new_id

    # Given usage on two days
    now = server.container.clock.now()
    for tokens, ago, thread in ((10, 0, "kyoto"), (20, 1, "oslo"), (5, 1, None)):
        record = UsageRecord(
            id=new_id("use"),
            namespace="alice",
            model="m",
            thread=thread,
            input_tokens=tokens,
            created_at=now - timedelta(days=ago),
        )
        server.container.store.append_usage(record)
    # When the report is read, Then each day has its sum, oldest first
    report = owner.get("/v1/usage", params={"days": 7}).json()
    assert [(d["requests"], d["input_tokens"]) for d in report["daily"]] == [(2, 25), (1, 10)]
    # And each thread its own, the most spent first (rows without a thread under null)
    assert [(t["thread"], t["input_tokens"]) for t in report["threads"]] == [("oslo", 20), ("kyoto", 10), (None, 5)]
    assert report["models"] == [{"model": "m", "requests": 3, "input_tokens": 35, "output_tokens": 0,
                                 "cache_read_tokens": 0, "cache_write_tokens": 0}]  # fmt: skip
