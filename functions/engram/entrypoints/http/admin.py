"""The admin panel at `/admin`: static files (no build step), password login, runtime settings and reindex.

The panel itself calls the REST API (`/v1/...`) with its session cookie (see `session.py` and
`auth.py`). This module adds what only the panel needs: login/logout/session, `GET/PUT
/v1/admin/settings` (the allowlisted runtime settings), `GET/POST /v1/admin/reindex` (a rebuild of
the search index as a job, with progress; services/index/reindex.py) and `GET /v1/admin/health`. The
`/v1/admin/*` routes need the `admin` scope, which an admin session holds.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Annotated, Any

from fastapi import APIRouter, Depends, FastAPI, Query, Request, Response
from fastapi.responses import FileResponse, JSONResponse, RedirectResponse
from pydantic import BaseModel, ConfigDict, Field
from starlette.datastructures import MutableHeaders
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from engram import __version__
from engram.bootstrap import Container
from engram.domain.access import Principal
from engram.domain.errors import EngramError, Forbidden, InvalidInput, NotConfigured, Unauthorized
from engram.domain.models import IndexInfo
from engram.entrypoints.http.auth import require
from engram.entrypoints.http.errors import error_response
from engram.entrypoints.http.openapi import CONFLICT
from engram.entrypoints.http.openapi import error_response as documented
from engram.entrypoints.http.proxies import TrustedProxies
from engram.entrypoints.http.session import AdminSessions, LoginLimiter, same_origin

log = logging.getLogger(__name__)

STATIC_DIR = Path(__file__).parent / "static" / "admin"
CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
    "font-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
)

Admin = Annotated[Principal, Depends(require("admin"))]


class LoginRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    password: str = Field(max_length=1000)


class SettingsRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    values: dict[str, Any] = Field(
        min_length=1, description="Setting name -> new value; null resets it to the default."
    )


class AdminHeadersMiddleware:
    """Security headers on the panel and its API. Pure ASGI: other paths pass through untouched."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope.get("path", "") if scope["type"] == "http" else ""
        if not (path == "/admin" or path.startswith(("/admin/", "/v1/admin/"))):
            await self.app(scope, receive, send)
            return

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = MutableHeaders(scope=message)
                headers["content-security-policy"] = CSP
                headers["x-frame-options"] = "DENY"
                headers["x-content-type-options"] = "nosniff"
                headers["referrer-policy"] = "same-origin"
                headers["cache-control"] = "no-cache" if path.startswith("/admin/assets/") else "no-store"
            await send(message)

        await self.app(scope, receive, send_with_headers)


# Admin login attempts per client address and minute, in process and in the shared rate limiter.
LOGIN_ATTEMPTS = 5
LOGIN_WINDOW_S = 60


def mount(app: FastAPI, container: Container) -> None:
    """The panel's sessions (a panel cookie is checked on every route: auth.py) and its security headers,
    with ``create_app``; its routes are ``mount_routes``'."""
    settings = container.settings
    password = settings.admin_password.get_secret_value() if settings.admin_password else None
    proxies = TrustedProxies(settings.trusted_proxies)
    sessions = AdminSessions(
        password, container.store, settings.default_namespace, clock=container.clock, proxies=proxies
    )
    app.state.admin_sessions = sessions
    app.add_middleware(AdminHeadersMiddleware)


def mount_routes(app: FastAPI, container: Container) -> None:
    """The panel's routes and files and `/v1/admin`: a lazy route group (entrypoints/http/routes.py), mounted
    by the first request under `/admin` or `/v1/admin`; the sessions and the headers are ``mount``'s."""
    sessions: AdminSessions = app.state.admin_sessions
    limits = container.limits
    limiter = LoginLimiter(
        attempts=LOGIN_ATTEMPTS,
        window=LOGIN_WINDOW_S,
        clock=container.clock,
        shared=lambda client: limits.login(client, attempts=LOGIN_ATTEMPTS, window_seconds=LOGIN_WINDOW_S),
        shared_reset=lambda client: limits.login_succeeded(client, window_seconds=LOGIN_WINDOW_S),
    )
    app.include_router(_panel(sessions, sessions.proxies, limiter))
    app.include_router(_admin_api(container))
    app.mount("/admin/assets", StaticFiles(directory=STATIC_DIR / "assets"), name="admin-assets")


