"""Extraction: windows and cursors, batches, retries, routing and review candidates.

Real stores (in-memory and SQLite), the real memory and review services; only the model is scripted.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from engram.domain.errors import UpstreamTimeout, UpstreamUnavailable
from engram.domain.policies import cosine
from engram.services.jobs.runs import last_runs
from engram.services.library.messages import MessageIn
from engram.services.models.prompts import EXTRACTION_SYSTEM

from tests.fakes.embedder import HashEmbedder
from tests.unit.jobs.conftest import NS, Env, MakeEnv, ago


def mem(content: str, **fields: Any) -> dict[str, Any]:
    return {
        "content": content,
        "type": fields.pop("type", "fact"),
        "fact_key": fields.pop("fact_key", None),
        "importance": fields.pop("importance", 0.6),
        "confidence": fields.pop("confidence", 0.9),
        "tags": fields.pop("tags", []),
        "source_message_ids": fields.pop("source_message_ids", []),
        **fields,
    }


def reply(*memories: object) -> str:
    return json.dumps({"memories": list(memories)}, ensure_ascii=False)


async def extract(env: Env) -> dict[str, Any]:
    report = await env.container.extraction.run()
    return report.to_dict()


# -- windows and cursors ---------------------------------------------------------------------
async def test_first_run_reads_only_the_last_window_not_all_history(env: Env) -> None:
    # Given an old message (10 h ago) and a recent one (1 h ago), and no cursor yet
    old = env.message("I used to live in Rome", at=ago(env, hours=10))
    recent = env.message("I live in Berlin now", at=ago(env, hours=1))
    env.model.script(reply())
    # When extraction runs for the first time
    result = await extract(env)
    # Then only the recent message went to the model
    assert len(env.model.calls) == 1
    prompt = env.model.calls[0].user
    assert recent.id in prompt and old.id not in prompt
    assert result["messages"] == 1 and result["batches"] == 1
    assert env.model.calls[0].json_mode is True


async def test_a_run_right_after_an_ingest_processes_those_messages(env: Env) -> None:
    # Given messages ingested at this very instant
    env.container.messages.ingest(NS, [MessageIn(role="user", content="My cat is called Mochi")])
    env.model.script(reply(mem("The user's cat is called Mochi", fact_key="pet:cat_name")))
    # When extraction runs at the same clock instant
    result = await extract(env)
    # Then the message was read and its memory stored
    assert result["messages"] == 1 and result["created"] == 1
    assert [m.content for m in env.active()] == ["The user's cat is called Mochi"]


async def test_cursor_moves_after_apply_and_the_next_run_reads_only_new_messages(env: Env) -> None:
    # Given one extracted window
    first = env.message("I drink green tea every morning", at=ago(env, minutes=30))
    env.model.script(reply(mem("The user drinks green tea every morning", type="preference")))
    await extract(env)
    # When nothing new arrives, a second run makes no model call
    env.clock.advance(hours=4)
    result = await extract(env)
    assert len(env.model.calls) == 1 and result["messages"] == 0
    # When a new message arrives, the next run sends only that one
    second = env.message("My sister Lena visits next week")
    env.clock.advance(minutes=1)
    env.model.script(reply())
    await extract(env)
    prompt = env.model.calls[-1].user
    assert second.id in prompt and first.id not in prompt


async def test_quiet_first_window_anchors_the_cursor(env: Env) -> None:
    # Given a first run with no messages at all
    await extract(env)
    assert env.model.calls == []
    # When a message arrives 6 h later (beyond one window from now) and the next run is 7 h later
    env.clock.advance(hours=6)
    msg = env.message("I started learning the cello")
    env.clock.advance(hours=1)
    env.model.script(reply())
    await extract(env)
    # Then it is still read: the cursor was anchored at the first run, not re-derived from "now"
    assert msg.id in env.model.calls[0].user


async def test_batches_limit_a_run_and_the_next_run_continues(make_env: MakeEnv) -> None:
    # Given 5 messages, batches of 2 messages and at most 2 batches per run
    env = make_env(extract_max_messages=2, extract_max_batches=2)
    msgs = [env.message(f"fact number {i}", at=ago(env, minutes=50 - i)) for i in range(5)]
    env.model.script(reply(), reply())
    # When extraction runs
    result = await extract(env)
    # Then two calls covered four messages in order, and more remain
    assert [c.user.count("[msg_") for c in env.model.calls] == [2, 2]
    assert msgs[0].id in env.model.calls[0].user and msgs[3].id in env.model.calls[1].user
    assert result["messages"] == 4 and result["namespaces"][0]["more"] is True
    # When the next run comes, it continues with the fifth message only
    env.model.script(reply())
    result = await extract(env)
    assert len(env.model.calls) == 3 and msgs[4].id in env.model.calls[2].user
    assert msgs[3].id not in env.model.calls[2].user
    assert result["namespaces"][0]["more"] is False


async def test_model_error_leaves_the_cursor_and_the_next_run_retries(env: Env) -> None:
    # Given a message and a model that is down once
    msg = env.message("I am allergic to peanuts", at=ago(env, minutes=5))
    env.model.script(UpstreamUnavailable("provider down"))
    # When extraction runs
    result = await extract(env)
    # Then nothing is stored and the error is reported
    assert result["created"] == 0 and result["errors"] == 1
    assert result["namespaces"][0]["errors"][0]["error"] == "upstream_unavailable"
    # When the next run comes and the model answers
    env.model.script(reply(mem("The user is allergic to peanuts", type="boundary", importance=0.9)))
    result = await extract(env)
    # Then the same message is read again and applied
    assert msg.id in env.model.calls[1].user
    assert result["created"] == 1 and [m.content for m in env.active()] == ["The user is allergic to peanuts"]


async def test_invalid_json_leaves_the_cursor_then_fenced_json_in_prose_is_accepted(env: Env) -> None:
    # Given a model that first rambles without JSON, then wraps JSON in prose and a code fence
    env.message("我住在上海", at=ago(env, minutes=5))
    env.model.script(
        "Sorry, I can't produce that right now.",
        'Here is what I found:\n```json\n{"memories": [{"content": "用户住在上海", "type": "fact", '
        '"fact_key": "profile:city", "importance": 0.8, "confidence": 0.95, "tags": ["城市"], '
        '"source_message_ids": []}]}\n```\nHope this helps {:}',
    )
    # When extraction runs twice
    first = await extract(env)
    second = await extract(env)
    # Then the first run failed without moving the cursor and the second applied the same window
    assert first["errors"] == 1 and first["namespaces"][0]["errors"][0]["error"] == "invalid_model_output"
    assert env.model.calls[0].user == env.model.calls[1].user
    assert second["created"] == 1
    city = env.container.store.find_active_by_fact_key(NS, "profile:city")
    assert city is not None and city.content == "用户住在上海"


async def test_json_without_a_memories_list_is_invalid_and_retried(env: Env) -> None:
    # Given a model answering a JSON object of the wrong shape
    env.message("I work at Acme", at=ago(env, minutes=5))
    env.model.script('{"facts": ["works at Acme"]}', reply())
    # When extraction runs twice
    first = await extract(env)
    second = await extract(env)
    # Then the first is an error and the window is read again
    assert first["errors"] == 1 and first["batches"] == 0
    assert second["errors"] == 0 and second["batches"] == 1


async def test_a_window_that_keeps_failing_is_skipped_after_max_attempts(env: Env) -> None:
    # Given a window the model never answers properly
    env.message("hello", at=ago(env, minutes=5))
    env.model.script(*["not json"] * 5)
    # When extraction runs five times, one scheduled interval (4 h) apart
    results = []
    for _ in range(5):
        results.append(await extract(env))
        env.clock.advance(hours=4)
    # Then the fifth gives up on it and later runs do not call the model again
    assert [r["skipped_batches"] for r in results] == [0, 0, 0, 0, 1]
    assert results[-1]["namespaces"][0]["errors"][-1]["error"] == "window_skipped"
    await extract(env)
    assert len(env.model.calls) == 5


async def test_a_window_is_never_applied_twice_even_if_the_cursor_write_was_lost(env: Env) -> None:
    # Given an applied window whose cursor write is then lost (a crash between apply and cursor)
    env.message("My favourite colour is teal", at=ago(env, minutes=5))
    store = env.container.store
    anchor = None

    def remember_anchor(messages: list[dict[str, Any]]) -> str:
        nonlocal anchor
        anchor = store.get_cursor(NS, "extract")
        return reply(mem("The user's favourite colour is teal", type="preference"))

    env.model.script(remember_anchor)
    await extract(env)
    assert anchor is not None
    store.set_cursor(NS, "extract", anchor)
    # When extraction runs again over the same window
    env.model.script(reply(mem("The user likes teal", type="preference")))
    result = await extract(env)
    # Then the model answer is not applied a second time
    assert result["skipped_batches"] == 1 and result["created"] == 0
    assert [m.content for m in env.active()] == ["The user's favourite colour is teal"]


# -- routing ---------------------------------------------------------------------------------
async def test_low_confidence_goes_to_review_with_the_key_holder_as_target(env: Env) -> None:
    # Given an active memory for a key and a message
    holder = env.remember("The user lives in Berlin", fact_key="profile:city")
    env.message("maybe I'll move to Lisbon", at=ago(env, minutes=5))
    env.model.script(
        reply(
            mem("The user lives in Lisbon", fact_key="profile:city", confidence=0.5),
            mem("The user might learn Portuguese", confidence=0.75),
            mem("The user plans a trip to Lisbon", confidence=0.76),
        )
    )
    # When extraction runs
    result = await extract(env)
    # Then the two below 0.76 are review candidates (the keyed one targets the holder) and 0.76 is stored
    assert result["candidates"] == 2 and result["created"] == 1
    pending = env.container.candidates.list_candidates(NS).items
    by_text = {c.content: c for c in pending}
    assert by_text["The user lives in Lisbon"].target_memory_id == holder.id
    assert by_text["The user might learn Portuguese"].target_memory_id is None
    city = env.container.store.find_active_by_fact_key(NS, "profile:city")
    assert city is not None and city.id == holder.id


async def test_same_low_confidence_fact_twice_is_one_candidate(env: Env) -> None:
    # Given a pending candidate
    env.message("I might get a dog", at=ago(env, minutes=10))
    env.model.script(reply(mem("The user might get a dog", confidence=0.4)))
    await extract(env)
    # When the same fact is extracted from a later window
    env.message("thinking about a dog again")
    env.clock.advance(minutes=1)
    env.model.script(reply(mem("the user might get a dog.", confidence=0.4)))
    result = await extract(env)
    # Then no second candidate is queued
    assert result["candidates"] == 0
    assert len(env.container.candidates.list_candidates(NS).items) == 1


async def test_same_key_same_text_marks_the_existing_memory_seen(env: Env) -> None:
    # Given a keyed memory
    holder = env.remember("The user's cat is called Mochi", fact_key="pet:cat_name")
    env.message("Mochi knocked over my cup", at=ago(env, minutes=5))
    env.model.script(reply(mem("the user's cat is called mochi.", fact_key="pet:cat_name")))
    # When the same fact is extracted
    result = await extract(env)
    # Then the existing memory is marked seen, no new row
    assert result["seen"] == 1 and result["created"] == 0 and result["superseded"] == 0
    seen = env.container.store.get_memory(NS, holder.id)
    assert seen.seen_count == holder.seen_count + 1 and seen.status == "active"


async def test_same_key_near_identical_by_cosine_marks_seen(make_env: MakeEnv) -> None:
    # Given the 0.9 threshold, a keyed memory and a reworded text whose cosine is at least 0.9
    env = make_env(dedup_cosine=0.9)
    old_text = "The user works as a senior data engineer at Acme in Berlin office team platform"
    new_text = "The user works as a senior data engineer at Acme in Berlin office team platform now"
    emb = HashEmbedder()
    assert cosine(*emb.embed_documents([old_text, new_text])) >= 0.9
    holder = env.remember(old_text, fact_key="work:employer")
    env.message("still at Acme", at=ago(env, minutes=5))
    env.model.script(reply(mem(new_text, fact_key="work:employer")))
    # When extracted
    result = await extract(env)
    # Then it counts as seen
    employer = env.container.store.find_active_by_fact_key(NS, "work:employer")
    assert result["seen"] == 1 and employer is not None and employer.id == holder.id


async def test_same_key_changed_supersedes_and_keeps_the_chain(env: Env) -> None:
    # Given a keyed memory
    holder = env.remember("The user lives in Berlin", fact_key="profile:city")
    env.message("I moved to Lisbon last month", at=ago(env, minutes=5))
    env.model.script(reply(mem("The user lives in Lisbon", fact_key="profile:city")))
    # When a changed value is extracted
    result = await extract(env)
    # Then a new version replaces the old one, which stays restorable in the chain
    assert result["superseded"] == 1
    current = env.container.store.find_active_by_fact_key(NS, "profile:city")
    assert current is not None
    assert current.content == "The user lives in Lisbon" and current.supersedes_id == holder.id
    chain = env.container.memories.versions(NS, current.id)
    assert [m.status for m in chain] == ["superseded", "active"]


@pytest.mark.parametrize("protection", [{"pinned": True}, {"layer": "core"}], ids=["pinned", "core"])
async def test_a_change_to_a_pinned_or_core_memory_goes_to_review_and_accepting_keeps_pin_and_layer(
    env: Env, protection: dict[str, Any]
) -> None:
    # Given a pinned (or core-layer) keyed memory
    holder = env.remember("The user lives in Berlin", fact_key="profile:city", **protection)
    env.message("I moved to Lisbon last month", at=ago(env, minutes=5))
    env.model.script(reply(mem("The user lives in Lisbon", fact_key="profile:city", confidence=0.95)))
    # When extraction finds a changed value for its key
    result = await extract(env)
    # Then the memory is untouched and the change waits in the review queue, aimed at it
    assert result["superseded"] == 0 and result["candidates"] == 1
    assert env.container.store.get_memory(NS, holder.id) == holder
    (candidate,) = env.container.candidates.list_candidates(NS).items
    assert (candidate.content, candidate.target_memory_id) == ("The user lives in Lisbon", holder.id)
    # When the owner accepts it
    _, written = env.container.candidates.approve(NS, candidate.id)
    # Then the new version replaces the memory and keeps its pin and layer
    new = env.container.store.find_active_by_fact_key(NS, "profile:city")
    assert new is not None and new.id == written.memory.id and new.supersedes_id == holder.id
    assert (new.content, new.pinned, new.layer) == ("The user lives in Lisbon", holder.pinned, holder.layer)
    assert env.container.store.get_memory(NS, holder.id).status == "superseded"


async def test_the_same_proposed_change_twice_is_one_candidate(env: Env) -> None:
    # Given a pinned keyed memory and a change to it proposed once
    env.remember("The user lives in Berlin", fact_key="profile:city", pinned=True)
    env.message("I moved to Lisbon last month", at=ago(env, minutes=9))
    env.model.script(reply(mem("The user lives in Lisbon", fact_key="profile:city")))
    await extract(env)
    # When a later run extracts the same change again
    env.message("Lisbon is lovely", at=env.clock.now())
    env.clock.advance(minutes=1)
    env.model.script(reply(mem("The user lives in Lisbon", fact_key="profile:city")))
    await extract(env)
    # Then one candidate waits
    assert len(env.container.candidates.list_candidates(NS).items) == 1


async def test_no_key_near_identical_same_type_is_seen_other_type_is_created(env: Env) -> None:
    # Given a preference without a key
    holder = env.remember("The user prefers dark roast coffee", type="preference")
    env.message("coffee talk", at=ago(env, minutes=5))
    env.model.script(
        reply(
            mem("the user prefers dark-roast coffee!", type="preference"),
            mem("The user prefers dark roast coffee", type="event"),
            mem("The user has a brother named Tom", type="relationship"),
        )
    )
    # When extracted
    result = await extract(env)
    # Then the same-type twin is seen; the other type and the new fact are created
    assert result["seen"] == 1 and result["created"] == 2
    assert env.container.store.get_memory(NS, holder.id).seen_count == 2
    assert len(env.active()) == 3


async def test_malformed_items_are_cleaned_or_rejected(env: Env) -> None:
    # Given a model answer with an empty item, an unknown type, a bad key and unknown source ids
    msg = env.message("I like jazz", at=ago(env, minutes=5))
    env.model.script(
        reply(
            {"content": "  "},
            mem("The user likes jazz", type="hobby", fact_key="not a key!!", source_message_ids=["msg_x", msg.id]),
            "just a string",
        )
    )
    # When extracted
    result = await extract(env)
    # Then one memory is stored as a fact without a key, pointing at the real message only
    assert result["created"] == 1 and result["rejected"] == 2
    (memory,) = env.active()
    assert memory.type == "fact" and memory.fact_key is None and memory.source_message_ids == (msg.id,)
    assert memory.source == "extraction"


async def test_each_run_records_an_event_row_per_namespace(env: Env) -> None:
    # Given messages in two namespaces
    env.message("I am Alice", at=ago(env, minutes=5))
    env.message("I am Bob", at=ago(env, minutes=5), ns="bob")
    env.model.script(reply(mem("The user is called Alice", type="identity")), UpstreamTimeout("slow"))
    # When extraction runs over every namespace
    await extract(env)
    # Then each namespace has a run row with its counts and errors
    alice = last_runs(env.container.store, NS)
    bob = last_runs(env.container.store, "bob")
    assert alice[0]["job"] == "extract" and alice[0]["created"] == 1 and alice[0]["errors"] == []
    assert bob[0]["created"] == 0 and bob[0]["errors"][0]["error"] == "upstream_timeout"


async def test_namespaces_are_isolated(env: Env) -> None:
    # Given a message in namespace bob only
    env.message("Bob likes chess", at=ago(env, minutes=5), ns="bob")
    env.model.script(reply(mem("The user likes chess", type="preference")))
    # When extraction runs for alice only
    result = (await env.container.extraction.run(namespace=NS)).to_dict()
    # Then the model was not called and bob's message stays unread
    assert env.model.calls == [] and result["messages"] == 0
    await env.container.extraction.run(namespace="bob")
    assert [m.content for m in env.active("bob")] == ["The user likes chess"] and env.active() == []


def test_the_prompt_names_every_field_and_the_skip_rules() -> None:
    # Given the extraction system prompt, Then it names the output shape and what to skip
    for name in ("memories", "content", "type", "fact_key", "importance", "confidence", "tags", "source_message_ids"):
        assert f'"{name}"' in EXTRACTION_SYSTEM
    lowered = EXTRACTION_SYSTEM.lower()
    assert "small talk" in lowered and "secrets" in lowered and "one-off tasks" in lowered
    assert "chinese" in lowered and "english" in lowered


async def test_related_keyed_memories_are_shown_so_the_model_reuses_their_keys(env: Env) -> None:
    # Given a keyed memory about the user's city and one unrelated
    env.remember("The user lives in Berlin", fact_key="profile:city")
    env.remember("The user owns a red bicycle", fact_key="items:bicycle")
    env.message("I am moving away from Berlin soon", at=ago(env, minutes=5))
    env.model.script(reply())
    # When extraction runs
    await extract(env)
    # Then the prompt lists the related key with its current value, not the unrelated one
    prompt = env.model.calls[0].user
    assert "- profile:city: The user lives in Berlin" in prompt and "items:bicycle" not in prompt


async def test_a_batch_of_only_system_and_tool_rows_needs_no_model_call(env: Env) -> None:
    # Given only a system and a tool message
    env.message("You are a helpful assistant", role="system", at=ago(env, minutes=5))
    env.message('{"result": 42}', role="tool", at=ago(env, minutes=4))
    # When extraction runs
    result = await extract(env)
    # Then the window is passed without asking the model
    assert env.model.calls == [] and result["messages"] == 2 and result["batches"] == 1


async def test_extracted_memories_below_the_least_importance_are_not_written(make_env: MakeEnv) -> None:
    # Given ENGRAM_MEMORY_MIN_IMPORTANCE 0.3 (Aelios' MEMORY_MIN_IMPORTANCE) and a reply with trivia
    env = make_env(memory_min_importance=0.3)
    env.message("I had toast, and by the way my sister is called Lena")
    env.model.script(
        reply(
            mem("The user had toast this morning", importance=0.2),
            mem("The user's sister is called Lena", importance=0.6),
            mem("The user may like jam", importance=0.1, confidence=0.4),
        )
    )
    # When extraction runs
    result = await extract(env)
    # Then the trivia is neither a memory nor a review candidate
    assert (result["created"], result["unimportant"], result["candidates"]) == (1, 2, 0)
    assert [m.content for m in env.active()] == ["The user's sister is called Lena"]
    assert env.container.store.list_candidates(NS, "pending").items == []
