"""`/` and `/health`: served on every surface, without a key, and mounted by ``create_app`` (the Lambda Web
Adapter polls ``/health`` before the first request).

Neither route declares a response model (``response_model=None``; their 200 is documented as a JSON
object, as FastAPI documents a ``dict`` return): FastAPI builds a model field for a route's parameters and
its response model, and its first one imports ``pydantic.v1`` for a check (~25 ms of CPU), which init
then leaves to the first request that mounts a route group (bench/README.md, "Cold start per HTTP
function"). A chat turn, served ahead of the routes (``EngramApp``, app.py), never pays it.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, FastAPI, Request

from engram.bootstrap import Container
from engram.entrypoints.http.state import container_of

public = APIRouter()


def _json_object(title: str) -> dict[int | str, dict[str, Any]]:
    """The 200 of a route that returns a ``dict``, documented as FastAPI documents its response model."""
    schema = {"additionalProperties": True, "type": "object", "title": title}
    return {200: {"content": {"application/json": {"schema": schema}}}}


@public.head("/", include_in_schema=False, response_model=None)  # one operation in the document, answered to both
@public.get("/", tags=["health"], response_model=None, responses=_json_object("Response Root  Get"))
def root(request: Request) -> dict[str, Any]:
    """What this server is (no auth): clients probe the base URL before their first request (Claude
    Code sends `HEAD /`), and a person opening it in a browser finds the way on."""
    return {"name": "engram", "version": request.app.version, "docs": "/docs", "health": "/health", "admin": "/admin"}


@public.get("/health", tags=["health"], response_model=None, responses=_json_object("Response Health Health Get"))
def health(request: Request) -> dict[str, Any]:
    """Readiness (no auth, no network call: the Lambda Web Adapter polls it before the first request).
    Reports what this process last saw of the search index and the embedding model; `GET
    /v1/admin/health` checks the store and the index now."""
    container = container_of(request)
    checks = shallow_checks(container)
    degraded = checks["search"]["status"] == "unavailable" or checks["embedder"]["status"] == "reindex_needed"
    return {"status": "degraded" if degraded else "ok", "version": request.app.version, "checks": checks}


def shallow_checks(container: Container) -> dict[str, Any]:
    """The search index's and the embedder's last known state (``unknown`` until first used)."""
    checks: dict[str, Any] = {"search": container.index.describe()}
    if container.embedder is None:
        checks["embedder"] = {"status": "off", "detail": "keyword search only"}
    else:
        checks["embedder"] = {
            "status": container.embedder.state,
            "model": container.embedder.model_id,
            "dimension": container.embedder.dimension,
        }
    return checks


def mount(app: FastAPI, container: Container) -> None:
    """`/` and `/health`, on every surface (no key)."""
    app.include_router(public)
