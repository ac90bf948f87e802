"""Extraction reads messages in the order they were stored, and `backfill` reads a whole history
(services/jobs/extraction.py): imported history is extracted once, no batch is applied twice."""

from __future__ import annotations

from typing import Any

from engram.domain.errors import UpstreamUnavailable
from engram.services.library.messages import MessageIn

from tests.unit.jobs.conftest import NS, Env, ago
from tests.unit.jobs.test_extraction import extract, mem, reply


async def test_history_ingested_with_old_timestamps_is_extracted_once(env: Env) -> None:
    # Given a namespace whose extraction already ran (the cursor is at the last run)
    env.message("hello", at=ago(env, minutes=5))
    env.model.script(reply())
    await extract(env)
    env.clock.advance(hours=1)
    # When a year-old conversation is ingested now
    year_ago = ago(env, days=365)
    old = MessageIn(role="user", content="I adopted a cat called Mochi", created_at=year_ago, conversation_id="2025")
    env.container.messages.ingest(NS, [old])
    env.model.script(reply(mem("The user's cat is called Mochi", fact_key="pet:cat_name")))
    result = await extract(env)
    # Then the next run reads it (it was stored after the cursor), and the one after does not again
    assert result["messages"] == 1 and result["created"] == 1
    env.clock.advance(hours=4)
    assert (await extract(env))["messages"] == 0
    assert len(env.model.calls) == 2


async def test_backfill_reads_the_whole_history_in_batches_once(make_env: Any) -> None:
    # Given 5 messages from long ago that the regular job never read (its first run saw only its window)
    env = make_env(extract_max_messages=2)
    history = [env.message(f"old fact number {i}", at=ago(env, days=300 - i)) for i in range(5)]
    await extract(env)  # the first run: nothing in its window
    assert env.model.calls == []
    # When the history is backfilled, with progress
    done: list[int] = []
    env.model.script(reply(mem("The user had fact 0")), reply(), reply(mem("The user had fact 4")))
    result = await env.container.extraction.backfill(NS, progress=done.append)
    # Then three batches covered the five messages in order, each once
    assert (result.messages, result.batches, result.created, result.errors) == (5, 3, 2, [])
    assert done == [2, 2, 1]
    assert history[0].id in env.model.calls[0].user and history[4].id in env.model.calls[2].user
    # And running it again, or the regular job, reads none of it again
    again = await env.container.extraction.backfill(NS)
    assert again.messages == 0 and (await extract(env))["messages"] == 0
    assert len(env.model.calls) == 3


async def test_a_failed_backfill_resumes_where_it_stopped(make_env: Any) -> None:
    # Given history of 4 messages in batches of 2, and a model that fails on the second batch
    env = make_env(extract_max_messages=2)
    history = [env.message(f"old fact {i}", at=ago(env, days=100 - i)) for i in range(4)]
    env.model.script(reply(mem("The user had fact 0")), UpstreamUnavailable("down"))
    first = await env.container.extraction.backfill(NS)
    assert (first.batches, len(first.errors)) == (1, 1)
    # When it runs again: the first batch is not sent again, the second is
    env.model.script(reply(mem("The user had fact 3")))
    second = await env.container.extraction.backfill(NS)
    assert (second.batches, second.messages, second.errors) == (1, 2, [])
    assert history[2].id in env.model.calls[2].user and history[0].id not in env.model.calls[2].user
    assert sorted(m.content for m in env.active()) == ["The user had fact 0", "The user had fact 3"]


async def test_messages_stored_after_the_backfill_started_are_left_to_the_regular_job(env: Env) -> None:
    env.message("before", at=ago(env, days=3))
    env.model.script(reply())
    await env.container.extraction.backfill(NS)
    env.clock.advance(minutes=1)
    late = env.message("after", at=env.clock.now())
    env.model.script(reply())
    assert (await env.container.extraction.backfill(NS)).messages == 0
    result = await extract(env)
    assert result["messages"] == 1 and late.id in env.model.calls[-1].user


async def test_a_backfill_does_not_reset_the_regular_jobs_failure_count(env: Env) -> None:
    # Given old history for the backfill and a recent window the model never answers properly
    env.message("old fact from last year", at=ago(env, days=300))
    env.message("hello", at=ago(env, minutes=5))
    env.model.script("not json")
    first = await extract(env)
    assert first["errors"] == 1
    # When the backfill applies the old history in between the regular runs
    env.model.script(reply(mem("The user had an old fact")))
    assert (await env.container.extraction.backfill(NS)).batches == 1
    # And the regular job fails four more times, one scheduled interval (4 h) apart
    env.model.script(*["not json"] * 4)
    results = []
    for _ in range(4):
        env.clock.advance(hours=4)
        results.append(await extract(env))
    # Then the fifth attempt still gives the window up: the backfill's batch did not restart the count
    assert [r["skipped_batches"] for r in results] == [0, 0, 0, 1]
