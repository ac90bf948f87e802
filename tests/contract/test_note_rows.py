"""The ``NoteRows`` contract (precious notes, glossary, digest, daily logs; domain/ports.py).

Run against every store in ``STORE_FACTORIES``.
"""

from __future__ import annotations

import pytest
from engram.domain.errors import Conflict, NotFound
from engram.domain.models import (
    DailyLog,
    Digest,
    Precious,
)
from engram.domain.ports import NoteRows

from tests.contract.rows import (
    NS,
    OTHER,
    T0,
    a_precious,
    a_term,
    at,
    ids,
)


def test_the_store_implements_note_rows(store: NoteRows) -> None:
    assert isinstance(store, NoteRows)


def test_precious_insert_list_delete(store: NoteRows) -> None:
    # Given three precious notes and one in another namespace
    full = Precious(
        id="p0",
        namespace=NS,
        content="«keep this»",
        reason="vow",
        tags=("t",),
        source_message_ids=("m",),
        created_at=T0,
    )
    store.insert_precious(full)
    store.insert_precious(a_precious("p1", minute=1))
    store.insert_precious(a_precious("p2", minute=2))
    store.insert_precious(a_precious("px", namespace=OTHER))
    # Then they list newest first, limited, round-tripped
    assert ids(store.list_precious(NS)) == ["p2", "p1", "p0"]
    assert ids(store.list_precious(NS, limit=1)) == ["p2"]
    assert store.list_precious(NS)[-1] == full
    with pytest.raises(Conflict):
        store.insert_precious(a_precious("p1"))
    # When one is deleted / Then it is gone; unknown ids and other namespaces' ids are NotFound
    store.delete_precious(NS, "p1")
    assert ids(store.list_precious(NS)) == ["p2", "p0"]
    with pytest.raises(NotFound):
        store.delete_precious(NS, "p1")
    with pytest.raises(NotFound):
        store.delete_precious(NS, "px")
    assert ids(store.list_precious(OTHER)) == ["px"]


def test_glossary_put_get_list_delete(store: NoteRows) -> None:
    # Given terms stored out of alphabetical order, mixed case
    store.put_glossary_term(a_term("g1", "zettel"))
    store.put_glossary_term(a_term("g2", "Alpha").model_copy(update={"aliases": ("α", "A")}))
    store.put_glossary_term(a_term("g3", "beta"))
    store.put_glossary_term(a_term("gx", "alpha", namespace=OTHER))
    # Then they list alphabetically ignoring case, and read back whole
    assert [t.term for t in store.list_glossary(NS)] == ["Alpha", "beta", "zettel"]
    assert store.get_glossary_term(NS, "g2").aliases == ("α", "A")
    # When a term is put again under the same id / Then it is replaced
    replaced = a_term("g3", "Beta").model_copy(update={"definition": "second letter", "updated_at": at(5)})
    store.put_glossary_term(replaced)
    assert store.get_glossary_term(NS, "g3") == replaced
    assert len(store.list_glossary(NS)) == 3
    # When one is deleted / Then it is gone; unknown and foreign ids are NotFound
    store.delete_glossary_term(NS, "g1")
    with pytest.raises(NotFound):
        store.get_glossary_term(NS, "g1")
    with pytest.raises(NotFound):
        store.delete_glossary_term(NS, "g1")
    with pytest.raises(NotFound):
        store.get_glossary_term(NS, "gx")
    assert [t.id for t in store.list_glossary(OTHER)] == ["gx"]


def test_digest_put_and_replace(store: NoteRows) -> None:
    # Given no digest
    assert store.get_digest(NS) is None
    # When one is put, then replaced
    store.put_digest(Digest(namespace=NS, content="first", updated_at=T0))
    latest = store.put_digest(Digest(namespace=NS, content="second", updated_at=at(1)))
    # Then the latest is read back, and only in its namespace
    assert store.get_digest(NS) == latest
    assert store.get_digest(OTHER) is None


def test_daily_logs(store: NoteRows) -> None:
    # Given logs for three dates, one in another namespace
    sections = ({"heading": "Work", "body": "shipped"},)
    for date in ("2025-03-01", "2025-03-03", "2025-03-02"):
        store.put_daily_log(DailyLog(namespace=NS, date=date, title=date, sections=sections, created_at=T0))
    store.put_daily_log(DailyLog(namespace=OTHER, date="2025-03-09", created_at=T0))
    # When a date is written again / Then it replaces that date's log
    rewritten = store.put_daily_log(DailyLog(namespace=NS, date="2025-03-02", summary="redo", created_at=at(1)))
    assert store.get_daily_log(NS, "2025-03-02") == rewritten
    assert store.get_daily_log(NS, "2025-03-01") == DailyLog(
        namespace=NS, date="2025-03-01", title="2025-03-01", sections=sections, created_at=T0
    )
    assert store.get_daily_log(NS, "2025-03-09") is None
    # And listings are newest date first, limited
    assert [log.date for log in store.list_daily_logs(NS)] == ["2025-03-03", "2025-03-02", "2025-03-01"]
    assert [log.date for log in store.list_daily_logs(NS, limit=2)] == ["2025-03-03", "2025-03-02"]
    assert [log.date for log in store.list_daily_logs(OTHER)] == ["2025-03-09"]
