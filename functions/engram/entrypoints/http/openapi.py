"""The OpenAPI document (`/openapi.json`): FastAPI's, plus what the routes do not say themselves.

- Security: every operation outside the public ones takes `Authorization: Bearer <key>` or
  `x-api-key: <key>` (two schemes, either is enough).
- Errors: every error is `{"error": {"message", "type", "code"}}` (the `Error` schema). Each operation
  lists the statuses it can answer, by the same rules everywhere:
  400 the body is not JSON, or a service rule refused a value (a bad cursor, a missing target; a skill
  name, agent id or fact key against the pattern the document states for it: ``stated``);
  401/403 no key, or a key without the scope; 404 an unknown id in the path; 413 a body over
  `ENGRAM_MAX_BODY_BYTES`; 422 a field missing, of the wrong type or out of its bounds (before any
  handler runs); 409 where a version or key conflict can happen (declared on those routes); 429 on
  every operation that takes a key: each request counts against the key's per-minute limit
  (`services/ratelimit.py`), and the answer says when to retry (`Retry-After`).
  FastAPI's own 422 schema (`detail`) is replaced: Engram's 422 is the `Error` shape too.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi

SECURITY_SCHEMES: dict[str, Any] = {
    "bearer": {"type": "http", "scheme": "bearer", "description": "An Engram API key."},
    "apiKey": {"type": "apiKey", "in": "header", "name": "x-api-key", "description": "An Engram API key."},
}
ERROR_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["error"],
    "properties": {
        "error": {
            "type": "object",
            "required": ["message", "type", "code"],
            "properties": {"message": {"type": "string"}, "type": {"type": "string"}, "code": {"type": "string"}},
        }
    },
}
ERROR_REF = {"$ref": "#/components/schemas/Error"}

_DESCRIPTIONS = {
    "400": "The body is not valid JSON, or a rule refused a value (the message says which).",
    "401": "No API key, or an unknown one.",
    "403": "The key lacks the scope this operation needs (the message names it).",
    "404": "No such id in your namespace.",
    "409": "A conflict: another version or another holder of the key changed first.",
    "413": "The body is larger than ENGRAM_MAX_BODY_BYTES.",
    "422": "A field is missing, of the wrong type or out of its bounds.",
    "429": "Over this key's requests (or chat turns) per minute; retry after `Retry-After` seconds.",
}
RETRY_AFTER: dict[str, Any] = {
    "description": "Seconds to wait before the next request.",
    "schema": {"type": "integer", "minimum": 1},
}


def stated(pattern: str) -> dict[str, Any]:
    """``json_schema_extra`` that states ``pattern`` in the document without FastAPI enforcing it: the
    domain's rule accepts exactly the pattern (``domain/skills.py``, ``domain/policies.py``) and refuses
    with 400 and its own code (`invalid_skill_name`, `invalid_agent_id`, `invalid_fact_key`), which the
    clients and the README promise, not a 422."""
    return {"pattern": pattern}


def error_response(status: str, description: str | None = None) -> dict[str, Any]:
    """One documented error response in the `Error` shape (a 429 with its `Retry-After` header)."""
    response: dict[str, Any] = {
        "description": description or _DESCRIPTIONS.get(status, "An error."),
        "content": {"application/json": {"schema": ERROR_REF}},
    }
    if status == "429":
        response["headers"] = {"Retry-After": RETRY_AFTER}
    return response


CONFLICT: dict[int | str, dict[str, Any]] = {409: error_response("409")}


def install_openapi(app: FastAPI, public_paths: Collection[str]) -> None:
    """Replace ``app.openapi`` with a builder that adds security and error responses (built once)."""

    def build() -> dict[str, Any]:
        if app.openapi_schema is None:
            schema = get_openapi(title=app.title, version=app.version, description=app.description, routes=app.routes)
            app.openapi_schema = complete(schema, public_paths)
        return app.openapi_schema

    setter: Callable[[], dict[str, Any]] = build
    app.openapi = setter  # type: ignore[method-assign]  # FastAPI's documented way to extend the schema


def complete(schema: dict[str, Any], public_paths: Collection[str]) -> dict[str, Any]:
    components = schema.setdefault("components", {})
    components["securitySchemes"] = SECURITY_SCHEMES
    schemas = components.setdefault("schemas", {})
    schemas["Error"] = ERROR_SCHEMA
    for name in ("HTTPValidationError", "ValidationError"):
        schemas.pop(name, None)
    for path, item in schema.get("paths", {}).items():
        for operation in item.values():
            responses: dict[str, Any] = operation.setdefault("responses", {})
            params = operation.get("parameters", [])
            has_body = "requestBody" in operation
            wanted: list[str] = []
            if path not in public_paths:
                operation["security"] = [{"bearer": []}, {"apiKey": []}]
                wanted += ["401", "403", "429"]  # every request with a key is counted (auth.authenticate)
            if has_body:
                wanted += ["400", "413", "422"]
            if params:
                wanted += ["400", "422"]
            if any(p.get("in") == "path" for p in params):
                wanted.append("404")
            for status in wanted:
                responses.setdefault(status, error_response(status))
            # FastAPI's default 422 points at its own `detail` schema; Engram's 422 is the Error shape.
            if "422" in responses:
                responses["422"] = error_response("422")
    return schema
