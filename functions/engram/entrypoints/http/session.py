"""Admin panel sessions: password login -> a signed, HttpOnly, SameSite=Strict cookie (12 h).

The signing key is derived from the admin password and a random salt kept in the store, so every
process of a deployment accepts the same cookies, a changed password ends every session, and a copy
of the store alone cannot forge one. A cookie acts as the owner (default namespace, every scope).
State-changing cookie requests must come from the panel's own origin (CSRF defence on top of
SameSite=Strict). Logout revokes the session id until it would have expired anyway.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import logging
import secrets
import threading
from collections import OrderedDict, deque
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlsplit

from starlette.requests import HTTPConnection
from starlette.responses import Response

from engram.domain.access import ALL, Principal
from engram.domain.errors import Forbidden
from engram.domain.once import Once
from engram.domain.ports import Clock, KeyValueRows
from engram.entrypoints.http.proxies import TrustedProxies
from engram.services.runtime_settings import SYSTEM_NAMESPACE

log = logging.getLogger(__name__)

COOKIE_NAME = "engram_admin"
SESSION_SECONDS = 12 * 3600
SALT_KEY = "admin_session_salt"
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


class AdminSessions:
    """Issues and verifies admin session cookies."""

    def __init__(
        self,
        password: str | None,
        store: KeyValueRows,
        namespace: str,
        *,
        clock: Clock,
        proxies: TrustedProxies | None = None,
    ) -> None:
        self._password = password or None
        self.proxies = proxies or TrustedProxies()
        self._store = store
        self.namespace = namespace
        self._clock = clock  # cookie expiry and revocations (docs/ARCHITECTURE.md, "One clock")
        self._key = Once(self._new_signing_key)  # the salt is read (or written) by the first cookie

    @property
    def configured(self) -> bool:
        return self._password is not None

    # -- password -------------------------------------------------------------------------------
    def check_password(self, candidate: str) -> bool:
        if self._password is None:
            return False
        # Compare digests so the comparison time depends on neither length nor content.
        expected = hashlib.sha256(self._password.encode()).digest()
        given = hashlib.sha256(candidate.encode()).digest()
        return hmac.compare_digest(expected, given)

    # -- tokens ---------------------------------------------------------------------------------
    def issue(self) -> tuple[str, int]:
        """A new session token and its expiry (unix seconds)."""
        expires = int(self._clock.now().timestamp()) + SESSION_SECONDS
        payload = f"{_b64(secrets.token_bytes(16))}.{expires}"
        return f"{payload}.{self._sign(payload)}", expires

    def verify(self, token: str | None) -> dict[str, Any] | None:
        """The session (``sid``, ``expires``) of a valid, unexpired, unrevoked token; else None."""
        if not token or not self.configured or len(token) > 256:
            return None
        parts = token.split(".")
        if len(parts) != 3 or not parts[1].isdigit():
            return None
        sid, expires_text, signature = parts
        if not hmac.compare_digest(self._sign(f"{sid}.{expires_text}"), signature):
            return None
        expires = int(expires_text)
        if expires <= self._clock.now().timestamp():
            return None
        try:
            if self._store.get_cache(SYSTEM_NAMESPACE, f"admin_revoked:{sid}") is not None:
                return None
        except Exception:  # the store is down: refuse rather than accept a possibly revoked cookie
            log.exception("could not check the admin session revocation list")
            return None
        return {"sid": sid, "expires": expires}

    def revoke(self, token: str | None) -> None:
        session = self.verify(token)
        if session is None:
            return
        until = datetime.fromtimestamp(session["expires"], tz=UTC)
        self._store.put_cache(SYSTEM_NAMESPACE, f"admin_revoked:{session['sid']}", True, expires_at=until)

    def _sign(self, payload: str) -> str:
        return _b64(hmac.new(self._signing_key(), payload.encode(), hashlib.sha256).digest())

    def _signing_key(self) -> bytes:
        return self._key.get()

    def _new_signing_key(self) -> bytes:
        secret = b"engram-admin-session\x00" + (self._password or "").encode()
        return hmac.new(self._load_salt(), secret, hashlib.sha256).digest()

    def _load_salt(self) -> bytes:
        try:
            stored = self._store.get_cache(SYSTEM_NAMESPACE, SALT_KEY)
            if isinstance(stored, str) and len(stored) >= 32:
                return stored.encode()
            salt = _b64(secrets.token_bytes(32))
            self._store.put_cache(SYSTEM_NAMESPACE, SALT_KEY, salt)
            # Read back: when two processes raced, both use whichever write landed last.
            again = self._store.get_cache(SYSTEM_NAMESPACE, SALT_KEY)
            return (again if isinstance(again, str) else salt).encode()
        except Exception:  # no store: sessions last as long as this process
            log.exception("could not load the admin session salt; using a per-process salt")
            return secrets.token_bytes(32)

    # -- requests -------------------------------------------------------------------------------
    def principal(self, request: HTTPConnection) -> Principal | None:
        """The owner principal for a request carrying a valid session cookie, else None.

        Raises Forbidden for a state-changing request whose Origin is not this host.
        """
        if self.verify(request.cookies.get(COOKIE_NAME)) is None:
            return None
        if request.scope.get("method", "GET") not in SAFE_METHODS and not same_origin(request, self.proxies):
            raise Forbidden("cross-origin request refused", code="bad_origin")
        return Principal(namespace=self.namespace, scopes=frozenset({ALL}), key_name="admin-panel")

    def set_cookie(self, request: HTTPConnection, response: Response, token: str) -> None:
        response.set_cookie(
            COOKIE_NAME,
            token,
            max_age=SESSION_SECONDS,
            path="/",
            httponly=True,
            samesite="strict",
            secure=is_https(request, self.proxies),
        )

    def clear_cookie(self, request: HTTPConnection, response: Response) -> None:
        response.delete_cookie(
            COOKIE_NAME, path="/", httponly=True, samesite="strict", secure=is_https(request, self.proxies)
        )


def is_https(request: HTTPConnection, proxies: TrustedProxies) -> bool:
    return proxies.scheme(request) == "https"


def same_origin(request: HTTPConnection, proxies: TrustedProxies) -> bool:
    """True when the request's Origin (or, lacking one, Referer) names the host it was sent to
    (``X-Forwarded-Host`` counts only from a trusted proxy)."""
    source = request.headers.get("origin") or request.headers.get("referer")
    if not source or source == "null":
        return False
    claimed = urlsplit(source).netloc.lower()
    hosts = {request.headers.get("host", "").lower(), proxies.host(request)}
    hosts.discard("")
    return bool(claimed) and claimed in hosts


class LoginLimiter:
    """At most ``attempts`` login attempts per ``window`` seconds per client address.

    Counted in this process, where a successful login clears its address's count, and — with ``shared``
    (``RequestLimits.login``: the DynamoDB counter on AWS) — in one counter every process and Lambda
    instance shares, so a new instance does not allow five more guesses.
    The window is short, so a lockout ends a minute after the guessing stops.
    """

    def __init__(
        self,
        attempts: int = 5,
        window: float = 60.0,
        *,
        clock: Clock,
        max_clients: int = 10_000,
        shared: Callable[[str], float | None] | None = None,
        shared_reset: Callable[[str], None] | None = None,
    ) -> None:
        self._shared = shared
        self._shared_reset = shared_reset
        self._attempts = attempts
        self._window = window
        self._max_clients = max_clients
        self._clock = clock  # the window follows the container's clock
        self._hits: OrderedDict[str, deque[float]] = OrderedDict()
        self._lock = threading.Lock()

    def hit(self, client: str) -> float | None:
        """Record an attempt; returns None when allowed, else the seconds until the next is allowed."""
        now = self._clock.now().timestamp()
        with self._lock:
            hits = self._hits.pop(client, None) or deque()
            while hits and now - hits[0] >= self._window:
                hits.popleft()
            self._hits[client] = hits
            while len(self._hits) > self._max_clients:
                self._hits.popitem(last=False)
            if len(hits) >= self._attempts:
                return max(1.0, self._window - (now - hits[0]))
            hits.append(now)
        if self._shared is not None:
            wait = self._shared(client)
            if wait is not None:
                return max(1.0, wait)
        return None

    def reset(self, client: str) -> None:
        """Forget the attempts of ``client`` (after a successful login), here and in the shared counter."""
        with self._lock:
            self._hits.pop(client, None)
        if self._shared_reset is not None:
            self._shared_reset(client)
