"""The shapes the chat gateway reads, as JSON-Schema subsets (pure): client requests on both wires, and
what upstreams answer (whole responses and stream events).

A client body that does not fit is a 400 in the door's error shape (``parse_chat_request``); an upstream
answer that does not fit is the upstream's fault, a 502 or one SSE error event
(``check_upstream_response`` / ``check_upstream_event``). Only fields Engram reads are described, loosely
(extra fields pass through untouched): the upstream stays the judge of everything else. The request
schemas also document the chat doors in the OpenAPI document.
"""

from __future__ import annotations

import json
from json.scanner import make_scanner
from typing import Any, Literal, cast

from engram.domain.errors import MESSAGE_CHARS, InvalidInput, UpstreamUnavailable
from engram.domain.json_checks import Schema, ShapeError, depth_exceeds, shape_checker

Wire = Literal["openai", "anthropic", "responses"]  # "responses": an upstream's Responses API answers

# Deeper than any real chat body (tool schemas included), far below Python's recursion limit.
MAX_DEPTH = 100

_STR: Schema = {"type": "string"}
_STR_N: Schema = {"type": ["string", "null"]}
_BOOL_N: Schema = {"type": ["boolean", "null"]}
_INT_N: Schema = {"type": ["integer", "null"]}
_NUM_N: Schema = {"type": ["number", "null"]}
_OBJ_N: Schema = {"type": ["object", "null"]}

# -- client requests ----------------------------------------------------------------------------
_OPENAI_PART: Schema = {
    "type": "object",
    "properties": {
        "type": {"type": "string", "examples": ["text", "image_url"]},
        "text": _STR,
        "image_url": {"type": ["string", "object"], "properties": {"url": _STR}},
    },
}
_OPENAI_CALL: Schema = {
    "type": "object",
    "properties": {
        "id": _STR_N,
        "type": _STR_N,
        "function": {
            "type": "object",
            "properties": {"name": _STR, "arguments": {"type": ["string", "object", "null"]}},
        },
    },
}
_OPENAI_MESSAGE: Schema = {
    "type": "object",
    "required": ["role"],
    "properties": {
        "role": {"type": "string", "examples": ["user", "assistant", "system", "developer", "tool"]},
        "content": {"type": ["string", "array", "null"], "items": _OPENAI_PART},
        "tool_calls": {"type": ["array", "null"], "items": _OPENAI_CALL},
        "tool_call_id": _STR_N,
        "name": _STR_N,
    },
}
OPENAI_REQUEST: Schema = {
    "type": "object",
    "required": ["messages"],
    "properties": {
        "model": _STR_N,
        "messages": {"type": "array", "items": _OPENAI_MESSAGE},
        "stream": _BOOL_N,
        "stream_options": {"type": ["object", "null"], "properties": {"include_usage": _BOOL_N}},
        "max_tokens": _INT_N,
        "max_completion_tokens": _INT_N,
        "temperature": _NUM_N,
        "top_p": _NUM_N,
        "user": _STR_N,
        "stop": {"type": ["string", "array", "null"], "items": _STR},
        "metadata": _OBJ_N,
        "thinking": _OBJ_N,
        "tools": {
            "type": ["array", "null"],
            "items": {
                "type": "object",
                "properties": {
                    "type": _STR,
                    "function": {
                        "type": "object",
                        "properties": {"name": _STR, "description": _STR_N, "parameters": _OBJ_N},
                    },
                },
            },
        },
        "tool_choice": {
            "type": ["string", "object", "null"],
            "properties": {"type": _STR, "function": {"type": "object", "properties": {"name": _STR}}},
        },
    },
}

