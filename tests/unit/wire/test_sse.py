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
