"""The rules of conversation recall (services/recall/conversations.py, docs/conversations.md) on in-memory
fakes: fragments with neighbours per thread, the current thread and binned threads left out, the
seen TTL, the token budget, namespaces apart, and the index following the embedding model."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from engram.adapters.search.inmemory import InMemorySearchIndex
from engram.adapters.storage.inmemory import InMemoryMemoryStore
from engram.domain.models import Message, SearchHit
from engram.domain.ports import Embedder
from engram.domain.text import estimate_tokens
from engram.services.index.gated_embedder import GatedEmbedder
from engram.services.index.guard import GuardedIndex
from engram.services.recall.conversations import ConversationConfig, ConversationService, topic_query

from tests.configs import config as cfg
from tests.fakes.clock import ManualClock
from tests.fakes.embedder import HashEmbedder

# A fixed day: the store expires the seen marks by the same clock as the service (docs/ARCHITECTURE.md, "One clock").
T0 = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)
NS = "alice"


def _world(
    embedder: Embedder | None = None, **config: object
) -> tuple[InMemoryMemoryStore, ConversationService, ManualClock, GuardedIndex]:
    clock = ManualClock(T0 + timedelta(days=30))
    store = InMemoryMemoryStore(clock=clock)
    index = GuardedIndex(InMemorySearchIndex(), clock=clock)
    gate = GatedEmbedder(embedder, index) if embedder is not None else None
    service = ConversationService(store, index, gate, clock, cfg(ConversationConfig, **config))
    return store, service, clock, index


def _say(store: InMemoryMemoryStore, thread: str, lines: list[str], *, start: int = 0, ns: str = NS) -> list[str]:
    ids = []
    for n, text in enumerate(lines):
        role = "user" if n % 2 == 0 else "assistant"
        message_id = f"{ns}-{thread}-{start + n}"
        at = T0 + timedelta(minutes=start + n)
        store.insert_message(
            Message(id=message_id, namespace=ns, conversation_id=thread, role=role, content=text, created_at=at)
        )
        ids.append(message_id)
    return ids


TRIP = [
    "good morning",
    "morning! how can I help",
    "we are planning a trip to Kyoto in October",
    "Kyoto in October is lovely",
    "what about the weather",
    "mild and dry",
    "and I need a JR pass for the trip",
    "buy the JR pass before you fly",
]


def test_a_fragment_is_the_match_with_its_neighbours_and_overlapping_windows_merge() -> None:
    # Given a trip conversation in one thread and an unrelated one in another, indexed
    store, service, _, _ = _world()
    trip = _say(store, "trip", TRIP)
    _say(store, "work", ["my python script crashes", "show me the traceback"], start=20)
    assert service.index_new(NS).indexed == 10
    # When the user asks about the trip from a third thread
    result = service.search(NS, "what did we talk about regarding the trip last month?", exclude_thread="now")
    # Then the trip thread comes back: each match with one message either side, in time order
    assert {f.thread_id for f in result.fragments} == {"trip"}
    windows = [[m.id for m in f.messages] for f in result.fragments]
    assert windows == [trip[1:4], trip[5:8]]
    # And with two neighbours the windows touch and merge into one fragment
    wide = service.search(NS, "the trip", exclude_thread="now", neighbours=2)
    assert [[m.id for m in f.messages] for f in wide.fragments] == [trip[0:8]]


def test_the_current_thread_binned_threads_and_other_namespaces_are_left_out() -> None:
    store, service, _, _ = _world()
    _say(store, "trip", TRIP)
    _say(store, "bob-trip", ["my trip to Oslo"], ns="bob")
    service.index_new(NS)
    service.index_new("bob")
    assert service.search(NS, "trip", exclude_thread="trip").fragments == []
    assert all(f.thread_id == "trip" for f in service.search(NS, "trip Oslo").fragments)
    assert all(m.namespace == "bob" for f in service.search("bob", "trip").fragments for m in f.messages)
    # A thread in the recycle bin is not recalled
    store.update_thread(NS, "trip", title=None, deleted_at=T0)
    assert service.search(NS, "trip").fragments == []


def test_a_namespace_with_one_thread_is_not_searched_from_it_and_a_second_thread_is_found() -> None:
    # Given a namespace whose only thread is the one asking, indexed
    store, service, _, index = _world()
    _say(store, "trip", TRIP)
    service.index_new(NS)
    searched: list[str] = []
    keyword_search = index.keyword_search

    def spy(namespace: str, query: str, **kw: Any) -> list[SearchHit]:
        searched.append(query)
        return keyword_search(namespace, query, **kw)

    index.keyword_search = spy  # type: ignore[method-assign]
    # When it searches the other threads: nothing, and the index is not asked
    result = service.search(NS, "the trip to Kyoto", exclude_thread="trip")
    assert result.fragments == [] and result.meta["no_other_thread"] is True and searched == []
    # And once a second thread exists it is searched and found
    _say(store, "plans", ["booked the Kyoto trip hotel", "nice"], start=30)
    service.index_new(NS)
    assert {f.thread_id for f in service.search(NS, "the trip to Kyoto", exclude_thread="trip").fragments} == {"plans"}
    assert searched
    # And the namespace, known to hold several threads, is not asked again even with that thread gone
    store.purge_thread(NS, "plans")
    assert "no_other_thread" not in service.search(NS, "the trip to Kyoto", exclude_thread="trip").meta


def test_at_most_k_threads_best_first() -> None:
    store, service, _, _ = _world(threads=2, fragments=1, neighbours=0)
    for n, thread in enumerate(["t1", "t2", "t3"]):
        _say(store, thread, [f"the trip plan number {n}"], start=n * 10)
    service.index_new(NS)
    result = service.search(NS, "trip plan")
    assert len(result.fragments) == 2 and len({f.thread_id for f in result.fragments}) == 2


def test_seen_messages_are_skipped_for_that_thread_until_the_ttl_runs_out() -> None:
    store, service, clock, _ = _world(seen_ttl_hours=2)
    _say(store, "trip", TRIP)
    service.index_new(NS)
    first = service.search(NS, "trip", exclude_thread="b", skip_seen=True)
    _, shown = service.render(first.fragments, 1000)
    service.mark_seen(NS, "b", shown)
    # Then thread b does not get them again, thread c does
    assert service.search(NS, "trip", exclude_thread="b", skip_seen=True).fragments == []
    assert service.search(NS, "trip", exclude_thread="c", skip_seen=True).fragments
    # And after the TTL thread b gets them again
    clock.advance(hours=3)
    assert service.search(NS, "trip", exclude_thread="b", skip_seen=True).fragments


def test_render_keeps_whole_fragments_within_the_budget_with_date_and_title() -> None:
    store, service, _, _ = _world(message_chars=60)
    _say(store, "trip", TRIP)
    store.update_thread(NS, "trip", title="Kyoto plans", deleted_at=None)
    service.index_new(NS)
    fragments = service.search(NS, "trip").fragments
    text, shown = service.render(fragments, 1000)
    assert text.startswith("Earlier conversations") and f"[{T0.date().isoformat()} · Kyoto plans]" in text
    assert set(shown) == {m.id for f in fragments for m in f.messages}
    small, few = service.render(fragments, estimate_tokens(text) - 5)
    assert 0 < len(few) < len(shown) and len(small) < len(text)
    assert service.render(fragments, 5) == ("", [])


def test_the_index_follows_the_embedding_model() -> None:
    # Given messages indexed with vectors by one model
    store, service, _, index = _world(HashEmbedder(64))
    _say(store, "trip", TRIP)
    first = service.index_new(NS)
    assert (first.indexed, first.vectors, first.restarted) == (8, 8, False)
    assert service.index_new(NS).indexed == 0  # nothing new
    # When the embedder changes
    other = GatedEmbedder(HashEmbedder(32), index)
    changed = ConversationService(store, index, other, ManualClock(T0), cfg(ConversationConfig))
    again = changed.index_new(NS)
    # Then the index is reset to it and every message is indexed again, with its vectors
    assert (again.indexed, again.vectors, again.restarted) == (8, 8, True)
    assert index.info(NS).dimension == 32
    assert changed.search(NS, "Kyoto in October").fragments


def test_topic_query_drops_words_about_the_conversation() -> None:
    assert topic_query("what did we talk about regarding the trip last month?") == "trip"
    assert topic_query("上个月我们聊的京都旅行怎么样了") == "京都 都旅 旅行"
    assert topic_query("what did we talk about?") == "what did we talk about?"


def test_vectors_rank_but_only_shared_words_vouch_for_a_fragment() -> None:
    # Given only a trip conversation, indexed with vectors
    store, service, _, _ = _world(HashEmbedder(64))
    _say(store, "trip", TRIP)
    service.index_new(NS)
    # When an unrelated question comes (its nearest vectors are still trip messages)
    off_topic = service.search(NS, "my python script crashes on import")
    # Then nothing is recalled at the default floor, while the trip question is
    assert off_topic.meta["counts"]["vector"] > 0 and off_topic.fragments == []
    assert service.search(NS, "the trip to Kyoto in October").fragments


def test_cleanup_takes_deleted_messages_out_of_the_conversation_index() -> None:
    from engram.bootstrap import Overrides, build_container
    from engram.services.library.messages import MessageIn
    from engram.settings import Settings

    # Given a month-old trip conversation and a fresh one, both indexed
    clock = ManualClock(datetime.now(UTC))
    settings = Settings(store="memory", search="memory", embedder="none", scheduler_enabled=False)
    container = build_container(settings, Overrides(clock=clock))
    old = clock.now() - timedelta(days=30)
    container.messages.ingest(
        NS, [MessageIn(role="user", content="the trip to Kyoto", conversation_id="a", created_at=old)]
    )
    container.messages.ingest(NS, [MessageIn(role="user", content="the trip to Oslo", conversation_id="b")])
    container.conversations.index_new(NS)
    assert container.conversations.index.info(NS).documents == 2
    # When cleanup deletes messages past retention (14 days)
    report = container.cleanup.run(NS)
    # Then the old message's document is gone from the conversation index too
    assert report.namespaces[0].messages == 1 and not report.namespaces[0].errors
    assert container.conversations.index.info(NS).documents == 1
    assert [f.thread_id for f in container.conversations.search(NS, "the trip").fragments] == ["b"]
    container.close()