_ANTHROPIC_SOURCE: Schema = {
    "type": "object",
    "properties": {"type": _STR, "media_type": _STR, "data": _STR, "url": _STR},
}
_ANTHROPIC_BLOCK: Schema = {
    "type": "object",
    "properties": {
        "type": {"type": "string", "examples": ["text", "image", "tool_use", "tool_result", "thinking"]},
        "text": _STR,
        "thinking": _STR,
        "id": _STR,
        "name": _STR,
        "input": {"type": "object"},
        "tool_use_id": _STR,
        "content": {
            "type": ["string", "array", "null"],
            "items": {"type": "object", "properties": {"type": _STR, "text": _STR, "source": _ANTHROPIC_SOURCE}},
        },
        "source": _ANTHROPIC_SOURCE,
    },
}
ANTHROPIC_REQUEST: Schema = {
    "type": "object",
    "required": ["messages"],
    "properties": {
        "model": _STR_N,
        "messages": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["role", "content"],
                "properties": {
                    "role": {"type": "string", "examples": ["user", "assistant"]},
                    "content": {"type": ["string", "array"], "items": _ANTHROPIC_BLOCK},
                },
            },
        },
        "system": {"type": ["string", "array", "null"], "items": {"type": "object", "properties": {"text": _STR}}},
        "max_tokens": _INT_N,
        "stream": _BOOL_N,
        "temperature": _NUM_N,
        "top_p": _NUM_N,
        "stop_sequences": {"type": ["array", "null"], "items": _STR},
        "metadata": {"type": ["object", "null"], "properties": {"user_id": _STR_N}},
        "thinking": _OBJ_N,
        "tools": {
            "type": ["array", "null"],
            "items": {
                "type": "object",
                "properties": {"name": _STR, "description": _STR_N, "input_schema": _OBJ_N},
            },
        },
        "tool_choice": {"type": ["object", "null"], "properties": {"type": _STR, "name": _STR}},
    },
}

_RESPONSES_PART: Schema = {
    "type": "object",
    "properties": {
        "type": {"type": "string", "examples": ["input_text", "output_text", "input_image"]},
        "text": _STR,
        "image_url": _STR_N,
    },
}
_RESPONSES_ITEM: Schema = {
    "type": "object",
    "properties": {
        "type": {
            "type": "string",
            "examples": ["message", "function_call", "function_call_output", "reasoning", "custom_tool_call"],
        },
        "role": {"type": "string", "examples": ["user", "assistant", "system", "developer"]},
        "content": {"type": ["string", "array", "null"], "items": _RESPONSES_PART},
        "call_id": _STR_N,
        "name": _STR_N,
        "arguments": {"type": ["string", "object", "null"]},
        "output": {"type": ["string", "array", "null"], "items": _RESPONSES_PART},
        "input": _STR_N,
    },
}
RESPONSES_REQUEST: Schema = {
    "type": "object",
    "required": ["input"],
    "properties": {
        "model": _STR_N,
        "input": {"type": ["string", "array"], "items": _RESPONSES_ITEM},
        "instructions": _STR_N,
        "stream": _BOOL_N,
        "store": _BOOL_N,
        "max_output_tokens": _INT_N,
        "temperature": _NUM_N,
        "top_p": _NUM_N,
        "user": _STR_N,
        "previous_response_id": _STR_N,
        "parallel_tool_calls": _BOOL_N,
        "text": _OBJ_N,
        "tools": {
            "type": ["array", "null"],
            "items": {
                "type": "object",
                "properties": {"type": _STR, "name": _STR, "description": _STR_N, "parameters": _OBJ_N},
            },
        },
        "tool_choice": {"type": ["string", "object", "null"], "properties": {"type": _STR, "name": _STR}},
    },
}

