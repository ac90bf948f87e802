"""Raw async HTTP to a model provider over one shared ``httpx.AsyncClient`` (the gateway's forwarding path).

Provider errors become domain errors here: an error status -> ``UpstreamRejected`` with the status and
body kept for pass-through; unreachable -> ``UpstreamUnavailable``; timeout -> ``UpstreamTimeout``.
The provider key lives only in the client's default headers: never returned, raised or logged.
"""

from __future__ import annotations

import json
import threading
from collections.abc import AsyncIterator, Mapping
from typing import Any

import httpx

from engram.adapters.tls import tls_context
from engram.domain.errors import (
    EngramError,
    UpstreamRateLimited,
    UpstreamRejected,
    UpstreamTimeout,
    UpstreamUnavailable,
)

_MAX_ERROR_BODY = 64 * 1024


def translate_transport_error(exc: httpx.HTTPError, what: str) -> UpstreamUnavailable:
    if isinstance(exc, httpx.TimeoutException):
        return UpstreamTimeout(f"{what} did not answer in time ({type(exc).__name__})")
    return UpstreamUnavailable(f"{what} could not be reached or dropped the connection ({type(exc).__name__})")


def status_error(resp: httpx.Response, what: str) -> EngramError | None:
    """The error of a JSON API's answer (embeddings, rerank), ``None`` for a 2xx/3xx: 429 -> rate limited,
    5xx -> unavailable, other 4xx -> rejected with its status and body."""
    if resp.status_code == 429:
        return UpstreamRateLimited(f"{what} rate-limited the request (429)")
    if resp.status_code >= 500:
        return UpstreamUnavailable(f"{what} failed with {resp.status_code}")
    if resp.status_code >= 400:
        return UpstreamRejected(
            f"{what} rejected the request ({resp.status_code})", status=resp.status_code, body=resp.content
        )
    return None


class JsonApiClient:
    """The blocking ``httpx.Client`` of a JSON API (embeddings, rerank): built on first use with the bearer
    key (if any), shared by every thread of the process, closed by ``close``."""

    def __init__(self, api_key: str | None, timeout: float, transport: httpx.BaseTransport | None = None) -> None:
        self._api_key = api_key
        self._timeout = timeout
        self._transport = transport
        self._client: httpx.Client | None = None
        self._lock = threading.Lock()

    def get(self) -> httpx.Client:
        with self._lock:
            if self._client is None:
                headers = {"Authorization": f"Bearer {self._api_key}"} if self._api_key else {}
                self._client = httpx.Client(
                    timeout=httpx.Timeout(self._timeout),
                    headers=headers,
                    transport=self._transport,
                    verify=tls_context(),
                )
            return self._client

    def close(self) -> None:
        with self._lock:
            if self._client is not None:
                self._client.close()
                self._client = None


class HttpxReply:
    """An open 2xx response; implements the ``UpstreamReply`` port."""

    __slots__ = ("_resp", "_what", "content_type", "status")

    def __init__(self, resp: httpx.Response, what: str) -> None:
        self._resp = resp
        self._what = what
        self.status = resp.status_code
        self.content_type = resp.headers.get("content-type", "application/json")

    async def aread(self) -> bytes:
        try:
            return await self._resp.aread()
        except httpx.HTTPError as exc:
            raise translate_transport_error(exc, self._what) from exc
        finally:
            await self._resp.aclose()

    async def aiter_bytes(self) -> AsyncIterator[bytes]:
        try:
            async for chunk in self._resp.aiter_raw():
                yield chunk
        except httpx.HTTPError as exc:
            raise translate_transport_error(exc, self._what) from exc

    async def aclose(self) -> None:
        await self._resp.aclose()


class _NoCookies(httpx.Cookies):
    """A cookie jar that keeps nothing: a provider's ``Set-Cookie`` is not sent back (one client carries
    every person's turns), and no per-response cookie parsing on the forwarding path."""

    def extract_cookies(self, response: httpx.Response) -> None:
        return None

    def set_cookie_header(self, request: httpx.Request) -> None:
        return None


