"""Regenerate the settings table in README.md from the Settings class (`python scripts/readme_settings.py`)."""

from __future__ import annotations

import contextlib
import io
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "functions"))

from engram.entrypoints.cli import main  # noqa: E402

MARK = "<!-- settings-table -->"


def table() -> str:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        main(["settings", "--markdown"])
    return out.getvalue().strip()


def render(readme: str) -> str:
    head, sep, _ = readme.partition(MARK)
    if not sep:
        raise SystemExit(f"README.md has no {MARK} marker")
    return f"{head}{MARK}\n{table()}\n"


if __name__ == "__main__":
    path = ROOT / "README.md"
    path.write_text(render(path.read_text(encoding="utf-8")), encoding="utf-8")
