"""The chat gateway's shape checks cover everything its pure code reads: any body that passes
``parse_chat_request`` goes through recall-text extraction, injection and wire conversion without a
crash, and any upstream answer or stream event that passes its check converts to both wires. Property
tests (hypothesis, fixed seed) generate the inputs from the very schemas, plus arbitrary JSON."""

from __future__ import annotations

import contextlib
import json
from typing import Any

import pytest
from engram.domain.errors import EngramError, InvalidInput, UpstreamUnavailable
from engram.domain.json_checks import ShapeError, check_shape, depth_exceeds, shape_checker
from engram.domain.wire import anthropic as w
from engram.domain.wire import shapes as ws
from engram.domain.wire import usage as u
from engram.domain.wire.cache_markers import CachePolicy
from engram.domain.wire.content import text_of
from engram.domain.wire.converse import openai_to_converse
from engram.domain.wire.sse import SseParser
from engram.entrypoints.http.app import scrub_lone_surrogates
from engram.services.chat.injection import inject_anthropic, inject_openai, last_user_text
from engram.services.chat.routing import anthropic_has_images, openai_has_images
from engram.services.chat.stream_relay import StreamTap
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.strategies import from_schema, json_values

FUZZ = settings(max_examples=60, derandomize=True, deadline=None, suppress_health_check=list(HealthCheck))


def _run_request_pipeline(body: dict[str, Any], wire: str) -> None:
    """Everything the gateway does to a client body before forwarding, except I/O."""
    last_user_text(body)
    json.dumps(body, ensure_ascii=False, sort_keys=True, default=str)  # the exchange key
    if wire == "openai":
        openai_has_images(body)
        inject_openai(body, "boot block", "- a memory")
        w.openai_request_to_anthropic(body, "claude-x", default_max_tokens=4096)
        with contextlib.suppress(InvalidInput):  # e.g. an image given as a link: Bedrock's own 400
            openai_to_converse(body)
    else:
        anthropic_has_images(body)
        inject_anthropic(body, "boot block", "- a memory", CachePolicy())
        w.anthropic_request_to_openai(body, "gpt-x")


@pytest.mark.parametrize("hostile", [False, True], ids=["schema-shaped", "hostile"])
@pytest.mark.parametrize("wire", ["openai", "anthropic"])
def test_any_body_is_refused_with_400_or_goes_through_the_pipeline(wire: str, hostile: bool) -> None:
    schema = ws.OPENAI_REQUEST if wire == "openai" else ws.ANTHROPIC_REQUEST

    @FUZZ
    @given(from_schema(schema, hostile=hostile))
    def check(body: Any) -> None:
        # Given a body (schema-shaped, or with arbitrary JSON anywhere)
        try:
            accepted = ws.parse_chat_request(json.dumps(body).encode(), wire)  # type: ignore[arg-type]
        except InvalidInput:
            assert hostile, "a schema-shaped body was refused"
            return
        # When the gateway prepares it; Then nothing raises
        _run_request_pipeline(accepted, wire)

    check()


@pytest.mark.parametrize("wire", ["openai", "anthropic"])
def test_every_upstream_answer_the_schema_accepts_converts(wire: str) -> None:
    schema = ws.OPENAI_RESPONSE if wire == "openai" else ws.ANTHROPIC_RESPONSE

    @FUZZ
    @given(from_schema(schema) | json_values)
    def check(data: Any) -> None:
        try:
            data = ws.check_upstream_response(data, wire)  # type: ignore[arg-type]
        except UpstreamUnavailable:
            return
        if wire == "openai":
            w.openai_response_to_anthropic(data, "m")
            u.usage_from_openai(data.get("usage"))
        else:
            w.anthropic_response_to_openai(data, "m")
            u.usage_from_anthropic(data.get("usage"))

    check()


@pytest.mark.parametrize("upstream", ["openai", "anthropic"])
@pytest.mark.parametrize("client", ["openai", "anthropic"])
def test_any_upstream_stream_event_converts_or_is_a_clean_upstream_error(upstream: str, client: str) -> None:
    schema = ws.OPENAI_CHUNK if upstream == "openai" else ws.ANTHROPIC_EVENT
    names = st.sampled_from(
        [None, "message_start", "content_block_start", "content_block_delta", "message_delta", "error"]
    )

    @FUZZ
    @given(st.lists(st.tuples(names, from_schema(schema) | json_values), min_size=1, max_size=6))
    def check(events: list[tuple[str | None, Any]]) -> None:
        # Given any sequence of events (schema-shaped or arbitrary JSON) from the upstream
        tap = StreamTap(upstream, client, "m", client_wants_usage=True)  # type: ignore[arg-type]
        parser = SseParser()
        raw = b"".join(
            (f"event: {name}\n" if name else "").encode() + b"data: " + json.dumps(data).encode() + b"\n\n"
            for name, data in events
        )
        # When the tap relays them; Then each one converts or raises an Engram error (an error event)
        for event in parser.feed(raw):
            try:
                out = tap.feed(event)
            except EngramError:
                return
            assert all(isinstance(piece, bytes) for piece in out)

    check()


