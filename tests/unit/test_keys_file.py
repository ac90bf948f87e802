"""The keys file: every key states its scopes; nothing is implied."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from engram.bootstrap import load_keys_file
from engram.domain.access import KeyRing
from engram.domain.errors import InvalidInput

SECRET = "ek_secret_value_never_shown_1"


def _write(tmp_path: Path, entries: object) -> Path:
    path = tmp_path / "keys.json"
    path.write_text(json.dumps(entries), encoding="utf-8")
    return path


def test_an_empty_scope_list_grants_nothing(tmp_path: Path) -> None:
    # Given a key whose scopes are an empty list
    path = _write(tmp_path, [{"name": "idle", "key": SECRET, "namespace": "n", "scopes": []}])
    # When it authenticates
    principal = KeyRing(load_keys_file(path)).authenticate(SECRET)
    # Then it may do nothing at all
    assert principal.scopes == frozenset()
    assert not any(principal.allows(s) for s in ("admin", "memory:read", "chat:proxy", "export:read"))


def test_a_missing_scopes_field_is_refused_naming_the_key_not_its_secret(tmp_path: Path) -> None:
    # Given a key without a scopes field
    path = _write(tmp_path, [{"name": "phone", "key": SECRET, "namespace": "n"}])
    # When the file is loaded, Then loading fails with the key's name and without its secret
    with pytest.raises(InvalidInput) as err:
        load_keys_file(path)
    assert "'phone'" in err.value.message and "scopes" in err.value.message
    assert SECRET not in err.value.message and err.value.code == "missing_scopes"


@pytest.mark.parametrize("scopes", ["*", None, [1], {"admin": True}])
def test_scopes_must_be_a_list_of_strings(tmp_path: Path, scopes: object) -> None:
    path = _write(tmp_path, [{"name": "odd", "key": SECRET, "namespace": "n", "scopes": scopes}])
    with pytest.raises(InvalidInput) as err:
        load_keys_file(path)
    assert "'odd'" in err.value.message and SECRET not in err.value.message


def test_a_key_may_set_its_own_rate_limits(tmp_path: Path) -> None:
    # Given a key with its own limits and one without
    path = _write(
        tmp_path,
        [
            {"name": "phone", "key": SECRET, "namespace": "n", "scopes": ["chat:proxy"], "chat_per_minute": 10},
            {"name": "script", "key": SECRET + "2", "namespace": "n", "scopes": ["*"], "requests_per_minute": 0},
        ],
    )
    ring = KeyRing(load_keys_file(path))
    # Then each principal carries its own (None: the default from settings; 0: no limit)
    phone, script = ring.authenticate(SECRET), ring.authenticate(SECRET + "2")
    assert (phone.chat_per_minute, phone.requests_per_minute) == (10, None)
    assert (script.chat_per_minute, script.requests_per_minute) == (None, 0)
    assert phone.rate_key and phone.rate_key != script.rate_key and SECRET not in phone.rate_key


@pytest.mark.parametrize("limit", [-1, "10", 1.5, True])
def test_rate_limits_must_be_whole_numbers(tmp_path: Path, limit: object) -> None:
    path = _write(tmp_path, [{"name": "odd", "key": SECRET, "namespace": "n", "scopes": [], "chat_per_minute": limit}])
    with pytest.raises(InvalidInput) as err:
        load_keys_file(path)
    assert "'odd'" in err.value.message and "chat_per_minute" in err.value.message


def test_a_key_may_name_the_agent_its_chats_come_from(tmp_path: Path) -> None:
    # Given a key whose client cannot send the x-engram-agent header, and one without an agent
    path = _write(
        tmp_path,
        [
            {"name": "cc", "key": SECRET, "namespace": "n", "scopes": ["chat:proxy"], "agent": " claude-code "},
            {"name": "plain", "key": SECRET + "2", "namespace": "n", "scopes": []},
        ],
    )
    ring = KeyRing(load_keys_file(path))
    # Then each principal carries its key's agent (trimmed), or none
    assert ring.authenticate(SECRET).agent == "claude-code"
    assert ring.authenticate(SECRET + "2").agent is None


@pytest.mark.parametrize("agent", ["", "has space", "x" * 65, 7, ["codex"]])
def test_an_invalid_agent_is_refused_naming_the_key(tmp_path: Path, agent: object) -> None:
    path = _write(tmp_path, [{"name": "cc", "key": SECRET, "namespace": "n", "scopes": [], "agent": agent}])
    with pytest.raises(InvalidInput) as err:
        load_keys_file(path)
    assert "'cc'" in err.value.message and err.value.code == "invalid_agent_id"
    assert SECRET not in err.value.message
