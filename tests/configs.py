"""Service configs at the setting defaults: ``engram/settings.py`` is their one source, so a test
builds one the way bootstrap does (``from_settings``) and changes only what it is about."""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Protocol, TypeVar

from engram.settings import Settings

C = TypeVar("C")

# The defaults as written in Settings (no environment, no .env file read).
DEFAULTS = Settings.model_construct()


class _FromSettings(Protocol[C]):  # type: ignore[misc]
    def from_settings(self, settings: Any) -> C: ...


def config(cls: _FromSettings[C], **overrides: Any) -> C:
    """``cls.from_settings(DEFAULTS)`` with ``overrides`` replaced."""
    return replace(cls.from_settings(DEFAULTS), **overrides)  # type: ignore[type-var]
