"""Dreaming: the day in the configured time zone, updates with version chains, archives, pinned
protection, verbatim excerpts, digest and daily log, once per date."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from engram.domain.errors import InvalidInput, UpstreamUnavailable
from engram.services.jobs.dreaming import day_bounds
from engram.services.jobs.runs import last_runs
from engram.services.models.prompts import DREAM_SYSTEM

from tests.unit.jobs.conftest import NS, Env, MakeEnv

# 04:10 on 2026-03-11 in Singapore (UTC+8): "yesterday" there is 2026-03-10.
DREAM_TIME = datetime(2026, 3, 10, 20, 10, tzinfo=UTC)


def plan(**fields: Any) -> str:
    body: dict[str, Any] = {
        "date": "2026-03-10",
        "title": "A quiet Tuesday",
        "summary": "The user talked about moving and tea.",
        "sections": [{"heading": "Home", "content": "Packing boxes for Lisbon."}],
        "important_excerpts": [],
        "memories_to_update": [],
        "memories_to_delete": [],
    }
    body.update(fields)
    return json.dumps(body, ensure_ascii=False)


@pytest.fixture
def sg(make_env: MakeEnv) -> Env:
    env = make_env(timezone="Asia/Singapore")
    env.clock.set(DREAM_TIME)
    return env


async def dream(env: Env, **kwargs: Any) -> dict[str, Any]:
    return (await env.container.dreaming.run(**kwargs)).to_dict()


def test_day_bounds_follow_the_time_zone_and_dst() -> None:
    # Given local days in Singapore and on the New York spring-forward day
    start, end = day_bounds("2026-03-10", "Asia/Singapore")
    ny_start, ny_end = day_bounds("2026-03-08", "America/New_York")
    # Then they start at local midnight and the DST day is 23 hours long
    assert start.astimezone(UTC) == datetime(2026, 3, 9, 16, 0, tzinfo=UTC)
    assert (end - start).total_seconds() == 24 * 3600
    assert ny_end.astimezone(UTC) - ny_start.astimezone(UTC) == timedelta(hours=23)
    with pytest.raises(InvalidInput):
        day_bounds("10/03/2026", "UTC")


async def test_yesterday_is_cut_at_local_midnight(sg: Env) -> None:
    # Given messages one minute before and at local midnight that started 2026-03-10 in Singapore,
    # and one at local midnight that ended it
    before = sg.message("late night on the 9th", at=datetime(2026, 3, 9, 15, 59, tzinfo=UTC))
    inside = sg.message("first minute of the 10th", at=datetime(2026, 3, 9, 16, 0, tzinfo=UTC))
    last = sg.message("last minute of the 10th", at=datetime(2026, 3, 10, 15, 59, tzinfo=UTC))
    after = sg.message("first minute of the 11th", at=datetime(2026, 3, 10, 16, 0, tzinfo=UTC))
    sg.model.script(plan())
    # When the nightly dream runs at 04:10 local on the 11th
    result = await dream(sg)
    # Then it dreams the 10th with exactly that local day's messages
    assert result["date"] == "2026-03-10"
    prompt = sg.model.calls[0].user
    assert inside.id in prompt and last.id in prompt
    assert before.id not in prompt and after.id not in prompt
    assert "2026-03-10 00:00 user" in prompt  # local times in the prompt


async def test_updates_supersede_and_keep_the_chain_deletes_archive(sg: Env) -> None:
    # Given memories and a day that changes them
    city = sg.remember("The user lives in Berlin", fact_key="profile:city")
    tea = sg.remember("The user likes green tea", type="preference")
    dup = sg.remember("User enjoys green tea", type="preference")
    sg.message("I moved to Lisbon and I still love green tea", at=datetime(2026, 3, 10, 3, 0, tzinfo=UTC))
    sg.model.script(
        plan(
            memories_to_update=[
                {
                    "target_id": city.id,
                    "content": "The user lives in Lisbon",
                    "type": "fact",
                    "importance": 0.8,
                    "confidence": 0.9,
                    "tags": ["home"],
                },
                {
                    "target_id": tea.id,
                    "content": "The user likes green tea",
                    "type": "preference",
                    "importance": 0.7,
                    "confidence": 0.95,
                    "tags": ["drinks"],
                },
            ],
            memories_to_delete=[{"target_id": dup.id, "reason": "duplicate of the green tea memory"}],
        )
    )
    # When the dream runs
    result = await dream(sg)
    # Then the changed text is a new version (old one restorable), the same text is updated in place,
    # and the duplicate is archived with its reason
    assert result["superseded"] == 1 and result["updated"] == 1 and result["archived"] == 1
    store = sg.container.store
    current = store.find_active_by_fact_key(NS, "profile:city")
    assert current is not None
    assert current.content == "The user lives in Lisbon" and current.supersedes_id == city.id
    assert current.source == "dreaming" and current.tags == ("home",)
    assert store.get_memory(NS, city.id).status == "superseded"
    assert store.get_memory(NS, tea.id).tags == ("drinks",) and store.get_memory(NS, tea.id).importance == 0.7
    assert store.get_memory(NS, dup.id).status == "archived"
    events = store.list_events(NS, memory_id=dup.id, kind="archived")
    assert "duplicate" in events[0].detail["reason"]
    restored = sg.container.memories.restore(NS, city.id)
    assert restored.status == "active"


async def test_pinned_memories_are_never_archived_or_rewritten(sg: Env) -> None:
    # Given a pinned memory the model wants to delete and rewrite
    pinned = sg.remember("The user's daughter is called Mia", type="relationship", pinned=True)
    sg.message("Mia had a good day at school", at=datetime(2026, 3, 10, 3, 0, tzinfo=UTC))
    sg.model.script(
        plan(
            memories_to_update=[{"target_id": pinned.id, "content": "The user has a daughter"}],
            memories_to_delete=[{"target_id": pinned.id, "reason": "redundant"}],
        )
    )
    # When the dream runs
    result = await dream(sg)
    # Then the pinned memory is untouched: the archive is refused, the rewrite waits for review
    assert result["protected"] == 1 and result["proposed"] == 1
    assert result["archived"] == 0 and result["superseded"] == 0
    kept = sg.container.store.get_memory(NS, pinned.id)
    assert kept.status == "active" and kept.content == "The user's daughter is called Mia"
    (candidate,) = sg.container.store.list_candidates(NS).items
    assert (candidate.content, candidate.target_memory_id) == ("The user has a daughter", pinned.id)


async def test_a_core_memory_rewrite_waits_for_review_and_accepting_keeps_the_layer(sg: Env) -> None:
    # Given a core-layer memory (not pinned) the model wants to rewrite, and an ordinary one
    core = sg.remember("The user is allergic to peanuts", type="fact", layer="core", fact_key="health:allergy")
    plain = sg.remember("The user likes green tea", type="preference")
    sg.message("no more peanuts, and now I prefer black tea", at=datetime(2026, 3, 10, 3, 0, tzinfo=UTC))
    sg.model.script(
        plan(
            memories_to_update=[
                {"target_id": core.id, "content": "The user is allergic to peanuts and cashews"},
                {"target_id": plain.id, "content": "The user prefers black tea"},
            ]
        )
    )
    # When the dream runs
    result = await dream(sg)
    # Then the ordinary memory is superseded as before, the core one only proposed
    assert result["superseded"] == 1 and result["proposed"] == 1
    assert sg.container.store.get_memory(NS, plain.id).status == "superseded"
    assert sg.container.store.get_memory(NS, core.id) == core
    (candidate,) = sg.container.candidates.list_candidates(NS).items
    assert (candidate.target_memory_id, candidate.source) == (core.id, "dreaming")
    # When the owner accepts the proposal
    _, written = sg.container.candidates.approve(NS, candidate.id)
    # Then the new version is in the core layer, holds the key and supersedes the old one
    new = sg.container.store.get_memory(NS, written.memory.id)
    assert (new.content, new.layer, new.fact_key) == (
        "The user is allergic to peanuts and cashews",
        "core",
        "health:allergy",
    )
    assert new.supersedes_id == core.id and sg.container.store.get_memory(NS, core.id).status == "superseded"


async def test_the_model_may_only_touch_memories_it_was_shown(make_env: MakeEnv) -> None:
    # Given more memories than the dream context holds
    env = make_env(timezone="Asia/Singapore", dream_memory_context_limit=1)
    env.clock.set(DREAM_TIME)
    shown = env.remember("The user plays the cello")
    hidden = env.remember("The user's passport expires in May", type="task")
    env.message("cello practice went well", at=datetime(2026, 3, 10, 3, 0, tzinfo=UTC))
    env.model.script(
        lambda messages: plan(
            memories_to_delete=[{"target_id": hidden.id, "reason": "x"}, {"target_id": "mem_unknown", "reason": "y"}]
        )
    )
    # When the dream runs
    result = await dream(env)
    # Then only the most relevant memory was in the prompt and the others could not be archived
    prompt = env.model.calls[0].user
    assert shown.id in prompt and hidden.id not in prompt
    assert result["archived"] == 0 and result["namespaces"][0]["ignored"] == 2
    assert env.container.store.get_memory(NS, hidden.id).status == "active"


async def test_excerpts_become_precious_only_when_verbatim(sg: Env) -> None:
    # Given a day with a meaningful sentence
    msg = sg.message("今天我答应自己：每天都要写一点东西。", at=datetime(2026, 3, 10, 3, 0, tzinfo=UTC))
    sg.model.script(
        plan(
            important_excerpts=[
                {
                    "quote": "我答应自己：每天都要写一点东西。",
                    "reason": "a promise",
                    "tags": ["承诺"],
                    "source_message_ids": [msg.id],
                },
                {
                    "quote": "I promised to write every day",
                    "reason": "paraphrase",
                    "tags": [],
                    "source_message_ids": [msg.id],
                },
            ]
        )
    )
    # When the dream runs
    result = await dream(sg)
    # Then the verbatim quote is a precious note linked to its message; the paraphrase is rejected
    assert result["excerpts"] == 1 and result["namespaces"][0]["excerpts_rejected"] == 1
    (note,) = sg.container.notes.list_precious(NS)
    assert note.content == "我答应自己：每天都要写一点东西。" and note.source == "dreaming"
    assert note.source_message_ids == (msg.id,) and note.reason == "a promise"


async def test_digest_is_at_most_500_chars_and_the_daily_log_is_rewritten(sg: Env) -> None:
    # Given an old daily log for the day and a day of messages
    sg.message("long day", at=datetime(2026, 3, 10, 3, 0, tzinfo=UTC))
    sg.model.script(plan(digest="x" * 900, title="Moving day"), plan(summary="Second take", digest=""))
    # When the dream runs, then is forced again
    await dream(sg)
    digest = sg.container.store.get_digest(NS)
    assert digest is not None and len(digest.content) <= 500
    log = sg.container.store.get_daily_log(NS, "2026-03-10")
    assert log is not None
    assert log.title == "Moving day" and log.sections == ({"heading": "Home", "content": "Packing boxes for Lisbon."},)
    await dream(sg, force=True)
    # Then the log is rewritten and, without a digest field, the summary becomes the digest
    log, digest = sg.container.store.get_daily_log(NS, "2026-03-10"), sg.container.store.get_digest(NS)
    assert log is not None and log.summary == "Second take"
    assert digest is not None and digest.content == "Second take"


def _state(env: Env) -> dict[str, Any]:
    store = env.container.store
    return {
        "memories": [m.model_dump() for m in store.iter_memories(NS)],
        "precious": [p.model_dump() for p in store.list_precious(NS)],
        "digest": store.get_digest(NS),
        "log": store.get_daily_log(NS, "2026-03-10"),
    }


async def test_one_bad_field_is_dropped_the_rest_applied_once(sg: Env) -> None:
    # Given memories, a day, and a plan with valid steps mixed with bad fields: a 2,600-character
    # summary (no digest field, so it becomes the digest), an update whose text is over the limit,
    # items that are not objects, an excerpt far over the limit, 30 tags, a 300-character tag
    city = sg.remember("The user lives in Berlin", fact_key="profile:city")
    dup = sg.remember("User enjoys green tea", type="preference")
    tea = sg.remember("The user likes green tea", type="preference")
    said = "I moved to Lisbon. Today I promised myself to write every day."
    sg.message(said, at=datetime(2026, 3, 10, 3, 0, tzinfo=UTC))
    sentence = "The user moved from Berlin to Lisbon and keeps a writing habit. "
    summary = (sentence * 42).strip()
    assert len(summary) > 2600
    sg.model.script(
        plan(
            summary=summary,
            memories_to_delete=[{"target_id": dup.id, "reason": "duplicate"}, "not an object"],
            memories_to_update=[
                {"target_id": tea.id, "content": "x" * 5000},
                {"target_id": city.id, "content": "The user lives in Lisbon", "tags": [f"t{i}" for i in range(30)]},
                42,
            ],
            important_excerpts=[
                {"quote": "Today I promised myself to write every day.", "tags": ["promise", "y" * 300]},
                {"quote": "z" * 5000},
            ],
        )
    )
    # When the dream runs
    result = await dream(sg)
    ns = result["namespaces"][0]
    # Then it is done: the valid steps are applied, each bad item is dropped and reported
    assert ns["status"] == "done" and ns["dropped"] == 4
    assert sorted(e["error"] for e in ns["errors"]) == [
        "content_too_long", "content_too_long", "invalid_item", "invalid_item"
    ]  # fmt: skip
    assert all(e["item"] for e in ns["errors"])
    store = sg.container.store
    assert store.get_memory(NS, dup.id).status == "archived"
    assert store.get_memory(NS, tea.id).status == "active" and store.get_memory(NS, tea.id).content == tea.content
    current = store.find_active_by_fact_key(NS, "profile:city")
    assert current is not None
    assert current.content == "The user lives in Lisbon" and len(current.tags) == 20
    (note,) = store.list_precious(NS)
    assert note.content == "Today I promised myself to write every day." and note.tags == ("promise",)
    # the digest is clamped to 500 characters at a sentence boundary, the log keeps the summary
    stored_digest = store.get_digest(NS)
    assert stored_digest is not None
    digest = stored_digest.content
    assert len(digest) <= 500 and digest.endswith("habit.") and digest.startswith(sentence.strip())
    daily = store.get_daily_log(NS, "2026-03-10")
    assert daily is not None and daily.summary == summary
    assert store.get_cursor(NS, "dream:2026-03-10")
    # When it runs again without force / Then nothing is asked and nothing changes
    before = _state(sg)
    again = await dream(sg)
    assert again["namespaces"][0]["status"] == "already_done" and len(sg.model.calls) == 1
    assert _state(sg) == before


async def test_a_plan_that_is_not_the_expected_shape_changes_only_what_it_validly_says(sg: Env) -> None:
    # Given a plan whose fields have the wrong types
    memory = sg.remember("The user plays the cello")
    sg.message("cello", at=datetime(2026, 3, 10, 3, 0, tzinfo=UTC))
    sg.model.script(
        json.dumps(
            {
                "title": ["not", "text"],
                "summary": 7,
                "digest": {"x": 1},
                "sections": "none",
                "memories_to_update": {"target_id": memory.id},
                "memories_to_delete": None,
                "important_excerpts": [None],
            }
        )
    )
    # When the dream runs / Then it completes, writes an empty log, keeps the digest unset
    result = await dream(sg)
    assert result["namespaces"][0]["status"] == "done"
    assert sg.container.store.get_memory(NS, memory.id).status == "active"
    assert sg.container.store.get_digest(NS) is None
    assert sg.container.store.get_daily_log(NS, "2026-03-10") is not None


async def test_once_per_date_unless_forced(sg: Env) -> None:
    # Given a dreamt day
    sg.message("a day", at=datetime(2026, 3, 10, 3, 0, tzinfo=UTC))
    sg.model.script(plan(), plan())
    first = await dream(sg)
    # When the dream runs again for the same date
    again = await dream(sg)
    # Then it does nothing; forced, it runs again
    assert first["namespaces"][0]["status"] == "done" and again["namespaces"][0]["status"] == "already_done"
    assert len(sg.model.calls) == 1
    forced = await dream(sg, date="2026-03-10", force=True)
    assert forced["namespaces"][0]["status"] == "done" and len(sg.model.calls) == 2


async def test_a_failed_dream_leaves_no_mark_and_runs_again(sg: Env) -> None:
    # Given a model that is down, then answers nonsense, then answers
    sg.message("a day", at=datetime(2026, 3, 10, 3, 0, tzinfo=UTC))
    sg.model.script(UpstreamUnavailable("down"), "no json here", plan())
    # When the dream runs three times
    results = [await dream(sg) for _ in range(3)]
    # Then the first two failed and the third did the work
    assert [r["namespaces"][0]["status"] for r in results] == ["failed", "failed", "done"]
    assert results[1]["namespaces"][0]["errors"][0]["error"] == "invalid_model_output"
    assert sg.container.store.get_daily_log(NS, "2026-03-10") is not None
    runs = last_runs(sg.container.store, NS)
    assert [r["status"] for r in runs] == ["done", "failed", "failed"]


async def test_a_day_without_messages_calls_no_model(sg: Env) -> None:
    # Given a namespace with only old messages
    sg.message("long ago", at=datetime(2026, 1, 1, tzinfo=UTC))
    # When the dream runs for yesterday
    result = await dream(sg)
    # Then nothing was asked and nothing marked
    assert sg.model.calls == [] and result["namespaces"][0]["status"] == "no_messages"
    assert sg.container.store.get_cursor(NS, "dream:2026-03-10") is None


async def test_a_bad_date_is_refused(sg: Env) -> None:
    with pytest.raises(InvalidInput):
        await dream(sg, date="2026-13-01")


def test_the_dream_prompt_names_every_field() -> None:
    for name in (
        "date",
        "title",
        "summary",
        "sections",
        "heading",
        "content",
        "important_excerpts",
        "quote",
        "reason",
        "tags",
        "source_message_ids",
        "memories_to_update",
        "target_id",
        "type",
        "importance",
        "confidence",
        "memories_to_delete",
    ):
        assert f'"{name}"' in DREAM_SYSTEM
    lowered = DREAM_SYSTEM.lower()
    assert "small talk" in lowered and "secrets" in lowered and "one-off tasks" in lowered
    assert "chinese" in lowered and "pinned" in lowered
