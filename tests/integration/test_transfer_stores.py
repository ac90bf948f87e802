"""Export -> import -> import again on every store (in-memory, SQLite, DynamoDB under moto): ids and
references kept, the second import adds nothing."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from engram.adapters.clock import SystemClock
from engram.adapters.search.inmemory import InMemorySearchIndex
from engram.domain.models import DailyLog
from engram.domain.ports import MemoryStore
from engram.services.library.candidates import CandidateService
from engram.services.library.memories import MemoryRules, MemoryService, MemoryWrite
from engram.services.library.messages import MessageIn, MessageService
from engram.services.library.notes import GlossaryIn, NoteService
from engram.services.transfer.engram_format import ExportDocument, TransferService

from tests.configs import config
from tests.contract.conftest import STORE_FACTORIES


@pytest.fixture(params=list(STORE_FACTORIES))
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[MemoryStore]:
    # The services below run on the real clock; the store shares it.
    with STORE_FACTORIES[request.param](tmp_path, SystemClock()) as adapter:
        yield adapter


def _without(doc: dict[str, Any], *drop: str) -> dict[str, Any]:
    kinds = ("memories", "candidates", "messages", "precious", "glossary", "daily_logs")
    return {k: sorted(repr({f: v for f, v in r.items() if f not in drop}) for r in doc[k]) for k in kinds} | {
        "digest": (doc["digest"] or {}).get("content")
    }


def test_round_trip_keeps_ids_and_importing_twice_adds_nothing(store: MemoryStore) -> None:
    # Given a namespace with a version chain, a note, a term, a message, a candidate and a digest
    clock = SystemClock()
    memories = MemoryService(store, InMemorySearchIndex(), None, clock, config(MemoryRules))
    notes = NoteService(store, clock)
    memories.write("alice", MemoryWrite(content="Lives in Berlin", fact_key="home:city"))
    memories.write("alice", MemoryWrite(content="Lives in Lisbon", fact_key="home:city"))
    notes.add_precious("alice", "A quote to keep")
    notes.set_term("alice", GlossaryIn(term="LX", aliases=["Lisboa"], definition="Lisbon"))
    MessageService(store, clock).ingest("alice", [MessageIn(role="user", content="hello", id="x1")])
    notes.set_digest("alice", "Moved to Lisbon.")
    store.put_daily_log(DailyLog(namespace="alice", date="2026-03-10", title="Moving day", created_at=clock.now()))
    CandidateService(store, memories, clock).propose("alice", "Might take up surfing")
    transfer = TransferService(store, memories, clock)
    exported = transfer.export("alice")
    # When it is imported into bob twice
    first = transfer.import_("bob", ExportDocument.model_validate(exported))
    second = transfer.import_("bob", ExportDocument.model_validate(exported))
    # Then bob holds the same rows with the same ids, and the second import created nothing
    assert sum(first["created"].values()) == 8 and sum(first["refused"].values()) == 0
    # (the thread its message made is one more row: an untitled thread has nothing to set, so it is skipped)
    assert sum(second["created"].values()) == 0 and sum(second["skipped"].values()) == 9
    assert _without(transfer.export("bob"), "index_ref", "stored_at") == _without(exported, "index_ref", "stored_at")
    assert store.find_active_by_fact_key("bob", "home:city").content == "Lives in Lisbon"  # type: ignore[union-attr]
