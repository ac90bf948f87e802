"""One mapping table from Engram errors to HTTP: status + ``{"error": {"message", "type", "code"}}``."""

from __future__ import annotations

import logging
import math
import re
from collections.abc import Iterator
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.responses import JSONResponse

from engram.domain import errors as e
from engram.domain.policies import DATE_OUT_OF_RANGE, INVALID_THREAD_ID

log = logging.getLogger(__name__)

# (error class, HTTP status, error type) — the first match wins, so subclasses come first.
STATUS_TABLE: tuple[tuple[type[e.EngramError], int, str], ...] = (
    (e.NotFound, 404, "not_found_error"),
    (e.Conflict, 409, "conflict_error"),
    (e.InvalidInput, 400, "invalid_request_error"),
    (e.Unauthorized, 401, "authentication_error"),
    (e.Forbidden, 403, "permission_error"),
    (e.RateLimited, 429, "rate_limit_error"),
    (e.UpstreamTimeout, 504, "upstream_timeout"),
    (e.UpstreamUnavailable, 502, "upstream_error"),
    (e.UpstreamRateLimited, 429, "rate_limit_error"),
    (e.UpstreamRejected, 502, "upstream_error"),
    (e.NotConfigured, 503, "not_configured"),
)

_HTTP_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    405: "invalid_request_error",
    413: "request_too_large",
    415: "invalid_request_error",
    422: "invalid_request_error",
}


def error_body(message: str, type_: str, code: str, **extra: Any) -> dict[str, Any]:
    return {"error": {"message": message, "type": type_, "code": code, **extra}}


def status_for(exc: e.EngramError) -> tuple[int, str]:
    for cls, status, type_ in STATUS_TABLE:
        if isinstance(exc, cls):
            if isinstance(exc, e.UpstreamRejected):
                return exc.status, type_
            return status, type_
    return 500, "api_error"


def error_headers(exc: e.EngramError, status: int) -> dict[str, str]:
    """The headers an error answer carries in every door's shape (401: how to authenticate; 429: when to retry)."""
    headers = {"www-authenticate": "Bearer"} if status == 401 else {}
    if isinstance(exc, e.RateLimited):
        headers["retry-after"] = str(max(1, math.ceil(exc.retry_after)))
    return headers


def error_response(
    status: int, message: str, type_: str, code: str, *, headers: dict[str, str] | None = None, **extra: Any
) -> JSONResponse:
    headers = {**({"www-authenticate": "Bearer"} if status == 401 else {}), **(headers or {})}
    return JSONResponse(error_body(message, type_, code, **extra), status_code=status, headers=headers or None)


def engram_error_response(exc: e.EngramError) -> JSONResponse:
    """The REST (and MCP gate) answer for an Engram error."""
    status, type_ = status_for(exc)
    return error_response(status, exc.message, type_, exc.code, headers=error_headers(exc, status))


def allowed_methods(app: Any, path: str) -> list[str]:
    """Every method some route of ``app`` serves at ``path`` (routes of included routers too). A path that
    a route names exactly (``/v1/memories/check``) allows that route's methods, not those of a route with
    a parameter that also matches it (``/v1/memories/{memory_id}``): what the OpenAPI document says."""
    exact: set[str] = set()
    methods: set[str] = set()
    for regex, route_path, route_methods in _route_table(app.router.routes):
        if regex.match(path):
            methods |= route_methods
            if route_path == path:
                exact |= route_methods
    return sorted(exact or methods)


def _route_table(routes: Any) -> Iterator[tuple[re.Pattern[str], str, set[str]]]:
    for route in routes:
        contexts = getattr(route, "effective_route_contexts", None)  # FastAPI's included routers
        if contexts is not None:
            for ctx in contexts() if callable(contexts) else contexts:
                yield ctx.path_regex, ctx.path, set(ctx.methods or ())
        elif getattr(route, "methods", None) and hasattr(route, "path_regex"):
            yield route.path_regex, getattr(route, "path", ""), set(route.methods)


def install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(e.EngramError)
    async def _engram(_: Request, exc: e.EngramError) -> JSONResponse:
        return engram_error_response(exc)

    @app.exception_handler(RequestValidationError)
    async def _validation(_: Request, exc: RequestValidationError) -> JSONResponse:
        errs = exc.errors()
        if any(err.get("type") == "json_invalid" for err in errs):
            return error_response(400, "request body is not valid JSON", "invalid_request_error", "invalid_json")
        details = [
            {"loc": [str(p) for p in err.get("loc", ())], "msg": err.get("msg", ""), "type": err.get("type", "")}
            for err in errs
        ]
        first = details[0] if details else {"loc": [], "msg": "invalid request"}
        where = ".".join(p for p in first["loc"] if p not in ("body", "query", "path"))
        message = f"{where}: {first['msg']}" if where else str(first["msg"])
        # Rules beyond the schema: a valid date-time no store can hold; a string that is no thread id.
        if first.get("type") in (DATE_OUT_OF_RANGE, INVALID_THREAD_ID):
            return error_response(400, message, "invalid_request_error", str(first["type"]), details=details)
        return error_response(422, message, "invalid_request_error", "invalid_request", details=details)

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        if exc.status_code == 400:  # FastAPI could not decode the body (not UTF-8, nested too deeply)
            return error_response(400, "request body is not valid JSON", "invalid_request_error", "invalid_json")
        code = {404: "not_found", 405: "method_not_allowed", 413: "body_too_large"}.get(exc.status_code, "http_error")
        response = error_response(exc.status_code, str(exc.detail), _HTTP_TYPES.get(exc.status_code, "api_error"), code)
        # Keep what the exception says about the response (``WWW-Authenticate``, ...).
        for name, value in (exc.headers or {}).items():
            response.headers[name] = value
        if exc.status_code == 405:
            # Starlette names only the methods of the first route that matched the path; a path
            # served by several routes (GET and DELETE /v1/memories/{id}) allows all of theirs.
            response.headers["allow"] = ", ".join(allowed_methods(request.app, request.url.path))
        return response

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
        log.exception("unhandled error on %s %s", request.method, request.url.path)
        return error_response(500, "internal error", "api_error", "internal_error")
