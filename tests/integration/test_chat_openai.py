"""The chat gateway on the OpenAI wire, driven by the official `openai` SDK over real HTTP."""

from __future__ import annotations

import json
import time
from typing import Any

import httpx
import openai
import pytest
from engram.domain.models import Digest, Memory, MemoryFilter
from engram.services.library.memories import MemoryWrite
from openai.types.chat import (
    ChatCompletionContentPartParam,
    ChatCompletionMessageFunctionToolCall,
    ChatCompletionMessageParam,
    ChatCompletionToolUnionParam,
)

from tests.fakes.upstream import Reply, ToolCall, Usage
from tests.integration.chat_support import OWNER_KEY, UPSTREAM_KEY, Gateway, MakeGateway, make_gateway, upstream

__all__ = ["make_gateway", "upstream"]

AUTH = {"authorization": f"Bearer {OWNER_KEY}"}


def memories(gw: Gateway) -> list[Memory]:
    return gw.store.list_memories("default", MemoryFilter()).items


def client(gw: Gateway) -> openai.OpenAI:
    return openai.OpenAI(base_url=gw.url + "/v1", api_key=OWNER_KEY, max_retries=0, timeout=10)


def test_non_streaming_chat_goes_to_the_chat_model_with_the_gateway_key(make_gateway: MakeGateway) -> None:
    # Given a gateway whose alias maps to fake-chat
    gw = make_gateway()
    gw.upstream.script(Reply(text="Hi Lin!", usage=Usage(input=30, output=4, cache_read=20)))
    # When the openai SDK asks the alias
    raw = client(gw).chat.completions.with_raw_response.create(
        model="companion", messages=[{"role": "user", "content": "hello"}]
    )
    completion = raw.parse()
    # Then the reply comes back and the upstream saw the real model with the gateway's own key
    assert completion.choices[0].message.content == "Hi Lin!"
    req = gw.upstream.last("/v1/chat/completions")
    assert req.json["model"] == "fake-chat"
    assert req.headers["authorization"] == f"Bearer {UPSTREAM_KEY}"
    # And every x-engram header is there, and the upstream key never comes back
    for name in ("x-engram-injected", "x-engram-reason", "x-engram-recall-ms", "x-engram-upstream-ms"):
        assert name in raw.headers
    assert UPSTREAM_KEY not in raw.http_response.text and UPSTREAM_KEY not in str(raw.headers)


def test_streaming_passes_chunks_on_as_they_arrive_and_ends_with_done(make_gateway: MakeGateway) -> None:
    # Given an upstream that streams 4 pieces 0.25 s apart
    gw = make_gateway()
    gw.upstream.script(Reply(text="abcdefgh", chunks=4, chunk_delay=0.25))
    # When streaming through the SDK
    started = time.monotonic()
    arrivals: list[float] = []
    pieces: list[str] = []
    for chunk in client(gw).chat.completions.create(
        model="companion", messages=[{"role": "user", "content": "hi"}], stream=True
    ):
        if chunk.choices and chunk.choices[0].delta.content:
            pieces.append(chunk.choices[0].delta.content)
            arrivals.append(time.monotonic() - started)
    # Then the text is whole and the first piece arrived long before the last (not buffered)
    assert "".join(pieces) == "abcdefgh"
    assert arrivals[-1] - arrivals[0] > 0.5
    # And on the wire the stream ends with [DONE] and carries no usage chunk the client did not ask for
    gw.upstream.script(Reply(text="xy"))
    body = {"model": "companion", "stream": True, "messages": [{"role": "user", "content": "hi"}]}
    raw = httpx.post(gw.url + "/v1/chat/completions", json=body, headers=AUTH).text
    assert raw.rstrip().endswith("data: [DONE]")
    assert '"usage"' not in raw
    assert gw.upstream.last().json["stream_options"] == {"include_usage": True}


