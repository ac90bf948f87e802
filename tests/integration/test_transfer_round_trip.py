"""Engram's own export -> import -> export is lossless (issue 21, item 4): memories with their version
chains and reminders in every state, messages, thread titles and the recycle bin, token usage, notes,
glossary, digest, daily logs and candidates; the two exports are compared whole. And an import is held
to the API's limits (a skill's agents)."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from engram.bootstrap import Container
from engram.domain.models import DailyLog, UsageRecord
from engram.services.library.memories import MemoryWrite
from engram.services.library.messages import MessageIn
from engram.services.library.notes import GlossaryIn
from engram.services.transfer.engram_format import ExportDocument

from tests.fakes.clock import ManualClock
from tests.integration.clocked_store import clocked_container, comparable

START = datetime(2026, 11, 2, 9, 0, tzinfo=UTC)


@pytest.fixture(params=["memory", "sqlite"])
def world(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[Container, ManualClock]]:
    yield from clocked_container(request.param, tmp_path, START)


def _fill(c: Container, clock: ManualClock, ns: str) -> None:
    """A namespace with a bit of everything, written through the services as a person would."""
    c.messages.ingest(
        ns,
        [
            MessageIn(role="user", content="we moved to Lisbon", conversation_id="move"),
            MessageIn(role="assistant", content="Congratulations!", conversation_id="move"),
            MessageIn(role="user", content="old chat", conversation_id="old"),
        ],
    )
    c.threads.rename(ns, "move", "Moving house")
    c.threads.delete(ns, "old")
    c.memories.write(ns, MemoryWrite(content="Lives in Porto", fact_key="home:city"))
    clock.advance(minutes=1)
    c.memories.write(ns, MemoryWrite(content="Lives in Lisbon", fact_key="home:city", pinned=True))
    soon = c.memories.write(ns, MemoryWrite(content="Dentist", remind_at=START + timedelta(days=3))).memory
    done = c.memories.write(ns, MemoryWrite(content="Call mum", remind_at=START + timedelta(minutes=30))).memory
    gone = c.memories.write(ns, MemoryWrite(content="Pay rent", remind_at=START + timedelta(days=9))).memory
    c.reminders.cancel(ns, gone.id)
    clock.advance(hours=1)
    assert [d.memory.id for d in c.reminders.claim_due(ns, "turn")] == [done.id]
    c.reminders.settle(ns, "turn", [done.id], delivered=True)
    assert soon.remind_at is not None
    c.store.append_usage(
        UsageRecord(
            id="use_1",
            namespace=ns,
            model="fake-chat",
            input_tokens=120,
            output_tokens=9,
            cache_read_tokens=100,
            created_at=clock.now(),
        )
    )
    c.notes.add_precious(ns, "You said: home is where the cat is", reason="kept verbatim")
    c.notes.set_term(ns, GlossaryIn(term="Miso", aliases=["the cat"], definition="the user's cat"))
    c.notes.set_digest(ns, "Moved from Porto to Lisbon in November.")
    c.store.put_daily_log(
        DailyLog(
            namespace=ns,
            date="2026-11-01",
            title="Moving day",
            summary="Boxes.",
            sections=[{"heading": "Home", "content": "Lisbon"}],
            created_at=clock.now(),
        )
    )
    c.candidates.propose(ns, "Might adopt a second cat", type="fact", source="extraction")


def test_export_import_export_is_lossless(world: tuple[Container, ManualClock]) -> None:
    container, clock = world
    _fill(container, clock, "home")
    first = container.transfer.export("home")
    # Then the export carries the thread titles, the usage and each reminder's state
    assert {t["id"]: t["title"] for t in first["threads"]} == {"move": "Moving house", "old": None}
    assert [u["id"] for u in first["usage"]] == ["use_1"]
    states = {m["content"]: (m.get("reminder") or {}).get("status") for m in first["memories"]}
    assert (states["Dentist"], states["Call mum"], states["Pay rent"]) == ("pending", "delivered", "cancelled")
    # When it is imported into a new namespace (a day later) and exported again
    clock.advance(days=1)
    report = container.transfer.import_("restored", ExportDocument.model_validate(first))
    assert sum(report["refused"].values()) == 0, report["problems"]
    second = container.transfer.export("restored")
    # Then the two exports are the same, row for row
    assert comparable(second) == comparable(first)
    # And the restored reminders are live: the pending one is listed
    assert [r["content"] for r in container.reminders.list("restored", "upcoming")] == ["Dentist"]


def test_an_imported_skill_is_held_to_the_api_s_limit_of_agents(world: tuple[Container, ManualClock]) -> None:
    container, _ = world
    skill = {
        "name": "review-code",
        "versions": [{"version": 1, "content": "Review the diff line by line."}],
        "agents": [f"agent-{n}" for n in range(500)],
    }
    report = container.transfer.import_("home", ExportDocument.model_validate({"skills": [skill]}))
    assert report["refused"]["skills"] == 1 and "at most 50 agents" in report["problems"][0]["reason"]
    assert container.transfer.export("home")["skills"] == []
