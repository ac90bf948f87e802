"""The RateLimiter contract (domain/ports.py), run against the in-process counter and DynamoDB (moto)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from datetime import UTC, datetime
from typing import Any

import pytest
from engram.adapters.ratelimit.inprocess import InProcessRateLimiter
from engram.domain.ports import RateLimiter

from tests.fakes.clock import ManualClock


def clock_at(t: float = 1_800_000_010.0) -> ManualClock:  # default: 10 s into a minute
    """The limiters' windows follow the injected clock, moved by the tests (never slept)."""
    return ManualClock(datetime.fromtimestamp(t, UTC))


@contextmanager
def _inprocess(clock: ManualClock) -> Iterator[RateLimiter]:
    yield InProcessRateLimiter(clock=clock)


@contextmanager
def _dynamodb(clock: ManualClock) -> Iterator[RateLimiter]:
    pytest.importorskip("moto")
    import boto3
    from engram.adapters.ratelimit.dynamodb import DynamoRateLimiter
    from engram.adapters.storage.dynamodb import create_table

    from tests.fakes.moto_aws import REGION, TABLE, SerializedClient, mocked_aws

    with mocked_aws():
        client = boto3.client("dynamodb", region_name=REGION)
        create_table(client, TABLE)
        # moto is not thread-safe; DynamoDB serializes conditional writes itself (tests/fakes/moto_aws.py)
        yield DynamoRateLimiter(TABLE, SerializedClient(client), clock=clock)


LIMITERS: dict[str, Callable[[ManualClock], AbstractContextManager[RateLimiter]]] = {
    "inprocess": _inprocess,
    "dynamodb": _dynamodb,
}


@pytest.fixture(params=list(LIMITERS))
def clocked(request: pytest.FixtureRequest) -> Iterator[tuple[RateLimiter, ManualClock]]:
    clock = clock_at()
    with LIMITERS[request.param](clock) as limiter:
        yield limiter, clock


def test_a_window_allows_the_limit_then_says_when_it_ends(clocked: tuple[RateLimiter, ManualClock]) -> None:
    limiter, clock = clocked
    # When a key sends four requests within one minute against a limit of three
    answers = [limiter.hit("k:chat", 3, 60) for _ in range(4)]
    # Then three pass and the fourth waits for the window's end (50 s away)
    assert answers[:3] == [None, None, None]
    assert answers[3] == pytest.approx(50.0)
    # And another key, or another kind of the same key, has its own counter
    assert limiter.hit("k:requests", 3, 60) is None
    assert limiter.hit("other:chat", 3, 60) is None
    # When the next window starts, Then the key may send again
    clock.advance(seconds=50)
    assert limiter.hit("k:chat", 3, 60) is None


def test_concurrent_hits_allow_exactly_the_limit(clocked: tuple[RateLimiter, ManualClock]) -> None:
    limiter, _ = clocked
    results: list[Any] = []
    lock = threading.Lock()

    def hit() -> None:
        answer = limiter.hit("busy", 5, 60)
        with lock:
            results.append(answer)

    threads = [threading.Thread(target=hit) for _ in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sum(1 for r in results if r is None) == 5


def test_the_dynamodb_counter_expires_with_ttl() -> None:
    pytest.importorskip("moto")
    import boto3
    from engram.adapters.ratelimit.dynamodb import DynamoRateLimiter
    from engram.adapters.storage.dynamodb import create_table

    from tests.fakes.moto_aws import REGION, TABLE, mocked_aws

    with mocked_aws():
        client = boto3.client("dynamodb", region_name=REGION)
        create_table(client, TABLE)
        DynamoRateLimiter(TABLE, client, clock=clock_at(1_800_000_010.0)).hit("k:chat", 3, 60)
        item = client.get_item(TableName=TABLE, Key={"PK": {"S": "RATE#k:chat"}, "SK": {"S": "W#1800000000"}})["Item"]
    # One item per key and window, counted, removed by DynamoDB's TTL an hour after the window
    assert item["n"] == {"N": "1"} and item["ttl"] == {"N": str(1_800_000_060 + 3600)}


def test_reset_forgets_the_current_window_of_one_key(clocked: tuple[RateLimiter, ManualClock]) -> None:
    limiter, _ = clocked
    # Given a key at its limit and another key with one request
    assert [limiter.hit("login:a", 2, 60) for _ in range(3)][2] is not None
    assert limiter.hit("login:b", 1, 60) is None
    # When the first is reset / Then it may send its limit again, and the other key kept its count
    limiter.reset("login:a", 60)
    assert [limiter.hit("login:a", 2, 60) for _ in range(2)] == [None, None]
    assert limiter.hit("login:b", 1, 60) is not None
    limiter.reset("never-seen", 60)  # resetting an unknown key is no error