# -- every field swapped for every wrong type: a gap in a schema fails here deterministically ----------
RICH_OPENAI: dict[str, Any] = {
    "model": "companion",
    "stream": True,
    "stream_options": {"include_usage": True},
    "max_tokens": 100,
    "temperature": 0.5,
    "user": "u1",
    "stop": ["END"],
    "metadata": {"k": "v"},
    "tools": [{"type": "function", "function": {"name": "f", "description": "d", "parameters": {"type": "object"}}}],
    "tool_choice": {"type": "function", "function": {"name": "f"}},
    "messages": [
        {"role": "system", "content": [{"type": "text", "text": "Today is 2026-01-01 10:00."}]},
        {"role": "user", "content": "first"},
        {
            "role": "assistant",
            "content": "calling",
            "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "result"},
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "look"},
                {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}},
            ],
        },
    ],
}
RICH_ANTHROPIC: dict[str, Any] = {
    "model": "claude-x",
    "max_tokens": 100,
    "stream": True,
    "system": [{"type": "text", "text": "Current date: 2026-01-01"}],
    "stop_sequences": ["END"],
    "metadata": {"user_id": "u1"},
    "tools": [{"name": "f", "description": "d", "input_schema": {"type": "object"}}],
    "tool_choice": {"type": "tool", "name": "f"},
    "messages": [
        {"role": "user", "content": "first"},
        {
            "role": "assistant",
            "content": [
                {"type": "thinking", "thinking": "hm", "signature": "s"},
                {"type": "text", "text": "calling"},
                {"type": "tool_use", "id": "t1", "name": "f", "input": {"a": 1}},
            ],
        },
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "t1", "content": [{"type": "text", "text": "r"}]},
                {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}},
                {"type": "text", "text": "look"},
            ],
        },
    ],
}
WRONG: tuple[object, ...] = (None, 5, 1.5, True, "x", [], {}, [None], [5], {"x": None})


