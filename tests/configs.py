"""Service configs at the setting defaults: ``engram/settings.py`` is their one source, so a test
builds one the way bootstrap does (``bootstrap/configs.py``) and changes only what it is about."""

from __future__ import annotations

from dataclasses import replace
from typing import Any, TypeVar

from engram.bootstrap.configs import by_type
from engram.settings import Settings

C = TypeVar("C")

# The defaults as written in Settings (no environment, no .env file read).
DEFAULTS = Settings.model_construct()


def config(cls: type[C], **overrides: Any) -> C:
    """The config ``cls`` mapped from ``DEFAULTS`` with ``overrides`` replaced."""
    built: C = by_type()[cls](DEFAULTS)
    return replace(built, **overrides)  # type: ignore[type-var]
