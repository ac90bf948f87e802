"""Moving in from Aelios, Pawwake, mem0 and plain text: `engram import --from ...` on a real SQLite data
directory and `POST /v1/import?from=...` over HTTP, on the fixture files in tests/fixtures/moving_in
(malformed rows, duplicates, unknown fields). Dry run first, then a real run, then a re-run."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from engram.bootstrap import Overrides, build_container
from engram.domain.models import MemoryFilter
from engram.entrypoints import cli
from engram.settings import Settings

from tests.conftest import OTHER_KEY, EngramServer
from tests.fakes.chat_model import ScriptedChatModel

FIXTURES = Path(__file__).parent.parent / "fixtures" / "moving_in"


@pytest.fixture
def data_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("ENGRAM_EMBEDDER", "none")
    return tmp_path / "data"


def _memories(data_dir: Path, namespace: str = "default") -> dict[str, Any]:
    container = build_container(Settings(data_dir=data_dir, embedder="none"))
    try:
        return {m.content: m for m in container.store.iter_memories(namespace)}
    finally:
        container.close()


def _run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    code = cli.main(["import", *args])
    return code, capsys.readouterr().out


def _counts(out: str) -> str:
    """The counts line of a report, without the dry-run prefix."""
    line = next(x for x in out.splitlines() if "import into" in x)
    return line.split(": ", 1)[1] if ": " in line and "would have" not in line else line.split("would have: ")[1]


@pytest.mark.parametrize("fmt", ["aelios", "pawwake", "mem0", "text"])
def test_dry_run_then_real_run_then_rerun_report_the_same_counts(
    fmt: str, data_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    file = (
        FIXTURES / {"aelios": "aelios.json", "pawwake": "pawwake.json", "mem0": "mem0.json", "text": "notes.txt"}[fmt]
    )
    common = ["--from", fmt, str(file), "--data-dir", str(data_dir)]
    # Given a dry run: it reports and writes nothing
    dry_code, dry = _run(capsys, *common, "--dry-run")
    assert "dry run (nothing written)" in dry and dry_code == 1  # every fixture has a refused row
    assert _memories(data_dir) == {}
    # When the real run follows, then a second one
    real_code, real = _run(capsys, *common)
    again_code, again = _run(capsys, *common)
    # Then the real run did what the dry run said, and the re-run adds nothing
    assert _counts(real) == _counts(dry), (dry, real)
    created = _counts(real).split(";")[0]
    assert created.startswith("created ") and created != "created nothing"
    assert _counts(again).startswith("created nothing; skipped ")
    assert real_code == again_code == 1
    # Every refusal names where in the file and why
    refused = [line for line in real.splitlines() if line.strip().startswith("refused ")]
    assert refused and all(": " in line for line in refused)


def test_aelios_fields_are_mapped_and_version_links_kept(data_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out = _run(capsys, "--from", "aelios", str(FIXTURES / "aelios.json"), "--data-dir", str(data_dir))
    stored = _memories(data_dir)
    allergy = stored["I am allergic to peanuts"]
    assert (allergy.type, allergy.fact_key, allergy.importance, allergy.confidence) == (
        "boundary",
        "health:allergy",
        0.9,
        0.95,
    )
    assert allergy.pinned and allergy.tags == ("health",) and allergy.external_id == "aelios:m1"
    assert allergy.created_at.isoformat() == "2025-03-01T08:00:00+00:00" and allergy.source == "import:aelios"
    porto, lisbon = stored["Lives in Porto"], stored["Lives in Lisbon"]
    assert porto.status == "superseded" and porto.superseded_by_id == lisbon.id and lisbon.supersedes_id == porto.id
    assert lisbon.created_at.isoformat() == "2025-01-01T10:00:00+00:00"  # a zone-less time is UTC
    assert stored["Likes jazz on Sundays"].type == "fact"  # unknown type: kept as a fact, reported
    assert "Works as a nurse" in stored  # an unreadable timestamp drops the timestamp, not the memory
    # The report lists the refused rows with their place in the file, and the fields left behind
    assert "refused data[7]: invalid_row: a row must be an object" in out
    assert "refused data[5] aelios-m6: empty_content" in out
    assert "refused data[6] aelios-m7: invalid_row: importance" in out
    assert "skipped data[4] aelios-m1: already_present: a memory with identical content is present" in out
    assert "metadata.mood (1)" in out and "embedding_model (1)" in out and "created_at (not a date-time) (1)" in out
    assert "metadata.type=whimsy" in out and code == 1


def test_pawwake_memories_layers_merges_and_conversations(data_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _, out = _run(capsys, "--from", "pawwake", str(FIXTURES / "pawwake.json"), "--data-dir", str(data_dir))
    stored = _memories(data_dir)
    tea = stored["Prefers green tea in the morning"]
    assert (tea.importance, tea.layer, tea.status, tea.external_id) == (0.6, "fragment", "active", "pawwake:1")
    hike = stored["Sintra hike\nWent hiking in Sintra with Ana"]  # the title is kept as the first line
    assert (hike.layer, hike.type, hike.importance) == ("event", "event", 0.8)
    assert "event_date:2025-04-12" in hike.tags
    birthday = stored["Birthday on 3 May"]
    assert (birthday.layer, birthday.importance, birthday.external_id) == ("core", 1.0, "seed-birthday")
    assert birthday.remind_at is not None and birthday.remind_at.isoformat() == "2026-05-02T09:00:00+00:00"
    # Memories merged into another one are superseded by it; inactive ones are archived
    for merged in ("birthday is in May", "born on the 3rd"):
        assert stored[merged].status == "superseded" and stored[merged].superseded_by_id == birthday.id
    assert "refused memories[6]: invalid_field: importance must be 1..10, got 42" in out
    assert "refused memories[7]: invalid_field: layer must be 1 (fragment), 2 (event) or 3 (core), got 9" in out
    assert "refused conversations[0].messages[2] pawwake-msg-102: invalid_row: role" in out
    assert "embedding (1)" in out and "conversations.title (1)" in out
    assert "(top level) version" not in out  # describes the file, loses nothing
    container = build_container(Settings(data_dir=data_dir, embedder="none"))
    try:
        messages = container.store.list_messages("default", limit=10)
    finally:
        container.close()
    assert [(m.conversation_id, m.role, m.content) for m in messages] == [
        ("s-1", "user", "good morning"),
        ("s-1", "assistant", "Morning! Tea?"),
        ("s-2", "user", "a flat message row"),
    ]


def test_mem0_user_ids_become_namespaces_only_when_asked(data_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    file = str(FIXTURES / "mem0.json")
    _, out = _run(capsys, "--from", "mem0", file, "--data-dir", str(data_dir), "--namespace", "me")
    assert set(_memories(data_dir, "me")) == {"Is vegetarian", "Plays the cello", "Training for a marathon"}
    assert _memories(data_dir, "me")["Is vegetarian"].tags == ("food",)
    assert "refused results[3]: invalid_field: the memory text is missing or not text" in out
    assert "user_id" not in out.split("dropped")[1]  # user_id is used for namespaces on request, not "dropped"
    # When asked, each row goes to its user's namespace
    _, split = _run(capsys, "--from", "mem0", file, "--data-dir", str(data_dir), "--user-namespaces")
    assert set(_memories(data_dir, "alice")) == {"Is vegetarian", "Training for a marathon"}
    assert set(_memories(data_dir, "bob")) == {"Plays the cello"}
    assert "import into alice: created 2 memories; skipped 1 memories; refused 1 memories" in split
    assert "import into bob: created 1 memories" in split


def test_text_scoring_asks_the_model_in_batches_and_keeps_defaults_when_it_fails(tmp_path: Path) -> None:
    import asyncio

    from engram.domain.errors import UpstreamUnavailable
    from engram.services.transfer.other_formats import convert
    from engram.services.transfer.other_systems import SCORE_BATCH, score

    lines = [f"note number {n}" for n in range(SCORE_BATCH + 3)]
    conv = convert("text", "\n".join(lines))
    model = ScriptedChatModel().script(
        json.dumps({"items": [{"i": 0, "type": "boundary", "importance": 0.95}, {"i": 1, "type": "nonsense"}]}),
        UpstreamUnavailable("down"),
    )
    done: list[int] = []
    asyncio.run(score(conv, model, done.append))
    assert len(model.calls) == 2 and done == [SCORE_BATCH, 3]
    assert "note number 0" in model.calls[0].user and "note number 20" in model.calls[1].user
    first, second = conv.rows[0].data, conv.rows[1].data
    assert (first["type"], first["importance"]) == ("boundary", 0.95)
    assert "type" not in second  # an unknown type keeps the default
    assert conv.scoring == {"scored": 2, "failed": SCORE_BATCH - 2 + 3}


def test_a_fenced_scoring_answer_is_read_like_a_bare_one() -> None:
    import asyncio

    from engram.services.transfer.other_formats import convert
    from engram.services.transfer.other_systems import score

    # Given a model that answers the scoring call in a code fence after a sentence
    conv = convert("text", "I never eat peanuts\nI like tea")
    answer = {"items": [{"i": 0, "type": "boundary", "importance": 0.9}, {"i": 1, "type": "preference"}]}
    model = ScriptedChatModel().script(f"Sure:\n```json\n{json.dumps(answer)}\n```")
    # When the text is scored
    asyncio.run(score(conv, model))
    # Then both lines are scored from the fenced JSON
    assert conv.scoring == {"scored": 2, "failed": 0}
    assert (conv.rows[0].data["type"], conv.rows[0].data["importance"]) == ("boundary", 0.9)


def test_cli_score_runs_the_extraction_model(
    data_dir: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    model = ScriptedChatModel().script(json.dumps({"items": [{"i": 0, "type": "boundary", "importance": 1.0}]}))
    real_build = build_container

    def with_model(settings: Settings, overrides: Overrides | None = None) -> Any:
        return real_build(settings, replace(overrides or Overrides(), extract_model=model))

    monkeypatch.setattr("engram.bootstrap.build_container", with_model)
    code = cli.main(["import", "--from", "text", str(FIXTURES / "notes.txt"), "--score", "--data-dir", str(data_dir)])
    out, err = capsys.readouterr()
    # Five non-empty lines in one batch: one scored, the rest (a duplicate, a too-long line) keep defaults
    assert "scored 1 memories; 4 kept the default type and importance" in out and code == 1
    assert len(model.calls) == 1 and "score default [" in err and "5/5" in err
    assert _memories(data_dir)["I am allergic to peanuts"].type == "boundary"


def test_bad_files_change_nothing(data_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    assert cli.main(["import", "--from", "aelios", str(bad), "--data-dir", str(data_dir)]) == 2
    assert "not a aelios export: not JSON" in capsys.readouterr().err
    bad.write_text(json.dumps({"something": "else"}))
    assert cli.main(["import", "--from", "mem0", str(bad), "--data-dir", str(data_dir)]) == 2
    assert "expected a list of rows or an object with 'results' / 'memories'" in capsys.readouterr().err
    assert cli.main(["import", "--from", "aelios", str(FIXTURES / "aelios.json"), "--score"]) == 2


# -- REST ----------------------------------------------------------------------------------------------
def test_rest_import_from_each_format_dry_run_real_rerun(server: EngramServer) -> None:
    with server.client(OTHER_KEY) as bob:
        for fmt, file in (("aelios", "aelios.json"), ("pawwake", "pawwake.json"), ("mem0", "mem0.json")):
            body = json.loads((FIXTURES / file).read_text())
            dry = bob.post(f"/v1/import?from={fmt}&dry_run=true", json=body)
            assert dry.status_code == 200, dry.text
            real = bob.post(f"/v1/import?from={fmt}", json=body).json()
            again = bob.post(f"/v1/import?from={fmt}", json=body).json()
            dry_report = dry.json()
            assert dry_report["dry_run"] is True and real["dry_run"] is False
            for outcome in ("created", "skipped", "refused"):
                assert dry_report[outcome] == real[outcome], (fmt, outcome)
            assert sum(again["created"].values()) == 0 and sum(again["skipped"].values()) == sum(
                real["created"].values()
            ) + sum(real["skipped"].values())
            assert real["format"] == fmt and real["dropped_fields"]
            assert all(p.get("source") for p in real["problems"])
        text = (FIXTURES / "notes.txt").read_bytes()
        resp = bob.post("/v1/import?from=text", content=text, headers={"content-type": "text/plain"})
        assert resp.status_code == 200 and resp.json()["created"]["memories"] == 2  # peanuts is there already
        # Wrong bodies are a 400 naming the problem; options that do not apply too
        assert bob.post("/v1/import?from=mem0", json={"x": 1}).status_code == 400
        assert bob.post("/v1/import?from=aelios&score=true", json={"data": []}).status_code == 400
        assert bob.post("/v1/import?from=text", json={"data": []}).status_code == 400
        assert bob.post("/v1/import?from=nope", json={}).status_code == 422
    # Nothing reached another namespace
    assert server.container.store.list_memories("alice", MemoryFilter()).items == []


def test_rest_text_score_uses_the_extraction_model(make_server: Callable[..., EngramServer]) -> None:
    model = ScriptedChatModel().script(json.dumps({"items": [{"i": 1, "type": "preference", "importance": 0.7}]}))
    server = make_server(embedder="none", overrides={"extract_model": model})
    with server.client(OTHER_KEY) as bob:
        resp = bob.post("/v1/import?from=text&score=true", json="First line\nI like short answers\n")
    report = resp.json()
    assert resp.status_code == 200 and report["scoring"] == {"scored": 1, "failed": 1}
    stored = {m.content: m for m in server.container.store.iter_memories("bob")}
    assert (stored["I like short answers"].type, stored["I like short answers"].importance) == ("preference", 0.7)
    assert stored["First line"].type == "fact"