def test_stream_with_usage_requested_passes_the_usage_chunk(make_gateway: MakeGateway) -> None:
    gw = make_gateway()
    gw.upstream.script(Reply(text="ok", usage=Usage(input=50, output=2, cache_read=40)))
    chunks = list(
        client(gw).chat.completions.create(
            model="companion",
            messages=[{"role": "user", "content": "hi"}],
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    usage = chunks[-1].usage
    assert usage is not None and usage.prompt_tokens_details is not None
    assert usage.prompt_tokens_details.cached_tokens == 40


def test_memories_are_injected_in_stable_and_per_turn_places(make_gateway: MakeGateway) -> None:
    # Given a pinned memory, a digest and a searchable fact
    gw = make_gateway()
    ns = "default"
    gw.container.memories.write(ns, MemoryWrite(content="The user's name is Lin.", type="identity", pinned=True))
    gw.container.memories.write(ns, MemoryWrite(content="Lin's test code is apple-star-0428."))
    gw.store.put_digest(Digest(namespace=ns, content="Lin likes green tea.", updated_at=gw.container.clock.now()))
    # When the client sends a system prompt with a clock line and asks about the code
    system = "You are Mira.\nCurrent time: 2026-11-30 10:32\nSpeak softly."
    raw = client(gw).chat.completions.with_raw_response.create(
        model="companion",
        messages=[{"role": "system", "content": system}, {"role": "user", "content": "what is my test code?"}],
    )
    # Then the headers say memories were injected
    assert raw.headers["x-engram-injected"] == "1"
    assert raw.headers["x-engram-reason"] == "injected"
    sent = gw.upstream.last().json["messages"]
    # And the system prompt keeps the client's text first, then the boot block, without the clock line
    assert sent[0]["role"] == "system"
    assert sent[0]["content"].startswith("You are Mira.\nSpeak softly.\n\n<engram-memory>")
    assert "The user's name is Lin." in sent[0]["content"] and "green tea" in sent[0]["content"]
    assert "10:32" not in sent[0]["content"]
    # And the current user turn carries the clock line and the recalled fact after the user's words
    assert sent[-1]["content"].startswith("what is my test code?\n\n<engram-context>")
    assert "apple-star-0428" in sent[-1]["content"] and "2026-11-30 10:32" in sent[-1]["content"]
    # And the pinned memory is not repeated in the patch
    assert "name is Lin" not in sent[-1]["content"]


def test_explicit_remember_is_stored_at_once_and_recalled_in_a_new_conversation(make_gateway: MakeGateway) -> None:
    # Given a user who asks the model to remember a code
    gw = make_gateway()
    c = client(gw)
    c.chat.completions.create(
        model="companion", messages=[{"role": "user", "content": "please remember: my test code is apple-star-0428"}]
    )
    # Then it is stored by the time the answer is complete (nothing runs after the last byte)
    stored = [m for m in memories(gw) if "apple-star" in m.content]
    assert stored and stored[0].content == "my test code is apple-star-0428"
    # When a new conversation asks for it
    raw = c.chat.completions.with_raw_response.create(
        model="companion",
        messages=[{"role": "user", "content": "what is my test code?"}],
        extra_headers={"x-engram-conversation": "another-window"},
    )
    # Then the request to the model carries the memory
    assert raw.headers["x-engram-reason"] == "injected"
    assert "apple-star-0428" in gw.upstream.last().json["messages"][-1]["content"]


def test_chinese_remember_and_questions_are_told_apart(make_gateway: MakeGateway) -> None:
    gw = make_gateway()
    c = client(gw)
    c.chat.completions.create(model="companion", messages=[{"role": "user", "content": "记住：我的猫叫小米"}])
    c.chat.completions.create(model="companion", messages=[{"role": "user", "content": "remember when we met?"}])
    assert [m.content for m in memories(gw)] == ["我的猫叫小米"]


def test_exchange_is_stored_once_and_a_retry_is_not_stored_twice(make_gateway: MakeGateway) -> None:
    # Given one exchange, retried by the client with the same history
    gw = make_gateway()
    c = client(gw)
    history: list[ChatCompletionMessageParam] = [
        {"role": "user", "content": "first"},
        {"role": "assistant", "content": "ok"},
    ]
    msgs: list[ChatCompletionMessageParam] = [*history, {"role": "user", "content": "tell me a joke"}]
    gw.upstream.script(Reply(text="A joke.", usage=Usage(input=100, output=5, cache_read=60, cache_write=10)))
    c.chat.completions.create(model="companion", messages=msgs)
    gw.upstream.script(Reply(text="Another joke.", usage=Usage(input=100, output=6, cache_read=90)))
    c.chat.completions.create(model="companion", messages=msgs, stream=True).close()
    gw.upstream.script(Reply(text="Streamed joke.", usage=Usage(input=100, output=6, cache_read=90)))
    list(c.chat.completions.create(model="companion", messages=msgs, stream=True))
    # Then the user message and the first reply are stored once, before each answer ended
    rows = gw.store.list_messages("default")
    assert [(m.role, m.content) for m in rows] == [("user", "tell me a joke"), ("assistant", "A joke.")]
    # And a different next message is stored as a new exchange
    c.chat.completions.create(
        model="companion",
        messages=[*msgs, {"role": "assistant", "content": "A joke."}, {"role": "user", "content": "another"}],
    )
    assert len(gw.store.list_messages("default")) == 4
    # And usage of every upstream call is logged and shown per model
    usage = httpx.get(gw.url + "/v1/usage", headers=AUTH).json()
    (row,) = usage["models"]
    assert row["model"] == "fake-chat"
    assert row["requests"] >= 3
    assert row["cache_read_tokens"] >= 60 + 90 and row["cache_write_tokens"] >= 10
    # And per thread: every turn was in the one conversation these requests name
    assert [t["thread"] for t in usage["threads"]] == [rows[0].conversation_id]


def test_guide_dog_uses_the_vision_model_and_stores_nothing(make_gateway: MakeGateway) -> None:
    # Given a memory that would match
    gw = make_gateway()
    gw.container.memories.write("default", MemoryWrite(content="remember the picture of the cat"))
    image: ChatCompletionContentPartParam = {
        "type": "image_url",
        "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="},
    }
    # When a picture is sent to guide-dog, even with a remember request
    g = openai.OpenAI(base_url=gw.url + "/v1/guide-dog", api_key=OWNER_KEY, max_retries=0)
    raw = g.chat.completions.with_raw_response.create(
        model="companion",
        messages=[{"role": "user", "content": [{"type": "text", "text": "remember: describe the cat picture"}, image]}],
    )
    # Then it went to the vision model untouched, and nothing was read, written or stored
    assert raw.headers["x-engram-injected"] == "0" and raw.headers["x-engram-reason"] == "disabled"
    sent = gw.upstream.last().json
    assert sent["model"] == "fake-vision"
    assert len(sent["messages"]) == 1 and len(sent["messages"][0]["content"]) == 2
    assert gw.recall.calls == []
    assert gw.store.list_messages("default") == []
    assert gw.store.list_usage("default") == []
    assert len(memories(gw)) == 1


def test_routing_images_to_vision_and_unknown_models(make_gateway: MakeGateway) -> None:
    gw = make_gateway()
    c = client(gw)
    image: ChatCompletionContentPartParam = {
        "type": "image_url",
        "image_url": {"url": "https://example.invalid/cat.png"},
    }
    # Given an image sent to the alias, Then it goes to the vision model
    c.chat.completions.create(model="companion", messages=[{"role": "user", "content": [image]}])
    assert gw.upstream.last().json["model"] == "fake-vision"
    # Given the configured chat model by name, Then it is accepted
    c.chat.completions.create(model="fake-chat", messages=[{"role": "user", "content": "x"}])
    assert gw.upstream.last().json["model"] == "fake-chat"
    # Given another name, Then it is refused unless passthrough is allowed
    with pytest.raises(openai.BadRequestError) as info:
        c.chat.completions.create(model="gpt-other", messages=[{"role": "user", "content": "x"}])
    assert "companion" in str(info.value)
    open_gw = make_gateway(chat_allow_model_passthrough=True)
    client(open_gw).chat.completions.create(model="gpt-other", messages=[{"role": "user", "content": "x"}])
    assert open_gw.upstream.last().json["model"] == "gpt-other"


def test_models_lists_the_alias_and_passthrough_models(make_gateway: MakeGateway) -> None:
    gw = make_gateway()
    ids = [m.id for m in client(gw).models.list()]
    assert ids == ["companion", "fake-chat", "fake-vision"]
    open_gw = make_gateway(chat_allow_model_passthrough=True, chat_model="m1", vision_model="")
    ids = [m.id for m in client(open_gw).models.list()]
    assert ids[:2] == ["companion", "m1"] and "fake-chat" in ids


def test_tool_calls_and_reasoning_pass_through(make_gateway: MakeGateway) -> None:
    gw = make_gateway()
    gw.upstream.script(Reply(text="", reasoning="think", tool_calls=(ToolCall("get_weather", '{"city": "Oslo"}'),)))
    tools: list[ChatCompletionToolUnionParam] = [
        {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}
    ]
    out = client(gw).chat.completions.create(
        model="companion", messages=[{"role": "user", "content": "weather?"}], tools=tools
    )
    tool_calls = out.choices[0].message.tool_calls
    assert tool_calls is not None
    call = tool_calls[0]
    assert isinstance(call, ChatCompletionMessageFunctionToolCall)
    assert (call.function.name, json.loads(call.function.arguments)) == ("get_weather", {"city": "Oslo"})
    assert gw.upstream.last().json["tools"] == tools


class RecordingQueue:
    def __init__(self) -> None:
        self.jobs: list[tuple[str, dict[str, Any]]] = []

    def enqueue(self, job: str, payload: dict[str, Any]) -> None:
        self.jobs.append((job, payload))


def test_cleanup_is_enqueued_at_most_once_per_day_per_namespace(make_gateway: MakeGateway) -> None:
    # Given a container with a job queue
    queue = RecordingQueue()
    gw = make_gateway(queue=queue)
    c = client(gw)
    # When three exchanges go through
    for text in ("one", "two", "three"):
        c.chat.completions.create(model="companion", messages=[{"role": "user", "content": text}])
    assert len(gw.store.list_messages("default")) == 6
    # Then cleanup was enqueued once for the namespace
    assert queue.jobs == [("cleanup", {"namespace": "default"})]


def test_upstream_keys_are_never_logged(make_gateway: MakeGateway, caplog: pytest.LogCaptureFixture) -> None:
    # Given debug logging and a few requests, one failing
    caplog.set_level("DEBUG")
    gw = make_gateway()
    gw.upstream.script(Reply(status=401, error_body={"error": {"message": "bad key"}}))
    c = client(gw)
    with pytest.raises(openai.AuthenticationError):
        c.chat.completions.create(model="companion", messages=[{"role": "user", "content": "x"}])
    c.chat.completions.create(model="companion", messages=[{"role": "user", "content": "y"}], stream=True).close()
    # Then no log line carries the gateway's upstream key
    assert all(UPSTREAM_KEY not in record.getMessage() for record in caplog.records)


@pytest.mark.parametrize(("model", "kept"), [("fake-chat", False), ("openrouter/anthropic/claude-sonnet-4.5", True)])
def test_client_cache_control_reaches_only_a_claude_upstream(make_gateway: MakeGateway, model: str, kept: bool) -> None:
    # Given a client that marks its prompt for Claude's cache (Pawwake's non-Claude rule), and a gateway
    # whose chat model is `model` on the OpenAI-compatible upstream
    gw = make_gateway(chat_model=model)
    gw.upstream.script(Reply(text="ok"))
    marker = {"type": "ephemeral"}
    body = {
        "model": "companion",
        "messages": [
            {"role": "system", "content": [{"type": "text", "text": "You are kind.", "cache_control": marker}]},
            {"role": "user", "content": [{"type": "text", "text": "hello", "cache_control": marker}]},
        ],
    }
    # When it is sent
    reply = httpx.post(gw.url + "/v1/chat/completions", json=body, headers=AUTH, timeout=10)
    assert reply.status_code == 200, reply.text
    # Then a non-Claude model gets no cache_control anywhere; a Claude one behind a router gets the client's
    sent = gw.upstream.last("/v1/chat/completions").json
    assert ("cache_control" in json.dumps(sent)) is kept
    assert "hello" in json.dumps(sent) and sent["model"] == model
