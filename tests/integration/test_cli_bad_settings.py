"""`engram` with an invalid setting: one line naming it as the user set it, exit 2, no traceback."""

from __future__ import annotations

from pathlib import Path

import pytest
from engram.entrypoints import cli


def test_a_bad_environment_variable_is_named_and_nothing_starts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("ENGRAM_PORT", "abc")
    monkeypatch.setenv("ENGRAM_EMBEDDER", "none")
    code = cli.main(["serve", "--data-dir", str(tmp_path / "data")])
    err = capsys.readouterr().err
    assert code == 2
    assert err.startswith("engram: invalid settings: ENGRAM_PORT: Input should be a valid integer")
    assert "Traceback" not in err and not (tmp_path / "data").exists()


def test_a_bad_flag_is_named_as_the_flag(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("ENGRAM_PORT", raising=False)
    code = cli.main(["serve", "--port", "70000", "--data-dir", str(tmp_path / "data")])
    assert code == 2
    assert (
        capsys.readouterr().err.strip()
        == "engram: invalid settings: --port: Input should be less than or equal to 65535"
    )


def test_a_bad_secret_is_named_without_its_value(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # Any field's value stays out of the message: a setting may be a key.
    monkeypatch.setenv("ENGRAM_PORT", "sk-not-a-port-1234")
    assert cli.main(["settings"]) == 2
    err = capsys.readouterr().err
    assert "ENGRAM_PORT" in err and "sk-not-a-port-1234" not in err
