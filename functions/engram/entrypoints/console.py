"""What every `engram` command shares: the settings from its flags, and a progress bar."""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any, TextIO

from pydantic import ValidationError

from engram.domain.errors import InvalidInput
from engram.entrypoints.logs import configure_logging
from engram.settings import ENV_PREFIX, Settings, load_settings


class Progress:
    """A one-line progress bar on stderr (plain lines when stderr is not a terminal)."""

    def __init__(self, total: int, label: str, stream: TextIO | None = None) -> None:
        self.total = max(total, 0)
        self.done = 0
        self.label = label
        self.stream = stream or sys.stderr
        self.started = time.monotonic()
        self._last_line = -1.0

    def __call__(self, n: int = 1) -> None:
        self.done += n
        now = time.monotonic()
        tty = self.stream.isatty()
        if tty or now - self._last_line >= 2 or self.done >= self.total:
            self._last_line = now
            pct = 100.0 * self.done / self.total if self.total else 100.0
            width = 30
            filled = int(width * pct / 100)
            rate = self.done / max(now - self.started, 1e-6)
            bar = "#" * filled + "." * (width - filled)
            line = f"{self.label} [{bar}] {self.done}/{self.total} ({pct:.0f}%, {rate:.0f}/s)"
            self.stream.write(("\r" + line) if tty else (line + "\n"))
            self.stream.flush()

    def close(self) -> None:
        if self.stream.isatty():
            self.stream.write("\n")


def settings_from(args: argparse.Namespace) -> Settings:
    overrides: dict[str, Any] = {}
    for name in ("host", "port", "data_dir"):
        value = getattr(args, name, None)
        if value is not None:
            overrides[name] = value
    try:
        settings = load_settings(**overrides)
    except ValidationError as exc:  # a bad ENGRAM_* variable or flag: one line per setting, no traceback
        raise InvalidInput(_invalid_settings(exc, overrides)) from exc
    configure_logging(settings.log_level)
    return settings


def _invalid_settings(exc: ValidationError, flags: dict[str, Any]) -> str:
    """Which settings are invalid and why, named as the user set them (``--port`` or ``ENGRAM_PORT``);
    the values are left out (a setting may be a secret)."""
    lines = []
    for error in exc.errors():
        field = str(error["loc"][0]) if error["loc"] else ""
        where = f"--{field.replace('_', '-')}" if field in flags else f"{ENV_PREFIX}{field.upper()}"
        lines.append(f"{where}: {error['msg']}" if field else str(error["msg"]))
    return "invalid settings: " + "; ".join(lines)
