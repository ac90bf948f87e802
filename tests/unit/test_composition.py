"""The composition root (bootstrap/__init__.py): overrides are typed, and a part left out is built."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from engram.bootstrap import Overrides, build_container
from engram.settings import Settings

from tests.fakes.chat_model import ScriptedChatModel
from tests.fakes.clock import ManualClock


def _settings(tmp_path: Path) -> Settings:
    return Settings(store="memory", search="memory", embedder="none", data_dir=tmp_path, scheduler_enabled=False)


def test_a_mistyped_override_is_an_error_not_silently_ignored() -> None:
    # Given a test that means to replace the clock but misspells it / Then building fails at once
    wrong: dict[str, Any] = {"clok": ManualClock()}
    with pytest.raises(TypeError, match="clok"):
        Overrides(**wrong)


def test_overrides_replace_parts_and_none_means_none_where_it_can(tmp_path: Path) -> None:
    # Given a clock and an extraction model, and explicitly no dreaming model
    clock, model = ManualClock(), ScriptedChatModel()
    container = build_container(_settings(tmp_path), Overrides(clock=clock, extract_model=model, dream_model=None))
    try:
        # Then the container uses them, and dreaming is not configured
        assert container.clock is clock
        assert container.extraction.configured and not container.dreaming.configured
        assert container.embedder is None
    finally:
        container.close()
