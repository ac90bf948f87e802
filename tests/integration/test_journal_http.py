"""The change journal over real HTTP (docs/journal.md): a dream run's changes with the model's reasons, a
hand edit over REST, an import, each listed in `GET /v1/runs`, undone with `POST /v1/runs/{id}/undo`
(a row changed since is a conflict), redone by undoing the undo; MCP `run_list` / `run_undo`.

Real parts: uvicorn on loopback, SQLite store and index, the local embedder. Only the model is scripted.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import httpx
import pytest

from tests.conftest import OTHER_KEY, READONLY_KEY, EngramServer
from tests.fakes.chat_model import ScriptedChatModel

_ids = itertools.count(1)


@pytest.fixture
def model() -> ScriptedChatModel:
    return ScriptedChatModel()


@pytest.fixture
def server(make_server: Callable[..., EngramServer], model: ScriptedChatModel) -> EngramServer:
    return make_server(timezone="Asia/Shanghai", overrides={"extract_model": model, "dream_model": model})


def _runs(client: httpx.Client) -> list[dict[str, Any]]:
    resp = client.get("/v1/runs")
    assert resp.status_code == 200, resp.text
    return list(resp.json()["items"])


def _changes(client: httpx.Client, run_id: str) -> list[dict[str, Any]]:
    resp = client.get(f"/v1/runs/{run_id}/changes")
    assert resp.status_code == 200, resp.text
    return list(resp.json()["items"])


def _undo(client: httpx.Client, run_id: str) -> dict[str, Any]:
    resp = client.post(f"/v1/runs/{run_id}/undo")
    assert resp.status_code == 200, resp.text
    return dict(resp.json())


def _memory(client: httpx.Client, memory_id: str) -> dict[str, Any]:
    return dict(client.get(f"/v1/memories/{memory_id}").json())


def test_a_dream_run_is_listed_with_its_changes_and_reasons_undone_and_redone(
    server: EngramServer, model: ScriptedChatModel
) -> None:
    with server.client() as owner:
        # Given a message of 2026-03-10, a memory to archive, and a dream plan that archives it with a reason
        message = {"role": "user", "content": "I ran the marathon!", "created_at": "2026-03-10T02:00:00Z"}
        resp = owner.post("/v1/ingest/messages", json={"messages": [message]})
        assert resp.status_code == 200, resp.text
        stale = owner.post("/v1/memories", json={"content": "The user is training for a marathon"}).json()["memory"]
        owner.put("/v1/digest", json={"content": "The user trains."})
        plan = {
            "date": "2026-03-10",
            "title": "Marathon day",
            "summary": "The user ran a marathon.",
            "sections": [],
            "important_excerpts": [
                {"quote": "I ran the marathon!", "reason": "a milestone", "tags": [], "source_message_ids": []}
            ],
            "memories_to_update": [],
            "memories_to_delete": [{"target_id": stale["id"], "reason": "the marathon is done"}],
        }
        model.script_json(plan)
        # When the day is dreamt
        assert owner.post("/v1/jobs/dream", json={"date": "2026-03-10"}).status_code == 200
        # Then the runs list shows the dream run first, with its counts; the hand edits before it too
        runs = _runs(owner)
        dream = runs[0]
        assert dream["kind"] == "job.dream" and dream["source"] == "job"
        assert dream["changes"]["memory.archive"] == 1 and dream["changes"]["precious.create"] == 1
        assert dream["changes"]["digest.rewrite"] == 1 and dream["detail"]["archived"] == 1
        assert [r["kind"] for r in runs[1:]] == ["edit", "edit"]  # the digest set, the memory written
        # And each change carries the rows before and after and the model's reason
        changes = {(c["row"], c["op"]): c for c in _changes(owner, dream["id"])}
        archived = changes[("memory", "archive")]
        assert archived["row_id"] == stale["id"] and archived["reason"] == "the marathon is done"
        assert (archived["before"]["status"], archived["after"]["status"]) == ("active", "archived")
        assert changes[("precious", "create")]["reason"] == "a milestone"
        digest = changes[("digest", "rewrite")]
        assert (digest["before"]["content"], digest["after"]["content"]) == (
            "The user trains.",
            "The user ran a marathon.",
        )
        # And the memory's own events list the change beside its other events
        events = owner.get(f"/v1/memories/{stale['id']}/events").json()["items"]
        assert "change" in [e["kind"] for e in events]
        # When the dream is undone
        undo = _undo(owner, dream["id"])
        # Then the memory is active again, the excerpt gone, the digest as before
        assert undo["conflicts"] == [] and undo["reverted"] == sum(dream["changes"].values())
        assert _memory(owner, stale["id"])["status"] == "active"
        assert owner.get("/v1/precious").json()["items"] == []
        assert owner.get("/v1/digest").json()["content"] == "The user trains."
        assert _runs(owner)[0]["kind"] == "undo" and _runs(owner)[0]["undoes"] == dream["id"]
        # When the undo is undone / Then the dream's changes are back
        redo = _undo(owner, undo["run_id"])
        assert redo["conflicts"] == []
        assert _memory(owner, stale["id"])["status"] == "archived"
        assert owner.get("/v1/digest").json()["content"] == "The user ran a marathon."


def test_a_hand_edit_is_a_run_and_a_later_edit_makes_its_undo_a_conflict(server: EngramServer) -> None:
    with server.client() as owner:
        # Given a memory, edited by hand over REST
        memory = owner.post("/v1/memories", json={"content": "The cat is called Mochi"}).json()["memory"]
        resp = owner.patch(f"/v1/memories/{memory['id']}", json={"content": "The cat is called Mochi-chan"})
        assert resp.status_code == 200, resp.text
        edit = _runs(owner)[0]
        assert (edit["kind"], edit["source"], edit["changes"]) == ("edit", "rest", {"memory.update": 1})
        assert edit["detail"]["route"] == f"PATCH /v1/memories/{memory['id']}"
        # And edited again afterwards
        owner.patch(f"/v1/memories/{memory['id']}", json={"content": "The cat is called Kiki"})
        # When the first edit is undone
        undo = _undo(owner, edit["id"])
        # Then the later edit stays, and the undo reports the conflict
        assert undo["reverted"] == 0
        assert [(c["row"], c["id"], c["error"]) for c in undo["conflicts"]] == [
            ("memory", memory["id"], "version_conflict")
        ]
        assert _memory(owner, memory["id"])["content"] == "The cat is called Kiki"
        # When the latest edit is undone / Then the text before it is back
        latest = _runs(owner)[1]  # the undo above changed nothing: not listed; [0] is itself
        assert latest["kind"] == "edit"
        assert _undo(owner, _runs(owner)[0]["id"])["reverted"] == 1
        assert _memory(owner, memory["id"])["content"] == "The cat is called Mochi-chan"
        # And reads change nothing and start no run
        count = len(_runs(owner))
        owner.get("/v1/memories")
        assert len(_runs(owner)) == count


def test_an_import_is_a_run_its_undo_removes_what_it_added(server: EngramServer) -> None:
    with server.client() as owner:
        # Given an export document of two memories and a glossary term
        now = datetime(2026, 1, 1, tzinfo=UTC).isoformat()
        document = {
            "memories": [
                {"id": "mem_imp_1", "content": "The user lives in Lisbon", "created_at": now, "updated_at": now},
                {"id": "mem_imp_2", "content": "The user plays the cello", "created_at": now, "updated_at": now},
            ],
            "glossary": [
                {"id": "gl_imp_1", "term": "Tia", "definition": "the user's aunt", "created_at": now, "updated_at": now}
            ],
        }
        # When it is imported
        resp = owner.post("/v1/import", json=document)
        assert resp.status_code == 200, resp.text
        run_id = resp.json()["run_id"]
        # Then the import is a run with its changes
        record = owner.get(f"/v1/runs/{run_id}").json()
        assert record["kind"] == "import" and record["changes"] == {"glossary.create": 1, "memory.create": 2}
        # When it is undone / Then the imported memories are deleted (restorable) and the term is gone
        undo = _undo(owner, run_id)
        assert undo["reverted"] == 3 and undo["conflicts"] == []
        assert [_memory(owner, m)["status"] for m in ("mem_imp_1", "mem_imp_2")] == ["deleted", "deleted"]
        assert owner.get("/v1/glossary").json()["items"] == []
        assert owner.get("/v1/memories").json()["items"] == []


def test_runs_are_namespaced_paged_and_need_their_scopes(server: EngramServer) -> None:
    with server.client() as owner:
        for n in range(3):
            owner.post("/v1/memories", json={"content": f"fact number {n}"})
        run_id = _runs(owner)[0]["id"]
        first = owner.get("/v1/runs", params={"limit": 2}).json()
        rest = owner.get("/v1/runs", params={"limit": 2, "cursor": first["next_cursor"]}).json()
        assert len(first["items"]) == 2 and len(rest["items"]) == 1 and rest["next_cursor"] is None
    with server.client(OTHER_KEY) as bob:
        assert bob.get("/v1/runs").json()["items"] == []
        assert bob.get(f"/v1/runs/{run_id}").status_code == 404
        assert bob.get(f"/v1/runs/{run_id}/changes").status_code == 404
        assert bob.post(f"/v1/runs/{run_id}/undo").json()["error"]["code"] == "run_not_found"
    with server.client(READONLY_KEY) as reader:
        assert reader.get("/v1/runs").status_code == 200
        assert reader.post(f"/v1/runs/{run_id}/undo").status_code == 403


def _tool(client: httpx.Client, name: str, **arguments: Any) -> dict[str, Any]:
    params = {"name": name, "arguments": arguments}
    body = {"jsonrpc": "2.0", "id": next(_ids), "method": "tools/call", "params": params}
    resp = client.post("/mcp", json=body, headers={"accept": "application/json, text/event-stream"})
    assert resp.status_code == 200, resp.text
    result = resp.json()["result"]
    assert not result.get("isError"), result
    return dict(json.loads(result["content"][0]["text"]))


def test_mcp_edits_are_runs_listed_and_undone_by_the_tools(server: EngramServer) -> None:
    with server.client() as owner:
        # Given a memory written by an MCP tool
        written = _tool(owner, "memory_remember", content="The user's bike is blue")
        # When the runs are listed over MCP / Then the tool call is a hand edit from MCP
        runs = _tool(owner, "run_list")["runs"]
        assert (runs[0]["kind"], runs[0]["source"], runs[0]["detail"]["tool"]) == ("edit", "mcp", "memory_remember")
        listed = _tool(owner, "run_list", run_id=runs[0]["id"])
        assert [(c["row"], c["op"]) for c in listed["changes"]] == [("memory", "create")]
        # When it is undone over MCP / Then the memory is deleted
        undo = _tool(owner, "run_undo", run_id=runs[0]["id"])
        assert undo["reverted"] == 1
        assert _memory(owner, written["memory"]["id"])["status"] == "deleted"
