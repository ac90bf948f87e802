"""Failures reach the owner (issue 21, item 5; docs/aws.md, "Alarms").

A namespace whose extraction or dream fails is reported as failed (``status``, the run's ``errors``
count that the job's error metric and its alarm read, ``failed``), while the run goes on with the other
namespaces and returns (the Lambda invocation succeeds, so Lambda's automatic retries never repeat what
succeeded). The next run retries only the failed namespace, and retries within one scheduled interval
(or one night) cost the job no attempt."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from engram.domain.errors import UpstreamUnavailable
from engram.services.jobs.dreaming import MAX_DAY_ATTEMPTS
from engram.services.jobs.extraction import FAILURES

from tests.unit.jobs.conftest import NS, Env, MakeEnv, ago

BOB = "bob"
# 04:10 on 2026-03-11 UTC: the nightly dream is for 2026-03-10.
NIGHT = datetime(2026, 3, 11, 4, 10, tzinfo=UTC)


def memories(*contents: str) -> str:
    items = [{"content": c, "type": "fact", "importance": 0.6, "confidence": 0.9} for c in contents]
    return json.dumps({"memories": items})


def plan(day: str) -> str:
    return json.dumps({"date": day, "title": f"Day {day}", "summary": "A day.", "sections": []})


def active(env: Env, ns: str) -> list[str]:
    from engram.domain.models import MemoryFilter

    return sorted(m.content for m in env.container.store.list_memories(ns, MemoryFilter()).items)


async def extract(env: Env) -> dict[str, Any]:
    return (await env.container.extraction.run()).to_dict()


async def dream(env: Env, **kwargs: Any) -> dict[str, Any]:
    return (await env.container.dreaming.run(**kwargs)).to_dict()


# -- extraction -------------------------------------------------------------------------------
async def test_a_failed_namespace_is_reported_and_only_it_is_retried(env: Env) -> None:
    # Given messages in two namespaces, and a model that answers alice but is down for bob
    env.message("I am Alice", at=ago(env, minutes=5))
    env.message("I am Bob", at=ago(env, minutes=5), ns=BOB)
    env.model.script(memories("The user is Alice"), UpstreamUnavailable("provider down"))
    # When extraction runs
    first = await extract(env)
    # Then the run returns (nothing raised), alice's memory is kept and bob's run is reported failed
    assert first["failed"] == [BOB] and first["errors"] == 1
    by_ns = {ns["namespace"]: ns for ns in first["namespaces"]}
    assert (by_ns[NS]["status"], by_ns[BOB]["status"]) == ("ok", "failed")
    assert active(env, NS) == ["The user is Alice"]
    # When the next run comes (4 h later) and the model answers
    env.clock.advance(hours=4)
    env.model.script(memories("The user is Bob"))
    second = await extract(env)
    # Then only bob's window went to the model again, and nothing of alice was redone
    assert len(env.model.calls) == 3 and "I am Bob" in env.model.calls[2].user
    assert second["failed"] == [] and second["errors"] == 0 and second["created"] == 1
    assert active(env, NS) == ["The user is Alice"] and active(env, BOB) == ["The user is Bob"]


async def test_an_unexpected_exception_fails_one_namespace_not_the_run(env: Env, monkeypatch: Any) -> None:
    # Given a store that breaks while reading bob's messages (not an Engram error)
    env.message("I am Alice", at=ago(env, minutes=5))
    env.message("I am Bob", at=ago(env, minutes=5), ns=BOB)
    store = env.container.store
    real = store.list_messages_stored

    def broken(namespace: str, **kwargs: Any) -> Any:
        if namespace == BOB:
            raise RuntimeError("disk on fire")
        return real(namespace, **kwargs)

    monkeypatch.setattr(store, "list_messages_stored", broken)
    env.model.script(memories("The user is Alice"))
    # When extraction runs
    report = await extract(env)
    # Then alice is extracted and bob is reported failed with an internal error
    assert report["failed"] == [BOB]
    (bob,) = [ns for ns in report["namespaces"] if ns["namespace"] == BOB]
    (internal,) = [e for e in bob["errors"] if e["error"] == "internal_error"]
    assert "RuntimeError: disk on fire" in internal["message"]
    assert active(env, NS) == ["The user is Alice"]


async def test_retries_within_one_interval_cost_the_batch_no_attempt(env: Env) -> None:
    # Given a window the model cannot answer
    env.message("hello", at=ago(env, minutes=5))
    env.model.script(*["not json"] * 4)

    def attempts() -> int:
        cursor = env.container.store.get_cursor(NS, FAILURES)
        assert cursor is not None
        return int(json.loads(cursor)["count"])

    # When the run is repeated three times within one scheduled interval (Lambda's async retries, a
    # manual run, the local scheduler's early retry)
    for _ in range(3):
        await extract(env)
        env.clock.advance(minutes=2)
    # Then one attempt is counted, and the next interval's run counts the second
    assert attempts() == 1
    env.clock.advance(hours=4)
    await extract(env)
    assert attempts() == 2 and len(env.model.calls) == 4


async def test_an_item_that_cannot_be_stored_is_no_failure_of_the_run(env: Env) -> None:
    # Given a model answer with one storable memory and one whose content is too long to store
    env.message("I like tea", at=ago(env, minutes=5))
    env.model.script(memories("The user likes tea", "x" * 50_000))
    # When extracted
    report = await extract(env)
    # Then the good one is stored, the bad one rejected and listed, and the run did not fail
    assert report["created"] == 1 and report["rejected"] == 1
    assert report["errors"] == 0 and report["failed"] == []
    assert report["namespaces"][0]["errors"][0]["item"]


# -- dreaming ---------------------------------------------------------------------------------
@pytest.fixture
def night(make_env: MakeEnv) -> Env:
    env = make_env(timezone="UTC")
    env.clock.set(NIGHT)
    return env


async def test_a_failed_dream_day_is_retried_next_night_for_that_namespace_only(night: Env) -> None:
    # Given a day of messages in two namespaces, and a model that dreams alice but is down for bob
    day1 = datetime(2026, 3, 10, 9, 0, tzinfo=UTC)
    night.message("alice on the 10th", at=day1)
    night.message("bob on the 10th", at=day1, ns=BOB)
    night.model.script(plan("2026-03-10"), UpstreamUnavailable("down"))
    first = await dream(night)
    # Then the run returns with bob failed and alice done
    assert first["failed"] == [BOB] and first["errors"] == 1
    assert {(ns["namespace"], ns["status"]) for ns in first["namespaces"]} == {(NS, "done"), (BOB, "failed")}
    # When the next night's run comes (for the 11th, one more day of messages each)
    night.message("alice on the 11th", at=day1 + timedelta(days=1))
    night.message("bob on the 11th", at=day1 + timedelta(days=1), ns=BOB)
    night.clock.advance(days=1)
    night.model.script(plan("2026-03-11"), plan("2026-03-11"), plan("2026-03-10"))
    second = await dream(night)
    # Then alice dreams the 11th only, bob the 11th and (again) the 10th; nothing failed
    done = sorted((ns["namespace"], ns["date"], ns["status"]) for ns in second["namespaces"])
    assert done == [(NS, "2026-03-11", "done"), (BOB, "2026-03-10", "done"), (BOB, "2026-03-11", "done")]
    assert second["failed"] == [] and len(night.model.calls) == 5
    assert night.container.store.get_daily_log(BOB, "2026-03-10") is not None
    # And the night after, nothing is retried any more
    night.clock.advance(days=1)
    third = await dream(night)
    assert [ns["date"] for ns in third["namespaces"]] == ["2026-03-12", "2026-03-12"]


async def test_a_day_that_keeps_failing_is_given_up_after_its_nights_not_its_retries(night: Env) -> None:
    # Given a day whose dream always fails
    night.message("a day", at=datetime(2026, 3, 10, 9, 0, tzinfo=UTC))
    night.model.script(*[UpstreamUnavailable("down")] * 20)
    # When the same night's run is retried three times (the local scheduler's early retry)
    for _ in range(3):
        report = await dream(night)
        night.clock.advance(minutes=30)
    # Then it is still to be retried
    assert [e["error"] for e in report["namespaces"][0]["errors"]] == ["upstream_unavailable"]
    # When later nights keep failing, the day is given up after MAX_DAY_ATTEMPTS nights, reported
    for _ in range(MAX_DAY_ATTEMPTS - 1):
        night.clock.set(night.clock.now().replace(hour=4, minute=10) + timedelta(days=1))
        report = await dream(night, date=night.clock.now().date().isoformat())
    retried = [ns for ns in report["namespaces"] if ns["date"] == "2026-03-10"]
    assert [e["error"] for e in retried[0]["errors"]] == ["upstream_unavailable", "day_skipped"]
    night.clock.advance(days=1)
    last = await dream(night, date=night.clock.now().date().isoformat())
    assert all(ns["date"] != "2026-03-10" for ns in last["namespaces"])
