"""The OpenAI Responses door (`POST /v1/responses`), driven by the `openai` SDK's `client.responses.create`
against the scripted fake upstream: translated to chat completions for an OpenAI-compatible upstream
and for Claude, streamed and whole, with recall, storage, "remember" and the Responses error shapes."""

from __future__ import annotations

import json
from typing import Any

import httpx
import openai
import pytest
from engram.domain.models import MemoryFilter
from engram.services.library.memories import MemoryWrite
from openai.types.responses import (
    ResponseCompletedEvent,
    ResponseFailedEvent,
    ResponseFunctionToolCall,
    ResponseInputParam,
)

from tests.fakes.upstream import Reply, ToolCall, Usage
from tests.integration.chat_support import OWNER_KEY, Gateway, MakeGateway, make_gateway, upstream

__all__ = ["make_gateway", "upstream"]

ENV = "<environment_context>\n  <cwd>/work/app</cwd>\n  <shell>bash</shell>\n</environment_context>"


def client(gw: Gateway, thread: str = "codex-1") -> openai.OpenAI:
    return openai.OpenAI(
        base_url=gw.url + "/v1",
        api_key=OWNER_KEY,
        max_retries=0,
        timeout=10,
        default_headers={"x-engram-thread": thread},
    )


def _codex_input(words: str) -> ResponseInputParam:
    """What Codex sends: its prompt as developer items, the environment as a user item, then the user."""
    return [
        {"type": "message", "role": "developer", "content": [{"type": "input_text", "text": "You are Codex."}]},
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": ENV}]},
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": words}]},
    ]


def _facts(gw: Gateway) -> list[str]:
    return [m.content for m in gw.store.list_memories("default", MemoryFilter(), limit=50).items]


def test_whole_response_with_instructions_recall_and_storage(make_gateway: MakeGateway) -> None:
    # Given an unpinned memory the question needs
    gw = make_gateway()
    gw.container.memories.write("default", MemoryWrite(content="Lin deploys the app with tools/ship.sh on Fridays."))
    gw.upstream.script(Reply(text="Run tools/ship.sh.", usage=Usage(input=30, output=4, cache_read=10)))
    # When a client asks through the Responses API, not streaming
    raw = client(gw).responses.with_raw_response.create(
        model="companion", instructions="Answer briefly.", input="how do I deploy the app?"
    )
    response = raw.parse()
    # Then the answer is a Response object with the text and the usage
    assert response.output_text == "Run tools/ship.sh."
    assert response.status == "completed" and response.object == "response"
    assert response.usage is not None and response.usage.input_tokens == 30 and response.usage.output_tokens == 4
    assert response.usage.input_tokens_details.cached_tokens == 10
    assert raw.headers["x-engram-reason"] == "injected"
    # And the upstream got a chat request: the instructions then the boot block, the memory in the user turn
    sent = gw.upstream.last("/v1/chat/completions").json
    assert sent["model"] == "fake-chat" and sent["messages"][0]["role"] == "system"
    assert sent["messages"][0]["content"].startswith("Answer briefly.")
    assert sent["messages"][-1]["role"] == "user"
    assert sent["messages"][-1]["content"].startswith("how do I deploy the app?\n\n<engram-context>")
    assert "tools/ship.sh" in sent["messages"][-1]["content"]
    # And the turn is stored in the thread the header named
    stored = gw.store.list_thread_messages("default", "codex-1").items
    assert [(m.role, m.content) for m in stored] == [
        ("user", "how do I deploy the app?"),
        ("assistant", "Run tools/ship.sh."),
    ]


def test_streamed_codex_turn_remembers_and_streams_responses_events(make_gateway: MakeGateway) -> None:
    gw = make_gateway()
    gw.upstream.script(Reply(text="Noted, blue.", chunks=3, usage=Usage(input=50, output=3)))
    # When Codex-shaped input streams: developer prompt, scaffolding, a reasoning item, the user's words
    items = _codex_input("remember: my bike is blue")
    items.insert(1, {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "opaque"})
    tools: list[Any] = [
        {"type": "function", "name": "exec_command", "description": "run", "parameters": {"type": "object"}},
        {"type": "web_search", "external_web_access": False},
    ]
    stream = client(gw).responses.create(
        model="companion", input=items, tools=tools, stream=True, store=False, extra_body={"include": []}
    )
    events = list(stream)
    kinds = [e.type for e in events]
    # Then the events come in the Responses order, numbered, ending with response.completed
    assert kinds[:2] == ["response.created", "response.in_progress"]
    assert kinds[2:4] == ["response.output_item.added", "response.content_part.added"]
    assert kinds.count("response.output_text.delta") == 3
    assert kinds[-4:] == [
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.completed",
    ]
    assert [e.sequence_number for e in events] == list(range(1, len(events) + 1))
    completed = events[-1]
    assert isinstance(completed, ResponseCompletedEvent)
    done = completed.response
    assert done.output_text == "Noted, blue." and done.usage is not None and done.usage.total_tokens == 53
    # And the fact is a memory, the turn stored without the scaffolding
    assert "my bike is blue" in _facts(gw)
    stored = gw.store.list_thread_messages("default", "codex-1").items
    assert [m.content for m in stored] == ["remember: my bike is blue", "Noted, blue."]
    # And the upstream got the function tool (the hosted one left out), usage asked for, no reasoning item
    sent = gw.upstream.last("/v1/chat/completions").json
    assert [t["function"]["name"] for t in sent["tools"]] == ["exec_command"]
    assert sent["stream_options"] == {"include_usage": True}
    assert "opaque" not in json.dumps(sent)
    assert sent["messages"][1] == {"role": "user", "content": ENV}


