"""Server-kept history, the pure parts (services/chat/history.py): placing it on each wire, which stored rows
make turns, and the opt-in from the keys file. The gateway tests drive the rest."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from engram.bootstrap.keys import load_keys_file
from engram.domain.errors import InvalidInput
from engram.domain.models import Message
from engram.services.chat.history import History, Turn, _cut, _turns, place_history

T0 = datetime(2026, 5, 1, 9, 0, tzinfo=UTC)


def msg(i: int, role: str, text: str, error: str | None = None) -> Message:
    return Message(id=f"m{i:02d}", namespace="n", role=role, content=text, created_at=T0 + timedelta(minutes=i),
                   error=error)  # fmt: skip


def test_turns_are_answered_user_messages_only() -> None:
    rows = [
        msg(0, "assistant", "a stray reply"),
        msg(1, "user", "q1"),
        msg(2, "assistant", "a1"),
        msg(3, "user", "q2", error="upstream_timeout: ..."),  # never answered
        msg(4, "user", "q2 again"),
        msg(5, "assistant", "a2"),
        msg(6, "user", "q3"),  # the newest, not answered yet
    ]
    assert [(t.user.content, t.assistant.content) for t in _turns(rows)] == [("q1", "a1"), ("q2 again", "a2")]


HISTORY = History(summary="Lin moved to Oslo.", turns=[Turn(msg(1, "user", "q1"), msg(2, "assistant", "a1"))],
                  rotate_due=False)  # fmt: skip


def test_on_the_openai_wire_the_summary_follows_the_clients_system_and_the_turns_come_before_the_new_one() -> None:
    body = {"model": "m", "messages": [{"role": "system", "content": "Be kind."}, {"role": "user", "content": "q2"}]}
    out = place_history("openai", body, HISTORY)
    assert [(m["role"], m["content"]) for m in out["messages"]] == [
        ("system", "Be kind."),
        ("system", "Summary of the earlier conversation in this thread:\nLin moved to Oslo."),
        ("user", "q1"),
        ("assistant", "a1"),
        ("user", "q2"),
    ]
    assert len(body["messages"]) == 2  # the client's body is left as it was


def test_on_the_anthropic_wire_the_summary_is_the_last_system_block() -> None:
    body = {"model": "m", "system": "Be kind.", "messages": [{"role": "user", "content": "q2"}]}
    out = place_history("anthropic", body, HISTORY)
    assert out["system"][0]["text"] == "Be kind." and out["system"][1]["text"].endswith("Oslo.")
    assert [m["role"] for m in out["messages"]] == ["user", "assistant", "user"]
    assert place_history("anthropic", body, History(summary="", turns=[], rotate_due=False)) is body


def test_a_summary_is_cut_at_a_sentence_end() -> None:
    assert _cut("One. Two. Three.", 12) == "One. Two."
    assert _cut("short", 12) == "short"


def test_the_keys_file_opts_a_key_into_server_kept_history(tmp_path: Path) -> None:
    path = tmp_path / "keys.json"
    entry = {"key": "ek_partition_client", "namespace": "me", "scopes": ["chat:proxy"], "server_history": True}
    path.write_text(json.dumps([entry, {**entry, "key": "ek_other_client_1", "server_history": False}]))
    keys = load_keys_file(path)
    assert [k.server_history for k in keys] == [True, False]
    path.write_text(json.dumps([{**entry, "server_history": "yes"}]))
    with pytest.raises(InvalidInput, match="server_history"):
        load_keys_file(path)
