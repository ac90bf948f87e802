"""API keys, scopes and the principal a request acts as (README, section Keys)."""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Iterable
from dataclasses import dataclass

from engram.domain.errors import Forbidden, InvalidInput, Unauthorized
from engram.domain.skills import agent_id

SCOPES: frozenset[str] = frozenset(
    {"chat:proxy", "memory:read", "memory:write", "export:read", "cache:read", "cache:write", "debug:read", "admin"}
)
ALL = "*"

# Namespaces whose name starts with this are Engram's own (runtime settings, panel-logout revocations,
# the session salt live in "__engram__"): no key may be given one, and no request may act in one
# (README, section Keys).
INTERNAL_NAMESPACE_PREFIX = "__"


def is_internal_namespace(namespace: str) -> bool:
    return namespace.startswith(INTERNAL_NAMESPACE_PREFIX)


def refuse_internal(principal: Principal) -> Principal:
    """The auth layer's check on every route (REST, chat, panel, MCP): no request acts in an internal
    namespace, whatever key or session it carries."""
    if is_internal_namespace(principal.namespace):
        raise Forbidden(
            f"namespace {principal.namespace!r} is internal to Engram: no key may address it",
            code="reserved_namespace",
        )
    return principal


@dataclass(frozen=True)
class Principal:
    """Who a request acts for: one namespace, a set of scopes; and its key's rate limits.

    ``rate_key`` names the key's request counters (not its secret); a limit of ``None`` means the
    configured default, 0 no limit. ``agent``: the agent id the key's chats are from when the client
    sends no ``x-engram-agent`` header (README, "Skills for coding agents").
    """

    namespace: str
    scopes: frozenset[str]
    key_name: str
    rate_key: str = ""
    chat_per_minute: int | None = None
    requests_per_minute: int | None = None
    agent: str | None = None
    server_history: bool = False  # its chats get their thread's history from the server (services/chat/history.py)

    def allows(self, scope: str) -> bool:
        if ALL in self.scopes or scope in self.scopes:
            return True
        family = scope.split(":", 1)[0]
        return f"{family}:*" in self.scopes

    def require(self, scope: str) -> None:
        if not self.allows(scope):
            raise Forbidden(f"this key lacks the '{scope}' scope", code="missing_scope")


@dataclass(frozen=True)
class ApiKey:
    name: str
    namespace: str
    scopes: frozenset[str]
    digest: bytes  # sha256 of the secret; the secret itself is not kept
    chat_per_minute: int | None = None
    requests_per_minute: int | None = None
    agent: str | None = None
    server_history: bool = False

    @staticmethod
    def create(
        secret: str,
        *,
        name: str,
        namespace: str,
        scopes: Iterable[str],
        chat_per_minute: int | None = None,
        requests_per_minute: int | None = None,
        agent: str | None = None,
        server_history: bool = False,
    ) -> ApiKey:
        if len(secret) < 8:
            raise InvalidInput(f"key {name!r} is shorter than 8 characters", code="weak_key")
        scope_set = frozenset(scopes)
        unknown = {s for s in scope_set if s != ALL and s not in SCOPES and not s.endswith(":*")}
        if unknown:
            raise InvalidInput(f"key {name!r} has unknown scopes: {sorted(unknown)}", code="unknown_scope")
        if not namespace or len(namespace) > 128:
            raise InvalidInput(f"key {name!r} needs a namespace of 1-128 characters", code="bad_namespace")
        if is_internal_namespace(namespace):
            raise InvalidInput(
                f"key {name!r}: namespace {namespace!r} is reserved for Engram's own data "
                f"(names starting with {INTERNAL_NAMESPACE_PREFIX!r}); give the key another namespace",
                code="reserved_namespace",
            )
        for field, limit in (("chat_per_minute", chat_per_minute), ("requests_per_minute", requests_per_minute)):
            if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 0):
                raise InvalidInput(f"key {name!r}: {field} must be a whole number >= 0 (0: no limit)", code="bad_limit")
        if agent is not None:
            if not isinstance(agent, str):
                raise InvalidInput(f"key {name!r}: agent must be a string", code="invalid_agent_id")
            try:
                agent = agent_id(agent)
            except InvalidInput as exc:
                raise InvalidInput(f"key {name!r}: {exc.message}", code=exc.code) from exc
        if not isinstance(server_history, bool):
            raise InvalidInput(f"key {name!r}: server_history must be true or false", code="bad_server_history")
        return ApiKey(
            server_history=server_history,
            name=name,
            namespace=namespace,
            scopes=scope_set,
            digest=_digest(secret),
            chat_per_minute=chat_per_minute,
            requests_per_minute=requests_per_minute,
            agent=agent,
        )

    @property
    def rate_key(self) -> str:
        """A stable id for the key's counters: a hash of the digest, so stored counters reveal no secret."""
        return hashlib.sha256(b"engram-rate\x00" + self.digest).hexdigest()[:24]


def _digest(secret: str) -> bytes:
    return hashlib.sha256(secret.encode()).digest()


class KeyRing:
    """Verifies bearer tokens in constant time against every configured key."""

    def __init__(self, keys: Iterable[ApiKey]) -> None:
        self._keys = tuple(keys)
        digests = [k.digest for k in self._keys]
        if len(set(digests)) != len(digests):
            raise InvalidInput("two configured keys have the same secret", code="duplicate_key")
        # Built once: a Principal is frozen, so each request of a key gets the same one (no per-request
        # hashing of its rate key). A key taken out of the configuration is a new ring: refused at once.
        self._principals = tuple((key.digest, _principal(key)) for key in self._keys)

    def __len__(self) -> int:
        return len(self._keys)

    def authenticate(self, token: str | None) -> Principal:
        if not token:
            raise Unauthorized("missing API key: send 'Authorization: Bearer <key>' or 'x-api-key'", code="missing_key")
        digest = _digest(token)
        match: Principal | None = None
        for key_digest, principal in self._principals:  # all of them: timing does not reveal which matched
            if hmac.compare_digest(key_digest, digest):
                match = principal
        if match is None:
            raise Unauthorized("invalid API key", code="invalid_key")
        return match


def _principal(key: ApiKey) -> Principal:
    return Principal(
        namespace=key.namespace,
        scopes=key.scopes,
        key_name=key.name,
        rate_key=key.rate_key,
        chat_per_minute=key.chat_per_minute,
        requests_per_minute=key.requests_per_minute,
        agent=key.agent,
        server_history=key.server_history,
    )