def test_tool_calls_come_back_as_function_call_items_and_their_outputs_go_up(make_gateway: MakeGateway) -> None:
    gw = make_gateway()
    call = ToolCall(name="exec_command", arguments='{"cmd": "ls"}', id="call_9")
    gw.upstream.script(Reply(text="", tool_calls=(call,)), Reply(text="", tool_calls=(call,)), Reply(text="Two files."))
    tools: list[Any] = [{"type": "function", "name": "exec_command", "parameters": {"type": "object"}}]
    # When the model calls a tool, streamed and whole
    streamed = list(client(gw).responses.create(model="companion", input="list files", tools=tools, stream=True))
    whole = client(gw).responses.create(model="companion", input="list files", tools=tools)
    # Then each is a function_call item with the call id, name and arguments
    completed = streamed[-1]
    assert isinstance(completed, ResponseCompletedEvent)
    item = completed.response.output[0]
    assert isinstance(item, ResponseFunctionToolCall)
    assert item.type == "function_call" and item.call_id == "call_9" and item.name == "exec_command"
    assert json.loads(item.arguments) == {"cmd": "ls"}
    assert "response.function_call_arguments.delta" in [e.type for e in streamed]
    whole_item = whole.output[0]
    assert isinstance(whole_item, ResponseFunctionToolCall)
    assert whole_item.type == "function_call" and json.loads(whole_item.arguments) == {"cmd": "ls"}
    # When the client sends the call and its output back (the whole conversation, store: false)
    history: list[Any] = [
        {"type": "message", "role": "user", "content": "list files"},
        {"type": "function_call", "call_id": "call_9", "name": "exec_command", "arguments": '{"cmd": "ls"}'},
        {"type": "function_call_output", "call_id": "call_9", "output": "a.py\nb.py"},
    ]
    final = client(gw).responses.create(model="companion", input=history, tools=tools)
    # Then the upstream got an assistant tool call and a tool message
    assert final.output_text == "Two files."
    sent = gw.upstream.last("/v1/chat/completions").json["messages"]
    assert sent[-2]["tool_calls"][0]["id"] == "call_9"
    assert sent[-1] == {"role": "tool", "tool_call_id": "call_9", "content": "a.py\nb.py"}


def test_claude_upstream_through_the_responses_door(make_gateway: MakeGateway) -> None:
    gw = make_gateway(chat_model="claude-test")
    gw.upstream.script(Reply(text="Bonjour.", reasoning="thinking it over"), Reply(text="Salut."))
    # When streaming and not, with Claude behind the alias
    events = list(client(gw).responses.create(model="companion", input=_codex_input("say hi"), stream=True))
    whole = client(gw).responses.create(model="companion", input="say hi", instructions="Be French.")
    # Then both are Responses answers; the reasoning is a reasoning item before the message
    completed = events[-1]
    assert isinstance(completed, ResponseCompletedEvent)
    final = completed.response
    assert completed.type == "response.completed" and final.output_text == "Bonjour."
    assert [item.type for item in final.output] == ["reasoning", "message"]
    assert whole.output_text == "Salut."
    # And Claude got a Messages request with the instructions as system text and the user's turn
    sent = gw.upstream.last("/v1/messages").json
    assert sent["system"][0]["text"].startswith("Be French.")
    assert sent["messages"][-1]["content"][0]["text"] == "say hi"


