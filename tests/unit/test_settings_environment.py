"""How Settings reads the environment: ``ENGRAM_<FIELD>``, any case, keyword values over it, each value
validated as the field's type with the field's errors (settings.py ``environment``; pydantic-settings'
environment source read the same before Engram stopped importing it)."""

from __future__ import annotations

from pathlib import Path

import pytest
from engram.settings import Settings, load_settings
from pydantic import ValidationError


@pytest.fixture(autouse=True)
def _no_engram_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    import os

    for name in list(os.environ):
        if name.upper().startswith("ENGRAM_"):
            monkeypatch.delenv(name)


def test_without_a_variable_every_field_has_its_default() -> None:
    # Given no ENGRAM_ variable / Then Settings() is the defaults, validated (the lists as lists)
    assert Settings() == Settings.model_validate({})
    assert Settings().port == 8787 and Settings().data_dir == Path("./.engram")
    assert Settings().mcp_allowed_hosts[:2] == ["localhost", "localhost:*"] and Settings().trusted_proxies == []


def test_each_field_is_read_from_its_prefixed_variable_as_its_type(monkeypatch: pytest.MonkeyPatch) -> None:
    # Given variables of a number, a flag, a path, a secret, a choice and an optional number
    monkeypatch.setenv("ENGRAM_PORT", "9000")
    monkeypatch.setenv("ENGRAM_MCP_ALLOW_QUERY_TOKEN", "yes")
    monkeypatch.setenv("ENGRAM_DATA_DIR", "/srv/engram")
    monkeypatch.setenv("ENGRAM_API_KEY", "ek_owner")
    monkeypatch.setenv("ENGRAM_STORE", "memory")
    monkeypatch.setenv("ENGRAM_RERANK_TIMEOUT_S", "1.5")
    # And variables that are not fields, or lack the prefix
    monkeypatch.setenv("ENGRAM_NOT_A_SETTING", "x")
    monkeypatch.setenv("PORT", "1")
    settings = Settings()
    # Then each field holds its variable's value as the field's type, and the rest is ignored
    assert (settings.port, settings.mcp_allow_query_token, settings.data_dir) == (9000, True, Path("/srv/engram"))
    assert settings.api_key is not None and settings.api_key.get_secret_value() == "ek_owner"
    assert (settings.store, settings.rerank_timeout_s) == ("memory", 1.5)
    assert not hasattr(settings, "not_a_setting")


def test_names_are_compared_in_any_case(monkeypatch: pytest.MonkeyPatch) -> None:
    # Given the prefix and the field name in lower or mixed case / Then each is read
    monkeypatch.setenv("engram_port", "9001")
    monkeypatch.setenv("Engram_Log_Level", "DEBUG")
    assert (Settings().port, Settings().log_level) == (9001, "DEBUG")


def test_the_lists_are_comma_separated_not_json(monkeypatch: pytest.MonkeyPatch) -> None:
    # Given the two list settings as comma-separated text, with spaces and an empty part
    monkeypatch.setenv("ENGRAM_MCP_ALLOWED_HOSTS", " a.example , *.b.example,, ")
    monkeypatch.setenv("ENGRAM_TRUSTED_PROXIES", "10.0.0.0/8,127.0.0.1")
    # Then each is split and stripped
    assert Settings().mcp_allowed_hosts == ["a.example", "*.b.example"]
    assert Settings().trusted_proxies == ["10.0.0.0/8", "127.0.0.1"]
    # Given JSON / Then it is not decoded: the text is split at its commas like any other
    monkeypatch.setenv("ENGRAM_MCP_ALLOWED_HOSTS", '["a","b"]')
    assert Settings().mcp_allowed_hosts == ['["a"', '"b"]']


def test_keyword_values_win_over_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    # Given a variable and a keyword value for the same field (a CLI flag, a test)
    monkeypatch.setenv("ENGRAM_PORT", "9000")
    monkeypatch.setenv("ENGRAM_HOST", "0.0.0.0")
    # Then the keyword wins, the other fields still come from the environment, unknown keywords are ignored
    settings = load_settings(port=9100, no_such_setting=1)
    assert (settings.port, settings.host) == (9100, "0.0.0.0")
    # And a keyword None wins too (an optional setting cleared)
    monkeypatch.setenv("ENGRAM_API_KEY", "ek_owner")
    assert Settings(api_key=None).api_key is None


def test_a_bad_value_is_the_fields_validation_error(monkeypatch: pytest.MonkeyPatch) -> None:
    # Given a variable that is not its field's type, one out of bounds and one not a choice
    monkeypatch.setenv("ENGRAM_PORT", "eighty")
    monkeypatch.setenv("ENGRAM_MAX_BODY_BYTES", "10")
    monkeypatch.setenv("ENGRAM_STORE", "postgres")
    monkeypatch.setenv("ENGRAM_TRUSTED_PROXIES", "10.0.0.0/8,not-a-network")
    # Then one validation error names each field, with the variable's text as its input
    with pytest.raises(ValidationError) as caught:
        Settings()
    errors = {error["loc"][0]: (error["type"], error["input"]) for error in caught.value.errors()}
    assert errors == {
        "port": ("int_parsing", "eighty"),
        "max_body_bytes": ("greater_than_equal", "10"),
        "store": ("literal_error", "postgres"),
        "trusted_proxies": ("value_error", "10.0.0.0/8,not-a-network"),
    }
    assert caught.value.title == "Settings"
    # And an empty variable is a value like any other (not the default)
    monkeypatch.delenv("ENGRAM_MAX_BODY_BYTES")
    monkeypatch.delenv("ENGRAM_STORE")
    monkeypatch.delenv("ENGRAM_TRUSTED_PROXIES")
    monkeypatch.setenv("ENGRAM_PORT", "")
    with pytest.raises(ValidationError, match="port"):
        Settings()


def test_a_copy_reads_no_environment_a_validated_dict_does(monkeypatch: pytest.MonkeyPatch) -> None:
    # Given settings built, then a variable set
    settings = Settings()
    monkeypatch.setenv("ENGRAM_PORT", "9000")
    # Then a copy with updates keeps what it is given
    assert settings.model_copy(update={"host": "::1"}).port == 8787
    # And validating a dict runs the constructor (pydantic calls a model's own __init__), environment included
    assert Settings.model_validate({"host": "::1"}).port == 9000
    assert Settings.model_construct().port == 8787  # the defaults, unvalidated (tests' DEFAULTS, infra)
