"""``with_secret``: the fields of the deployment's secret applied to the settings, each validated as the
environment's would be (bootstrap/adapters.py)."""

from __future__ import annotations

from typing import Any

import pytest
from engram.adapters import secrets
from engram.bootstrap.adapters import with_secret
from engram.settings import Settings
from pydantic import SecretStr, ValidationError

ARN = "arn:aws:secretsmanager:us-east-1:000000000000:secret:engram"


def _secret(monkeypatch: pytest.MonkeyPatch, values: dict[str, Any]) -> None:
    def read(secret_arn: str, *, region: str | None = None, client: Any | None = None) -> dict[str, Any]:
        assert secret_arn == ARN
        return values

    monkeypatch.setattr(secrets, "read_secret_json", read)


def test_the_secrets_fields_are_applied_validated_and_the_settings_left_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    # Given settings from the environment and a secret with keys, a list field as text, and a stranger
    base = Settings(secret_arn=ARN, api_key="ek_from_the_environment_0001", max_body_bytes=4096)
    _secret(
        monkeypatch,
        {"api_key": "ek_from_the_secret_000000001", "trusted_proxies": "10.0.0.0/8, 127.0.0.1", "nope": "x"},
    )
    # When the secret is applied
    applied = with_secret(base)
    # Then its fields are the secret's, parsed as from the environment (a SecretStr, a comma list)
    assert isinstance(applied.api_key, SecretStr)
    assert applied.api_key.get_secret_value() == "ek_from_the_secret_000000001"
    assert applied.trusted_proxies == ["10.0.0.0/8", "127.0.0.1"]
    # And the other fields are kept, the unknown one ignored, the given settings unchanged
    assert applied.max_body_bytes == 4096 and not hasattr(applied, "nope")
    assert base.api_key is not None and base.api_key.get_secret_value() == "ek_from_the_environment_0001"
    assert base.trusted_proxies == []


def test_a_bad_value_in_the_secret_is_refused_as_in_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    _secret(monkeypatch, {"trusted_proxies": "not-an-address"})
    with pytest.raises(ValidationError, match="not an IP address or CIDR range"):
        with_secret(Settings(secret_arn=ARN))
    _secret(monkeypatch, {"max_body_bytes": "many"})
    with pytest.raises(ValidationError, match="max_body_bytes"):
        with_secret(Settings(secret_arn=ARN))


def test_no_secret_no_change() -> None:
    settings = Settings()
    assert with_secret(settings) is settings
