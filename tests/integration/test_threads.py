"""Threads (docs/threads.md): pinned on both doors, streaming or not; the `/v1/threads` REST surface."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import httpx

from tests.configs import config
from tests.fakes.upstream import Reply
from tests.integration.chat_support import OWNER_KEY, Gateway, MakeGateway, make_gateway, upstream

__all__ = ["make_gateway", "upstream"]

AUTH = {"authorization": f"Bearer {OWNER_KEY}"}


def _openai(
    gw: Gateway, text: str, *, stream: bool = False, headers: dict[str, str] | None = None, **body: Any
) -> None:
    gw.upstream.script(Reply(text=f"answer to {text}", chunks=3 if stream else 1))
    payload = {"model": "companion", "messages": [{"role": "user", "content": text}], "stream": stream, **body}
    resp = httpx.post(gw.url + "/v1/chat/completions", json=payload, headers={**AUTH, **(headers or {})}, timeout=10)
    assert resp.status_code == 200, resp.text


def _anthropic(
    gw: Gateway, text: str, *, stream: bool = False, headers: dict[str, str] | None = None, **body: Any
) -> None:
    gw.upstream.script(Reply(text=f"answer to {text}", chunks=3 if stream else 1))
    payload = {"model": "companion", "max_tokens": 64, "messages": [{"role": "user", "content": text}], **body}
    if stream:
        payload["stream"] = True
    resp = httpx.post(gw.url + "/v1/messages", json=payload, headers={**AUTH, **(headers or {})}, timeout=10)
    assert resp.status_code == 200, resp.text


def _get(gw: Gateway, path: str, **params: Any) -> Any:
    resp = httpx.get(gw.url + path, params=params, headers=AUTH)
    assert resp.status_code == 200, resp.text
    return resp.json()


def _texts(gw: Gateway, thread: str) -> list[str]:
    return [m["content"] for m in _get(gw, f"/v1/threads/{thread}/messages")["items"]]


def test_a_thread_continues_across_doors_and_clients(make_gateway: MakeGateway) -> None:
    # Given a conversation started on the OpenAI door with a pinned thread (not streaming, then streaming)
    gw = make_gateway()
    pin = {"x-engram-thread": "trip-2026"}
    _openai(gw, "we fly to Kyoto in May", headers=pin)
    _openai(gw, "book the ryokan", stream=True, headers=pin)
    # When another client continues it on the Anthropic door (streaming, then not)
    _anthropic(gw, "what about trains?", stream=True, headers=pin)
    _anthropic(gw, "and the return?", headers=pin)
    # Then one thread holds the whole exchange in order, and nothing went to `default`
    assert _texts(gw, "trip-2026") == [
        "we fly to Kyoto in May",
        "answer to we fly to Kyoto in May",
        "book the ryokan",
        "answer to book the ryokan",
        "what about trains?",
        "answer to what about trains?",
        "and the return?",
        "answer to and the return?",
    ]
    threads = _get(gw, "/v1/threads")["items"]
    assert [(t["id"], t["message_count"]) for t in threads] == [("trip-2026", 8)]
    assert threads[0]["last_message_at"] is not None and "namespace" not in threads[0]


def test_without_the_header_each_wire_uses_its_own_user_field(make_gateway: MakeGateway) -> None:
    gw = make_gateway()
    _openai(gw, "hello from openai", user="laptop")
    _anthropic(gw, "hello from claude", metadata={"user_id": "phone"})
    _openai(gw, "header wins", user="laptop", headers={"x-engram-thread": "pinned"})
    _openai(gw, "no thread at all")
    ids = {t["id"]: t["message_count"] for t in _get(gw, "/v1/threads")["items"]}
    assert ids == {"laptop": 2, "phone": 2, "pinned": 2, "default": 2}


def test_a_failed_turn_is_kept_in_its_thread(make_gateway: MakeGateway) -> None:
    gw = make_gateway()
    gw.upstream.script(Reply(status=500, text="boom"))
    payload = {"model": "companion", "messages": [{"role": "user", "content": "lost?"}]}
    resp = httpx.post(gw.url + "/v1/chat/completions", json=payload, headers={**AUTH, "x-engram-thread": "t"})
    assert resp.status_code == 500
    assert _texts(gw, "t") == ["lost?"]


def test_thread_messages_page_oldest_first(make_gateway: MakeGateway) -> None:
    gw = make_gateway()
    for n in range(3):
        _openai(gw, f"turn {n}", headers={"x-engram-thread": "long"})
    first = _get(gw, "/v1/threads/long/messages", limit=4)
    second = _get(gw, "/v1/threads/long/messages", limit=4, cursor=first["next_cursor"])
    assert [m["content"] for m in first["items"]] == ["turn 0", "answer to turn 0", "turn 1", "answer to turn 1"]
    assert [m["content"] for m in second["items"]] == ["turn 2", "answer to turn 2"]
    assert second["next_cursor"] is None


def test_rename_delete_restore_merge_and_purge(make_gateway: MakeGateway) -> None:
    # Given two threads
    gw = make_gateway()
    _openai(gw, "first", headers={"x-engram-thread": "a"})
    _openai(gw, "second", headers={"x-engram-thread": "b"})
    api = httpx.Client(base_url=gw.url, headers=AUTH)
    # When one is renamed
    renamed = api.patch("/v1/threads/a", json={"title": "  Kyoto   trip "})
    assert renamed.status_code == 200 and renamed.json()["title"] == "Kyoto trip"
    # And deleted: it leaves the list for the recycle bin, its messages still readable
    assert api.delete("/v1/threads/a").json()["deleted_at"] is not None
    one = api.get("/v1/threads/a").json()  # one thread is readable, from the bin too
    assert (one["title"], one["message_count"], one["deleted_at"] is not None) == ("Kyoto trip", 2, True)
    assert api.get("/v1/threads/nope").status_code == 404
    assert [t["id"] for t in _get(gw, "/v1/threads")["items"]] == ["b"]
    assert [t["id"] for t in _get(gw, "/v1/threads", deleted="true")["items"]] == ["a"]
    assert _texts(gw, "a") == ["first", "answer to first"]
    # And restored
    assert api.post("/v1/threads/a/restore").json()["deleted_at"] is None
    assert {t["id"] for t in _get(gw, "/v1/threads")["items"]} == {"a", "b"}
    # When "b" is merged into "a"
    merged = api.post("/v1/threads/b/merge", json={"into": "a"}).json()
    assert merged["moved"] == 2 and merged["thread"]["message_count"] == 4 and merged["thread"]["title"] == "Kyoto trip"
    assert _texts(gw, "a") == ["first", "answer to first", "second", "answer to second"]
    assert api.get("/v1/threads/b/messages").status_code == 404
    # Then bad requests get clear errors
    assert api.post("/v1/threads/a/merge", json={"into": "a"}).json()["error"]["code"] == "same_thread"
    assert api.post("/v1/threads/a/merge", json={"into": "nope"}).status_code == 404
    assert api.post("/v1/threads/a/merge", json={}).status_code == 422
    assert api.patch("/v1/threads/nope", json={"title": "x"}).status_code == 404
    assert api.get("/v1/threads", params={"cursor": "garbage"}).status_code == 400
    # And a thread in the bin is erased by cleanup only after the grace period
    api.delete("/v1/threads/a")
    threads = gw.container.threads
    assert threads.purge_deleted("default", older_than_days=30) == 0
    later = gw.container.clock.now() + timedelta(days=31)
    assert threads.purge_deleted("default", older_than_days=30, now=later) == 1
    assert _get(gw, "/v1/threads", deleted="true")["items"] == []
    assert gw.store.count_messages("default") == 0


def test_a_deleted_thread_comes_back_with_a_new_turn(make_gateway: MakeGateway) -> None:
    gw = make_gateway()
    _openai(gw, "one", headers={"x-engram-thread": "t"})
    httpx.delete(gw.url + "/v1/threads/t", headers=AUTH)
    _anthropic(gw, "two", headers={"x-engram-thread": "t"})
    [thread] = _get(gw, "/v1/threads")["items"]
    assert (thread["id"], thread["deleted_at"], thread["message_count"]) == ("t", None, 4)


def test_the_cleanup_job_erases_threads_binned_longer_than_the_grace() -> None:
    from engram.adapters.search.inmemory import InMemorySearchIndex
    from engram.adapters.storage.inmemory import InMemoryMemoryStore
    from engram.domain.models import Message
    from engram.services.jobs.cleanup import CleanupService
    from engram.services.library.threads import ThreadService

    from tests.fakes.clock import ManualClock

    # Given two binned threads, one binned 31 days before the cleanup and one 29 days before
    clock = ManualClock()
    store = InMemoryMemoryStore(clock=clock)
    threads = ThreadService(store, clock)
    for thread in ("old", "recent"):
        store.insert_message(
            Message(
                id=f"m-{thread}",
                namespace="ns",
                conversation_id=thread,
                role="user",
                content="x",
                created_at=clock.now(),
            )
        )
    threads.delete("ns", "old")
    clock.advance(days=2)
    threads.delete("ns", "recent")
    clock.advance(days=29)
    # When cleanup runs (message retention far away)
    from engram.services.jobs.cleanup import RetentionPolicy

    report = CleanupService(store, InMemorySearchIndex(), clock, config(RetentionPolicy, messages_days=365)).run("ns")
    # Then only the older one is gone, with its messages
    assert report.to_dict()["threads_purged"] == 1
    assert [t.id for t in store.list_threads("ns", deleted=True).items] == ["recent"]
    assert [m.id for m in store.list_messages("ns")] == ["m-recent"]