def _panel(sessions: AdminSessions, proxies: TrustedProxies, limiter: LoginLimiter) -> APIRouter:
    """The panel's page and its session: login, logout, whether this browser is logged in."""
    panel = APIRouter(include_in_schema=False)

    @panel.get("/admin")
    def admin_root() -> RedirectResponse:
        # Relative, so the panel also works under a path prefix (an API Gateway stage).
        return RedirectResponse("admin/", status_code=308)

    @panel.get("/admin/")
    def admin_index() -> FileResponse:
        return FileResponse(STATIC_DIR / "index.html", media_type="text/html")

    @panel.get("/admin/session")
    def admin_session(request: Request) -> dict[str, Any]:
        """Whether a password is configured and whether this browser is logged in."""
        from engram.entrypoints.http.session import COOKIE_NAME

        session = sessions.verify(request.cookies.get(COOKIE_NAME))
        return {
            "configured": sessions.configured,
            "authenticated": session is not None,
            "expires_at": session["expires"] if session else None,
            "namespace": sessions.namespace if session else None,
            "version": __version__,
        }

    @panel.post("/admin/login")
    def admin_login(request: Request, body: LoginRequest) -> Response:
        if not same_origin(request, proxies):
            return error_response(403, "cross-origin request refused", "permission_error", "bad_origin")
        client = proxies.client_ip(request)
        retry = limiter.hit(client)
        if retry is not None:
            response = error_response(
                429, "too many login attempts; wait a minute", "rate_limit_error", "login_rate_limited"
            )
            response.headers["retry-after"] = str(int(retry + 0.999))
            return response
        if not sessions.configured:
            raise NotConfigured(
                "the admin panel has no password: set ENGRAM_ADMIN_PASSWORD and restart", code="admin_password_missing"
            )
        if not sessions.check_password(body.password):
            log.warning("admin login failed from %s", client)
            raise Unauthorized("wrong password", code="wrong_password")
        limiter.reset(client)
        token, expires = sessions.issue()
        response = JSONResponse({"authenticated": True, "expires_at": expires, "namespace": sessions.namespace})
        sessions.set_cookie(request, response, token)
        return response

    @panel.post("/admin/logout")
    def admin_logout(request: Request) -> Response:
        from engram.entrypoints.http.session import COOKIE_NAME

        if not same_origin(request, proxies):
            return error_response(403, "cross-origin request refused", "permission_error", "bad_origin")
        sessions.revoke(request.cookies.get(COOKIE_NAME))
        response = JSONResponse({"authenticated": False})
        sessions.clear_cookie(request, response)
        return response

    return panel


