"""``SqsJobQueue`` against SQS under moto."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("moto")

from botocore.stub import Stubber
from engram.adapters.queue.sqs import SqsJobQueue
from engram.domain.errors import InvalidInput, UpstreamRateLimited, UpstreamUnavailable
from engram.domain.ports import JobQueue
from engram.entrypoints.lambdas.cleanup import decode_job

from tests.fakes.moto_aws import sqs_queue_url


def test_enqueue_sends_one_json_message_with_the_job_attribute() -> None:
    with sqs_queue_url() as (client, url):
        # Given a queue adapter on a fresh queue
        queue = SqsJobQueue(url, client)
        assert isinstance(queue, JobQueue)
        # When a cleanup job is enqueued
        queue.enqueue("cleanup", {"namespace": "alice"})
        # Then exactly one message holds it, readable by decode_job
        messages = client.receive_message(QueueUrl=url, MaxNumberOfMessages=10, MessageAttributeNames=["All"])
        assert len(messages["Messages"]) == 1
        message = messages["Messages"][0]
        assert decode_job(message["Body"]) == ("cleanup", {"namespace": "alice"})
        assert message["MessageAttributes"]["job"]["StringValue"] == "cleanup"


def test_enqueue_rejects_payloads_that_cannot_be_sent() -> None:
    with sqs_queue_url() as (client, url):
        queue = SqsJobQueue(url, client)
        # When the payload is not JSON or too big / Then InvalidInput and nothing is sent
        with pytest.raises(InvalidInput):
            queue.enqueue("cleanup", {"bad": object()})
        with pytest.raises(InvalidInput):
            queue.enqueue("cleanup", {"blob": "x" * (256 * 1024)})
        assert "Messages" not in client.receive_message(QueueUrl=url, WaitTimeSeconds=0)


def test_sqs_errors_become_engram_errors() -> None:
    # Given a client whose SendMessage is throttled, then fails
    import boto3

    client = boto3.client("sqs", region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="x")
    queue = SqsJobQueue("https://sqs.us-east-1.amazonaws.com/123456789012/q", client)
    with Stubber(client) as stub:
        stub.add_client_error("send_message", service_error_code="ThrottlingException")
        stub.add_client_error("send_message", service_error_code="QueueDoesNotExist")
        # Then the errors are translated
        with pytest.raises(UpstreamRateLimited):
            queue.enqueue("cleanup", {})
        with pytest.raises(UpstreamUnavailable):
            queue.enqueue("cleanup", {})


def test_decode_job_rejects_foreign_messages() -> None:
    # Given bodies that are not job messages / Then InvalidInput
    for body in ("not json", json.dumps([1]), json.dumps({"payload": {}}), json.dumps({"job": "x", "payload": 3})):
        with pytest.raises(InvalidInput):
            decode_job(body)
    assert decode_job(json.dumps({"job": "cleanup"})) == ("cleanup", {})
