"""The ``replica`` search backend as Lambda runs it (tests/lambda_harness.py): the stack synthesized with
``-c engram:search_backend=replica`` (no OpenSearch; a snapshot bucket), API instances frozen between
requests on one moto DynamoDB table and S3 bucket, Titan embeddings from the loopback Bedrock fake."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from typing import Any

import pytest

pytest.importorskip("aws_lambda_powertools")

from tests.integration.conftest import ADMIN_PASSWORD, UPSTREAM_KEY
from tests.lambda_harness import (
    LambdaInstance,
    LambdaStack,
    MotoServer,
    http_function,
    lambda_stack,
    start_instances,
)

FRESH_WITHIN_S = 2.0


@pytest.fixture(scope="session")
def replica_template() -> dict[str, Any]:
    pytest.importorskip("aws_cdk")
    from tests.lambda_harness import cached_template

    return cached_template(search_backend="replica")


@pytest.fixture
def make_replica_stack(
    replica_template: dict[str, Any], moto_server: MotoServer, bedrock_fake: Any
) -> Iterator[Callable[[], LambdaStack]]:
    with ExitStack() as exits:

        def make() -> LambdaStack:
            return exits.enter_context(
                lambda_stack(
                    replica_template,
                    moto_server,
                    opensearch_endpoint=None,
                    bedrock_endpoint=bedrock_fake.root_url,
                    secret_values={"upstream_api_key": UPSTREAM_KEY, "admin_password": ADMIN_PASSWORD},
                )
            )

        yield make


def search(instance: LambdaInstance, key: str, query: str) -> tuple[list[str], dict[str, Any]]:
    reply = instance.invoke("POST", "/v1/search/memories", key=key, json_body={"query": query, "top_k": 10})
    assert reply.status == 200, reply.text
    body = reply.json()
    return [hit["memory"]["id"] for hit in body["items"]], body["meta"]


def found_within(instance: LambdaInstance, key: str, query: str, memory_id: str, seconds: float) -> float | None:
    """Seconds until ``memory_id`` is among the hits of ``query`` on ``instance`` (None if not in time)."""
    started = time.monotonic()
    while time.monotonic() - started < seconds:
        if memory_id in search(instance, key, query)[0]:
            return time.monotonic() - started
        time.sleep(0.1)
    return None


def write(instance: LambdaInstance, key: str, content: str, **extra: Any) -> str:
    made = instance.invoke("POST", "/v1/memories", key=key, json_body={"content": content, **extra})
    assert made.status == 201, made.text
    return str(made.json()["memory"]["id"])


def test_replica_instances_share_writes_supersedes_and_deletes(make_replica_stack: Callable[[], LambdaStack]) -> None:
    # Given a stack without OpenSearch and two warm API instances, both having searched once
    stack = make_replica_stack()
    env = stack.env(http_function(stack.template, "Api"))
    assert env["ENGRAM_SEARCH"] == "replica" and env["ENGRAM_SNAPSHOT_BUCKET"]
    assert "ENGRAM_OPENSEARCH_ENDPOINT" not in env
    a, b = start_instances([stack.instance(name="a"), stack.instance(name="b")])
    key = stack.deployment.owner_key
    assert search(b, key, "cat")[0] == []
    # When A stores a memory
    cat = write(a, key, "My cat is called Miso", fact_key="pet:cat")
    # Then B finds it within 2 s, by hybrid search (Titan vectors kept in the table, searched in B's /tmp)
    assert found_within(b, key, "what is my cat called?", cat, FRESH_WITHIN_S) is not None
    ids, meta = search(b, key, "what is my cat called?")
    assert ids[0] == cat
    assert "vector" in meta["stages"] and meta["counts"]["vector"] >= 1, meta
    # When B corrects it, the old version is never returned on either instance
    fixed = b.invoke("POST", f"/v1/memories/{cat}/supersede", key=key, json_body={"content": "My cat is called Mochi"})
    assert fixed.status == 201, fixed.text
    new_cat = fixed.json()["memory"]["id"]
    assert found_within(a, key, "cat called", new_cat, FRESH_WITHIN_S) is not None
    for side in (a, b):
        assert cat not in search(side, key, "my cat is called Miso")[0]
    # When A deletes the new version, it disappears from both
    assert a.invoke("DELETE", f"/v1/memories/{new_cat}", key=key).status == 200
    deadline = time.monotonic() + FRESH_WITHIN_S
    while new_cat in search(b, key, "cat called")[0] and time.monotonic() < deadline:
        time.sleep(0.1)
    for side in (a, b):
        assert new_cat not in search(side, key, "cat called")[0]


def test_a_fresh_instance_hydrates_from_the_snapshot_and_later_changes(
    make_replica_stack: Callable[[], LambdaStack],
) -> None:
    # Given memories written through one instance, then an extraction run (it snapshots changed namespaces)
    stack = make_replica_stack()
    (a,) = start_instances([stack.instance(name="a")])
    key = stack.deployment.owner_key
    early = [write(a, key, f"Fact number {n}: I collect {thing}") for n, thing in enumerate(("stamps", "coins"))]
    extract = stack.job("engram.entrypoints.lambdas.extract.handler").start()
    answer = extract.invoke({"job": "extract"})
    assert "error" not in answer, answer
    s3 = stack.deployment.moto.client("s3")
    bucket = next(v for k, v in stack.deployment.physical.items() if k.startswith("SnapshotsBucket"))
    keys = [o["Key"] for o in s3.list_objects_v2(Bucket=bucket).get("Contents", [])]
    assert len(keys) == 1 and keys[0].startswith("search/") and keys[0].endswith("/index.snapshot")
    # And a memory written and one deleted after the snapshot
    late = write(a, key, "Fact number 2: I collect seashells")
    assert a.invoke("DELETE", f"/v1/memories/{early[0]}", key=key).status == 200
    # When a new execution environment starts cold
    (cold,) = start_instances([stack.instance(name="cold")])
    ids, _ = search(cold, key, "what do I collect?")
    # Then it finds what the snapshot holds and what changed since, and not the deleted memory
    assert early[1] in ids and late in ids
    assert early[0] not in ids
