"""What the synth tests share."""

from __future__ import annotations

from pathlib import Path

import pytest

from layers.build import lock_path, stamp

LAYERS = Path(__file__).resolve().parents[2] / "layers"


@pytest.fixture(scope="module")
def layer_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    # A stand-in for layers/build (the real build is layers/build.py; tests need only the folder).
    root = tmp_path_factory.mktemp("layer")
    (root / "python").mkdir()
    (root / "python" / "placeholder.txt").write_text("layer contents are built by layers/build.py\n")
    # Stamped as built from each layer's current lock, so synth uses it as it is (no rebuild).
    for requirements in LAYERS.glob("requirements*.txt"):
        stamp(root, lock_path(requirements))
    return root
