"""Engram's own namespace ("__engram__": runtime settings, panel-logout revocations, the session salt)
is reserved: no key may be given it, and no route acts in it (README, section Keys)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
from engram.bootstrap import load_keys_file
from engram.domain.access import ApiKey, KeyRing, _digest
from engram.domain.errors import InvalidInput
from engram.services.runtime_settings import SYSTEM_NAMESPACE

from tests.conftest import OWNER_KEY, EngramServer

SECRET = "ek_internal_ns_cache_writer_1"


def test_a_keys_file_key_in_the_internal_namespace_is_refused_naming_the_key(tmp_path: Path) -> None:
    # Given a keys file with a cache:write key in Engram's own namespace
    path = tmp_path / "keys.json"
    path.write_text(
        json.dumps([{"name": "sneaky", "key": SECRET, "namespace": SYSTEM_NAMESPACE, "scopes": ["cache:write"]}])
    )
    # When it is loaded, Then loading fails naming the key (not its secret) and the namespace
    with pytest.raises(InvalidInput) as err:
        load_keys_file(path)
    assert err.value.code == "reserved_namespace"
    assert "'sneaky'" in err.value.message and SYSTEM_NAMESPACE in err.value.message
    assert SECRET not in err.value.message


def test_no_route_acts_in_an_internal_namespace(make_server: Callable[..., EngramServer]) -> None:
    # Given a key ring that somehow holds a key in the internal namespace (built past the load check)
    smuggled = ApiKey(name="smuggled", namespace=SYSTEM_NAMESPACE, scopes=frozenset({"*"}), digest=_digest(SECRET))
    owner = ApiKey.create(OWNER_KEY, name="owner", namespace="alice", scopes=["*"])
    server = make_server(overrides={"keys": KeyRing([owner, smuggled])})
    with server.client(SECRET) as client:
        # When it writes the runtime settings through the cache, reads them, or calls MCP
        put = client.put("/v1/cache/runtime_settings", json={"value": {"top_k": 1}})
        get = client.get("/v1/cache/runtime_settings")
        mcp = client.post(
            "/mcp",
            json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
            headers={"accept": "application/json, text/event-stream"},
        )
    # Then every one is refused with 403 reserved_namespace, and nothing was written
    for response in (put, get, mcp):
        assert response.status_code == 403, response.text
        assert response.json()["error"]["code"] == "reserved_namespace"
    assert server.container.store.get_cache(SYSTEM_NAMESPACE, "runtime_settings") is None
    with server.client() as client:  # the owner key still works
        assert client.get("/v1/cache/anything").status_code in (200, 404)