class UpstreamClient(httpx.AsyncClient):
    """The shared ``httpx.AsyncClient`` of a provider, without a cookie jar (``_NoCookies``)."""

    _no_cookies = _NoCookies()

    @property
    def cookies(self) -> httpx.Cookies:
        return self._no_cookies

    @cookies.setter
    def cookies(self, cookies: object) -> None:
        return None  # httpx's own __init__ sets an empty jar: ignored


class HttpxUpstream:
    """Base of the provider adapters: ``send`` implements the ``ChatUpstream`` port.

    The request is built here rather than by ``client.build_request`` (which merges the base URL,
    headers, cookies and query parameters again on every call): the URL of each path and the client's
    headers are merged once (bench/README.md, "Gateway overhead")."""

    name = "upstream"

    def __init__(
        self,
        base_url: str,
        auth_headers: Mapping[str, str],
        *,
        connect_timeout: float = 10.0,
        read_timeout: float = 300.0,
        max_connections: int = 100,
        client: httpx.AsyncClient | None = None,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self._auth_headers = dict(auth_headers)
        self._timeout = httpx.Timeout(
            connect=connect_timeout, read=read_timeout, write=read_timeout, pool=connect_timeout
        )
        self._limits = httpx.Limits(max_connections=max_connections, max_keepalive_connections=max_connections)
        self._client = client
        self._urls: dict[str, httpx.URL] = {}
        # the client's headers (with the auth headers) and timeouts, as build_request would merge them
        self._headers: list[tuple[str, str]] | None = None
        self._timeouts: dict[str, float | None] = {}

    @property
    def configured(self) -> bool:
        return bool(self.base_url)

    @property
    def client(self) -> httpx.AsyncClient:
        # Built on first use (inside the running loop), then shared by every request of the process.
        if self._client is None:
            self._client = UpstreamClient(
                timeout=self._timeout, limits=self._limits, headers=self._auth_headers, verify=tls_context()
            )
        return self._client

    def url(self, path: str) -> str:
        return self.base_url + path

    async def send(
        self,
        method: str,
        path: str,
        body: Mapping[str, Any] | bytes | None = None,
        *,
        headers: Mapping[str, str] | None = None,
    ) -> HttpxReply:
        content: bytes | None
        if body is None or isinstance(body, bytes):
            content = body
        else:
            content = json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode()
        client = self.client
        merged = self._request_headers(client, content, headers)  # first: reads the client's timeouts once
        request = httpx.Request(method, self._url(path), content=content, headers=merged)
        request.extensions = {"timeout": self._timeouts}
        try:
            resp = await client.send(request, stream=True)
        except httpx.HTTPError as exc:
            raise translate_transport_error(exc, self.name) from exc
        if resp.status_code >= 400:
            try:
                raw = await resp.aread()
            except httpx.HTTPError as exc:
                raise translate_transport_error(exc, self.name) from exc
            finally:
                await resp.aclose()
            raise UpstreamRejected(
                f"{self.name} answered {resp.status_code}", status=resp.status_code, body=raw[:_MAX_ERROR_BODY]
            )
        return HttpxReply(resp, self.name)

    def _url(self, path: str) -> httpx.URL:
        url = self._urls.get(path)
        if url is None:
            url = self._urls[path] = httpx.URL(self.url(path))
        return url

    def _request_headers(
        self, client: httpx.AsyncClient, content: bytes | None, extra: Mapping[str, str] | None
    ) -> list[tuple[str, str]]:
        """The client's headers (httpx's defaults and the auth headers), then the request's own, as
        ``build_request`` merges them: a request header replaces the client's of the same name."""
        if self._headers is None:
            self._headers = client.headers.multi_items()  # names in lower case
            self._timeouts = client.timeout.as_dict()
        own = {"content-type": "application/json"} if content is not None else {}
        own.update({k.lower(): v for k, v in (extra or {}).items()})
        if not own:
            return self._headers
        return [(k, v) for k, v in self._headers if k not in own] + list(own.items())

    async def aclose(self) -> None:
        if self._client is not None:
            await self._client.aclose()
            self._client = None
            self._headers = None
