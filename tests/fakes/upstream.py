"""A scripted fake LLM provider on loopback: OpenAI chat completions, OpenAI Responses and Anthropic
Messages wires.

Tests (and ``bench/gateway.py``) start one per session/module, script replies per test and assert on
the recorded requests::

    with FakeUpstream() as up:
        up.script(Reply(text="hi", usage=Usage(input=10, output=2, cache_read=4)))
        ...  # point the gateway at up.openai_base_url / up.base_url
        assert up.requests[-1].json["model"] == "gpt-x"

A raw ASGI app under uvicorn in a background thread (its own event loop), so the thing under test
talks real HTTP to it. Replies are taken from the script queue in order; when it is empty the
``default`` reply is used. Nothing here imports Engram.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from tests.servers import ServerThread


@dataclass(frozen=True)
class Usage:
    input: int = 11
    output: int = 7
    cache_read: int = 0
    cache_write: int = 0


@dataclass(frozen=True)
class ToolCall:
    name: str
    arguments: str  # JSON text, streamed in pieces
    id: str = "call_1"


@dataclass(frozen=True)
class Reply:
    """How the fake answers one request."""

    text: str = "Hello from the fake upstream."
    reasoning: str = ""  # OpenAI `reasoning_content` / Anthropic `thinking`
    tool_calls: tuple[ToolCall, ...] = ()
    usage: Usage = field(default_factory=Usage)
    chunks: int = 3  # the text is streamed in this many pieces
    chunk_delay: float = 0.0  # seconds between streamed events
    first_byte_delay: float = 0.0  # seconds before the response starts
    status: int = 200
    error_body: Any = None  # with status >= 400: dict (sent as JSON) or bytes
    drop_after: int | None = None  # stream: close the connection after this many data events; whole: mid-body
    hang: float = 0.0  # seconds to stall before answering (released early by stop())
    model: str | None = None  # model name echoed back (default: the request's)
    body: bytes | None = None  # non-stream 200: send exactly these bytes (malformed answers)
    splice: tuple[int, bytes] | None = None  # stream: send these raw bytes after this many events


@dataclass
class RecordedRequest:
    method: str
    path: str
    headers: dict[str, str]
    json: Any
    raw: bytes
    received_at: float
    disconnected: bool = False  # the client went away before the response finished


def _split(text: str, n: int) -> list[str]:
    if not text:
        return []
    n = max(1, min(n, len(text)))
    size = -(-len(text) // n)
    return [text[i : i + size] for i in range(0, len(text), size)]


class _Dropped(Exception):
    """Raised inside the app to make uvicorn cut the connection mid-body."""


class FakeUpstream:
    def __init__(self, *, default: Reply | None = None, models: tuple[str, ...] = ("fake-chat", "fake-vision")) -> None:
        self.default = default or Reply()
        self.models = models
        self.requests: list[RecordedRequest] = []
        self._script: deque[Reply] = deque()
        self._lock = threading.Lock()
        self._server: ServerThread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._release: asyncio.Event | None = None
        self.port = 0

    # -- control ----------------------------------------------------------------------------
    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def openai_base_url(self) -> str:
        return f"{self.base_url}/v1"

    def script(self, *replies: Reply) -> None:
        with self._lock:
            self._script.extend(replies)

    def reset(self) -> None:
        with self._lock:
            self._script.clear()
            self.requests.clear()

    def last(self, path: str | None = None) -> RecordedRequest:
        for req in reversed(self.requests):
            if path is None or req.path == path:
                return req
        raise AssertionError(f"no request recorded for {path or 'any path'}")

    def start(self) -> FakeUpstream:
        self._server = ServerThread(
            self._app,
            start_timeout=10,
            interface="asgi3",
            log_level="critical",
            lifespan="off",
            access_log=False,
            timeout_graceful_shutdown=1,
        )
        self.port = self._server.port
        self._server.start()
        return self

    def stop(self) -> None:
        if self._loop is not None and self._release is not None:
            self._loop.call_soon_threadsafe(self._release.set)
        if self._server is not None:
            self._server.stop(timeout=5)

    def __enter__(self) -> FakeUpstream:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _next(self) -> Reply:
        with self._lock:
            return self._script.popleft() if self._script else self.default

    # -- ASGI ---------------------------------------------------------------------------------
    async def _app(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        if self._release is None:
            self._loop = asyncio.get_running_loop()
            self._release = asyncio.Event()
        raw = b""
        while True:
            msg = await receive()
            raw += msg.get("body", b"")
            if not msg.get("more_body"):
                break
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            body = None
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        record = RecordedRequest(scope["method"], scope["path"], headers, body, raw, time.monotonic())
        with self._lock:
            self.requests.append(record)
        path = scope["path"]
        if scope["method"] == "GET" and path in ("/v1/models", "/models"):
            data = {"object": "list", "data": [{"id": m, "object": "model", "owned_by": "fake"} for m in self.models]}
            await _send_json(send, 200, data)
            return
        if scope["method"] != "POST" or path not in (
            "/v1/chat/completions",
            "/chat/completions",
            "/v1/messages",
            "/v1/responses",
        ):
            await _send_json(send, 404, {"error": {"message": f"no route {path}", "type": "not_found"}})
            return
        reply = self._next()
        if reply.hang:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._release.wait(), reply.hang)
        if reply.first_byte_delay:
            await asyncio.sleep(reply.first_byte_delay)
        if reply.status >= 400:
            err = reply.error_body
            if isinstance(err, bytes):
                await _send_raw(send, reply.status, err, b"application/json")
            else:
                await _send_json(send, reply.status, err or {"error": {"message": "scripted failure"}})
            return
        anthropic = path == "/v1/messages"
        responses = path == "/v1/responses"
        model = reply.model or (body or {}).get("model") or "fake"
        if not (body or {}).get("stream"):
            if reply.body is not None:
                await _send_raw(send, 200, reply.body, b"application/json")
                return
            data = (
                _anthropic_message(reply, model)
                if anthropic
                else _responses_object(reply, model, "completed")
                if responses
                else _openai_completion(reply, model)
            )
            if reply.drop_after is not None:  # promise the whole body, send half of it, hang up
                raw = json.dumps(data).encode()
                response_headers = [(b"content-type", b"application/json"), (b"content-length", str(len(raw)).encode())]
                await send({"type": "http.response.start", "status": 200, "headers": response_headers})
                await send({"type": "http.response.body", "body": raw[: len(raw) // 2], "more_body": True})
                raise _Dropped("scripted drop")
            await _send_json(send, 200, data)
            return
        events = (
            _anthropic_events(reply, model)
            if anthropic
            else _responses_events(reply, model)
            if responses
            else _openai_events(reply, model, body or {})
        )
        if reply.splice is not None:
            at, raw_event = reply.splice
            events.insert(at, raw_event)
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [(b"content-type", b"text/event-stream"), (b"cache-control", b"no-cache")],
            }
        )
        watcher = asyncio.ensure_future(_watch_disconnect(receive, record))
        try:
            for i, event in enumerate(events):
                if reply.drop_after is not None and i >= reply.drop_after:
                    raise _Dropped("scripted drop")
                if i and reply.chunk_delay:
                    await asyncio.sleep(reply.chunk_delay)
                if record.disconnected:
                    return
                await send({"type": "http.response.body", "body": event, "more_body": True})
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        except OSError:
            record.disconnected = True
        finally:
            watcher.cancel()


async def _watch_disconnect(receive: Any, record: RecordedRequest) -> None:
    while True:
        msg = await receive()
        if msg["type"] == "http.disconnect":
            record.disconnected = True
            return


async def _send_raw(send: Any, status: int, body: bytes, ctype: bytes) -> None:
    await send({"type": "http.response.start", "status": status, "headers": [(b"content-type", ctype)]})
    await send({"type": "http.response.body", "body": body})


async def _send_json(send: Any, status: int, data: Any) -> None:
    await _send_raw(send, status, json.dumps(data).encode(), b"application/json")


# -- OpenAI wire -----------------------------------------------------------------------------------
def _openai_usage(u: Usage) -> dict[str, Any]:
    return {
        "prompt_tokens": u.input,
        "completion_tokens": u.output,
        "total_tokens": u.input + u.output,
        "prompt_tokens_details": {"cached_tokens": u.cache_read},
        "cache_write_tokens": u.cache_write,
    }


def _openai_completion(r: Reply, model: str) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": r.text or None}
    if r.reasoning:
        message["reasoning_content"] = r.reasoning
    if r.tool_calls:
        message["tool_calls"] = [
            {"id": t.id, "type": "function", "function": {"name": t.name, "arguments": t.arguments}}
            for t in r.tool_calls
        ]
    return {
        "id": "chatcmpl-fake",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [{"index": 0, "message": message, "finish_reason": "tool_calls" if r.tool_calls else "stop"}],
        "usage": _openai_usage(r.usage),
    }


def _sse(data: Any, event: str | None = None) -> bytes:
    head = f"event: {event}\n" if event else ""
    payload = data if isinstance(data, str) else json.dumps(data)
    return f"{head}data: {payload}\n\n".encode()


def _openai_events(r: Reply, model: str, body: dict[str, Any]) -> list[bytes]:
    base = {"id": "chatcmpl-fake", "object": "chat.completion.chunk", "created": int(time.time()), "model": model}

    def chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
        return _sse({**base, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})

    out = [chunk({"role": "assistant", "content": ""})]
    out += [chunk({"reasoning_content": piece}) for piece in _split(r.reasoning, r.chunks)]
    out += [chunk({"content": piece}) for piece in _split(r.text, r.chunks)]
    for i, t in enumerate(r.tool_calls):
        head = {"index": i, "id": t.id, "type": "function", "function": {"name": t.name, "arguments": ""}}
        out.append(chunk({"tool_calls": [head]}))
        for piece in _split(t.arguments, 2):
            out.append(chunk({"tool_calls": [{"index": i, "function": {"arguments": piece}}]}))
    out.append(chunk({}, "tool_calls" if r.tool_calls else "stop"))
    if (body.get("stream_options") or {}).get("include_usage"):
        out.append(_sse({**base, "choices": [], "usage": _openai_usage(r.usage)}))
    out.append(b"data: [DONE]\n\n")
    return out


# -- Anthropic wire --------------------------------------------------------------------------------
def _anthropic_usage(u: Usage) -> dict[str, Any]:
    return {
        "input_tokens": u.input,
        "output_tokens": u.output,
        "cache_read_input_tokens": u.cache_read,
        "cache_creation_input_tokens": u.cache_write,
    }


def _anthropic_message(r: Reply, model: str) -> dict[str, Any]:
    content: list[dict[str, Any]] = []
    if r.reasoning:
        content.append({"type": "thinking", "thinking": r.reasoning, "signature": "sig-fake"})
    if r.text:
        content.append({"type": "text", "text": r.text})
    for t in r.tool_calls:
        content.append({"type": "tool_use", "id": t.id, "name": t.name, "input": json.loads(t.arguments or "{}")})
    return {
        "id": "msg_fake",
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": content,
        "stop_reason": "tool_use" if r.tool_calls else "end_turn",
        "stop_sequence": None,
        "usage": _anthropic_usage(r.usage),
    }


def _anthropic_events(r: Reply, model: str) -> list[bytes]:
    start_usage = {**_anthropic_usage(r.usage), "output_tokens": 1}
    msg: dict[str, Any] = {
        "id": "msg_fake",
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": [],
        "stop_reason": None,
        "stop_sequence": None,
        "usage": start_usage,
    }
    out = [_sse({"type": "message_start", "message": msg}, "message_start")]
    out.append(_sse({"type": "ping"}, "ping"))
    idx = 0

    def block(start: dict[str, Any], deltas: list[dict[str, Any]]) -> None:
        nonlocal idx
        out.append(_sse({"type": "content_block_start", "index": idx, "content_block": start}, "content_block_start"))
        for d in deltas:
            out.append(_sse({"type": "content_block_delta", "index": idx, "delta": d}, "content_block_delta"))
        out.append(_sse({"type": "content_block_stop", "index": idx}, "content_block_stop"))
        idx += 1

    if r.reasoning:
        deltas = [{"type": "thinking_delta", "thinking": p} for p in _split(r.reasoning, r.chunks)]
        deltas.append({"type": "signature_delta", "signature": "sig-fake"})
        block({"type": "thinking", "thinking": "", "signature": ""}, deltas)
    if r.text:
        block({"type": "text", "text": ""}, [{"type": "text_delta", "text": p} for p in _split(r.text, r.chunks)])
    for t in r.tool_calls:
        block(
            {"type": "tool_use", "id": t.id, "name": t.name, "input": {}},
            [{"type": "input_json_delta", "partial_json": p} for p in _split(t.arguments, 2)],
        )
    delta = {"stop_reason": "tool_use" if r.tool_calls else "end_turn", "stop_sequence": None}
    out.append(
        _sse(
            {"type": "message_delta", "delta": delta, "usage": {"output_tokens": r.usage.output}},
            "message_delta",
        )
    )
    out.append(_sse({"type": "message_stop"}, "message_stop"))
    return out


# -- OpenAI Responses wire -----------------------------------------------------------------------
def _responses_output(r: Reply) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    if r.reasoning:
        out.append({"id": "rs_fake", "type": "reasoning", "summary": [{"type": "summary_text", "text": r.reasoning}]})
    if r.text:
        content = [{"type": "output_text", "text": r.text, "annotations": []}]
        out.append(
            {"id": "msg_fake", "type": "message", "status": "completed", "role": "assistant", "content": content}
        )
    for t in r.tool_calls:
        out.append(
            {
                "id": f"fc_{t.id}",
                "type": "function_call",
                "status": "completed",
                "call_id": t.id,
                "name": t.name,
                "arguments": t.arguments,
            }
        )
    return out


def _responses_object(r: Reply, model: str, status: str) -> dict[str, Any]:
    usage = {
        "input_tokens": r.usage.input,
        "input_tokens_details": {"cached_tokens": r.usage.cache_read},
        "output_tokens": r.usage.output,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": r.usage.input + r.usage.output,
    }
    output = _responses_output(r) if status == "completed" else []
    return {
        "id": "resp_fake",
        "object": "response",
        "created_at": int(time.time()),
        "status": status,
        "model": model,
        "output": output,
        "usage": usage if status == "completed" else None,
    }


def _responses_events(r: Reply, model: str) -> list[bytes]:
    seq = iter(range(1, 10_000))

    def event(kind: str, **fields: Any) -> bytes:
        return _sse({"type": kind, "sequence_number": next(seq), **fields}, kind)

    out = [event("response.created", response=_responses_object(r, model, "in_progress"))]
    for index, item in enumerate(_responses_output(r)):
        out.append(event("response.output_item.added", output_index=index, item={**item, "status": "in_progress"}))
        if item["type"] == "message":
            for piece in _split(r.text, r.chunks):
                out.append(
                    event(
                        "response.output_text.delta",
                        item_id=item["id"],
                        output_index=index,
                        content_index=0,
                        delta=piece,
                    )
                )
        out.append(event("response.output_item.done", output_index=index, item=item))
    out.append(event("response.completed", response=_responses_object(r, model, "completed")))
    return out
