"""DynamoDB-specific behaviour of ``DynamoMemoryStore`` under moto (the shared contract is in tests/contract)."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

pytest.importorskip("moto")
pytest.importorskip("boto3")

from botocore.exceptions import ClientError
from botocore.stub import Stubber
from engram.adapters.storage.dynamodb import DynamoMemoryStore
from engram.domain.errors import Conflict, InvalidInput, UpstreamRateLimited, UpstreamUnavailable
from engram.domain.models import (
    IdempotencyRecord,
    Memory,
    MemoryEvent,
    MemoryFilter,
    Message,
    UsageRecord,
)

from tests.fakes.clock import ManualClock
from tests.fakes.moto_aws import TABLE, dynamo_store

NS = "alice"
T0 = datetime(2025, 3, 1, 12, 0, tzinfo=UTC)


@pytest.fixture
def store() -> Iterator[DynamoMemoryStore]:
    with dynamo_store(clock=ManualClock(T0), message_ttl_days=14, log_ttl_days=30, idempotency_ttl_days=7) as adapter:
        yield adapter


def raw_items(store: DynamoMemoryStore) -> list[dict[str, Any]]:
    """Every item as the console shows it (test-only scan; the adapter never scans)."""
    client = store._db.client
    items = client.scan(TableName=TABLE)["Items"]
    return [store._db.des(item) for item in items]


def a_memory(memory_id: str, **fields: Any) -> Memory:
    return Memory(id=memory_id, namespace=NS, content=f"content {memory_id}", created_at=T0, updated_at=T0, **fields)


def test_memory_item_is_readable_in_the_console(store: DynamoMemoryStore) -> None:
    # Given a memory with tags, scores and a non-UTC timestamp
    remind = datetime(2025, 4, 1, 9, 30, tzinfo=UTC) + timedelta(hours=0)
    store.insert_memory(a_memory("m1", fact_key="pref:tea", tags=("drink",), importance=0.7, remind_at=remind))
    # When the raw item is read
    item = next(i for i in raw_items(store) if i["SK"] == "MEM#m1")
    # Then it holds plain attributes with ISO-8601 UTC timestamps and an entity name
    assert item["entity"] == "memory"
    assert item["content"] == "content m1"
    assert item["tags"] == ["drink"]
    assert str(item["importance"]) == "0.7"
    assert item["created_at"] == "2025-03-01T12:00:00.000000+00:00"
    assert item["remind_at"] == "2025-04-01T09:30:00.000000+00:00"
    assert "superseded_by_id" not in item  # None fields are left out
    assert "ttl" not in item  # memories expire through the cleanup job (vector first), never by TTL


def test_ttl_is_set_on_messages_usage_events_idempotency_and_cache(store: DynamoMemoryStore) -> None:
    # Given one row of each kind that expires
    store.insert_message(Message(id="msg1", namespace=NS, role="user", content="hi", external_id="t1", created_at=T0))
    store.append_usage(UsageRecord(id="u1", namespace=NS, model="m", created_at=T0))
    store.append_event(MemoryEvent(id="e1", namespace=NS, kind="created", memory_id="m1", created_at=T0))
    store.put_idempotency(IdempotencyRecord(namespace=NS, key="k1", created_at=T0))
    store.put_cache(NS, "c1", {"v": 1}, expires_at=T0 + timedelta(hours=1))
    store.put_cache(NS, "c2", {"v": 2})
    # When the items are read raw
    ttl = {i["SK"]: i.get("ttl") for i in raw_items(store) if i["PK"] == f"NS#{NS}"}
    # Then each carries its retention as epoch seconds; a cache entry without expiry has none
    day = 86400
    start = int(T0.timestamp())
    assert ttl["MSG#2025-03-01T12:00:00.000000+00:00#msg1"] == start + 14 * day
    assert ttl["MSGID#msg1"] == ttl["MSGEXT#t1"] == start + 14 * day
    assert ttl["USAGE#u1"] == ttl["EVT#e1"] == start + 30 * day
    assert ttl["IDEM#k1"] == start + 7 * day
    assert ttl["CACHE#c1"] == start + 3600
    assert ttl["CACHE#c2"] is None


def test_request_paths_never_scan(store: DynamoMemoryStore) -> None:
    # Given a store used through every read path
    store.insert_memory(a_memory("m1", fact_key="a:b"))
    store.list_memories(NS, MemoryFilter(tag="x"))
    list(store.iter_memories(NS))
    store.count_memories(NS)
    store.find_active_by_fact_key(NS, "a:b")
    store.list_messages(NS)
    store.list_events(NS, memory_id="m1")
    store.list_namespaces()
    # Then only GetItem, BatchGetItem, Query and writes were issued
    calls = set(store._db.client.calls)
    assert "scan" not in calls
    assert calls <= {"get_item", "batch_get_item", "query", "put_item", "transact_write_items"}


def test_supersede_moves_the_fact_key_lock_in_one_transaction(store: DynamoMemoryStore) -> None:
    # Given an active memory holding a fact key
    old = store.insert_memory(a_memory("m1", fact_key="city:home"))
    store._db.client.calls.clear()
    # When it is superseded by a new version
    store.supersede(
        old.model_copy(update={"status": "superseded", "superseded_by_id": "m2"}),
        a_memory("m2", fact_key="city:home", supersedes_id="m1"),
    )
    # Then one transaction wrote both rows and moved the lock; the key resolves to the new row
    assert store._db.client.calls.count("transact_write_items") == 1
    assert store.find_active_by_fact_key(NS, "city:home").id == "m2"  # type: ignore[union-attr]
    lock = next(i for i in raw_items(store) if i["SK"] == "MEMKEY#city:home")
    assert lock["memory_id"] == "m2"


def test_archiving_releases_the_fact_key(store: DynamoMemoryStore) -> None:
    # Given an active memory with a key, then archived
    memory = store.insert_memory(a_memory("m1", fact_key="k:v"))
    store.update_memory(memory.model_copy(update={"status": "archived"}))
    # When another memory takes the key / Then it may
    store.insert_memory(a_memory("m2", fact_key="k:v"))
    with pytest.raises(Conflict):
        store.update_memory(memory.model_copy(update={"status": "active"}))


def test_hard_delete_removes_the_locks(store: DynamoMemoryStore) -> None:
    # Given a memory with a key and an external id
    store.insert_memory(a_memory("m1", fact_key="k:v", external_id="ext"))
    # When its row is hard-deleted
    store.delete_memory_row(NS, "m1")
    # Then no lock item is left and both are free again
    assert [i["SK"] for i in raw_items(store) if i["PK"] == f"NS#{NS}"] == []
    store.insert_memory(a_memory("m2", fact_key="k:v", external_id="ext"))


def test_throttling_becomes_upstream_rate_limited() -> None:
    # Given a client whose GetItem is throttled
    import boto3

    client = boto3.client("dynamodb", region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="x")
    store = DynamoMemoryStore("t", client, clock=ManualClock())
    with Stubber(client) as stub:
        stub.add_client_error("get_item", service_error_code="ProvisionedThroughputExceededException")
        stub.add_client_error("get_item", service_error_code="ResourceNotFoundException")
        stub.add_client_error("get_item", service_error_code="ValidationException", service_message="too big")
        # When reads fail / Then Engram's errors come out, chained to the SDK error
        with pytest.raises(UpstreamRateLimited) as limited:
            store.get_digest(NS)
        assert isinstance(limited.value.__cause__, ClientError)
        with pytest.raises(UpstreamUnavailable):
            store.get_digest(NS)
        with pytest.raises(InvalidInput):
            store.get_digest(NS)


def test_table_name_is_required() -> None:
    with pytest.raises(InvalidInput):
        DynamoMemoryStore("", client=object(), clock=ManualClock())


def test_a_row_written_before_versions_reads_as_version_1_and_is_replaced_only_once(store: DynamoMemoryStore) -> None:
    # Given a memory item as an older Engram wrote it: no version attribute
    store.insert_memory(a_memory("m1", fact_key="k:v"))
    store._db.client.update_item(
        TableName=TABLE, Key=store._db.key(f"NS#{NS}", "MEM#m1"), UpdateExpression="REMOVE version"
    )
    read = store.get_memory(NS, "m1")
    assert read.version == 1
    # When two writers replace the row they both read at version 1
    first = store.update_memory(read.model_copy(update={"status": "archived"}))
    with pytest.raises(Conflict) as caught:
        store.update_memory(read.model_copy(update={"content": "stale"}))
    # Then the first one landed (version 2, the key freed), the second was refused
    assert caught.value.code == "version_conflict"
    assert store.get_memory(NS, "m1") == first
    assert first.version == 2
    assert store.find_active_by_fact_key(NS, "k:v") is None


def test_record_seen_moves_the_sweep_key_of_active_rows_only(store: DynamoMemoryStore) -> None:
    # Given an active and an archived memory
    store.insert_memory(a_memory("m1"))
    store.insert_memory(a_memory("m2", status="archived", status_changed_at=T0 + timedelta(minutes=1)))
    # When both are seen an hour later
    later = T0 + timedelta(hours=1)
    store.record_seen(NS, "m1", later)
    store.record_seen(NS, "m2", later)
    # Then the active row sweeps by its sighting, the archived one still by its status change
    items = {i["SK"]: i for i in raw_items(store)}
    assert items["MEM#m1"]["GSI2SK"] == f"{later.isoformat(timespec='microseconds')}#m1"
    assert items["MEM#m2"]["GSI2SK"].startswith("2025-03-01T12:01:00")
    # And counters are increments of those attributes alone
    assert (items["MEM#m1"]["seen_count"], items["MEM#m1"]["version"]) == (1, 1)


def test_bookkeeping_is_one_update_per_row_never_a_put(store: DynamoMemoryStore) -> None:
    # Given two memories
    store.insert_memory(a_memory("m1"))
    store.insert_memory(a_memory("m2"))
    store._db.client.calls.clear()
    # When a recall records both as injected
    store.record_injected(NS, ["m1", "m2"], T0)
    # Then two UpdateItem calls (ADD / SET on the counters) did it, nothing read or replaced the rows
    assert store._db.client.calls == ["update_item", "update_item"]
