"""Request authentication: Bearer token or x-api-key (or the admin panel's session cookie) -> Principal,
then a scope check."""

from __future__ import annotations

from collections.abc import Callable, Mapping

from fastapi import Request

from engram.domain.access import Principal, refuse_internal
from engram.entrypoints.http.state import KEY_PRINCIPAL, container_of
from engram.services.ratelimit import Kind


def token_from_headers(headers: Mapping[str, str]) -> str | None:
    header = headers.get("authorization", "")
    if header[:7].lower() == "bearer ":
        return header[7:].strip() or None
    if key := headers.get("x-api-key"):
        return key.strip() or None
    return None


def token_from(request: Request, *, allow_query: bool = False) -> str | None:
    if (token := token_from_headers(request.headers)) is not None:
        return token
    if allow_query:
        return request.query_params.get("token") or None
    return None


def authenticate(request: Request, kind: Kind = "requests") -> Principal:
    """The principal of this request (cached on the request), counted once against its key's rate
    limit of ``kind``. Raises Unauthorized, or RateLimited over the limit. A key sent in the headers was
    looked up already by the body limit, before the body was read (app.py, ``BodyLimitMiddleware``):
    that lookup is taken, not done twice."""
    cached = getattr(request.state, "principal", None)
    if isinstance(cached, Principal):
        return cached
    container = container_of(request)
    checked = request.scope.get(KEY_PRINCIPAL)  # the header key the body limit checked (app.py)
    if isinstance(checked, Principal):
        principal = refuse_internal(checked)
    else:
        token = token_from(request)
        sessions = getattr(request.app.state, "admin_sessions", None)
        session_principal = sessions.principal(request) if token is None and sessions is not None else None
        principal = refuse_internal(session_principal or container.keys.authenticate(token))
    container.limits.check(principal, kind)
    request.state.principal = principal
    return principal


def require(scope: str) -> Callable[[Request], Principal]:
    """A FastAPI dependency: the request's principal, which must hold ``scope``."""

    def dependency(request: Request) -> Principal:
        principal = authenticate(request)
        principal.require(scope)
        return principal

    dependency.__name__ = f"require_{scope.replace(':', '_').replace('*', 'any')}"
    return dependency