def _paths(value: Any, at: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [at] if at else []
    if isinstance(value, dict):
        for key, child in value.items():
            out += _paths(child, (*at, key))
    elif isinstance(value, list):
        for i, child in enumerate(value):
            out += _paths(child, (*at, i))
    return out


def _swapped(value: Any, path: tuple[Any, ...], new: Any) -> Any:
    copy = json.loads(json.dumps(value))
    target = copy
    for step in path[:-1]:
        target = target[step]
    target[path[-1]] = new
    return copy


@pytest.mark.parametrize("wire", ["openai", "anthropic"])
def test_any_field_of_a_full_request_with_a_wrong_type_is_refused_or_handled(wire: str) -> None:
    rich = RICH_OPENAI if wire == "openai" else RICH_ANTHROPIC
    _run_request_pipeline(ws.parse_chat_request(json.dumps(rich).encode(), wire), wire)  # type: ignore[arg-type]
    checked = 0
    for path in _paths(rich):
        for new in WRONG:
            # Given a full request with one field of the wrong type
            raw = json.dumps(_swapped(rich, path, new)).encode()
            # When the door reads it: Then a 400, or the pipeline copes
            try:
                body = ws.parse_chat_request(raw, wire)  # type: ignore[arg-type]
            except InvalidInput:
                continue
            try:
                _run_request_pipeline(body, wire)
            except Exception as exc:
                raise AssertionError(f"{wire}: {path} = {new!r} passed the check and broke: {exc!r}") from exc
            checked += 1
    assert checked > 50  # unknown or loosely typed fields really went through


RICH_OPENAI_ANSWER: dict[str, Any] = {
    "id": "chatcmpl-1",
    "choices": [
        {
            "index": 0,
            "finish_reason": "tool_calls",
            "message": {
                "role": "assistant",
                "content": "hi",
                "reasoning_content": "thought",
                "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}],
            },
        }
    ],
    "usage": {"prompt_tokens": 5, "completion_tokens": 2, "prompt_tokens_details": {"cached_tokens": 1}},
}
RICH_ANTHROPIC_ANSWER: dict[str, Any] = {
    "id": "msg_1",
    "stop_reason": "tool_use",
    "content": [
        {"type": "thinking", "thinking": "t"},
        {"type": "text", "text": "hi"},
        {"type": "tool_use", "id": "t1", "name": "f", "input": {"a": 1}},
    ],
    "usage": {"input_tokens": 5, "output_tokens": 2, "cache_read_input_tokens": 1},
}


@pytest.mark.parametrize("wire", ["openai", "anthropic"])
def test_any_field_of_an_upstream_answer_with_a_wrong_type_is_a_502_or_handled(wire: str) -> None:
    rich = RICH_OPENAI_ANSWER if wire == "openai" else RICH_ANTHROPIC_ANSWER
    for path in [(), *_paths(rich)]:
        for new in WRONG:
            data = new if not path else _swapped(rich, path, new)
            try:
                data = ws.check_upstream_response(data, wire)  # type: ignore[arg-type]
            except UpstreamUnavailable:
                continue
            try:
                if wire == "openai":
                    text_of(((data.get("choices") or [{}])[0].get("message") or {}).get("content"))
                    w.openai_response_to_anthropic(data, "m")
                else:
                    w.anthropic_response_to_openai(data, "m")
            except Exception as exc:
                raise AssertionError(f"{wire}: {path} = {new!r} passed the check and broke: {exc!r}") from exc


def _rich_events(upstream: str) -> list[tuple[str | None, dict[str, Any]]]:
    if upstream == "openai":
        base: dict[str, Any] = {"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "m"}
        deltas = [
            {"role": "assistant", "content": ""},
            {"reasoning_content": "t"},
            {"content": "hi"},
            {"tool_calls": [{"index": 0, "id": "c1", "type": "function", "function": {"name": "f", "arguments": "{"}}]},
        ]
        events: list[tuple[str | None, dict[str, Any]]] = [
            (None, {**base, "choices": [{"index": 0, "delta": d, "finish_reason": None}]}) for d in deltas
        ]
        events.append((None, {**base, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}))
        events.append((None, {**base, "choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 1}}))
        return events
    raw: list[dict[str, Any]] = [
        {"type": "message_start", "message": {"id": "msg_1", "usage": {"input_tokens": 3}}},
        {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
        {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "hi"}},
        {"type": "content_block_delta", "index": 0, "delta": {"type": "thinking_delta", "thinking": "t"}},
        {"type": "content_block_start", "index": 1, "content_block": {"type": "tool_use", "id": "t", "name": "f"}},
        {"type": "content_block_delta", "index": 1, "delta": {"type": "input_json_delta", "partial_json": "{"}},
        {"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 2}},
    ]
    return [(e["type"], e) for e in raw]


@pytest.mark.parametrize("upstream", ["openai", "anthropic"])
@pytest.mark.parametrize("client", ["openai", "anthropic"])
def test_any_field_of_a_stream_event_with_a_wrong_type_is_an_error_event_or_handled(upstream: str, client: str) -> None:
    events = _rich_events(upstream)
    for i, (name, data) in enumerate(events):
        for path in [(), *_paths(data)]:
            for new in WRONG:
                bad = new if not path else _swapped(data, path, new)
                tap = StreamTap(upstream, client, "m", client_wants_usage=True)  # type: ignore[arg-type]
                stream = [*events[:i], (name, bad), *events[i + 1 :]]
                raw = b"".join(
                    (f"event: {n}\n" if n else "").encode() + b"data: " + json.dumps(d).encode() + b"\n\n"
                    for n, d in stream
                )
                try:
                    for event in SseParser().feed(raw):
                        tap.feed(event)
                except EngramError:
                    continue
                except Exception as exc:
                    raise AssertionError(f"event {i} {path} = {new!r} broke the relay: {exc!r}") from exc


def test_check_shape_names_the_first_bad_path() -> None:
    schema = {"type": "object", "required": ["a"], "properties": {"a": {"type": "array", "items": {"type": "string"}}}}
    check_shape({"a": ["x", "y"], "extra": 1}, schema)
    with pytest.raises(ShapeError, match=r"a\[1\]: must be a string"):
        check_shape({"a": ["x", 2, None]}, schema)
    with pytest.raises(ShapeError, match="a: is required"):
        check_shape({}, schema)
    with pytest.raises(ShapeError, match="must be an integer"):
        check_shape(True, {"type": "integer"})  # a bool is not a number on the wire


_SCHEMAS = [
    ws.OPENAI_REQUEST,
    ws.ANTHROPIC_REQUEST,
    ws.RESPONSES_REQUEST,
    ws.OPENAI_CHUNK,
    ws.ANTHROPIC_EVENT,
    ws.RESPONSES_EVENT,
    ws.OPENAI_RESPONSE,
    ws.ANTHROPIC_RESPONSE,
    ws.RESPONSES_RESPONSE,
]


def _outcome(check: Any, value: Any) -> str | None:
    try:
        check(value)
    except ShapeError as exc:
        return str(exc)
    return None


@pytest.mark.parametrize("index", range(len(_SCHEMAS)))
@FUZZ
@given(data=st.data())
def test_a_compiled_shape_checker_decides_and_words_errors_as_check_shape(index: int, data: st.DataObject) -> None:
    schema = _SCHEMAS[index]
    value = data.draw(from_schema(schema, hostile=True) | from_schema(schema) | json_values)
    assert _outcome(shape_checker(schema), value) == _outcome(lambda v: check_shape(v, schema), value)


def test_a_compiled_shape_checker_refuses_a_bool_for_a_number() -> None:
    check = shape_checker({"type": "object", "properties": {"n": {"type": ["integer", "null"]}}})
    check({"n": 3})
    check({"n": None})
    with pytest.raises(ShapeError, match="n: must be an integer or null"):
        check({"n": True})
    shape_checker({"type": ["boolean", "integer"]})(True)


@pytest.mark.parametrize("wire", ["openai", "anthropic"])
def test_nesting_over_the_limit_is_refused_and_brackets_inside_strings_are_not_nesting(wire: str) -> None:
    # 100 levels are allowed, 101 are not (the text is only walked when it has enough opening brackets).
    key = "messages"
    ok = json.dumps({key: [{"role": "user", "content": "[" * 500 + "{" * 500}], "x": _nest(99)})
    assert ws.parse_chat_request(ok.encode(), wire)[key][0]["content"].startswith("[[")  # type: ignore[arg-type]
    deep = json.dumps({key: [{"role": "user", "content": "hi"}], "x": _nest(100)})
    with pytest.raises(InvalidInput, match="nests deeper than 100"):
        ws.parse_chat_request(deep.encode(), wire)  # type: ignore[arg-type]


def _nest(levels: int) -> Any:
    value: Any = 1
    for _ in range(levels):
        value = [value]
    return value


def test_depth_is_measured_without_overflow() -> None:
    deep: Any = []
    for _ in range(100_000):
        deep = [deep]
    assert depth_exceeds(deep, 100)
    assert not depth_exceeds({"a": [{"b": [1]}]}, 4) and depth_exceeds({"a": [{"b": [1]}]}, 3)


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        (rb'"a\ud800b"', rb'"a\ufffdb"'),
        (rb'"\udc00\ud800"', rb'"\ufffd\ufffd"'),
        (rb'"\ud83d\ude00"', rb'"\ud83d\ude00"'),  # a pair: an emoji, kept
        (rb'"\\ud800"', rb'"\\ud800"'),  # an escaped backslash, then text
        (rb'"\\\ud800"', rb'"\\\ufffd"'),  # an escaped backslash, then a lone escape
        (rb'"\uD800\u0041"', rb'"\ufffd\u0041"'),
        (b'"plain"', b'"plain"'),
    ],
)
def test_lone_surrogate_escapes_become_replacement_characters(raw: bytes, expected: bytes) -> None:
    fixed = scrub_lone_surrogates(raw)
    assert fixed == expected and len(fixed) == len(raw)
    json.loads(fixed).encode("utf-8")  # encodable now


@FUZZ
@given(st.text())
def test_scrubbed_json_always_encodes_to_utf8(text: str) -> None:
    raw = json.dumps(text).encode()  # ensure_ascii: every non-ASCII character as \u escapes
    decoded = json.loads(scrub_lone_surrogates(raw))
    decoded.encode("utf-8")
    if not any(0xD800 <= ord(ch) <= 0xDFFF for ch in text):
        assert decoded == text  # valid text is never changed


@FUZZ
@given(
    text=st.one_of(
        json_values.map(json.dumps),
        json_values.map(lambda v: " " + json.dumps(v) + "\n"),
        json_values.map(lambda v: "\ufeff" + json.dumps(v)),
        json_values.map(lambda v: json.dumps(v) + ",1"),
        st.text(),
    )
)
def test_a_text_is_decoded_as_json_loads_decodes_it(text: str) -> None:
    # The stream events' scanner shortcut (shapes._loads) gives json.loads's value or its very error.
    def outcome(load: Any) -> Any:
        try:
            return ("value", load(text))
        except (ValueError, RecursionError) as exc:
            return ("error", type(exc), str(exc))

    assert outcome(ws._loads) == outcome(json.loads)


def test_a_shape_checker_is_compiled_by_its_first_check_once(monkeypatch: pytest.MonkeyPatch) -> None:
    # Given a checker made (as domain/wire/shapes.py makes nine at import) / Then nothing is compiled yet
    from engram.domain import json_checks

    compiled: list[Any] = []
    real = json_checks._compile

    def counted(schema: Any) -> Any:
        compiled.append(schema)
        return real(schema)

    monkeypatch.setattr(json_checks, "_compile", counted)
    schema = {"type": "object", "required": ["n"], "properties": {"n": {"type": "integer"}}}
    check = shape_checker(schema)
    assert compiled == []
    # When it checks values, good and bad / Then it is compiled once, by the first, and decides as before
    check({"n": 1})
    with pytest.raises(ShapeError, match="n: must be an integer"):
        check({"n": "one"})
    assert compiled == [schema]
