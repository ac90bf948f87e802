"""In front of the MCP SDK at `/mcp`: the host allowlist, the query-token strip, authentication and the
request limit, before any MCP handling (401/403/421/429 JSON in the house error shape)."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from urllib.parse import parse_qsl, urlencode, urlsplit

from mcp.server.transport_security import TransportSecuritySettings
from starlette.requests import Request
from starlette.types import ASGIApp, Receive, Scope, Send

from engram.domain.access import KeyRing, Principal, refuse_internal
from engram.domain.errors import Forbidden, RateLimited, Unauthorized
from engram.entrypoints.http.auth import token_from
from engram.entrypoints.http.errors import engram_error_response, error_response
from engram.entrypoints.http.mcp.toolkit import PRINCIPAL_KEY
from engram.services.ratelimit import RequestLimits

log = logging.getLogger("engram.entrypoints.http.mcp")


def host_allowed(host: str | None, rules: Sequence[str]) -> bool:
    """``name`` exact, ``name:*`` any port, ``*.suffix`` any subdomain (any port), ``*`` anything."""
    if not host:
        return False
    host = host.lower()
    bare = host if host.startswith("[") and host.endswith("]") else host.rsplit(":", 1)[0]
    for rule in (r.lower() for r in rules):
        if rule == "*" or host == rule:
            return True
        if rule.endswith(":*") and host.startswith(rule[:-1]):
            return True
        if rule.startswith("*.") and bare.endswith(rule[1:]):
            return True
    return False


def security_settings(rules: Sequence[str]) -> TransportSecuritySettings:
    """The SDK's own DNS-rebinding check, mirroring the gate where its syntax can say the same."""
    if any(r == "*" or r.startswith("*.") for r in rules):
        # Suffix wildcards are beyond the SDK's syntax; the gate enforces them before the SDK runs.
        return TransportSecuritySettings(enable_dns_rebinding_protection=False)
    origins = [f"{scheme}://{r}" for r in rules for scheme in ("http", "https")]
    return TransportSecuritySettings(allowed_hosts=list(rules), allowed_origins=origins)


def strip_query_token(scope: Scope) -> str | None:
    """Remove ``token`` from the query string in place (so access logs never see it); return it."""
    raw = scope.get("query_string", b"")
    if b"token" not in raw:
        return None
    pairs = parse_qsl(raw.decode("latin-1"), keep_blank_values=True)
    token = next((v for k, v in pairs if k == "token"), None)
    scope["query_string"] = urlencode([(k, v) for k, v in pairs if k != "token"]).encode("latin-1")
    return token or None


class McpGate:
    """In front of the SDK: strip a query token, check Host/Origin, authenticate, then hand over."""

    def __init__(
        self,
        app: ASGIApp,
        keys: KeyRing,
        *,
        hosts: Sequence[str],
        allow_query_token: bool,
        limits: RequestLimits | None = None,
    ) -> None:
        self.app = app
        self.keys = keys
        self.limits = limits  # None: no limit
        self.hosts = tuple(hosts)
        self.allow_query_token = allow_query_token

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        query_token = strip_query_token(scope)
        request = Request(scope)
        if not host_allowed(request.headers.get("host"), self.hosts):
            log.warning("mcp: rejected Host header %r (see ENGRAM_MCP_ALLOWED_HOSTS)", request.headers.get("host"))
            response = error_response(421, "host not allowed for /mcp", "invalid_request_error", "host_not_allowed")
            await response(scope, receive, send)
            return
        origin = request.headers.get("origin")
        if origin and not host_allowed(urlsplit(origin).netloc, self.hosts):
            response = error_response(403, "origin not allowed for /mcp", "permission_error", "origin_not_allowed")
            await response(scope, receive, send)
            return
        token = token_from(request)
        if token is None and query_token is not None:
            if not self.allow_query_token:
                response = error_response(
                    401,
                    "query tokens are off: send 'Authorization: Bearer <key>' (or set ENGRAM_MCP_ALLOW_QUERY_TOKEN)",
                    "authentication_error",
                    "query_token_disabled",
                )
                await response(scope, receive, send)
                return
            token = query_token
        try:
            principal: Principal = refuse_internal(self.keys.authenticate(token))
            if self.limits is not None:
                self.limits.check(principal, "requests")
        except (Unauthorized, Forbidden, RateLimited) as exc:
            await engram_error_response(exc)(scope, receive, send)
            return
        if scope["method"] == "GET":
            # Stateless with JSON responses: no server-initiated stream to offer. The spec's answer is
            # 405; the SDK would instead hold an idle SSE stream open (on Lambda, until the timeout).
            message = "GET /mcp opens no stream on this server: POST JSON-RPC"
            response = error_response(405, message, "invalid_request_error", "method_not_allowed")
            response.headers["allow"] = "POST, DELETE"
            await response(scope, receive, send)
            return
        scope[PRINCIPAL_KEY] = principal
        await self.app(scope, receive, send)
