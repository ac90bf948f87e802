"""The README's front door: two quick-start commands, a settings table that matches the code."""

from __future__ import annotations

import re
from pathlib import Path

from scripts.readme_settings import render

ROOT = Path(__file__).resolve().parents[2]


def test_settings_table_is_current() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert render(readme) == readme, "README settings table is stale: run `python scripts/readme_settings.py`"


def test_quick_start_has_the_two_commands_ci_uses() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    quick = readme.split("## Quick start", 1)[1].split("```", 2)[1]
    commands = [line.split("#")[0].strip() for line in quick.strip().splitlines()[1:] if line.strip()]
    assert commands == ["make run", "make test"]
    assert re.search(r"^make test\b", (ROOT / ".ci" / "run").read_text(), re.M)
