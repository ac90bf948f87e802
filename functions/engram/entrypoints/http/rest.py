"""The REST API (`/v1/...`): a thin layer over the services. Handlers are sync (run in a thread pool).

This module serves message ingest, the counts and the cache (two lazy route groups). Every other concern
has a module of its own (``public``: `/` and `/health`; ``curation``, ``memories``, ``notes``,
``candidates``, ``transfer``, ``threads``, ``reminders``, ``skills``, ``chat`` and ``chat_routes``,
``job_routes``, ``admin``, ``mcp``), all mounted in one place and order: ``routes.py``. What the REST
modules share: ``rest_shared``.
"""

from __future__ import annotations

import json
import logging
from datetime import datetime, timedelta
from typing import Annotated, Any

from fastapi import APIRouter, FastAPI, Request
from pydantic import BaseModel, Field

from engram.bootstrap import Container
from engram.domain.errors import InvalidInput, NotFound
from engram.domain.policies import CACHE_KEY_MAX_CHARS, CACHE_VALUE_MAX_BYTES
from engram.entrypoints.http.rest_shared import STRICT, WHOLE, CacheRead, CacheWrite, IsoDatetime, Read, Write, _c
from engram.services.library.messages import MessageIn

log = logging.getLogger(__name__)

_counts = APIRouter()  # message ingest and stats
_cache = APIRouter()


class MessageRequest(MessageIn):
    model_config = STRICT

    created_at: IsoDatetime | None = None


class IngestRequest(BaseModel):
    model_config = STRICT

    messages: list[MessageRequest] = Field(min_length=1, max_length=1000)


class CacheRequest(BaseModel):
    model_config = STRICT

    value: Any
    ttl_seconds: Annotated[int, Field(ge=1, le=365 * 86400), WHOLE] | None = None


# -- message ingest, stats -------------------------------------------------------------------
@_counts.post("/ingest/messages", tags=["messages"])
def ingest_messages(request: Request, body: IngestRequest, who: Write) -> dict[str, Any]:
    """Store raw chat messages for the extraction job; each message is stored once (send `id` or
    `created_at` to keep identical repeats apart)."""
    return dict(_c(request).messages.ingest(who.namespace, body.messages))


@_counts.get("/stats", tags=["stats"])
def stats(request: Request, who: Read) -> dict[str, Any]:
    return dict(_c(request).stats.counts(who.namespace))


# -- cache ------------------------------------------------------------------------------------
@_cache.get("/cache/{key}", tags=["cache"])
def get_cache(request: Request, key: str, who: CacheRead) -> dict[str, Any]:
    value = _c(request).store.get_cache(who.namespace, key)
    if value is None:
        raise NotFound(f"no cache entry {key!r}")
    return {"key": key, "value": value}


@_cache.put("/cache/{key}", tags=["cache"])
def put_cache(request: Request, key: str, body: CacheRequest, who: CacheWrite) -> dict[str, Any]:
    container = _c(request)
    if len(key) > CACHE_KEY_MAX_CHARS:
        raise InvalidInput(f"cache keys have at most {CACHE_KEY_MAX_CHARS} characters", code="cache_key_too_long")
    if len(json.dumps(body.value, ensure_ascii=False).encode()) > CACHE_VALUE_MAX_BYTES:
        raise InvalidInput(
            f"cache values have at most {CACHE_VALUE_MAX_BYTES} bytes as JSON", code="cache_value_too_large"
        )
    expires: datetime | None = None
    if body.ttl_seconds:
        expires = container.clock.now() + timedelta(seconds=body.ttl_seconds)
    container.store.put_cache(who.namespace, key, body.value, expires_at=expires)
    return {"key": key, "value": body.value, "expires_at": expires.isoformat() if expires else None}


@_cache.delete("/cache/{key}", tags=["cache"])
def delete_cache(request: Request, key: str, who: CacheWrite) -> dict[str, Any]:
    _c(request).store.delete_cache(who.namespace, key)
    return {"deleted": key}


def mount(app: FastAPI, container: Container) -> None:
    """Message ingest and the counts."""
    app.include_router(_counts, prefix="/v1")


def mount_cache(app: FastAPI, container: Container) -> None:
    app.include_router(_cache, prefix="/v1")
