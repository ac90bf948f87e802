"""A scripted fake of boto3's ``bedrock-runtime`` client: ``converse`` and ``converse_stream``.

What is real: every request is checked against botocore's own service model for Converse /
ConverseStream (``botocore.validate``, the same check boto3 runs before sending), so a request shape
Bedrock would refuse fails the test. Errors are real ``botocore`` exceptions (``ClientError`` with the
service's error codes; mid-stream failures as ``EventStreamError``, which is what botocore's
``EventStream`` raises). What is faked: the model (scripted replies, in order) and the network.

    fake = FakeBedrockRuntime()
    fake.script(BedrockReply(text="hi", usage={"inputTokens": 5, "outputTokens": 1}))
    build_container(settings, bedrock_runtime=fake)
"""

from __future__ import annotations

import json
import threading
import time
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import botocore.session
from botocore.exceptions import ClientError, EventStreamError
from botocore.validate import validate_parameters

_MODEL = botocore.session.get_session().get_service_model("bedrock-runtime")


@dataclass(frozen=True)
class BedrockTool:
    name: str
    input_json: str  # streamed in two pieces
    id: str = "tooluse_1"


@dataclass(frozen=True)
class BedrockReply:
    text: str = "Hello from fake Bedrock."
    reasoning: str = ""
    tools: tuple[BedrockTool, ...] = ()
    stop_reason: str = ""  # default: tool_use with tools, else end_turn
    usage: dict[str, int] = field(default_factory=lambda: {"inputTokens": 12, "outputTokens": 5})
    chunks: int = 3
    chunk_delay: float = 0.0
    error_code: str = ""  # raise ClientError(error_code) at the call
    error_status: int = 400
    error_message: str = "scripted failure"
    stream_error_after: int | None = None  # stream: raise EventStreamError after this many events
    stream_error_code: str = "modelStreamErrorException"


class FakeEventStream:
    """Iterable of event dicts like botocore's ``EventStream``; ``close()`` ends it early."""

    def __init__(self, events: list[dict[str, Any]], reply: BedrockReply) -> None:
        self._events = events
        self._reply = reply
        self.closed = threading.Event()
        self.delivered = 0

    def __iter__(self) -> Iterator[dict[str, Any]]:
        for n, event in enumerate(self._events):
            if self._reply.stream_error_after is not None and n == self._reply.stream_error_after:
                code = self._reply.stream_error_code
                raise EventStreamError(
                    {"Error": {"Code": code, "Message": self._reply.error_message}}, "ConverseStream"
                )
            if n and self._reply.chunk_delay and self.closed.wait(self._reply.chunk_delay):
                return
            if self.closed.is_set():
                return
            self.delivered += 1
            yield event

    def close(self) -> None:
        self.closed.set()


class FakeBedrockRuntime:
    def __init__(self) -> None:
        self._script: deque[BedrockReply] = deque()
        self.default = BedrockReply()
        self.requests: list[tuple[str, dict[str, Any]]] = []
        self.streams: list[FakeEventStream] = []
        self._lock = threading.Lock()

    def script(self, *replies: BedrockReply) -> None:
        self._script.extend(replies)

    def reset(self) -> None:
        self._script.clear()
        self.requests.clear()
        self.streams.clear()

    @property
    def last(self) -> dict[str, Any]:
        return self.requests[-1][1]

    def _take(self, operation: str, params: dict[str, Any]) -> BedrockReply:
        validate_parameters(params, _MODEL.operation_model(operation).input_shape)
        with self._lock:
            self.requests.append((operation, params))
            reply = self._script.popleft() if self._script else self.default
        if reply.error_code:
            raise ClientError(
                {
                    "Error": {"Code": reply.error_code, "Message": reply.error_message},
                    "ResponseMetadata": {"HTTPStatusCode": reply.error_status},
                },
                operation,
            )
        return reply

    @staticmethod
    def _stop(reply: BedrockReply) -> str:
        return reply.stop_reason or ("tool_use" if reply.tools else "end_turn")

    def converse(self, **params: Any) -> dict[str, Any]:
        reply = self._take("Converse", params)
        content: list[dict[str, Any]] = []
        if reply.reasoning:
            content.append({"reasoningContent": {"reasoningText": {"text": reply.reasoning, "signature": "sig"}}})
        if reply.text:
            content.append({"text": reply.text})
        for tool in reply.tools:
            content.append({"toolUse": {"toolUseId": tool.id, "name": tool.name, "input": json.loads(tool.input_json)}})
        usage = {**reply.usage, "totalTokens": sum(reply.usage.values())}
        return {
            "ResponseMetadata": {"RequestId": "req-fake-1", "HTTPStatusCode": 200},
            "output": {"message": {"role": "assistant", "content": content}},
            "stopReason": self._stop(reply),
            "usage": usage,
            "metrics": {"latencyMs": 5},
        }

    def converse_stream(self, **params: Any) -> dict[str, Any]:
        reply = self._take("ConverseStream", params)
        events: list[dict[str, Any]] = [{"messageStart": {"role": "assistant"}}]
        index = 0
        if reply.reasoning:
            events.append(
                {
                    "contentBlockDelta": {
                        "delta": {"reasoningContent": {"text": reply.reasoning}},
                        "contentBlockIndex": 0,
                    }
                }
            )
            events.append({"contentBlockStop": {"contentBlockIndex": 0}})
            index = 1
        if reply.text:
            size = max(1, -(-len(reply.text) // max(1, reply.chunks)))
            for start in range(0, len(reply.text), size):
                piece = reply.text[start : start + size]
                events.append({"contentBlockDelta": {"delta": {"text": piece}, "contentBlockIndex": index}})
            events.append({"contentBlockStop": {"contentBlockIndex": index}})
            index += 1
        for tool in reply.tools:
            events.append(
                {
                    "contentBlockStart": {
                        "start": {"toolUse": {"toolUseId": tool.id, "name": tool.name}},
                        "contentBlockIndex": index,
                    }
                }
            )
            half = len(tool.input_json) // 2
            for piece in (tool.input_json[:half], tool.input_json[half:]):
                events.append(
                    {"contentBlockDelta": {"delta": {"toolUse": {"input": piece}}, "contentBlockIndex": index}}
                )
            events.append({"contentBlockStop": {"contentBlockIndex": index}})
            index += 1
        events.append({"messageStop": {"stopReason": self._stop(reply)}})
        usage = {**reply.usage, "totalTokens": sum(reply.usage.values())}
        events.append({"metadata": {"usage": usage, "metrics": {"latencyMs": 5}}})
        stream = FakeEventStream(events, reply)
        self.streams.append(stream)
        return {"ResponseMetadata": {"RequestId": "req-fake-2", "HTTPStatusCode": 200}, "stream": stream}


def wait_until(predicate: Any, timeout: float = 3.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.01)
    return bool(predicate())