# -- upstream answers ------------------------------------------------------------------------------
_OPENAI_ANSWER_CALL: Schema = {
    "type": "object",
    "properties": {
        "index": {"type": "integer"},
        "id": _STR_N,
        "function": {"type": ["object", "null"], "properties": {"name": _STR_N, "arguments": _STR_N}},
    },
}
_OPENAI_ANSWER_MESSAGE: Schema = {
    "type": ["object", "null"],
    "properties": {
        "content": {"type": ["string", "array", "null"], "items": {"type": "object", "properties": {"text": _STR}}},
        "reasoning_content": _STR_N,
        "tool_calls": {"type": ["array", "null"], "items": _OPENAI_ANSWER_CALL},
    },
}
OPENAI_RESPONSE: Schema = {
    "type": "object",
    "required": ["choices"],
    "properties": {
        "choices": {
            "type": ["array", "null"],
            "items": {"type": "object", "properties": {"message": _OPENAI_ANSWER_MESSAGE, "finish_reason": _STR_N}},
        },
        "usage": _OBJ_N,
    },
}
_OPENAI_DELTA: Schema = {
    "type": ["object", "null"],
    "properties": {
        "content": _STR_N,
        "reasoning_content": _STR_N,
        "tool_calls": {"type": ["array", "null"], "items": _OPENAI_ANSWER_CALL},
    },
}
OPENAI_CHUNK: Schema = {
    "type": "object",
    "properties": {
        "choices": {
            "type": ["array", "null"],
            "items": {"type": "object", "properties": {"delta": _OPENAI_DELTA, "finish_reason": _STR_N}},
        },
        "usage": _OBJ_N,
    },
}
_ANTHROPIC_ANSWER_BLOCK: Schema = {
    "type": "object",
    "properties": {
        "type": {"type": ["string", "null"], "examples": ["text", "thinking", "tool_use"]},
        "text": _STR,
        "thinking": _STR,
        "id": _STR,
        "name": _STR,
        "input": _OBJ_N,
    },
}
ANTHROPIC_RESPONSE: Schema = {
    "type": "object",
    "required": ["content"],
    "properties": {
        "content": {"type": ["array", "null"], "items": _ANTHROPIC_ANSWER_BLOCK},
        "stop_reason": _STR_N,
        "usage": _OBJ_N,
    },
}
ANTHROPIC_EVENT: Schema = {
    "type": "object",
    "properties": {
        "type": {
            "type": ["string", "null"],
            "examples": [
                "message_start",
                "content_block_start",
                "content_block_delta",
                "content_block_stop",
                "message_delta",
                "message_stop",
                "error",
            ],
        },
        "index": {"type": "integer"},
        "message": {"type": ["object", "null"], "properties": {"usage": _OBJ_N}},
        "content_block": {
            "type": ["object", "null"],
            "properties": {
                "type": {"type": ["string", "null"], "examples": ["text", "tool_use"]},
                "id": _STR,
                "name": _STR,
            },
        },
        "delta": {
            "type": ["object", "null"],
            "properties": {
                "type": {
                    "type": ["string", "null"],
                    "examples": ["text_delta", "thinking_delta", "input_json_delta", "signature_delta"],
                },
                "text": _STR,
                "thinking": _STR,
                "partial_json": _STR,
                "stop_reason": _STR_N,
            },
        },
        "usage": _OBJ_N,
    },
}


RESPONSES_RESPONSE: Schema = {
    "type": "object",
    "required": ["output"],
    "properties": {
        "output": {
            "type": ["array", "null"],
            "items": {
                "type": "object",
                "properties": {
                    "type": _STR_N,
                    "content": {"type": ["array", "null"], "items": {"type": "object", "properties": {"text": _STR}}},
                },
            },
        },
        "usage": _OBJ_N,
    },
}
RESPONSES_EVENT: Schema = {
    "type": "object",
    "required": ["type"],
    "properties": {"type": _STR, "delta": _STR, "response": _OBJ_N},
}
_UPSTREAM = {
    "openai": (OPENAI_RESPONSE, OPENAI_CHUNK),
    "anthropic": (ANTHROPIC_RESPONSE, ANTHROPIC_EVENT),
    "responses": (RESPONSES_RESPONSE, RESPONSES_EVENT),
}


_UPSTREAM_CHECKS = {wire: (shape_checker(whole), shape_checker(event)) for wire, (whole, event) in _UPSTREAM.items()}


class _TooDeep(ValueError):
    pass


# The scanner ``json.loads`` runs (a plain decoder's, as ``json.loads`` without arguments uses).
_SCAN = make_scanner(cast(Any, json.JSONDecoder()))  # typeshed types its context as a scanner, not a decoder