def test_errors_in_the_responses_shape(make_gateway: MakeGateway) -> None:
    gw = make_gateway()
    url = gw.url + "/v1/responses"
    auth = {"authorization": f"Bearer {OWNER_KEY}"}
    # A body without input, a stateful continuation, no key: OpenAI-style errors with the x-engram headers
    missing = httpx.post(url, json={"model": "companion"}, headers=auth, timeout=5)
    assert missing.status_code == 400 and missing.json()["error"]["code"] == "invalid_request"
    assert "input" in missing.json()["error"]["message"] and "x-engram-reason" in missing.headers
    stateful = httpx.post(url, json={"input": "hi", "previous_response_id": "resp_1"}, headers=auth, timeout=5)
    assert stateful.status_code == 400 and stateful.json()["error"]["code"] == "unsupported_parameter"
    with pytest.raises(openai.AuthenticationError):
        openai.OpenAI(base_url=gw.url + "/v1", api_key="wrong", max_retries=0).responses.create(
            model="companion", input="hi"
        )
    # And a stream the upstream cuts ends with one response.failed event, the user's turn kept
    gw.upstream.script(Reply(text="abcdef", chunks=6, drop_after=3))
    events = list(client(gw, "cut").responses.create(model="companion", input="tell me a story", stream=True))
    failed = events[-1]
    assert isinstance(failed, ResponseFailedEvent) and failed.type == "response.failed"
    assert failed.response.error is not None
    code: str = failed.response.error.code  # Engram's own codes are outside the SDK's list of OpenAI's
    assert code == "upstream_unavailable"
    stored = gw.store.list_thread_messages("default", "cut").items
    assert [m.content for m in stored] == ["tell me a story"] and stored[0].error


def test_agent_prefixed_responses_door(make_gateway: MakeGateway) -> None:
    gw = make_gateway()
    gw.upstream.script(Reply(text="ok"))
    reply = openai.OpenAI(base_url=gw.url + "/agents/codex/v1", api_key=OWNER_KEY, max_retries=0).responses.create(
        model="companion", input="hello"
    )
    assert reply.output_text == "ok"


def test_native_responses_upstream_gets_the_request_as_sent_plus_memory(make_gateway: MakeGateway) -> None:
    # Given an OpenAI-compatible upstream that speaks the Responses API, and a memory the question needs
    gw = make_gateway(upstream_responses_api=True)
    gw.container.memories.write("default", MemoryWrite(content="Lin's staging host is kestrel-7 in Frankfurt."))
    gw.upstream.script(
        Reply(text="kestrel-7.", usage=Usage(input=40, output=3, cache_read=20)), Reply(text="Noted, blue.")
    )
    items = _codex_input("which host is staging on?")
    items.insert(1, {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "opaque"})
    tools: list[Any] = [
        {"type": "function", "name": "exec_command", "parameters": {"type": "object"}},
        {"type": "web_search", "external_web_access": False},
    ]
    # When the client streams through the Responses door
    events = list(
        client(gw).responses.create(
            model="companion", instructions="Be brief.", input=items, tools=tools, stream=True, store=False
        )
    )
    # Then the upstream's own events reach the client, ending with its response.completed
    completed = events[-1]
    assert isinstance(completed, ResponseCompletedEvent) and completed.response.output_text == "kestrel-7."
    # And the upstream got a Responses request: reasoning item and hosted tool kept, the boot block
    # after the instructions, the memory in the user's item
    req = gw.upstream.last("/v1/responses")
    sent = req.json
    assert req.headers["authorization"] == "Bearer sk-upstream-secret-0001"
    assert sent["model"] == "fake-chat" and sent["store"] is False and sent["tools"] == tools
    assert sent["input"][1] == items[1] and sent["input"][:1] == items[:1]
    assert sent["instructions"].startswith("Be brief.")
    user = sent["input"][-1]
    assert user["content"][0] == {"type": "input_text", "text": "which host is staging on?"}
    assert user["content"][-1]["text"].startswith("<engram-context>") and "kestrel-7" in user["content"][-1]["text"]
    # And the turn and its usage are stored
    stored = gw.store.list_thread_messages("default", "codex-1").items
    assert [m.content for m in stored] == ["which host is staging on?", "kestrel-7."]
    usage = gw.container.usage.report("default", days=1)
    assert "fake-chat" in json.dumps(usage)
    # When not streaming, a "remember" goes the same way and the upstream's Response comes back as is
    whole = client(gw).responses.create(model="companion", input="remember: my bike is blue")
    assert whole.output_text == "Noted, blue." and whole.id == "resp_fake"
    assert "my bike is blue" in _facts(gw)
    assert gw.upstream.last("/v1/responses").json["input"][0]["role"] == "user"


def test_native_responses_upstream_failure_event_ends_the_stream(make_gateway: MakeGateway) -> None:
    gw = make_gateway(upstream_responses_api=True)
    gw.upstream.script(Reply(text="abcdef", chunks=6, drop_after=3))
    events = list(client(gw, "cut-native").responses.create(model="companion", input="tell me", stream=True))
    assert events[-1].type == "response.failed"
    stored = gw.store.list_thread_messages("default", "cut-native").items
    assert [m.content for m in stored] == ["tell me"] and stored[0].error
