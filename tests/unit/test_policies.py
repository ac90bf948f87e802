"""Domain rules: fact keys, content limits, upsert decisions, retention, digest."""

from __future__ import annotations

import os
import re
import time
from datetime import UTC, datetime, timedelta

import pytest
from engram.domain.errors import InvalidInput
from engram.domain.models import Memory
from engram.domain.policies import (
    FACT_KEY_PATTERN,
    clean_content,
    clean_tags,
    decide_upsert,
    expires_by_retention,
    normalize_fact_key,
    truncate_digest,
)
from engram.domain.skills import AGENT_ID_PATTERN, SKILL_NAME_PATTERN, agent_id, skill_name
from hypothesis import example, given, settings
from hypothesis import strategies as st

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
    assert decide_upsert(old, "My cat is really called Mochi now", None, 0.96).action == "seen"
    assert decide_upsert(old, "My cat is called Tofu", 0.93, 0.96).action == "supersede"
    assert decide_upsert(old, "My cat is called Tofu", None, 0.96).action == "supersede"


def test_an_explicit_write_with_changed_text_supersedes_however_close_the_embeddings() -> None:
    # Given a keyed fact, When an explicit write rewords it (cosine 0.99)
    old = _memory(content="My cat is called Mochi")
    explicit = decide_upsert(old, "My cat is named Mochi", 0.99, 0.96)
    inferred = decide_upsert(old, "My cat is named Mochi", 0.99, 0.96, explicit=False)
    # Then the explicit write supersedes; a machine-written one may be folded by cosine
    assert (explicit.action, explicit.reason) == ("supersede", "content changed")
    assert inferred.action == "seen" and "cosine" in inferred.reason


@pytest.mark.parametrize(
    ("old", "new", "reason"),
    [
        ("I am 30 years old", "I am 31 years old", "numbers changed"),
        ("The user has two cats and a dog at home.", "The user has three cats and a dog at home.", "numbers"),
        ("The user's sister is called Anna.", "The user's sister is called Maria.", "names or places"),
        ("Alice loves Bob", "Bob loves Alice", "names or places"),
        ("The user lives in Berlin.", "The user lives in Munich.", "names or places"),
        ("The gym is on Monday and Thursday.", "The gym is on Tuesday and Thursday.", "names or places"),
        ("The user is allergic to peanuts.", "The user isn't allergic to peanuts.", "negation"),
        ("The user never drinks coffee after lunch.", "The user drinks coffee after lunch.", "negation"),
        (
            "用户的老婆叫周婷，在上海一所公立高中教英语。",
            "用户的老婆周婷在杭州滨江一所国际学校教英语。",
            "names or places",
        ),
        ("用户不喜欢吃辣的菜。", "用户喜欢吃辣的菜。", "negation"),
        ("用户养了两只猫。", "用户养了三只猫。", "numbers"),
    ],
)
def test_machine_written_near_duplicates_that_change_a_fact_supersede(old: str, new: str, reason: str) -> None:
    # Given a cosine above the threshold, When numbers, names, places or negation differ
    decision = decide_upsert(_memory(content=old), new, 0.99, 0.96, explicit=False)
    # Then the new text supersedes, and the reason names what changed
    assert decision.action == "supersede" and decision.reason.startswith(reason)


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
    sentences = truncate_digest("Lives in Lisbon. " * 40)
    assert sentences == ("Lives in Lisbon. " * 29).strip() and len(sentences) <= 500
    chinese = truncate_digest("用户住在里斯本。" * 80)
    assert chinese == "用户住在里斯本。" * 62
    assert truncate_digest("a" * 200 + ". " + "b" * 400).endswith("…")  # no sentence end late enough


def test_ids_sort_in_creation_order_even_within_one_millisecond() -> None:
    from engram.domain.models import new_id

    ids = [new_id("evt") for _ in range(2000)]
    assert ids == sorted(ids) and len(set(ids)) == len(ids)


