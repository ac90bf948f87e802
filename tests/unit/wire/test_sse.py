import pytest
from engram.domain.wire.sse import SseParser, sse_bytes


def test_parser_handles_split_chunks_crlf_comments_and_events() -> None:
    # Given a stream split at awkward places, with CRLF and a comment
    wire = b': ping\r\n\r\nevent: message_start\r\ndata: {"a": 1}\r\n\r\ndata: [DONE]\n\n'
    parser = SseParser()
    # When fed one byte at a time
    events = [e for i in range(len(wire)) for e in parser.feed(wire[i : i + 1])]
    # Then three events come out, in order, with their wire form
    assert [e.is_comment for e in events] == [True, False, False]
    assert events[1].event == "message_start"
    assert events[1].json() == {"a": 1}
    assert events[2].data == "[DONE]"
    assert events[2].raw == b"data: [DONE]\n\n"


def test_flush_returns_unterminated_last_event_and_format_roundtrips() -> None:
    parser = SseParser()
    assert parser.feed(sse_bytes({"x": "é"}, "e")[:-1]) == []
    (event,) = parser.flush()
    assert event.event == "e"
    assert event.json() == {"x": "é"}


@pytest.mark.parametrize(
    "block",
    [
        b'data: {"a": 1}\n\n',
        b"data: \n\n",
        b"data:  two spaces\n\n",
        b"data: a: b\n\n",
        b"data: x\rthe rest\n\n",
        b"data: \xff\xfe\n\n",
        b"data:no-space\n\n",
        b"data: one\ndata: two\n\n",
        b"event: e\ndata: x\n\n",
        b"data: x\nid: 7\n\n",
    ],
)
def test_a_one_line_data_event_is_read_as_every_other_event(block: bytes) -> None:
    # The parser's shortcut for the common `data: ...` event gives what the line-by-line reading gives.
    (event,) = SseParser().feed(block)
    slow = _line_by_line(block)
    assert (event.event, event.data, event.raw) == slow


def _line_by_line(block: bytes) -> tuple[str | None, str, bytes]:
    """The SSE reading of a block, field by field (the parser's general path, written out)."""
    event: str | None = None
    data: list[str] = []
    for line in block.decode("utf-8", "replace").split("\n"):
        if not line or line.startswith(":"):
            continue
        name, _, value = line.partition(":")
        value = value[1:] if value.startswith(" ") else value
        if name == "event":
            event = value
        elif name == "data":
            data.append(value)
    return event, "\n".join(data), block
