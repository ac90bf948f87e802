"""Domain rules: fact keys, content limits, upsert decisions, retention, digest."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from engram.domain.errors import InvalidInput
from engram.domain.models import Memory
from engram.domain.policies import (
    clean_content,
    clean_tags,
    decide_upsert,
    expires_by_retention,
    normalize_fact_key,
    numeric_tokens,
    truncate_digest,
)

NOW = datetime(2026, 11, 1, tzinfo=UTC)


def _memory(**fields: object) -> Memory:
    base: dict[str, object] = {"id": "mem_1", "namespace": "n", "content": "x", "created_at": NOW, "updated_at": NOW}
    return Memory.model_validate(base | fields)


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("pet:cat_name", "pet:cat_name"),
        ("  Pet:Cat Name ", "pet:cat_name"),
        ("home:城市", "home:城市"),
        ("work:project/engram-v2.1", "work:project/engram-v2.1"),
    ],
)
def test_fact_keys_normalize(raw: str, expected: str) -> None:
    assert normalize_fact_key(raw) == expected


@pytest.mark.parametrize(
    "raw", ["", "nocolon", ":slug", "cat:", "1cat:x", "cat:a:b", "c" * 41 + ":x", "cat:" + "s" * 121]
)
def test_invalid_fact_keys_are_rejected(raw: str) -> None:
    with pytest.raises(InvalidInput) as err:
        normalize_fact_key(raw)
    assert err.value.code == "invalid_fact_key"


def test_content_and_tags_limits() -> None:
    assert clean_content("  hi  ") == "hi"
    with pytest.raises(InvalidInput):
        clean_content(" \n ")
    with pytest.raises(InvalidInput):
        clean_content("x" * 4001)
    assert clean_tags([" a", "a", "", "b"]) == ("a", "b")
    with pytest.raises(InvalidInput):
        clean_tags([f"t{i}" for i in range(21)])


def test_upsert_decisions() -> None:
    old = _memory(content="My cat is called Mochi")
    assert decide_upsert(None, "x", None, 0.96).action == "create"
    assert decide_upsert(old, "my cat is called mochi!", None, 0.96).action == "seen"
    assert decide_upsert(old, "My cat is named Mochi", 0.99, 0.96).action == "seen"
    assert decide_upsert(old, "My cat is called Tofu", 0.93, 0.96).action == "supersede"
    assert decide_upsert(old, "My cat is called Tofu", None, 0.96).action == "supersede"


def test_changed_numbers_always_supersede_even_when_embeddings_agree() -> None:
    old = _memory(content="I am 30 years old")
    decision = decide_upsert(old, "I am 31 years old", 0.99, 0.96)
    assert decision.action == "supersede" and "numbers" in decision.reason
    assert numeric_tokens("Standup at 9:30, room B2") == {"9", "30", "b2"}


def test_retention_spares_pinned_identity_persona_and_recently_seen() -> None:
    old = NOW - timedelta(days=200)
    assert expires_by_retention(_memory(created_at=old, updated_at=old), NOW, 180)
    assert not expires_by_retention(_memory(created_at=old, updated_at=old, pinned=True), NOW, 180)
    assert not expires_by_retention(_memory(created_at=old, updated_at=old, type="identity"), NOW, 180)
    assert not expires_by_retention(_memory(created_at=old, updated_at=old, type="persona"), NOW, 180)
    assert not expires_by_retention(_memory(created_at=old, updated_at=old, last_seen_at=NOW), NOW, 180)
    assert not expires_by_retention(_memory(created_at=old, updated_at=old, status="archived"), NOW, 180)


def test_digest_is_cut_to_500_characters() -> None:
    assert truncate_digest("short") == "short"
    cut = truncate_digest("w" * 800)
    assert len(cut) == 500 and cut.endswith("…")


def test_ids_sort_in_creation_order_even_within_one_millisecond() -> None:
    from engram.domain.models import new_id

    ids = [new_id("evt") for _ in range(2000)]
    assert ids == sorted(ids) and len(set(ids)) == len(ids)
