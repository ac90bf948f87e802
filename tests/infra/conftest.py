"""What the synth tests share."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(scope="module")
def layer_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    # A stand-in for layers/build (the real build is layers/build.py; tests need only the folder).
    root = tmp_path_factory.mktemp("layer")
    (root / "python").mkdir()
    (root / "python" / "placeholder.txt").write_text("layer contents are built by layers/build.py\n")
    return root
