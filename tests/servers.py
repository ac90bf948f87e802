"""Run an ASGI app under real uvicorn on a loopback port, in a background thread.

One helper for every server the tests start: the Engram app (``serve_app``), the fake upstream
(``tests/fakes/upstream.py``) and the benchmarks.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import uvicorn


def free_port() -> int:
    """A port nothing listens on right now (for a dead URL, or a child process that binds it itself)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class ServerThread:
    """uvicorn serving ``app`` on 127.0.0.1 in a daemon thread.

    Without a port it binds port 0 itself and hands uvicorn the socket, so two servers never race
    for the same free port. ``config`` goes to ``uvicorn.Config`` (log level, lifespan, ...).
    """

    def __init__(self, app: Any, *, port: int | None = None, start_timeout: float = 20.0, **config: Any) -> None:
        config.setdefault("log_level", "warning")
        config.setdefault("proxy_headers", False)  # as `engram serve` and run.sh: Engram reads them itself
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._sock.bind(("127.0.0.1", port or 0))
        self.port = int(self._sock.getsockname()[1])
        self.server = uvicorn.Server(uvicorn.Config(app, **config))
        self._thread = threading.Thread(
            target=self.server.run, kwargs={"sockets": [self._sock]}, name=f"uvicorn-{self.port}", daemon=True
        )
        self._start_timeout = start_timeout

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> str:
        self._thread.start()
        deadline = time.monotonic() + self._start_timeout
        while not self.server.started:
            if not self._thread.is_alive():
                raise RuntimeError("test server failed to start")
            if time.monotonic() > deadline:
                raise TimeoutError(f"test server did not start within {self._start_timeout:.0f} s")
            time.sleep(0.005)
        return self.url

    def stop(self, timeout: float = 10.0) -> None:
        self.server.should_exit = True
        self._thread.join(timeout=timeout)
        self._sock.close()


@contextmanager
def serve_app(app: Any, *, port: int | None = None) -> Iterator[str]:
    """Serve ``app`` (lifespan on) until the block exits; yields the base URL."""
    thread = ServerThread(app, port=port, lifespan="on")
    try:
        yield thread.start()
    finally:
        thread.stop()


def app_routes(app: Any) -> Iterator[tuple[str, list[str]]]:
    """(path, methods) of every route, looking through included routers (FastAPI may keep them nested)."""
    for route in app.routes:
        contexts = getattr(route, "effective_route_contexts", None)
        if contexts is not None:
            for ctx in contexts() if callable(contexts) else contexts:
                yield ctx.path, sorted(ctx.methods or [])
        elif hasattr(route, "routes") and not hasattr(route, "app"):
            yield from app_routes(route)
        else:
            yield route.path, sorted(getattr(route, "methods", None) or ["GET", "POST"])


@contextmanager
def child_process(args: list[str], env: dict[str, str], ready_url: str, timeout: float = 60.0) -> Iterator[Any]:
    """Start ``args`` (a server in a subprocess), wait until ``ready_url`` answers 200, yield the
    process; terminate it at the end. Fails with the process's output if it exits first."""
    import subprocess

    import httpx

    process = subprocess.Popen(args, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + timeout
        while True:
            if process.poll() is not None:
                output = process.stdout.read().decode(errors="replace") if process.stdout else ""
                raise AssertionError(f"{args[-1]} exited with {process.returncode}:\n{output[-3000:]}")
            try:
                if httpx.get(ready_url, timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                raise AssertionError(f"{ready_url} did not answer within {timeout:.0f} s")
            time.sleep(0.1)
        yield process
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


@contextmanager
def access_log_lines() -> Iterator[list[str]]:
    """The lines uvicorn's access log writes (at INFO) while the block runs, as they would be printed."""
    import logging

    lines: list[str] = []

    class Capture(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            lines.append(record.getMessage())

    access = logging.getLogger("uvicorn.access")
    handler, level = Capture(), access.level
    access.addHandler(handler)
    access.setLevel(logging.INFO)
    try:
        yield lines
    finally:
        access.removeHandler(handler)
        access.setLevel(level)
