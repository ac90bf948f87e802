"""Each queued job message runs once (``services/jobs/registry.run_once``): deliveries at once, redeliveries,
a failed run given back to the queue, a claim left by a process that died. In-memory and SQLite stores."""

from __future__ import annotations

import threading
from datetime import timedelta
from typing import Any

import pytest
from engram.domain.errors import Conflict
from engram.domain.models import IdempotencyRecord
from engram.services.jobs.registry import JOBS_NAMESPACE, run_once

from tests.unit.jobs.conftest import Env

LEASE = timedelta(minutes=16)


def test_two_deliveries_at_once_run_the_job_once(env: Env) -> None:
    # Given a job that waits inside its run until the second delivery has tried
    store, clock = env.container.store, env.container.clock
    inside, tried = threading.Event(), threading.Event()
    runs: list[int] = []

    def job() -> dict[str, Any]:
        runs.append(1)
        inside.set()
        assert tried.wait(10)
        return {"job": "cleanup", "errors": 0}

    outcome: list[Any] = []
    first = threading.Thread(target=lambda: outcome.append(run_once(store, clock, "sqs:m1", LEASE, job)))
    first.start()
    assert inside.wait(10)
    # When the same message is delivered again while the first run is in progress
    with pytest.raises(Conflict) as refused:
        run_once(store, clock, "sqs:m1", LEASE, job)
    tried.set()
    first.join(10)
    # Then the second delivery is refused (the queue retries it later), the job ran once,
    # and a later redelivery is acknowledged without running
    assert refused.value.code == "job_running"
    assert runs == [1] and outcome == [{"job": "cleanup", "errors": 0}]
    assert run_once(store, clock, "sqs:m1", LEASE, job) is None
    assert runs == [1]


def test_a_failed_run_gives_the_message_back_for_a_retry(env: Env) -> None:
    store, clock = env.container.store, env.container.clock

    def failing() -> dict[str, Any]:
        raise RuntimeError("the index is away")

    # When the first delivery fails
    with pytest.raises(RuntimeError):
        run_once(store, clock, "sqs:m2", LEASE, failing)
    # Then nothing is kept, and the retry runs and is kept with its summary
    assert store.get_idempotency(JOBS_NAMESPACE, "sqs:m2") is None
    report = run_once(store, clock, "sqs:m2", LEASE, lambda: {"job": "cleanup", "errors": 1}, keep={"job": "cleanup"})
    assert report == {"job": "cleanup", "errors": 1}
    kept = store.get_idempotency(JOBS_NAMESPACE, "sqs:m2")
    assert kept is not None and kept.value == {"job": "cleanup", "errors": 1}
    assert store.get_idempotency(JOBS_NAMESPACE, "sqs:m2:claim") is None


def test_a_claim_left_by_a_dead_process_is_taken_over_after_its_lease(env: Env) -> None:
    store, clock = env.container.store, env.container.clock

    def dies() -> dict[str, Any]:
        raise SystemExit

    # Given a claim left behind by a process killed in its run (an exception would have given it back)
    with pytest.raises(SystemExit):
        run_once(store, clock, "sqs:m3", LEASE, dies)
    until = (clock.now() + LEASE).isoformat()
    claim = IdempotencyRecord(
        namespace=JOBS_NAMESPACE, key="sqs:m3:claim", value={"until": until}, created_at=clock.now()
    )
    assert store.put_idempotency(claim) is True
    # When a redelivery comes within the lease / Then it is refused
    with pytest.raises(Conflict):
        run_once(store, clock, "sqs:m3", LEASE, lambda: {"errors": 0})
    # When one comes after the lease / Then it takes the claim over and runs
    env.clock.advance(minutes=17)
    assert run_once(store, clock, "sqs:m3", LEASE, lambda: {"errors": 0}) == {"errors": 0}
