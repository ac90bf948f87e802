"""The conversation index on every search backend (docs/conversations.md, "The conversation index"):
the local SQLite file, the replica backend (its own log beside the memory index's, in SQLite and in
DynamoDB under moto; seen by another process), and OpenSearch (its own index, against osmem-server).
Messages never reach memory search, and resetting one index leaves the other alone."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from engram.adapters.search.replica import ReplicaSearchIndex
from engram.adapters.search.replica_log import SqliteSearchLog
from engram.adapters.storage.inmemory import InMemoryMemoryStore
from engram.bootstrap import build_container
from engram.domain.models import IndexedDoc, Message
from engram.domain.ports import SearchIndex
from engram.services.index.guard import GuardedIndex
from engram.services.library.messages import MessageIn
from engram.services.recall.conversations import ConversationConfig, ConversationService
from engram.settings import Settings

from tests.configs import config
from tests.fakes.clock import ManualClock

NS = "alice"
T0 = datetime.now(UTC) - timedelta(days=20)
TRIP = ["We are planning a trip to Kyoto in October.", "Book the ryokan near Gion early.", "Noted, thanks!"]


def _store_with_trip() -> InMemoryMemoryStore:
    store = InMemoryMemoryStore(clock=ManualClock(T0))
    for n, text in enumerate(TRIP):
        role = "user" if n % 2 == 0 else "assistant"
        at = T0 + timedelta(minutes=n)
        store.insert_message(
            Message(id=f"m{n}", namespace=NS, conversation_id="trip", role=role, content=text, created_at=at)
        )
    return store


def _service(store: InMemoryMemoryStore, index: SearchIndex) -> ConversationService:
    return ConversationService(
        store, GuardedIndex(index, clock=ManualClock(T0)), None, ManualClock(T0), config(ConversationConfig)
    )


def _found(service: ConversationService, query: str = "the Kyoto trip") -> list[str]:
    return [m.id for f in service.search(NS, query, exclude_thread="now").fragments for m in f.messages]


def _memory_doc() -> IndexedDoc:
    return IndexedDoc(memory_id="mem1", namespace=NS, text="The user likes Kyoto", type="fact", created_at=T0)


@pytest.fixture(params=["sqlite", "dynamodb"])
def logs(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[Any, Any]]:
    """The memory index's log and the conversation index's log, side by side in one store."""
    if request.param == "sqlite":
        yield SqliteSearchLog(tmp_path / "engram.db"), SqliteSearchLog(tmp_path / "engram.db", prefix="replica_conv")
        return
    pytest.importorskip("moto")
    from engram.adapters.search.replica_log import DynamoSearchLog

    from tests.fakes.moto_aws import TABLE, dynamo_search_log

    with dynamo_search_log() as memory_log:
        yield memory_log, DynamoSearchLog(TABLE, memory_log._db.client, kind="CDOC")


def test_replica_logs_keep_messages_apart_and_another_process_sees_them(logs: tuple[Any, Any], tmp_path: Path) -> None:
    memory_log, conversation_log = logs
    with ExitStack() as stack:
        memories = ReplicaSearchIndex(memory_log, tmp_path / "replica", sync_seconds=0)
        first = ReplicaSearchIndex(conversation_log, tmp_path / "replica" / "conversations", sync_seconds=0)
        other = ReplicaSearchIndex(conversation_log, tmp_path / "other" / "conversations", sync_seconds=0)
        for index in (memories, first, other):
            stack.callback(index.close)
        memories.upsert(_memory_doc())
        # Given the messages indexed by one process
        store = _store_with_trip()
        assert _service(store, first).index_new(NS).indexed == 3
        # Then that process and another one find the trip fragment
        assert _found(_service(store, first)) == ["m0", "m1"]
        assert _found(_service(store, other)) == ["m0", "m1"]
        # And memory search sees no message, conversation search no memory
        assert [h.memory_id for h in memories.keyword_search(NS, "Kyoto")] == ["mem1"]
        assert {h.memory_id for h in other.keyword_search(NS, "Kyoto")} == {"m0"}
        # And resetting the conversation index (a new embedding model) leaves the memory index's model alone
        memories.reset("memory-model", 3)
        first.reset("other-model", 5)
        assert memory_log.meta().model_id == "memory-model" and conversation_log.meta().model_id == "other-model"
        assert memories.info(NS).documents == 1


def test_opensearch_conversation_index(osmem_base: Any) -> None:
    pytest.importorskip("botocore")
    from botocore.credentials import Credentials
    from engram.adapters.search.opensearch import OpenSearchIndex, SigV4Signer

    clone = osmem_base.clone()
    signer = SigV4Signer("us-east-1", Credentials("AKIDEXAMPLE", "secret", "token"))
    conversations = OpenSearchIndex(clone.url, "engram-conversations", signer=signer)
    memories = OpenSearchIndex(clone.url, "engram-memories", signer=signer)
    try:
        memories.upsert(_memory_doc())
        # Given the messages indexed into their own OpenSearch index (keywords: osmem has no kNN)
        store = _store_with_trip()
        service = _service(store, conversations)
        assert service.index_new(NS).indexed == 3
        # Then conversation search finds the trip, memory search only the memory
        assert _found(service) == ["m0", "m1"]
        assert [h.memory_id for h in memories.keyword_search(NS, "Kyoto")] == ["mem1"]
        # And another namespace finds nothing
        assert service.search("bob", "the Kyoto trip").fragments == []
    finally:
        conversations.close()
        memories.close()
        clone.close()


@pytest.mark.parametrize("search", ["local", "replica"])
def test_bootstrap_builds_the_conversation_index_beside_the_memory_index(tmp_path: Path, search: str) -> None:
    # Given Engram on SQLite with the local or replica index
    settings = Settings(store="sqlite", search=search, embedder="none", data_dir=tmp_path, scheduler_enabled=False)
    container = build_container(settings)
    try:
        container.messages.ingest(NS, [MessageIn(role="user", content=TRIP[0], conversation_id="trip")])
        # When the messages are indexed, Then conversation search finds them and memory search does not
        assert container.conversations.index_new(NS).indexed == 1
        fragments = container.conversations.search(NS, "the Kyoto trip").fragments
        assert [f.thread_id for f in fragments] == ["trip"]
        assert container.recall.recall(NS, "Kyoto trip", min_relevance=0).hits == []
    finally:
        container.close()
    if search == "local":
        assert (tmp_path / "conversations.sqlite3").exists()
