"""The ``CandidateRows`` contract (review candidates; domain/ports.py): every store in ``STORE_FACTORIES``."""

from __future__ import annotations

import pytest
from engram.domain.errors import Conflict, NotFound
from engram.domain.ports import CandidateRows

from tests.contract.rows import (
    NS,
    OTHER,
    a_candidate,
    all_pages,
    at,
    ids,
)


def test_the_store_implements_candidate_rows(store: CandidateRows) -> None:
    assert isinstance(store, CandidateRows)


def test_candidate_insert_get_update(store: CandidateRows) -> None:
    # Given a pending candidate
    candidate = store.insert_candidate(
        a_candidate("c1", fact_key="pref:tea", tags=("x",), source_message_ids=("msg1",), target_memory_id="m1")
    )
    assert store.get_candidate(NS, "c1") == candidate
    # When it is approved
    approved = candidate.model_copy(
        update={"status": "approved", "result_memory_id": "m2", "decision_note": "ok", "decided_at": at(9)}
    )
    store.update_candidate(approved)
    # Then the next read sees the decision
    assert store.get_candidate(NS, "c1") == approved


def test_candidate_errors(store: CandidateRows) -> None:
    # Given one candidate
    store.insert_candidate(a_candidate("c1"))
    # Then a duplicate id conflicts, and unknown ids are NotFound for reads and updates
    with pytest.raises(Conflict):
        store.insert_candidate(a_candidate("c1"))
    with pytest.raises(NotFound):
        store.get_candidate(NS, "nope")
    with pytest.raises(NotFound):
        store.update_candidate(a_candidate("nope"))
    with pytest.raises(NotFound):
        store.get_candidate(OTHER, "c1")


def test_list_candidates_by_status_with_pages(store: CandidateRows) -> None:
    # Given pending and decided candidates, and one in another namespace
    for n in range(1, 5):
        store.insert_candidate(a_candidate(f"p{n}", minute=n))
    store.insert_candidate(a_candidate("d1", minute=9, status="discarded"))
    store.insert_candidate(a_candidate("x1", namespace=OTHER))
    # When listed by status, and for every status, in pages
    pending = all_pages(lambda cursor: store.list_candidates(NS, limit=3, cursor=cursor))
    every = all_pages(lambda cursor: store.list_candidates(NS, None, limit=3, cursor=cursor))
    # Then each listing is newest first and continues across pages
    assert pending == [["p4", "p3", "p2"], ["p1"]]
    assert every == [["d1", "p4", "p3"], ["p2", "p1"]]
    assert ids(store.list_candidates(NS, "discarded").items) == ["d1"]
    assert ids(store.list_candidates(OTHER).items) == ["x1"]
