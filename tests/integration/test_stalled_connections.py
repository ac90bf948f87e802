"""Stalled clients do not keep connections: over raw sockets against uvicorn run as `engram serve`
runs it, a connection that sends nothing, half a request line, headers a byte at a time, or a body
shorter than its Content-Length gets a 408 and is closed; a client that is slow but in time is served."""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Iterator
from typing import Any

import pytest
from engram.bootstrap import build_container
from engram.entrypoints.http.app import create_app
from engram.entrypoints.http.server import header_deadline_protocol, uvicorn_options
from engram.settings import Settings

from tests.servers import ServerThread

KEY = "ek_stalled_conn_key_0001"
TIMEOUT = 0.5  # headers
BODY_TIMEOUT = 2.0
GRACE = 8.0  # how long the test waits for the close: generous, a loaded CI box is slow


@pytest.fixture(scope="module", params=["httptools", "h11"])
def port(request: pytest.FixtureRequest) -> Iterator[int]:
    """uvicorn as `engram serve` runs it, with either of its HTTP parsers."""
    settings = Settings(
        store="memory",
        search="memory",
        embedder="none",
        api_key=KEY,
        scheduler_enabled=False,
        header_timeout=TIMEOUT,
        body_timeout=BODY_TIMEOUT,
    )
    container = build_container(settings)
    options = {**uvicorn_options(settings), "http": header_deadline_protocol(TIMEOUT, request.param)}
    server = ServerThread(create_app(container), lifespan="on", **options)
    server.start()
    yield server.port
    server.stop()
    container.close()


def _connect(port: int) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=GRACE)
    return sock


def _read_until_closed(sock: socket.socket) -> tuple[bytes, float]:
    """Everything the server sends until it closes, and how long that took."""
    started = time.monotonic()
    data = b""
    while True:
        try:
            chunk = sock.recv(65536)
        except TimeoutError:
            pytest.fail(f"the server kept a stalled connection open for {GRACE} s (got {data!r})")
        if not chunk:
            return data, time.monotonic() - started
        data += chunk


def _status_and_json(raw: bytes) -> tuple[int, dict[str, Any]]:
    head, _, body = raw.partition(b"\r\n\r\n")
    return int(head.split(b" ", 2)[1]), json.loads(body)


@pytest.mark.parametrize(
    "sent",
    [b"", b"POST /v1/memo", b"POST /v1/memories HTTP/1.1\r\nHost: localhost\r\nContent-Type: app"],
    ids=["nothing", "half a request line", "half the headers"],
)
def test_incomplete_headers_get_408_and_the_connection_closes(port: int, sent: bytes) -> None:
    # Given a client that opens a connection and stops partway through the headers
    with _connect(port) as sock:
        sock.sendall(sent)
        # When it sends nothing more; Then the server answers 408 and closes the connection
        raw, _ = _read_until_closed(sock)
    status, body = _status_and_json(raw)
    assert status == 408 and body["error"]["code"] == "header_timeout"


def test_headers_trickled_past_the_deadline_are_cut(port: int) -> None:
    # Given a client sending its headers a byte every 0.1 s (slowloris): 3x the deadline in all
    request = b"GET /health HTTP/1.1\r\nHost: localhost\r\nX-Pad: " + b"a" * 20 + b"\r\n\r\n"
    with _connect(port) as sock:
        closed = False
        for byte in request:
            try:
                sock.sendall(bytes([byte]))
            except OSError:
                closed = True
                break
            time.sleep(0.1)
        raw, _ = _read_until_closed(sock) if not closed else (b"", 0.0)
    # Then it never got an answer to that request, only the 408
    assert closed or raw.startswith(b"HTTP/1.1 408")


def test_a_body_shorter_than_its_content_length_gets_408(port: int) -> None:
    # Given complete headers promising 100 bytes, and 10 of them sent
    head = (
        b"POST /v1/memories HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
        b"Authorization: Bearer " + KEY.encode() + b"\r\nContent-Length: 100\r\n\r\n"
    )
    with _connect(port) as sock:
        sock.sendall(head + b'{"content"')
        # When the rest never comes; Then 408 in the error shape, and the connection is closed
        raw, _ = _read_until_closed(sock)
    status, body = _status_and_json(raw)
    assert status == 408 and body["error"]["code"] == "body_timeout"