def _loads(raw: bytes | str) -> Any:
    """``json.loads(raw)``. A text that is one JSON value from its first character to its last (a stream
    event's ``data``) is read by the scanner directly, without ``json.loads``'s checks around it (a BOM,
    whitespace, extra data): the same value, ~60 fewer bytecodes an event. Anything else, and anything
    the scanner cannot start on, goes through ``json.loads``, for its value or its error."""
    if isinstance(raw, str):
        try:
            value, end = _SCAN(raw, 0)
        except StopIteration:
            pass
        else:
            if end == len(raw):
                return value
    return json.loads(raw)


def _decode(raw: bytes | str) -> Any:
    """``json.loads``, with nesting deeper than ``MAX_DEPTH`` (or than the parser's own limit) refused."""
    try:
        value = _loads(raw)
    except RecursionError as exc:
        raise _TooDeep from exc
    # Nesting is never deeper than the text has opening brackets (those inside strings only add to the
    # count): a stream event or a short request is not walked (bench/gateway.py).
    opens = raw.count(b"{") + raw.count(b"[") if isinstance(raw, bytes) else raw.count("{") + raw.count("[")
    if opens > MAX_DEPTH and depth_exceeds(value, MAX_DEPTH):
        raise _TooDeep
    return value


_REQUESTS = {
    "openai": (shape_checker(OPENAI_REQUEST), "messages"),
    "anthropic": (shape_checker(ANTHROPIC_REQUEST), "messages"),
    "responses": (shape_checker(RESPONSES_REQUEST), "input"),
}


def parse_chat_request(raw: bytes, wire: Literal["openai", "anthropic", "responses"]) -> dict[str, Any]:
    """The client's chat body, checked: JSON, an object, not absurdly deep, and every field Engram
    reads of the right type. Raises ``InvalidInput`` (400) with the first offending path."""
    check, required = _REQUESTS[wire]
    try:
        body = _decode(raw)
    except _TooDeep as exc:
        raise InvalidInput(f"request body nests deeper than {MAX_DEPTH} levels", code="invalid_request") from exc
    except ValueError as exc:
        raise InvalidInput("request body is not valid JSON", code="invalid_json") from exc
    try:
        check(body)
    except ShapeError as exc:
        if exc.where == required and exc.problem == "is required":
            what = "an 'input' string or list" if required == "input" else "a 'messages' list"
            raise InvalidInput(f"request body needs {what}", code="invalid_request") from exc
        raise InvalidInput(f"invalid request: {exc}", code="invalid_request") from exc
    assert isinstance(body, dict)  # the schema's root type
    return body


def check_upstream_response(data: Any, wire: Wire) -> dict[str, Any]:
    """A decoded non-stream upstream answer, checked; ``UpstreamUnavailable`` (502) when malformed."""
    try:
        _UPSTREAM_CHECKS[wire][0](data)
    except ShapeError as exc:
        raise UpstreamUnavailable(f"the upstream sent a malformed response ({exc})", code="upstream_malformed") from exc
    assert isinstance(data, dict)
    return data


def parse_upstream_event(data: str, wire: Wire) -> dict[str, Any]:
    """One upstream SSE ``data`` payload, decoded and checked; ``UpstreamUnavailable`` when malformed."""
    try:
        value = _decode(data)
    except ValueError as exc:
        raise UpstreamUnavailable(
            "the upstream sent a stream event that is not JSON", code="upstream_malformed"
        ) from exc
    try:
        _UPSTREAM_CHECKS[wire][1](value)
    except ShapeError as exc:
        raise UpstreamUnavailable(
            f"the upstream sent a malformed stream event ({exc})", code="upstream_malformed"
        ) from exc
    assert isinstance(value, dict)
    return value


def upstream_error_message(error: Any) -> str:
    """The text of an upstream ``error`` field, whatever its shape (object with ``message``, or text)."""
    if isinstance(error, dict):
        error = error.get("message", error)
    return str(error)[:MESSAGE_CHARS]
