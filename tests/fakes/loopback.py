"""One HTTP server on loopback for the tests' fakes and fronts (the embeddings and rerank fakes, the Lambda
harness's OpenSearch and DynamoDB proxies): a ``ThreadingHTTPServer`` on a free port of 127.0.0.1, served
from a daemon thread. A subclass answers each request in ``respond``; the server writes the answer (a client
that hung up meanwhile is not an error) and says nothing on stderr.

    class Echo(LoopbackServer):
        def respond(self, method, path, headers, body):
            return 200, body, {"Content-Type": "application/octet-stream"}

    with Echo() as server:
        httpx.post(server.root_url, content=b"hi")
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Mapping
from email.message import Message
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Self

JSON = {"Content-Type": "application/json"}


class LoopbackServer:
    # The HTTP methods answered (any other gets the standard library's 501).
    methods: tuple[str, ...] = ("POST",)

    def __init__(self) -> None:
        self._server: ThreadingHTTPServer | None = None

    def respond(self, method: str, path: str, headers: Message, body: bytes) -> tuple[int, bytes, Mapping[str, str]]:
        """The status, body and headers (``Content-Length`` is added) of the answer to one request."""
        raise NotImplementedError

    @property
    def root_url(self) -> str:
        assert self._server is not None, "not started"
        return f"http://127.0.0.1:{self._server.server_port}"

    def start(self) -> Self:
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:  # quiet
                return None

            def handle_one(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                status, payload, headers = owner.respond(self.command, self.path, self.headers, body)
                with contextlib.suppress(OSError):  # the client gave up (its deadline, a test's stop)
                    self.send_response(status)
                    for name, value in headers.items():
                        self.send_header(name, value)
                    self.send_header("Content-Length", str(len(payload)))
                    self.end_headers()
                    if self.command != "HEAD":
                        self.wfile.write(payload)

        for method in self.methods:
            setattr(Handler, f"do_{method}", Handler.handle_one)
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