def test_a_slow_client_within_the_deadlines_is_served(port: int) -> None:
    # Given a client that pauses between its headers and its body, but less than the deadlines
    payload = json.dumps({"content": "slow but fine"}).encode()
    head = (
        b"POST /v1/memories HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nConnection: close\r\n"
        b"Authorization: Bearer " + KEY.encode() + b"\r\nContent-Length: " + str(len(payload)).encode() + b"\r\n\r\n"
    )
    with _connect(port) as sock:
        sock.sendall(head[:20])
        time.sleep(TIMEOUT / 4)
        sock.sendall(head[20:])
        time.sleep(TIMEOUT / 4)
        sock.sendall(payload)
        raw, _ = _read_until_closed(sock)
    status, body = _status_and_json(raw)
    # Then it is answered normally
    assert status == 201 and body["memory"]["content"] == "slow but fine"


def test_keep_alive_requests_each_get_their_own_header_deadline(port: int) -> None:
    # Given one connection carrying two requests, the second one started after longer than the deadline
    request = b"GET /health HTTP/1.1\r\nHost: localhost\r\n\r\n"
    with _connect(port) as sock:
        sock.sendall(request)
        first = sock.recv(65536)
        time.sleep(TIMEOUT * 0.6)  # idle between requests: uvicorn's keep-alive timeout (5 s) governs it
        sock.sendall(request)
        second = sock.recv(65536)
    # Then both are served
    assert first.startswith(b"HTTP/1.1 200") and second.startswith(b"HTTP/1.1 200")


def test_a_body_taking_longer_than_the_header_deadline_is_fine(port: int) -> None:
    # Given complete headers, then a body sent in pieces over 3x the header deadline (within its own)
    payload = json.dumps({"content": "a body in pieces " + "x" * 40}).encode()
    head = (
        b"POST /v1/memories HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nConnection: close\r\n"
        b"Authorization: Bearer " + KEY.encode() + b"\r\nContent-Length: " + str(len(payload)).encode() + b"\r\n\r\n"
    )
    with _connect(port) as sock:
        sock.sendall(head)
        for i in range(0, len(payload), len(payload) // 6 + 1):
            time.sleep(TIMEOUT / 2)
            sock.sendall(payload[i : i + len(payload) // 6 + 1])
        raw, _ = _read_until_closed(sock)
    # Then the headers' deadline did not cut it: it is served
    assert _status_and_json(raw)[0] == 201


@pytest.mark.parametrize(
    ("path", "auth"),
    [
        ("/v1/memories", b""),
        ("/v1/memories", b"Authorization: Bearer ek_not_a_configured_key_9\r\n"),
        ("/v1/messages", b""),
        ("/mcp", b""),
    ],
    ids=["no key", "wrong key", "anthropic door", "mcp"],
)
def test_a_request_without_a_valid_key_gets_401_before_its_body_is_read(port: int, path: str, auth: bytes) -> None:
    # Given complete headers with no valid key, promising 100 bytes, and 10 of them sent
    head = (
        b"POST "
        + path.encode()
        + b" HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
        + auth
        + b"Content-Length: 100\r\n\r\n"
    )
    with _connect(port) as sock:
        sock.sendall(head + b'{"content"')
        # When the rest never comes; Then the answer is 401 from the headers (not the body's 408)
        raw, _ = _read_until_closed(sock)
    status, body = _status_and_json(raw)
    assert status == 401, raw
    assert b"www-authenticate: bearer" in raw.lower()
    error = body["error"]
    assert error["code"] in ("missing_key", "invalid_key") and error["type"] == "authentication_error"
    if path == "/v1/messages":
        assert body["type"] == "error"  # the Anthropic door's shape
