"""moto-backed AWS for tests: a DynamoDB store and an SQS queue on an in-process fake (no network).

The mock starts before any client exists (credentials are fake, the region fixed), and every client
call is serialized: moto's backends are not thread-safe, while DynamoDB itself serializes conditional
writes, so without the lock concurrent tests would measure moto, not the adapter.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from engram.domain.ports import Clock

REGION = "us-east-1"
TABLE = "engram-test"


class SerializedClient:
    """Wraps a boto3 client so that one call runs at a time; records the operation names.
    ``serialize=False`` only records (for a moto server, which takes concurrent requests)."""

    def __init__(self, client: Any, *, serialize: bool = True) -> None:
        self._client = client
        self._lock = threading.Lock()
        self._serialize = serialize
        self.calls: list[str] = []

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._client, name)
        if not callable(attr) or name.startswith("_") or name in ("get_waiter", "get_paginator"):
            return attr

        def call(*args: Any, **kwargs: Any) -> Any:
            with self._lock:
                self.calls.append(name)
                if self._serialize:
                    return attr(*args, **kwargs)
            return attr(*args, **kwargs)

        return call


@contextmanager
def mocked_aws() -> Iterator[None]:
    from moto import mock_aws

    fake = {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_SESSION_TOKEN": "testing",
        "AWS_DEFAULT_REGION": REGION,
    }
    saved = {key: os.environ.get(key) for key in fake}
    os.environ.update(fake)
    try:
        with mock_aws():
            yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


@contextmanager
def dynamo_store(tmp_path: Path | None = None, *, clock: Clock, **options: Any) -> Iterator[Any]:
    """A ``DynamoMemoryStore`` on a fresh moto table and ``clock`` (``tmp_path`` unused; registry signature)."""
    import boto3
    from engram.adapters.storage.dynamodb import DynamoMemoryStore, create_table

    with mocked_aws():
        client = boto3.client("dynamodb", region_name=REGION)
        create_table(client, TABLE)
        yield DynamoMemoryStore(TABLE, SerializedClient(client), clock=clock, **options)


@contextmanager
def sqs_queue_url(name: str = "engram-cleanup") -> Iterator[tuple[Any, str]]:
    """An SQS client and the URL of a fresh queue (inside the moto mock)."""
    import boto3

    with mocked_aws():
        client = boto3.client("sqs", region_name=REGION)
        yield client, client.create_queue(QueueName=name)["QueueUrl"]


@contextmanager
def dynamo_search_log(tmp_path: Path | None = None) -> Iterator[Any]:
    """A ``DynamoSearchLog`` (the replica search backend's shared documents) on a fresh moto table."""
    import boto3
    from engram.adapters.search.replica_log import DynamoSearchLog
    from engram.adapters.storage.dynamodb import create_table

    with mocked_aws():
        client = boto3.client("dynamodb", region_name=REGION)
        create_table(client, TABLE)
        yield DynamoSearchLog(TABLE, SerializedClient(client))
