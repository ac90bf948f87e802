"""`engram migrate` on DynamoDB (moto): messages stored before threads and insertion order existed are
given their thread and stored-order index keys, once; thread rows count them; a run cut short resumes;
a second run changes nothing (README, "Upgrading"; docs/aws.md, "Upgrading a deployment")."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

pytest.importorskip("moto")

from engram.domain.models import Message
from engram.entrypoints import cli
from engram.services.jobs.migrate import CURSOR, MigrationService
from engram.services.recall.conversations import CURSOR as CONVERSATION_CURSOR

from tests.fakes.clock import ManualClock
from tests.fakes.moto_aws import TABLE, dynamo_store

NS = "alice"
T0 = datetime(2025, 6, 1, 9, 0, tzinfo=UTC)


@pytest.fixture
def store() -> Iterator[Any]:
    with dynamo_store(clock=ManualClock(T0)) as s:
        yield s


def _message(message_id: str, thread: str, minute: int) -> Message:
    return Message(
        id=message_id,
        namespace=NS,
        conversation_id=thread,
        role="user",
        content=f"about the trip {message_id}",
        created_at=T0 + timedelta(minutes=minute),
    )


def _as_before_the_upgrade(store: Any, message: Message, *, keep_thread_index: bool = False) -> None:
    """Store ``message`` the way an older version did: no stored-order keys (and no thread keys)."""
    store.insert_message(message)
    pk = f"NS#{NS}"
    item = next(i for i in store._db.query(pk=pk, sk_prefix="MSG#") if i["id"] == message.id)
    removed = "GSI2PK, GSI2SK, stored_at" if keep_thread_index else "GSI1PK, GSI1SK, GSI2PK, GSI2SK, stored_at"
    store._db.call(
        "update_item", TableName=TABLE, Key=store._db.key(pk, item["SK"]), UpdateExpression=f"REMOVE {removed}"
    )
    if not keep_thread_index:  # nor a thread row counting it
        store._db.call(
            "update_item",
            TableName=TABLE,
            Key=store._db.key(pk, f"THREAD#{message.conversation_id}"),
            UpdateExpression="ADD message_count :minus",
            ExpressionAttributeValues={":minus": {"N": "-1"}},
        )


def _world(store: Any) -> None:
    """Thread `old`: two messages of an older version (its row then deleted); thread `trip`: two old ones
    and a newer one stored after the upgrade; one message on the thread index but not the stored order."""
    _as_before_the_upgrade(store, _message("o1", "old", 0))
    _as_before_the_upgrade(store, _message("o2", "old", 5))
    store._db.delete(f"NS#{NS}", "THREAD#old")
    _as_before_the_upgrade(store, _message("t1", "trip", 1))
    _as_before_the_upgrade(store, _message("t2", "trip", 2))
    store.insert_message(_message("t3", "trip", 3))
    _as_before_the_upgrade(store, _message("h1", "half", 4), keep_thread_index=True)


def _threads(store: Any) -> dict[str, tuple[int, datetime | None]]:
    return {t.id: (t.message_count, t.last_message_at) for t in store.list_threads(NS).items}


def test_older_messages_get_their_index_keys_once(store: Any) -> None:
    # Given messages of an older version beside newer ones
    _world(store)
    assert _threads(store)["trip"][0] == 1 and "old" not in _threads(store)
    assert [m.id for m in store.list_messages_stored(NS)] == ["t3"]
    store.set_cursor(NS, CONVERSATION_CURSOR, '{"ts": "2026-01-01T00:00:00+00:00", "id": "x", "model": ""}')
    # When the migration runs in batches of two
    report = MigrationService(store).backfill_message_indexes(NS, batch=2)
    # Then every older message is on the thread and stored-order indexes, counted once in its thread
    assert (report.read, report.fixed) == (6, 5)
    threads = _threads(store)
    assert threads["old"] == (2, T0 + timedelta(minutes=5))
    assert threads["trip"] == (3, T0 + timedelta(minutes=3))
    assert threads["half"][0] == 1
    assert [m.id for m in store.list_thread_messages(NS, "old").items] == ["o1", "o2"]
    assert [m.id for m in store.list_thread_messages(NS, "trip").items] == ["t1", "t2", "t3"]
    assert sorted(m.id for m in store.list_messages_stored(NS)) == ["h1", "o1", "o2", "t1", "t2", "t3"]
    # And the conversation index will index the namespace again from the start
    assert store.get_cursor(NS, CONVERSATION_CURSOR) == ""
    # And a second run changes nothing
    again = MigrationService(store).backfill_message_indexes(NS, batch=2)
    assert (again.read, again.fixed) == (6, 0)
    assert _threads(store) == threads


def test_a_run_cut_short_resumes_where_it_stopped(store: Any) -> None:
    # Given the same rows and a run that stops after its first batch
    _world(store)
    batches: list[int] = []

    def stop_after_one(n: int) -> None:
        batches.append(n)
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        MigrationService(store).backfill_message_indexes(NS, batch=2, progress=stop_after_one)
    assert batches == [2] and store.get_cursor(NS, CURSOR)
    # When it runs again, Then it continues after that batch, and the counts come out right
    rest = MigrationService(store).backfill_message_indexes(NS, batch=2)
    assert rest.read == 4
    assert _threads(store)["trip"] == (3, T0 + timedelta(minutes=3))
    assert _threads(store)["old"][0] == 2


def test_engram_migrate_command(
    store: Any, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # Given older rows in the table the settings name
    _world(store)
    for name, value in {"STORE": "dynamodb", "TABLE_NAME": TABLE, "SEARCH": "memory", "EMBEDDER": "none"}.items():
        monkeypatch.setenv(f"ENGRAM_{name}", value)
    # When `engram migrate --json` runs, Then it reports what it fixed per namespace
    assert cli.main(["migrate", "--json"]) == 0
    reports = json.loads(capsys.readouterr().out)
    assert reports == [{"namespace": NS, "supported": True, "read": 6, "fixed": 5}]
    assert _threads(store)["old"][0] == 2


def test_stores_that_upgrade_themselves_have_nothing_to_migrate() -> None:
    from engram.adapters.storage.inmemory import InMemoryMemoryStore

    service = MigrationService(InMemoryMemoryStore(clock=ManualClock()))
    assert not service.needed
    assert service.backfill_message_indexes(NS).supported is False
