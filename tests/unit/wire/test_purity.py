"""The wire package is pure and the only home of wire-format reading (docs/ARCHITECTURE.md, "Layers")."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ENGRAM = Path(__file__).resolve().parents[3] / "functions" / "engram"
WIRE = ENGRAM / "domain" / "wire"
# What a translation may use: data, JSON, encodings, regular expressions, the wall clock for ``created`` stamps.
STDLIB = {"__future__", "base64", "binascii", "collections", "dataclasses", "json", "re", "time", "typing"}


def _imports(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
    return names


@pytest.mark.parametrize("path", sorted(WIRE.glob("*.py")), ids=lambda p: p.name)
def test_a_wire_module_imports_only_plain_stdlib_and_the_domain(path: Path) -> None:
    for name in _imports(path):
        top = name.split(".")[0]
        assert top in STDLIB or name.startswith("engram.domain"), f"{path.name} imports {name}"


def test_no_other_module_reads_message_content_or_tool_arguments_itself() -> None:
    # The copies this package replaced: text_of (three), the tool-argument parsers, the usage builders.
    copies = {"text_of", "_text_of", "_parse_args", "_arguments", "tool_arguments", "openai_usage", "_openai_usage"}
    found = [
        f"{path.relative_to(ENGRAM)}: {node.name}"
        for path in ENGRAM.rglob("*.py")
        if WIRE not in path.parents
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name in copies
    ]
    assert found == []
