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