def _id_spelled_out(prefix: str, ms: int, rand: int) -> str:
    """The id's layout character by character: 10 Crockford characters of the millisecond time (its low
    50 bits), 16 of the random part (its low 80), most significant first, all lower case."""
    crockford = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
    stamp = "".join(crockford[(ms >> shift) & 31] for shift in range(45, -5, -5))
    tail = "".join(crockford[(rand >> shift) & 31] for shift in range(75, -5, -5))
    return f"{prefix}_{stamp}{tail}".lower()


@settings(max_examples=300, deadline=None)
@given(
    st.sampled_from(["msg", "t", "turn", "use", "Evt"]),
    st.one_of(st.integers(0, 2**50 - 1), st.integers(0, 2**60)),
    st.one_of(st.integers(0, 2**79), st.integers(0, 2**90)),
)
def test_an_id_spells_its_time_and_random_part_in_crockford_base32(prefix: str, ms: int, rand: int) -> None:
    import engram.domain.models as models

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(models, "_last_id", (-1, 0))  # no earlier id: the random part is fresh
        patch.setattr(time, "time", lambda: (ms + 0.5) / 1000)
        patch.setattr(os, "urandom", lambda n: ((rand << 1) % (1 << 80)).to_bytes(10, "big"))
        made = models.new_id(prefix)
    expected_ms = int((ms + 0.5) / 1000 * 1000)
    assert made == _id_spelled_out(prefix, expected_ms, ((rand << 1) % (1 << 80)) >> 1)


# The OpenAPI document states these patterns for the API's fields (entrypoints/http/openapi.stated): a
# rule accepts a value exactly when the pattern matches it, and what it stores matches it too.
_NEAR_MISSES = st.text(
    alphabet=st.sampled_from([*"aZ9_ :.-/#!\t\n", "城", "Ｐ", "İ", "ﬁ", "¨", "\xa0", "\u3000", "😀", "：", "\u212a"]),
    max_size=50,
)


@settings(max_examples=300, deadline=None)
@given(st.one_of(_NEAR_MISSES, st.from_regex(FACT_KEY_PATTERN), st.text(max_size=60)))
@example("A:\u1d2c")  # NFKC brings back a capital (modifier letter A): stored "a:a", not "a:A"
@example("a:\u210c")  # ℌ is H in NFKC
def test_the_fact_key_rule_accepts_exactly_its_pattern(raw: str) -> None:
    matches = re.fullmatch(FACT_KEY_PATTERN, raw) is not None
    try:
        stored = normalize_fact_key(raw)
    except InvalidInput:
        assert not matches
        return
    assert matches
    assert re.fullmatch(FACT_KEY_PATTERN, stored) and normalize_fact_key(stored) == stored


@settings(max_examples=300, deadline=None)
@given(st.one_of(_NEAR_MISSES, st.from_regex(SKILL_NAME_PATTERN), st.from_regex(AGENT_ID_PATTERN)))
def test_skill_names_and_agent_ids_accept_exactly_their_patterns(raw: str) -> None:
    for pattern, rule in ((SKILL_NAME_PATTERN, skill_name), (AGENT_ID_PATTERN, agent_id)):
        matches = re.fullmatch(pattern, raw) is not None
        try:
            kept = rule(raw)
        except InvalidInput:
            assert not matches
            continue
        assert matches and re.fullmatch(pattern, kept) and rule(kept) == kept


def test_fact_keys_fold_case_spaces_and_compatibility_forms_but_keep_what_would_break() -> None:
    assert normalize_fact_key("pet: ｃａｔ  name") == "pet:_cat_name"
    assert normalize_fact_key("note:ﬁle") == "note:file"
    assert normalize_fact_key("note:¨") == "note:¨"  # its compatibility form starts with a space
    assert normalize_fact_key("note:" + "İ" * 120) == "note:" + "İ" * 120  # lower-cased it would be 240 long
    for refused in ("pet:cat\tname", "pet:a#b", "pet：cat", "ｐｅｔ:cat", "pet:cat!"):
        with pytest.raises(InvalidInput):
            normalize_fact_key(refused)
