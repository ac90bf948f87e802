"""Jobs over real HTTP: `POST /v1/jobs/{extract,dream,cleanup}`, `GET /v1/jobs`, scopes, namespaces,
and the scheduler started by the app lifespan.

Real parts: uvicorn on loopback, SQLite store and index, the local embedder. Only the model is scripted.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest
from engram.bootstrap import Overrides, build_container
from engram.entrypoints.http.app import create_app
from engram.settings import Settings

from tests.conftest import OTHER_KEY, READONLY_KEY, EngramServer, write_keys
from tests.fakes.chat_model import ScriptedChatModel
from tests.servers import serve_app


@pytest.fixture
def model() -> ScriptedChatModel:
    return ScriptedChatModel()


@pytest.fixture
def jobs_server(make_server: Callable[..., EngramServer], model: ScriptedChatModel) -> EngramServer:
    return make_server(timezone="Asia/Shanghai", overrides={"extract_model": model, "dream_model": model})


def memories_reply(*items: dict[str, Any]) -> str:
    return json.dumps({"memories": list(items)}, ensure_ascii=False)


def ingest(client: httpx.Client, *contents: str, at: datetime | None = None) -> list[str]:
    body = {
        "messages": [{"role": "user", "content": c, **({"created_at": at.isoformat()} if at else {})} for c in contents]
    }
    resp = client.post("/v1/ingest/messages", json=body)
    assert resp.status_code == 200, resp.text
    return [m["id"] for m in resp.json()["messages"]]


def test_extract_now_after_ingest_creates_memories_and_reviews(
    jobs_server: EngramServer, model: ScriptedChatModel
) -> None:
    # Given two messages ingested over REST and a model that extracts two facts
    with jobs_server.client() as owner:
        ids = ingest(owner, "我叫小林，住在杭州。", "maybe I'll adopt a cat")
        model.script(
            memories_reply(
                {
                    "content": "用户住在杭州",
                    "type": "fact",
                    "fact_key": "profile:city",
                    "importance": 0.8,
                    "confidence": 0.95,
                    "tags": ["城市"],
                    "source_message_ids": [ids[0]],
                },
                {
                    "content": "The user may adopt a cat",
                    "type": "fact",
                    "fact_key": None,
                    "importance": 0.4,
                    "confidence": 0.5,
                    "tags": [],
                    "source_message_ids": [ids[1]],
                },
            )
        )
        # When extraction is run now
        resp = owner.post("/v1/jobs/extract")
        # Then it reports what it did, and the memory and the review candidate are visible
        assert resp.status_code == 200, resp.text
        report = resp.json()
        assert report["messages"] == 2 and report["created"] == 1 and report["candidates"] == 1
        assert [ns["namespace"] for ns in report["namespaces"]] == ["alice"]
        memories = owner.get("/v1/memories").json()["items"]
        assert [m["content"] for m in memories] == ["用户住在杭州"]
        assert memories[0]["source_message_ids"] == [ids[0]]
        pending = owner.get("/v1/candidates").json()["items"]
        assert [c["content"] for c in pending] == ["The user may adopt a cat"]
        # When it runs again with nothing new, Then the model is not called
        again = owner.post("/v1/jobs/extract").json()
        assert again["messages"] == 0 and len(model.calls) == 1


def test_dream_a_date_then_refuse_to_repeat_unless_forced(jobs_server: EngramServer, model: ScriptedChatModel) -> None:
    with jobs_server.client() as owner:
        # Given messages on 2026-03-10 in Shanghai time and a memory to archive
        ingest(owner, "Today I finally finished the marathon!", at=datetime(2026, 3, 10, 2, 0, tzinfo=UTC))
        stale = owner.post("/v1/memories", json={"content": "The user is training for a marathon"}).json()["memory"]
        plan = {
            "date": "2026-03-10",
            "title": "Marathon day",
            "summary": "The user ran a marathon.",
            "sections": [{"heading": "Sport", "content": "Finished the marathon."}],
            "important_excerpts": [
                {
                    "quote": "Today I finally finished the marathon!",
                    "reason": "milestone",
                    "tags": ["sport"],
                    "source_message_ids": [],
                }
            ],
            "memories_to_update": [],
            "memories_to_delete": [{"target_id": stale["id"], "reason": "the marathon is done"}],
        }
        model.script_json(plan, plan)
        # When that day is dreamt over REST
        resp = owner.post("/v1/jobs/dream", json={"date": "2026-03-10"})
        # Then the memory is archived, the excerpt kept, the digest and the log written
        assert resp.status_code == 200, resp.text
        body = resp.json()
        assert body["date"] == "2026-03-10" and body["archived"] == 1 and body["excerpts"] == 1
        assert owner.get(f"/v1/memories/{stale['id']}").json()["status"] == "archived"
        assert [p["content"] for p in owner.get("/v1/precious").json()["items"]] == [
            "Today I finally finished the marathon!"
        ]
        assert owner.get("/v1/digest").json()["content"] == "The user ran a marathon."
        # When it is asked again, Then it is already done; forced, it runs again
        assert owner.post("/v1/jobs/dream", json={"date": "2026-03-10"}).json()["namespaces"][0]["status"] == (
            "already_done"
        )
        forced = owner.post("/v1/jobs/dream", json={"date": "2026-03-10", "force": True}).json()
        assert forced["namespaces"][0]["status"] == "done" and len(model.calls) == 2
        # And a malformed date is refused
        assert owner.post("/v1/jobs/dream", json={"date": "10.03.2026"}).status_code == 422


def test_cleanup_now_and_list_runs(jobs_server: EngramServer) -> None:
    with jobs_server.client() as owner:
        # Given a message 20 days old
        ingest(owner, "ancient history", at=datetime.now(UTC) - timedelta(days=20))
        ingest(owner, "fresh news")
        # When cleanup runs now
        resp = owner.post("/v1/jobs/cleanup")
        # Then the old message is gone and the run is listed
        assert resp.status_code == 200 and resp.json()["messages"] == 1
        runs = owner.get("/v1/jobs").json()["runs"]
        assert runs[0]["job"] == "cleanup" and runs[0]["messages"] == 1
        assert jobs_server.container.store.count_messages("alice") == 1


def test_jobs_need_the_admin_scope_and_act_on_the_callers_namespace(
    jobs_server: EngramServer, model: ScriptedChatModel
) -> None:
    # Given a read-only key and a key of another namespace
    with (
        jobs_server.client(READONLY_KEY) as reader,
        jobs_server.client(OTHER_KEY) as bob,
        jobs_server.client() as alice,
    ):
        ingest(alice, "alice's secret plan")
        # When the read-only key asks for a run, Then it is forbidden
        for job in ("extract", "dream", "cleanup"):
            assert reader.post(f"/v1/jobs/{job}").status_code == 403
        assert reader.get("/v1/jobs").status_code == 403
        # When bob runs extraction, Then only bob's (empty) namespace is read
        report = bob.post("/v1/jobs/extract").json()
        assert [ns["namespace"] for ns in report["namespaces"]] == ["bob"] and model.calls == []
        assert bob.get("/v1/jobs").json()["runs"][0]["messages"] == 0
        assert alice.get("/v1/jobs").json()["runs"] == []


def test_without_a_model_extraction_answers_503_not_configured(make_server: Callable[..., EngramServer]) -> None:
    server = make_server()
    with server.client() as owner:
        resp = owner.post("/v1/jobs/extract")
    assert resp.status_code == 503
    assert "ENGRAM_EXTRACT_MODEL" in resp.text


def test_the_scheduler_runs_inside_the_server_only_when_enabled(tmp_path: Any) -> None:
    # Given two apps, one with the scheduler on and one off
    apps = []
    for enabled in (True, False):
        data = tmp_path / f"s{enabled}"
        data.mkdir()
        settings = Settings(
            store="memory",
            search="memory",
            embedder="none",
            data_dir=data,
            keys_file=write_keys(data / "keys.json"),
            scheduler_enabled=enabled,
        )
        container = build_container(
            settings, Overrides(extract_model=ScriptedChatModel(default='{"memories": []}'), dream_model=None)
        )
        apps.append((create_app(container), container))
    # When each is served, Then only the first has a running scheduler with its jobs
    for (app, container), enabled in zip(apps, (True, False), strict=True):
        with serve_app(app) as url:
            assert httpx.get(f"{url}/health").status_code == 200
            scheduler = getattr(app.state, "scheduler", None)
            if enabled:
                assert scheduler is not None
                assert [j.name for j in scheduler.jobs] == ["extract", "cleanup"]  # no dream model: no dream job
            else:
                assert scheduler is None
        container.close()


def test_a_run_now_writes_the_replica_snapshot_like_a_scheduled_run(
    make_server: Callable[..., EngramServer], model: ScriptedChatModel
) -> None:
    # Given a server on the replica index and a model that extracts one fact
    server = make_server(search="replica", embedder="none", replica_sync_seconds=0, overrides={"extract_model": model})
    with server.client() as owner:
        ingest(owner, "I keep bees on the roof")
        fact = {"content": "The user keeps bees on the roof", "type": "fact", "importance": 0.8, "confidence": 0.95}
        model.script(memories_reply(fact))
        # When the owner runs extraction now over REST
        resp = owner.post("/v1/jobs/extract")
        assert resp.status_code == 200 and resp.json()["created"] == 1, resp.text
    # Then the run wrote the snapshot of the changed namespace, as the scheduled run does:
    # nothing is left changed since the last snapshot
    assert (server.data_dir / "snapshots").is_dir()
    assert server.container.jobs.snapshot() == 0
