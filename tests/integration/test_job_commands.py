"""`engram extract | dream | cleanup` against a real SQLite data directory."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from engram.bootstrap import Overrides, build_container
from engram.domain.models import Message, new_id
from engram.entrypoints import cli, job_commands
from engram.entrypoints.console import settings_from
from engram.settings import Settings

from tests.fakes.chat_model import ScriptedChatModel


@pytest.fixture
def data_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    for name in ("ENGRAM_EXTRACT_MODEL", "ENGRAM_CHAT_MODEL", "ENGRAM_UPSTREAM_BASE_URL", "ENGRAM_DREAM_MODEL"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("ENGRAM_EMBEDDER", "none")
    return tmp_path / "data"


def seed(data_dir: Path, *messages: tuple[str, datetime]) -> None:
    container = build_container(Settings(data_dir=data_dir, embedder="none"))
    try:
        for content, at in messages:
            container.store.insert_message(
                Message(id=new_id("msg"), namespace="default", role="user", content=content, created_at=at)
            )
    finally:
        container.close()


@pytest.fixture
def scripted(monkeypatch: pytest.MonkeyPatch) -> ScriptedChatModel:
    """Build the CLI's container with the scripted model in place of the upstream one."""
    model = ScriptedChatModel()

    def container(args: Any) -> Any:
        return build_container(settings_from(args), Overrides(extract_model=model, dream_model=model))

    monkeypatch.setattr(job_commands, "_container", container)
    return model


def test_cleanup_prints_a_summary_and_deletes_old_rows(data_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # Given an old and a new message in the data directory
    now = datetime.now(UTC)
    seed(data_dir, ("old", now - timedelta(days=30)), ("new", now))
    # When `engram cleanup` runs
    code = cli.main(["cleanup", "--data-dir", str(data_dir)])
    # Then it prints what it deleted and exits 0
    out = capsys.readouterr().out
    assert code == 0 and "deleted 1 messages" in out
    # And with --json the full report is printed
    assert cli.main(["cleanup", "--data-dir", str(data_dir), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["job"] == "cleanup" and report["messages"] == 0 and report["namespaces"][0]["namespace"] == "default"


def test_extract_without_a_model_says_which_setting_is_missing(
    data_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    seed(data_dir, ("hello", datetime.now(UTC)))
    code = cli.main(["extract", "--data-dir", str(data_dir)])
    assert code == 2 and "ENGRAM_EXTRACT_MODEL" in capsys.readouterr().err


def test_extract_and_dream_with_a_model(
    data_dir: Path, scripted: ScriptedChatModel, capsys: pytest.CaptureFixture[str]
) -> None:
    # Given a message from a minute ago and one from yesterday (UTC)
    now = datetime.now(UTC)
    yesterday = (now - timedelta(days=1)).date().isoformat()
    seed(
        data_dir,
        ("I am a nurse in Leeds", now - timedelta(minutes=1)),
        ("We met at the lake", datetime.fromisoformat(f"{yesterday}T12:00:00+00:00")),
    )
    scripted.script(
        json.dumps(
            {
                "memories": [
                    {
                        "content": "The user is a nurse in Leeds",
                        "type": "fact",
                        "fact_key": "work:job",
                        "importance": 0.8,
                        "confidence": 0.9,
                        "tags": [],
                        "source_message_ids": [],
                    }
                ]
            }
        )
    )
    # When `engram extract` runs
    assert cli.main(["extract", "--data-dir", str(data_dir)]) == 0
    # Then it summarises what it did
    assert "1 created" in capsys.readouterr().out
    # When `engram dream` runs for yesterday, twice
    scripted.script(
        json.dumps(
            {
                "date": yesterday,
                "title": "Lake",
                "summary": "Met at the lake.",
                "sections": [],
                "important_excerpts": [],
                "memories_to_update": [],
                "memories_to_delete": [],
            }
        )
    )
    assert cli.main(["dream", "--data-dir", str(data_dir), "--date", yesterday]) == 0
    first = capsys.readouterr().out
    assert cli.main(["dream", "--data-dir", str(data_dir), "--date", yesterday]) == 0
    second = capsys.readouterr().out
    # Then the first dreams the day and the second finds it done
    assert f"dream {yesterday}: 1 done" in first and "1 already_done" in second
    assert len(scripted.calls) == 2


def test_job_commands_exist_when_run_as_a_module(data_dir: Path) -> None:
    import os
    import subprocess
    import sys

    # Given the CLI run as `python -m engram.entrypoints.cli` (not through the `engram` script)
    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "PYTHONPATH": str(root / "functions"), "ENGRAM_EMBEDDER": "none"}
    # When `cleanup` runs on a fresh data directory
    done = subprocess.run(
        [sys.executable, "-m", "engram.entrypoints.cli", "cleanup", "--data-dir", str(data_dir)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    # Then the job command is known and reports what it did
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("cleanup: deleted 0 messages")


def test_extract_backfill_reads_the_whole_history_with_progress(
    data_dir: Path, scripted: ScriptedChatModel, capsys: pytest.CaptureFixture[str]
) -> None:
    # Given three messages from last year (before any extraction window)
    now = datetime.now(UTC)
    seed(data_dir, *[(f"old fact {n}", now - timedelta(days=365 - n)) for n in range(3)])
    scripted.script(json.dumps({"memories": []}))
    # When `engram extract --backfill` runs
    assert cli.main(["extract", "--backfill", "--data-dir", str(data_dir)]) == 0
    out = capsys.readouterr()
    # Then it read all three in one batch, showed progress, and a second backfill reads nothing
    assert "backfill: 3 messages in 1 batches" in out.out and "backfill default" in out.err
    assert cli.main(["extract", "--backfill", "--data-dir", str(data_dir)]) == 0
    assert "backfill: 0 messages" in capsys.readouterr().out
    assert len(scripted.calls) == 1
