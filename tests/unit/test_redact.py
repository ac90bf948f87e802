"""Secret query parameters are redacted from every logged URL."""

from __future__ import annotations

import logging

import pytest
from engram.entrypoints.http.redact import REDACTED, install_redaction, redact_urls


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("/v1/stats?api_key=s3cret&limit=5", f"/v1/stats?api_key={REDACTED}&limit=5"),
        ("/mcp?token=s3cret", f"/mcp?token={REDACTED}"),
        ("/x?Access_Token=a&KEY=b&api-key=c", f"/x?Access_Token={REDACTED}&KEY={REDACTED}&api-key={REDACTED}"),
        ("/x?api%5Fkey=s3cret", f"/x?api%5Fkey={REDACTED}"),
        ('127.0.0.1:5 - "GET /a?key=s3cret HTTP/1.1" 200', f'127.0.0.1:5 - "GET /a?key={REDACTED} HTTP/1.1" 200'),
        ("/x?monkey=1&keys=2&token", "/x?monkey=1&keys=2&token"),
        ("no url here = fine?", "no url here = fine?"),
    ],
)
def test_secret_values_are_replaced_and_the_rest_kept(text: str, expected: str) -> None:
    assert redact_urls(text) == expected


def test_records_of_any_logger_printed_by_a_configured_handler_are_redacted() -> None:
    # Given a handler on the root logger (where engram's and libraries' records end up)
    lines: list[str] = []

    class Capture(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            lines.append(record.getMessage())

    root = logging.getLogger()
    handler = Capture()
    root.addHandler(handler)
    try:
        install_redaction()
        # When an own module logs a URL with a key in it
        log = logging.getLogger("engram.somewhere")
        log.warning("calling %s", "https://api.example/v1/x?key=s3cret&model=m")
        log.warning("calling https://api.example/v1/x?access_token=s3cret")
    finally:
        root.removeHandler(handler)
    # Then the key is gone and the rest is kept
    assert lines == [
        f"calling https://api.example/v1/x?key={REDACTED}&model=m",
        f"calling https://api.example/v1/x?access_token={REDACTED}",
    ]
