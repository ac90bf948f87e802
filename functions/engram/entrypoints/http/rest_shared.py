"""What every REST router shares: the scope each route needs, the container of a request, and the strict
request-body conventions (a JSON value of the wrong type is a 422, never coerced)."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any

from fastapi import Depends, Request
from pydantic import AfterValidator, BeforeValidator, ConfigDict, Field

from engram.bootstrap import Container
from engram.domain.access import Principal
from engram.domain.policies import MAX_CONTENT_CHARS, MAX_TAG_CHARS, MAX_TAGS, instant_in_range
from engram.entrypoints.http.auth import require
from engram.entrypoints.http.state import container_of
from engram.services.library.memories import WriteResult

Read = Annotated[Principal, Depends(require("memory:read"))]
Write = Annotated[Principal, Depends(require("memory:write"))]
Export = Annotated[Principal, Depends(require("export:read"))]
CacheRead = Annotated[Principal, Depends(require("cache:read"))]
CacheWrite = Annotated[Principal, Depends(require("cache:write"))]


def _c(request: Request) -> Container:
    return container_of(request)


# Request bodies are strict: a JSON value of the wrong type is a 422, never coerced (0 is not false,
# true is not 1, a number is not a date), so the OpenAPI document says exactly what is accepted.
STRICT = ConfigDict(extra="forbid", strict=True)


def _not_a_number(value: Any) -> Any:
    if isinstance(value, (int, float)):
        raise ValueError("must be an ISO 8601 date-time string")
    return value


# Strict mode would refuse the ISO string itself (it wants a datetime object); numbers are refused above.
IsoDatetime = Annotated[datetime, Field(strict=False), BeforeValidator(_not_a_number), AfterValidator(instant_in_range)]


def _whole_number(value: Any) -> Any:
    return int(value) if isinstance(value, float) and value.is_integer() else value


# JSON Schema's "integer" includes 6.0; strict mode would refuse it. A string or 6.5 is still refused.
# The bounds go before the validator, or the OpenAPI document loses them (minimum/maximum).
WHOLE = BeforeValidator(_whole_number)
Text = Annotated[str, Field(min_length=1, max_length=MAX_CONTENT_CHARS, pattern=r"\S")]
TagList = Annotated[list[Annotated[str, Field(max_length=MAX_TAG_CHARS)]], Field(max_length=MAX_TAGS)]


def write_body(result: WriteResult) -> dict[str, Any]:
    """The body of a memory write: the memory, what happened, and the version it superseded."""
    return {
        "memory": result.memory.model_dump(mode="json"),
        "created": result.created,
        "action": result.action,
        "reason": result.reason,
        "superseded": result.previous.model_dump(mode="json") if result.previous else None,
    }