def _admin_api(container: Container) -> APIRouter:
    """`/v1/admin/*`: runtime settings, the deep health check and reindex."""
    settings = container.settings
    api = APIRouter(prefix="/v1/admin", tags=["admin"])

    def require_owner(who: Principal, what: str) -> None:
        # Runtime settings and a full index rebuild act on every namespace: the owner's, not a tenant's.
        if who.namespace != settings.default_namespace:
            raise Forbidden(
                f"{what} applies to every namespace: only an admin key of the default namespace "
                f"({settings.default_namespace!r}) may do it",
                code="owner_only",
            )

    @api.get("/settings")
    def get_settings(request: Request, who: Admin) -> dict[str, Any]:
        """The runtime settings (global: every namespace uses them), with defaults, plus facts about this
        build and your namespace's index. Only the default namespace's admin may change them."""
        return {"items": container.runtime.describe(), "info": _info(container, who)}

    @api.put("/settings")
    def put_settings(request: Request, body: SettingsRequest, who: Admin) -> dict[str, Any]:
        """Change runtime settings (validated; all or nothing); they apply without a restart, to every
        namespace, so this needs an admin key of the default namespace (403 `owner_only` otherwise)."""
        require_owner(who, "changing runtime settings")
        if not body.values:
            raise InvalidInput("nothing to change: send {'values': {name: value}}", code="empty_settings")
        container.runtime.update(body.values)
        log.info("runtime settings changed: %s", sorted(body.values))
        return {"items": container.runtime.describe(), "info": _info(container, who)}

    @api.get(
        "/models",
        responses={
            502: documented("502", "The upstream did not answer with a model list."),
            503: documented("503", "No OpenAI-compatible upstream is configured."),
        },
    )
    async def provider_models(
        who: Admin, q: Annotated[str, Query(max_length=200, description="Only ids containing this text.")] = ""
    ) -> dict[str, Any]:
        """The models the OpenAI-compatible upstream offers (its `/models`), for the settings' model fields;
        `q` filters them (case aside). The client-facing `GET /v1/models` is unchanged: it lists only what
        the gateway accepts."""
        ids = await container.chat.provider_models()
        needle = q.strip().lower()
        return {"items": [i for i in ids if needle in i.lower()]}

    @api.get("/health")
    def deep_health(request: Request, response: Response, who: Admin) -> dict[str, Any]:
        """Check the store and the search index now (a network call each on AWS), the embedding model
        against the index, and whether index writes of your namespace wait for repair. 503 if one fails."""
        checks = _health_checks(container, who.namespace)
        ok = all(c["status"] in ("ok", "off", "pending") for c in checks.values())
        if not ok:
            response.status_code = 503
        return {"status": "ok" if ok else "degraded", "version": __version__, "checks": checks}

    @api.get("/reindex")
    def reindex_status(who: Admin) -> dict[str, Any]:
        """Progress of the latest reindex started from your namespace (kept in the store: every
        instance reports the same; another namespace's run is not shown)."""
        return dict(container.reindex.status(who.namespace))

    @api.post("/reindex", status_code=202, responses=CONFLICT)
    def reindex_start(who: Admin) -> dict[str, Any]:
        """Rebuild your namespace's search index entries (vectors and keywords) as a job (in process
        locally, on the jobs queue on AWS); poll `GET` for progress. After an embedding model change the
        whole index is rebuilt, which only the default namespace's admin may start (403 `owner_only`)."""
        from engram.bootstrap import index_model_mismatch

        if container.embedder is not None and index_model_mismatch(container):
            require_owner(who, "rebuilding the whole index (the embedding model changed)")
        return dict(container.reindex.start(who.namespace))

    return api


def _health_checks(container: Container, namespace: str) -> dict[str, Any]:
    """The store, the search index, the embedder against the index and pending index repair, checked now;
    a failed check is reported, never raised."""
    checks: dict[str, Any] = {}
    for name, probe in (("store", container.store.ping), ("search", container.index.ping)):
        try:
            probe()
            checks[name] = {"status": "ok"}
        except Exception as exc:  # reported, never raised
            checks[name] = {"status": "error", "error": getattr(exc, "code", type(exc).__name__)}
    embedder = container.embedder
    if embedder is None:
        checks["embedder"] = {"status": "off", "detail": "keyword search only"}
    else:
        try:
            embedder.matches_index  # noqa: B018 - asks the index now
        except Exception as exc:
            checks["embedder"] = {"status": "error", "error": getattr(exc, "code", type(exc).__name__)}
        else:
            checks["embedder"] = {"status": embedder.state, "model": embedder.model_id}
    try:
        checks["index_repair"] = {"status": container.upkeep.health(namespace).status}
    except Exception as exc:
        checks["index_repair"] = {"status": "error", "error": getattr(exc, "code", type(exc).__name__)}
    return checks


def _info(container: Container, who: Principal) -> dict[str, Any]:
    settings = container.settings
    try:
        index = container.index.info(who.namespace)  # counts of the caller's namespace only
    except EngramError:  # the index is away: the settings page still works
        index = IndexInfo()
    return {
        "version": __version__,
        "namespace": who.namespace,
        "store": settings.store,
        "search": settings.search,
        "embedder": container.embedder.model_id if container.embedder is not None else None,
        "index_model": index.model_id,
        "index_documents": index.documents,
        "index_vectors": index.vectors,
    }
