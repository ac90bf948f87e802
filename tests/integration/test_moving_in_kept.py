"""Moving in keeps everything, alive and linked (issue 21, item 4; README "Moving in").

The fixture files are written the way each system's exporter writes them (tests/fixtures/moving_in:
Aelios' Vectorize export and D1 fallback, a Pawwake schema-5 backup, mem0's OSS and platform
``get_all()``). Each is imported into a real store (in-memory and SQLite) with a manual clock, cleaned
up, listed and asked for due reminders."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from engram.bootstrap import Container
from engram.domain.models import Memory
from engram.services.transfer.engram_format import ExportDocument
from engram.services.transfer.other_formats import convert

from tests.conftest import EngramServer
from tests.fakes.clock import ManualClock
from tests.integration.clocked_store import clocked_container, comparable

FIXTURES = Path(__file__).parent.parent / "fixtures" / "moving_in"
NS = "default"
IMPORTED = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
FILES = {
    "pawwake_v5.json": "pawwake",
    "aelios_vectorize.json": "aelios",
    "aelios_d1.json": "aelios",
    "mem0_oss.json": "mem0",
    "mem0_platform.json": "mem0",
}


@pytest.fixture(params=["memory", "sqlite"])
def world(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[Container, ManualClock]]:
    yield from clocked_container(request.param, tmp_path, IMPORTED)


def _import(container: Container, file: str, namespace: str = NS) -> dict[str, Any]:
    conv = convert(FILES[file], (FIXTURES / file).read_text(encoding="utf-8"))
    return container.moving_in.run(namespace, conv)


def _all(container: Container, namespace: str = NS) -> dict[str, Memory]:
    return {m.content.split("\n")[-1]: m for m in container.store.iter_memories(namespace)}


def _active(container: Container, namespace: str = NS) -> set[str]:
    return {c for c, m in _all(container, namespace).items() if m.status == "active"}


@pytest.mark.parametrize("file", sorted(FILES))
def test_an_import_counts_as_seeing_and_survives_the_first_cleanup(
    world: tuple[Container, ManualClock], file: str
) -> None:
    # Given a file of memories years old, imported today
    container, clock = world
    _import(container, file)
    active = _active(container)
    assert active
    # When cleanup runs right after the import
    container.cleanup.run(NS)
    # Then nothing the person brought along expired
    assert _active(container) == active
    # And a month later without a sighting, only what may expire did: never pinned or core-layer ones
    clock.advance(days=31)
    container.cleanup.run(NS)
    for memory in _all(container).values():
        if memory.pinned or memory.layer == "core" or memory.type in ("identity", "persona"):
            assert memory.status != "expired", memory


@pytest.mark.parametrize("file", sorted(FILES))
def test_what_moved_in_exports_and_imports_again_unchanged(world: tuple[Container, ManualClock], file: str) -> None:
    # Given a file moved in and cleaned up
    container, clock = world
    _import(container, file)
    container.cleanup.run(NS)
    exported = container.transfer.export(NS)
    # When Engram's export of it is imported into another namespace a day later and exported again
    clock.advance(days=1)
    report = container.transfer.import_("copy", ExportDocument.model_validate(exported))
    assert sum(report["refused"].values()) == 0 and report["links_dropped"] == 0, report["problems"]
    # Then nothing changed: links, reminders and their state, last-seen times and expiry included
    assert comparable(container.transfer.export("copy")) == comparable(exported)


def test_a_source_s_own_last_seen_and_expiry_are_kept(world: tuple[Container, ManualClock]) -> None:
    container, _ = world
    _import(container, "aelios_d1.json")
    _import(container, "mem0_oss.json", "alice")
    _import(container, "aelios_vectorize.json", "vectorize")
    d1 = _all(container)
    # Aelios' D1 export carries its own last-seen time: kept; a row without one is seen at import
    assert d1["I am allergic to peanuts"].last_seen_at == datetime(2026, 11, 1, 8, 0, tzinfo=UTC)
    assert d1["Likes jazz on Sunday mornings"].last_seen_at == IMPORTED
    mem0 = _all(container, "alice")
    # mem0's expiration_date: passed -> comes in expired; in the future -> kept as the memory's expiry
    assert mem0["Visiting Kyoto in April 2024"].status == "expired"
    marathon = mem0["Training for the Lisbon marathon"]
    assert (marathon.status, marathon.expires_at) == ("active", datetime(2099, 1, 1, tzinfo=UTC))
    assert _all(container, "vectorize")["Conference in Porto this week"].status == "expired"


def test_pawwake_backup_links_are_applied_and_dangling_ones_reported(world: tuple[Container, ManualClock]) -> None:
    container, _ = world
    report = _import(container, "pawwake_v5.json")
    rows = _all(container)
    hike = rows["Hiked up to Pena palace in Sintra with Ana"]
    assert (hike.layer, hike.type, hike.status) == ("event", "event", "active")
    # merged_from: the sources are superseded by the merged event (not merely archived)
    for source in ("Walked up to Pena palace", "Ana came along to Sintra"):
        assert (rows[source].status, rows[source].superseded_by_id) == ("superseded", hike.id)
    assert hike.supersedes_id == rows["Walked up to Pena palace"].id
    # superseded_by: one chain, both ways
    old, new = rows["Works as a nurse at Santa Maria hospital"], rows["Works as a nurse at Sao Joao hospital"]
    assert (old.status, old.superseded_by_id, new.supersedes_id) == ("superseded", new.id, old.id)
    # And restoring the old version leaves one active memory in the chain, not two
    container.memories.restore(NS, old.id)
    after = _all(container)
    statuses = {c: after[c].status for c in (old.content, new.content)}
    assert sorted(statuses.values()) == ["active", "superseded"]
    # A link to a row in neither the file nor the store is dropped and reported; the row is archived
    alfama = rows["Lived in Alfama before the move"]
    assert (alfama.superseded_by_id, alfama.status, alfama.source_message_ids) == (None, "archived", ())
    dangling = [p for p in report["problems"] if p["code"] == "dangling_link"]
    assert report["links_dropped"] == 2 and len(dangling) == 2
    assert all(p["id"] == alfama.id for p in dangling) and "99" in dangling[0]["reason"]
    # The session each memory came from is kept as a tag, the delivered reminder as delivered
    assert "session:sess-4c2" in hike.tags
    call = rows["Call mum on Sunday evening"]
    reminder = container.store.find_reminder(NS, call.id)
    assert reminder is not None and reminder.status == "delivered"
    assert reminder.delivered_at == datetime(2024, 6, 2, 18, 1, 10, 250000, tzinfo=UTC)
    # Nothing of the file's own description is reported as lost
    assert not [k for k in report["dropped_fields"] if k.startswith("(top level)")]


def test_supersede_cycles_are_refused(world: tuple[Container, ManualClock]) -> None:
    container, _ = world
    backup = {
        "schema_version": 5,
        "memories": [
            {"backup_id": 20, "content": "Drives a blue car", "importance": 5, "layer": 1, "superseded_by": 21},
            {"backup_id": 21, "content": "Drives a red car", "importance": 5, "layer": 1, "superseded_by": 20},
            {"backup_id": 22, "content": "Rides a bike to work", "importance": 5, "layer": 1},
        ],
    }
    report = container.moving_in.run(NS, convert("pawwake", json.dumps(backup)))
    assert report["created"]["memories"] == 1 and report["refused"]["memories"] == 2
    assert {p["code"] for p in report["problems"]} == {"supersede_cycle"}
    assert set(_all(container)) == {"Rides a bike to work"}


def test_imported_reminders_are_armed_listed_and_told_when_due(world: tuple[Container, ManualClock]) -> None:
    container, clock = world
    _import(container, "pawwake_v5.json")
    _import(container, "aelios_d1.json")
    # Then both reminders to come are listed
    upcoming = {r["content"] for r in container.reminders.list(NS, "upcoming")}
    assert {"Dentist appointment at 9", "Likes jazz on Sunday mornings"} <= upcoming
    # And when the dentist's comes due, a chat turn is told it
    clock.set(datetime(2026, 12, 1, 8, 35, tzinfo=UTC))
    due = container.reminders.claim_due(NS, "turn-1")
    assert [d.memory.content for d in due] == ["Dentist appointment at 9"]


def test_an_out_of_range_date_is_one_reported_row(world: tuple[Container, ManualClock]) -> None:
    container, _ = world
    report = _import(container, "aelios_d1.json")
    (bad,) = [p for p in report["problems"] if p["outcome"] == "refused"]
    assert bad["code"] == "invalid_date" and bad["reason"].startswith("remind_at:")
    assert report["created"]["memories"] == 4


# -- out-of-range dates over HTTP: a 400 naming the field, never a 500 -------------------------------
FAR = "9999-12-31T23:59:59-14:00"


def test_out_of_range_dates_are_a_400_naming_the_field(server: EngramServer) -> None:
    with server.client() as owner:
        made = owner.post("/v1/memories", json={"content": "water the plants", "remind_at": "2030-01-01T09:00:00Z"})
        assert made.status_code == 201, made.text
        memory_id = made.json()["memory"]["id"]
        cases = [
            ("POST", "/v1/memories", {"content": "x y z", "remind_at": FAR}, "remind_at"),
            ("PATCH", f"/v1/memories/{memory_id}", {"remind_at": FAR}, "remind_at"),
            ("POST", f"/v1/reminders/{memory_id}/snooze", {"until": FAR}, "until"),
            (
                "POST",
                "/v1/ingest/messages",
                {"messages": [{"role": "user", "content": "hi", "created_at": FAR}]},
                "created_at",
            ),
            ("POST", "/v1/jobs/dream", {"date": "9999-12-31"}, "date"),
        ]
        for method, path, body, name in cases:
            resp = owner.request(method, path, json=body)
            assert resp.status_code == 400, (path, resp.status_code, resp.text)
            assert name in resp.json()["error"]["message"], (path, resp.text)
        # And in an import of Engram's own format, the one row is refused and reported, the rest imported
        document = {
            "memories": [
                {"id": "mem_far", "content": "a memory from the far future", "created_at": FAR, "updated_at": FAR},
                {"id": "mem_ok", "content": "a memory from today"},
            ],
            "messages": [{"role": "user", "content": "hello", "conversation_id": "t", "created_at": FAR}],
        }
        report = owner.post("/v1/import", json=document)
        assert report.status_code == 200, report.text
        body = report.json()
        assert body["created"]["memories"] == 1 and body["refused"] == {**body["refused"], "memories": 1, "messages": 1}
        reasons = {p["kind"]: p["reason"] for p in body["problems"]}
        assert reasons["memories"].startswith("created_at:") and reasons["messages"].startswith("created_at:")
