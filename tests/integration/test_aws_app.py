"""The AWS wiring end to end on moto: ENGRAM_* settings as the stack sets them, keys from Secrets
Manager, DynamoDB as the store, SQS as the queue, and the ASGI app answering the requests that API
Gateway's REST proxy events turn into (the Lambda Web Adapter's job, done here by ``to_request``)."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

pytest.importorskip("moto")

import boto3
from engram.adapters.queue.sqs import SqsJobQueue
from engram.adapters.storage.dynamodb import DynamoMemoryStore, create_table
from engram.bootstrap import Container, build_container
from engram.entrypoints.http.app import create_app
from engram.services.library.journaled_store import JournaledStore
from engram.settings import load_settings

from tests.fakes.moto_aws import REGION, mocked_aws

EVENTS = Path(__file__).resolve().parents[1] / "events"
OWNER_KEY = "ek_test_aws_owner_key_000001"


@pytest.fixture
def aws_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[dict[str, str]]:
    with mocked_aws():
        dynamodb = boto3.client("dynamodb", region_name=REGION)
        create_table(dynamodb, "engram")
        queue_url = boto3.client("sqs", region_name=REGION).create_queue(QueueName="cleanup")["QueueUrl"]
        secret = boto3.client("secretsmanager", region_name=REGION).create_secret(
            Name="engram-secret",
            SecretString=json.dumps({"api_key": OWNER_KEY, "upstream_api_key": "", "admin_password": "pw-123"}),
        )
        env = {
            "ENGRAM_STORE": "dynamodb",
            "ENGRAM_TABLE_NAME": "engram",
            "ENGRAM_SEARCH": "memory",
            "ENGRAM_EMBEDDER": "none",
            "ENGRAM_QUEUE": "sqs",
            "ENGRAM_CLEANUP_QUEUE_URL": queue_url,
            "ENGRAM_SECRET_ARN": secret["ARN"],
            "ENGRAM_AWS_REGION": REGION,
            "ENGRAM_SCHEDULER_ENABLED": "false",
            "ENGRAM_DATA_DIR": str(tmp_path),
        }
        for key, value in env.items():
            monkeypatch.setenv(key, value)
        yield env


def to_request(event: dict[str, Any]) -> httpx.Request:
    """An API Gateway REST proxy event as the HTTP request the Lambda Web Adapter forwards."""
    body = event.get("body") or ""
    content = base64.b64decode(body) if event.get("isBase64Encoded") else body.encode()
    query = event.get("multiValueQueryStringParameters") or {}
    params = [(k, v) for k, values in query.items() for v in values]
    headers = {k: v[-1] for k, v in (event.get("multiValueHeaders") or {}).items()}
    headers.pop("Content-Length", None)
    return httpx.Request(event["httpMethod"], f"http://testserver{event['path']}", params=params,
                         headers=headers, content=content)  # fmt: skip


def rest_event(method: str, path: str, body: Any = None, key: str = OWNER_KEY) -> dict[str, Any]:
    event: dict[str, Any] = json.loads((EVENTS / "apigw_rest_proxy.json").read_text())
    event["httpMethod"], event["path"] = method, path
    event["resource"], event["pathParameters"] = "/{proxy+}", {"proxy": path.lstrip("/")}
    event["multiValueHeaders"]["Authorization"] = [f"Bearer {key}"]
    event["multiValueHeaders"]["Accept"] = ["application/json"]
    event["body"] = None if body is None else json.dumps(body)
    return event


def test_settings_as_the_stack_sets_them_build_aws_adapters(aws_env: dict[str, str]) -> None:
    # Given the environment of a deployed function / When the container is built
    container = build_container(load_settings())
    # Then it uses DynamoDB (behind the journal's recording wrapper) and SQS, and takes the keys from the secret
    assert isinstance(container.store, JournaledStore) and isinstance(container.store.inner, DynamoMemoryStore)
    assert isinstance(container.queue, SqsJobQueue)
    assert container.settings.api_key is not None and container.settings.api_key.get_secret_value() == OWNER_KEY
    assert container.settings.admin_password is not None
    assert container.settings.upstream_api_key is None  # empty fields in the secret are ignored
    container.close()


async def test_rest_proxy_event_reaches_dynamodb(aws_env: dict[str, str]) -> None:
    # Given the app on the AWS adapters
    app = create_app(build_container(load_settings()))
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport) as client:
        # When API Gateway delivers a POST /v1/memories event (through the web adapter)
        event = rest_event("POST", "/v1/memories", {"content": "I am allergic to peanuts", "type": "fact"})
        created = await client.send(to_request(event))
        # Then the memory is created and readable through a GET event
        assert created.status_code == 201, created.text
        memory_id = created.json()["memory"]["id"]
        fetched = await client.send(to_request(rest_event("GET", f"/v1/memories/{memory_id}")))
        assert fetched.status_code == 200
        # And a wrong key is refused
        denied = await client.send(to_request(rest_event("GET", f"/v1/memories/{memory_id}", key="ek_wrong_key_0000")))
        assert denied.status_code == 401
    # And the row is a readable DynamoDB item in the owner's namespace
    item = boto3.client("dynamodb", region_name=REGION).get_item(
        TableName="engram", Key={"PK": {"S": "NS#default"}, "SK": {"S": f"MEM#{memory_id}"}}
    )["Item"]
    assert item["content"]["S"] == "I am allergic to peanuts"
    assert item["entity"]["S"] == "memory"


async def test_health_answers_for_the_web_adapter_readiness_check(aws_env: dict[str, str]) -> None:
    # Given the app / When LWA polls the readiness path set by the stack / Then it is healthy
    app = create_app(build_container(load_settings()))
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://127.0.0.1:8080") as client:
        response = await client.get("/health")
    assert response.status_code == 200


def test_one_client_per_aws_service_and_the_rare_ones_on_first_use(
    aws_env: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given every boto3 client built recorded by service
    built: list[str] = []
    real = boto3.client

    def recording(service: str, *args: Any, **kwargs: Any) -> Any:
        built.append(service)
        return real(service, *args, **kwargs)

    monkeypatch.setattr(boto3, "client", recording)
    monkeypatch.setenv("ENGRAM_EXTRACT_MODEL", "bedrock/amazon.nova-lite-v1:0")
    # When the API function's app is built
    container = build_container(load_settings())
    create_app(container)
    # Then the store, the rate limiter and the skills library share one DynamoDB client, and neither the
    # queue's SQS client nor the jobs' Bedrock client is built yet (bench/README.md, "Cold start")
    assert sorted(built) == ["dynamodb", "secretsmanager"]
    journaled = container.store
    assert isinstance(journaled, JournaledStore)
    store = journaled.inner
    assert isinstance(store, DynamoMemoryStore)
    limiter: Any = container.limits._limiter
    skill_store: Any = container.skills._store
    assert limiter._db.client is store._db.client
    assert skill_store._toolkit().client is store._db.client
    # When a job is queued, then the SQS client is built, once
    container.queue.enqueue("cleanup", {"namespace": "default"})
    container.queue.enqueue("cleanup", {"namespace": "default"})
    assert sorted(built) == ["dynamodb", "secretsmanager", "sqs"]
    container.close()


def test_bedrock_job_models_and_reranker_are_wired(aws_env: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> None:
    # Given the stack's defaults: Bedrock models for the jobs and the Bedrock reranker
    from engram.adapters.llm.bedrock import BedrockChatModel, BedrockReranker
    from engram.bootstrap.models import RuntimeChatModel
    from engram.services.recall.pipeline import RecallService

    monkeypatch.setenv("ENGRAM_EXTRACT_MODEL", "bedrock/amazon.nova-lite-v1:0")
    monkeypatch.setenv("ENGRAM_DREAM_MODEL", "bedrock/amazon.nova-lite-v1:0")
    monkeypatch.setenv("ENGRAM_RERANKER", "bedrock")
    monkeypatch.setenv("ENGRAM_RERANK_REGION", "us-west-2")
    # When the container is built
    container = build_container(load_settings())
    # Then the jobs talk to Bedrock Converse (one client shared) and recall reranks with Bedrock
    # (the job models follow the runtime settings through a RuntimeChatModel wrapper)
    extract_runtime, dream_runtime = container.extraction._model, container.dreaming._model
    assert isinstance(extract_runtime, RuntimeChatModel) and isinstance(dream_runtime, RuntimeChatModel)
    extract_model = extract_runtime._model()
    assert isinstance(extract_model, BedrockChatModel)
    assert extract_model is dream_runtime._model()
    assert isinstance(container.recall, RecallService)
    assert isinstance(container.recall._reranker, BedrockReranker)
    container.close()


def test_cleanup_lambda_runs_the_real_cleanup_on_dynamodb(aws_env: dict[str, str]) -> None:
    # Given the CleanupFunction building its container from the environment, and a 30-day-old message
    from datetime import timedelta

    from engram.domain.models import Message
    from engram.entrypoints.lambdas import cleanup, runtime

    from tests.integration.test_lambda_handlers import LambdaContextStub

    runtime.set_container_factory(None)
    try:
        built = runtime.get_container()
        assert isinstance(built, Container)  # the one bootstrap builds, with its whole store
        store = built.store
        old = Message(
            id="msg_old",
            namespace="default",
            role="user",
            content="hi",
            created_at=built.clock.now() - timedelta(days=30),
        )
        store.insert_message(old)
        batch = json.loads((EVENTS / "sqs_cleanup_batch.json").read_text())
        batch["Records"] = batch["Records"][:1]
        batch["Records"][0]["body"] = json.dumps({"job": "cleanup", "payload": {"namespace": "default"}})
        # When the SQS batch arrives
        result = cleanup.handler(batch, LambdaContextStub())
        # Then the record succeeded and retention removed the old message
        assert result == {"batchItemFailures": []}
        assert store.count_messages("default") == 0
        assert store.get_idempotency(cleanup.JOBS_NAMESPACE, "sqs:059f36b4-87a3-44ab-83d2-661975830a7d") is not None
    finally:
        runtime.set_container_factory(None)


async def test_reindex_is_a_job_on_the_queue_that_continues_itself_and_reports_on_any_instance(
    aws_env: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given the API function's app and 12 memories in DynamoDB (a reindex batch is 8 here, 32 in real life)
    from engram.entrypoints.lambdas import cleanup, runtime
    from engram.services.index import reindex
    from engram.services.library.memories import MemoryWrite

    from tests.integration.test_lambda_handlers import LambdaContextStub

    api = build_container(load_settings())
    monkeypatch.setattr(reindex, "BATCH", 8)
    for i in range(12):
        api.memories.write("default", MemoryWrite(content=f"memory number {i} about topic {i % 7}"))
    sqs = boto3.client("sqs", region_name=REGION)
    queue_url = aws_env["ENGRAM_CLEANUP_QUEUE_URL"]
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=create_app(api))) as client:
        # When the admin starts a reindex
        started = await client.send(to_request(rest_event("POST", "/v1/admin/reindex")))
        assert started.status_code == 202, started.text
        # Then the response came back with the run queued on the jobs queue, not running in this process
        assert started.json()["state"] == "running" and started.json()["done"] == 0
    # When the jobs function consumes the queue, with time for one batch per invocation
    monkeypatch.setattr(runtime, "MIN_SLICE_S", 0.0)
    monkeypatch.setattr(runtime, "REINDEX_MARGIN_S", 900.0)
    runtime.set_container_factory(None)
    invocations = 0
    try:
        while True:
            messages = sqs.receive_message(QueueUrl=queue_url, MaxNumberOfMessages=10).get("Messages", [])
            if not messages:
                break
            batch = json.loads((EVENTS / "sqs_cleanup_batch.json").read_text())
            template = batch["Records"][0]
            batch["Records"] = [
                {**template, "messageId": m["MessageId"], "receiptHandle": m["ReceiptHandle"], "body": m["Body"]}
                for m in messages
            ]
            assert cleanup.handler(batch, LambdaContextStub()) == {"batchItemFailures": []}
            for m in messages:
                sqs.delete_message(QueueUrl=queue_url, ReceiptHandle=m["ReceiptHandle"])
            invocations += 1
            assert invocations < 10
    finally:
        runtime.set_container_factory(None)
    # Then the run continued itself (two invocations: 8 + 4 memories) and is done
    assert invocations == 2
    # And another instance of the API function reports it from DynamoDB
    other = create_app(build_container(load_settings()))
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=other)) as client:
        state = (await client.send(to_request(rest_event("GET", "/v1/admin/reindex")))).json()
    assert (state["state"], state["done"], state["total"]) == ("done", 12, 12)
    assert state["run_id"] == started.json()["run_id"]
    api.close()


async def test_a_binary_skill_file_arrives_base64_encoded_and_is_stored_byte_for_byte(
    aws_env: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given the app with the stack's skill files bucket (moto S3)
    s3 = boto3.client("s3", region_name=REGION)
    s3.create_bucket(Bucket="engram-skill-files")
    monkeypatch.setenv("ENGRAM_SKILLS_BUCKET", "engram-skill-files")
    app = create_app(build_container(load_settings()))
    data = bytes(range(256)) * 8 + b"\x00\xff\r\n\x1a"  # every byte value, NUL, CR LF, Ctrl-Z
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app)) as client:
        created = await client.send(
            to_request(rest_event("POST", "/v1/skills", {"content": "# Pdf tools\nFill.", "name": "pdf-tools"}))
        )
        assert created.status_code == 201, created.text
        # When API Gateway delivers the PUT of a binary file: application/octet-stream is a binary media type
        # of the stack, so the event's body is base64 with isBase64Encoded (the Web Adapter decodes it)
        event = rest_event("PUT", "/v1/skills/pdf-tools/files/bin/tool.bin")
        event["multiValueHeaders"]["Content-Type"] = ["application/octet-stream"]
        event["body"], event["isBase64Encoded"] = base64.b64encode(data).decode(), True
        put = await client.send(to_request(event))
        assert put.status_code == 201, put.text
        # Then the bucket holds exactly the bytes, and a GET returns them
        (stored,) = s3.list_objects_v2(Bucket="engram-skill-files", Prefix="skills/")["Contents"]
        assert s3.get_object(Bucket="engram-skill-files", Key=stored["Key"])["Body"].read() == data
        fetched = await client.send(to_request(rest_event("GET", "/v1/skills/pdf-tools/files/bin/tool.bin")))
        assert fetched.status_code == 200 and fetched.content == data
