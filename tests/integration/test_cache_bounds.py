"""The REST cache has bounds: keys of at most 256 characters, values of at most 64 KiB as JSON."""

from __future__ import annotations

import httpx
from engram.domain.policies import CACHE_KEY_MAX_CHARS, CACHE_VALUE_MAX_BYTES


def test_a_long_key_or_a_large_value_is_refused_and_not_stored(owner: httpx.Client) -> None:
    long_key = owner.put("/v1/cache/" + "k" * (CACHE_KEY_MAX_CHARS + 1), json={"value": 1})
    big_value = owner.put("/v1/cache/big", json={"value": "x" * CACHE_VALUE_MAX_BYTES})
    assert long_key.status_code == 400 and long_key.json()["error"]["code"] == "cache_key_too_long"
    assert big_value.status_code == 400 and big_value.json()["error"]["code"] == "cache_value_too_large"
    assert owner.get("/v1/cache/big").status_code == 404
    assert owner.put("/v1/cache/" + "k" * CACHE_KEY_MAX_CHARS, json={"value": "x" * 1000}).status_code == 200
