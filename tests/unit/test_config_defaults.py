"""Config defaults are written once, in engram/settings.py (docs/ARCHITECTURE.md, "Where each behaviour
lives"): no service config repeats a setting's default, and the AWS stack's context keys that the
functions read take the functions' defaults unless they are deliberate AWS defaults."""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import MISSING, fields
from pathlib import Path
from typing import Any

import pytest
from engram.bootstrap.configs import by_type
from engram.settings import Settings

DEFAULTS = Settings.model_construct()

BUILDERS: dict[type, Callable[[Any], Any]] = by_type()


class _Reading:
    """Settings as ``bootstrap/configs.py`` reads them: the defaults, one of them changed; names read are noted."""

    def __init__(self, changed: str | None = None) -> None:
        self._changed = changed
        self.read: set[str] = set()

    def __getattr__(self, name: str) -> Any:
        if name not in Settings.model_fields:
            raise AttributeError(name)
        self.read.add(name)
        value = getattr(DEFAULTS, name)
        return _other(value) if name == self._changed else value


def _other(value: Any) -> Any:
    """A different value of the same kind."""
    if isinstance(value, bool):
        return not value
    if isinstance(value, int | float):
        return value + 1
    if isinstance(value, str):
        return value + "-changed"
    raise AssertionError(f"no other value for {value!r}")


@pytest.mark.parametrize("cls", list(BUILDERS), ids=lambda c: c.__name__)
def test_no_field_fed_by_a_setting_has_a_default_of_its_own(cls: type) -> None:
    # Given the config as bootstrap builds it from the setting defaults
    build = BUILDERS[cls]
    reading = _Reading()
    base = build(reading)
    # When each setting it reads is changed in turn, Then the fields that follow it are found
    fed: set[str] = set()
    for name in sorted(reading.read):
        changed = build(_Reading(name))
        fed |= {f.name for f in fields(cls) if getattr(changed, f.name) != getattr(base, f.name)}
    assert fed, f"the mapping of {cls.__name__} reads no setting"
    # And none of those fields has a default: the value is written only in Settings
    defaulted = {f.name for f in fields(cls) if f.default is not MISSING or f.default_factory is not MISSING}
    assert fed & defaulted == set(), f"{cls.__name__} repeats the defaults of settings: {sorted(fed & defaulted)}"


# -- the AWS stack -------------------------------------------------------------------------------------
REPO = Path(__file__).resolve().parents[2]


def test_stack_context_keys_take_the_functions_defaults_unless_deliberately_different() -> None:
    pytest.importorskip("constructs")
    sys.path.insert(0, str(REPO))
    from infra.config import AWS_DEFAULTS, EngramConfig

    # Given every context key the functions read under the same name
    shared = [f for f in fields(EngramConfig) if f.name in Settings.model_fields]
    assert len(shared) > 10
    for f in shared:
        default = f.default if f.default_factory is MISSING else f.default_factory()
        if f.name in AWS_DEFAULTS:
            # Then a deliberate AWS default differs from the local one (else it should not be listed)
            assert default != getattr(DEFAULTS, f.name), f"{f.name} is listed in AWS_DEFAULTS but is the same"
        else:
            # Then the stack's default is the functions' own
            assert default == getattr(DEFAULTS, f.name), f"infra/config.py repeats {f.name} with another value"
