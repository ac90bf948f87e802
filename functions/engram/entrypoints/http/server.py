"""uvicorn as `engram serve` runs it: the options, and a deadline for request headers.

uvicorn closes idle keep-alive connections but has no timeout for a request whose headers never
finish: a client that opens a connection and sends nothing (or half a request line) holds it forever,
and enough of them hold every file descriptor. ``HeaderDeadline`` gives each request
``ENGRAM_HEADER_TIMEOUT`` seconds from its first byte (or from the connection's start) to complete its
headers; past that the connection gets a 408 and is closed. The body has its own deadline, in the app
(``BodyLimitMiddleware``, ``ENGRAM_BODY_TIMEOUT``). On AWS, API Gateway and the Function URL receive
the whole request before Lambda is invoked (docs/aws.md), so neither deadline is reached there.
"""

from __future__ import annotations

import asyncio
from typing import Any

from uvicorn.protocols.http.h11_impl import H11Protocol
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

_TIMEOUT_RESPONSE = (
    b"HTTP/1.1 408 Request Timeout\r\ncontent-type: application/json\r\nconnection: close\r\n"
    b"content-length: %d\r\n\r\n%s"
)
_BODY = (
    b'{"error": {"message": "the request headers did not arrive in time", '
    b'"type": "invalid_request_error", "code": "header_timeout"}}'
)


class _HeaderDeadlineMixin:
    """Arms a timer when a connection opens and when a request begins; headers complete disarm it."""

    header_timeout: float = 10.0
    transport: asyncio.Transport
    loop: asyncio.AbstractEventLoop
    _deadline: asyncio.TimerHandle | None = None

    def _arm(self) -> None:
        if self._deadline is None:
            self._deadline = self.loop.call_later(self.header_timeout, self._expire)

    def _disarm(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def _expire(self) -> None:
        self._deadline = None
        if not self.transport.is_closing():
            self.transport.write(_TIMEOUT_RESPONSE % (len(_BODY), _BODY))
            self.transport.close()

    # The hooks both parsers share (the mixin comes first in each class's bases, so super() is uvicorn's).
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)  # type: ignore[misc]
        self._arm()

    def on_response_complete(self) -> None:
        # Waiting for the next request on a kept-alive connection is uvicorn's keep-alive timeout.
        self._disarm()
        super().on_response_complete()  # type: ignore[misc]

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)  # type: ignore[misc]


class HttpToolsHeaderDeadline(_HeaderDeadlineMixin, HttpToolsProtocol):
    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._arm()

    def on_headers_complete(self) -> None:
        self._disarm()
        super().on_headers_complete()


class H11HeaderDeadline(_HeaderDeadlineMixin, H11Protocol):
    """The same for uvicorn's pure-Python parser (used when httptools is not installed)."""

    def data_received(self, data: bytes) -> None:
        cycle = self.cycle
        if cycle is None or cycle.response_complete:
            self._arm()  # the first bytes of a request: its headers have until the deadline
        super().data_received(data)
        if self.cycle is not cycle and self.cycle is not None:
            self._disarm()  # a new request cycle started: its headers are complete


def header_deadline_protocol(header_timeout: float, parser: str = "auto") -> type[asyncio.Protocol]:
    """uvicorn's ``http`` protocol class with a ``header_timeout`` deadline: httptools when installed
    (as uvicorn's ``auto`` picks), else h11; ``parser`` forces one."""
    base: type[Any] = H11HeaderDeadline
    if parser in ("auto", "httptools"):
        try:
            import httptools  # noqa: F401

            base = HttpToolsHeaderDeadline
        except ImportError:
            if parser == "httptools":
                raise
    return type(base.__name__, (base,), {"header_timeout": header_timeout})


def uvicorn_options(settings: Any) -> dict[str, Any]:
    """The uvicorn options of `engram serve` (and of tests that run it the same way)."""
    return {
        "http": header_deadline_protocol(settings.header_timeout),
        # Engram logs each request itself (method, path without query, status, ms, request id).
        "access_log": False,
        "timeout_graceful_shutdown": 5,
        # Engram reads forwarding headers itself, from ENGRAM_TRUSTED_PROXIES only (entrypoints/http/proxies.py);
        # uvicorn's own handling would believe any local peer.
        "proxy_headers": False,
    }
