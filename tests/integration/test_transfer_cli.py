"""`engram export` and `engram import` against a real SQLite data directory."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from engram.bootstrap import build_container
from engram.entrypoints import cli
from engram.services.library.memories import MemoryWrite
from engram.settings import Settings


@pytest.fixture
def data_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("ENGRAM_EMBEDDER", "none")
    path = tmp_path / "data"
    container = build_container(Settings(data_dir=path, embedder="none"))
    try:
        container.memories.write("default", MemoryWrite(content="Lives in Lisbon", fact_key="home:city"))
        container.memories.write("default", MemoryWrite(content="Prefers tea"))
        container.notes.add_precious("default", "A quote to keep")
    finally:
        container.close()
    return path


def test_export_then_import_twice_with_progress_and_counts(
    data_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Given an export file written by the CLI
    file = tmp_path / "export.json"
    assert cli.main(["export", str(file), "--data-dir", str(data_dir)]) == 0
    exported = json.loads(file.read_text())
    assert len(exported["memories"]) == 2
    capsys.readouterr()
    # When it is imported into another namespace, twice
    first = cli.main(["import", str(file), "--namespace", "bob", "--data-dir", str(data_dir)])
    out, err = capsys.readouterr()
    second = cli.main(["import", str(file), "--namespace", "bob", "--data-dir", str(data_dir)])
    out2, _ = capsys.readouterr()
    # Then the first creates every row and shows progress, the second skips them all
    assert first == 0 and "import into bob: created 2 memories, 1 precious; skipped nothing; refused nothing" in out
    assert "import bob [" in err and "3/3" in err and "embed bob [" in err
    assert second == 0 and "created nothing; skipped 2 memories, 1 precious; refused nothing" in out2
    assert out2.count("skipped memories[") == 2


def test_import_reports_refused_rows_and_exits_1(data_dir: Path, tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    file = tmp_path / "bad.json"
    t = "2026-01-01T00:00:00Z"
    file.write_text(json.dumps({"memories": [{"content": "", "created_at": t, "updated_at": t}]}))
    assert cli.main(["import", str(file), "--data-dir", str(data_dir)]) == 1
    out = capsys.readouterr().out
    assert "refused 1 memories" in out and "refused memories[0]: empty_content: content must not be empty" in out
    # A file that is not an export at all changes nothing and exits 2
    file.write_text("[1, 2]")
    assert cli.main(["import", str(file), "--data-dir", str(data_dir)]) == 2
    assert "is not an Engram export" in capsys.readouterr().err


def test_export_writes_the_namespace_owner_only(data_dir: Path, tmp_path: Path) -> None:
    # Given a loose umask, When the CLI exports the namespace to a file
    import os
    import stat

    file = tmp_path / "export-private.json"
    old = os.umask(0o022)
    try:
        assert cli.main(["export", str(file), "--data-dir", str(data_dir)]) == 0
    finally:
        os.umask(old)
    # Then the file is readable by its owner only (0600), and holds the export
    assert stat.S_IMODE(file.stat().st_mode) == 0o600
    assert len(json.loads(file.read_text())["memories"]) == 2
