"""Every AWS adapter maps the SDK's errors through ``adapters/aws_errors.py``: one table, so an IAM
denial is 403 (the owner can grant it) and broken credentials 502 on every service alike."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

pytest.importorskip("boto3")

import boto3
from botocore.exceptions import ClientError
from botocore.stub import Stubber
from engram.adapters.queue.sqs import SqsJobQueue
from engram.adapters.ratelimit.dynamodb import DynamoRateLimiter
from engram.adapters.search.replica_log import DynamoSearchLog
from engram.adapters.storage.dynamodb import DynamoMemoryStore
from engram.adapters.storage.skills import DynamoSkillStore
from engram.domain.errors import UpstreamRateLimited, UpstreamRejected, UpstreamUnavailable

from tests.fakes.clock import ManualClock

QUEUE_URL = "https://sqs.us-east-1.amazonaws.com/123456789012/q"


def _client(service: str) -> Any:
    return boto3.client(service, region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="x")


def _dynamo_store(client: Any) -> None:
    DynamoMemoryStore("t", client, clock=ManualClock()).get_digest("alice")


def _rate_limiter(client: Any) -> None:
    DynamoRateLimiter("t", client, clock=ManualClock()).hit("k", 10, 60)


def _search_log(client: Any) -> None:
    DynamoSearchLog("t", client).ping()


def _skill_store(client: Any) -> None:
    DynamoSkillStore("t", client).find_skill("alice", "pdf")


def _sqs(client: Any) -> None:
    SqsJobQueue(QUEUE_URL, client).enqueue("cleanup", {})


# adapter, its service, the operation the call issues, the denial code that service sends
ADAPTERS: list[tuple[str, str, str, str, Callable[[Any], None]]] = [
    ("DynamoMemoryStore", "dynamodb", "get_item", "AccessDeniedException", _dynamo_store),
    ("DynamoRateLimiter", "dynamodb", "update_item", "AccessDeniedException", _rate_limiter),
    ("DynamoSearchLog", "dynamodb", "get_item", "AccessDeniedException", _search_log),
    ("DynamoSkillStore", "dynamodb", "get_item", "AccessDeniedException", _skill_store),
    ("SqsJobQueue", "sqs", "send_message", "AccessDenied", _sqs),
    ("SqsJobQueue/json", "sqs", "send_message", "AccessDeniedException", _sqs),
    ("SqsJobQueue/kms", "sqs", "send_message", "KMS.AccessDeniedException", _sqs),
]


@pytest.mark.parametrize(("name", "service", "operation", "code", "call"), ADAPTERS, ids=[a[0] for a in ADAPTERS])
def test_access_denied_is_403_on_every_aws_adapter(
    name: str, service: str, operation: str, code: str, call: Callable[[Any], None]
) -> None:
    # Given a client whose IAM role may not do the operation
    client = _client(service)
    with Stubber(client) as stub:
        stub.add_client_error(operation, service_error_code=code, http_status_code=400)
        # When the adapter calls it / Then a 403 comes out, chained to the SDK error
        with pytest.raises(UpstreamRejected) as denied:
            call(client)
    assert denied.value.status == 403, name
    assert isinstance(denied.value.__cause__, ClientError)


@pytest.mark.parametrize(
    ("name", "service", "operation", "code", "call"), ADAPTERS[::2], ids=[a[0] for a in ADAPTERS[::2]]
)
def test_broken_credentials_throttling_and_outages_map_alike(
    name: str, service: str, operation: str, code: str, call: Callable[[Any], None]
) -> None:
    # Given a client that fails with bad credentials, then throttling, then an outage
    client = _client(service)
    bad_token = "InvalidClientTokenId" if service == "sqs" else "UnrecognizedClientException"
    with Stubber(client) as stub:
        stub.add_client_error(operation, service_error_code=bad_token, http_status_code=403)
        stub.add_client_error(operation, service_error_code="ThrottlingException", http_status_code=400)
        stub.add_client_error(operation, service_error_code="InternalFailure", http_status_code=500)
        # Then: the gateway's own fault (502), rate limited, unavailable
        with pytest.raises(UpstreamRejected) as rejected:
            call(client)
        assert rejected.value.status == 502, name
        with pytest.raises(UpstreamRateLimited):
            call(client)
        with pytest.raises(UpstreamUnavailable):
            call(client)
