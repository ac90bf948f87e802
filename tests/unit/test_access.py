"""Keys and scopes."""

from __future__ import annotations

import pytest
from engram.domain.access import ApiKey, KeyRing
from engram.domain.errors import Forbidden, InvalidInput, Unauthorized


def _ring() -> KeyRing:
    return KeyRing(
        [
            ApiKey.create("owner-secret-1", name="owner", namespace="alice", scopes=["*"]),
            ApiKey.create("reader-secret-2", name="reader", namespace="alice", scopes=["memory:read"]),
            ApiKey.create("cache-secret-3", name="cache", namespace="bob", scopes=["cache:*"]),
        ]
    )


def test_authenticate_maps_a_key_to_its_namespace_and_scopes() -> None:
    principal = _ring().authenticate("reader-secret-2")
    assert (principal.namespace, principal.scopes, principal.key_name) == (
        "alice",
        frozenset({"memory:read"}),
        "reader",
    )


@pytest.mark.parametrize(("token", "code"), [(None, "missing_key"), ("", "missing_key"), ("nope-nope", "invalid_key")])
def test_missing_or_wrong_token_is_unauthorized(token: str | None, code: str) -> None:
    with pytest.raises(Unauthorized) as err:
        _ring().authenticate(token)
    assert err.value.code == code


def test_scopes_wildcards_and_refusals() -> None:
    ring = _ring()
    assert ring.authenticate("owner-secret-1").allows("export:read")
    cache = ring.authenticate("cache-secret-3")
    assert cache.allows("cache:write") and not cache.allows("memory:read")
    with pytest.raises(Forbidden) as err:
        ring.authenticate("reader-secret-2").require("memory:write")
    assert "memory:write" in err.value.message


def test_bad_key_definitions_are_refused() -> None:
    with pytest.raises(InvalidInput):
        ApiKey.create("short", name="x", namespace="n", scopes=["*"])
    with pytest.raises(InvalidInput):
        ApiKey.create("long-enough-secret", name="x", namespace="n", scopes=["memory:fly"])
    with pytest.raises(InvalidInput):
        KeyRing(
            [
                ApiKey.create("same-secret-1", name="a", namespace="n", scopes=["*"]),
                ApiKey.create("same-secret-1", name="b", namespace="m", scopes=["*"]),
            ]
        )


def test_the_secret_is_not_kept() -> None:
    key = ApiKey.create("owner-secret-1", name="owner", namespace="alice", scopes=["*"])
    assert "owner-secret-1" not in repr(key)
