"""How MCP calls written for Aelios and cf-agent-memory are read (entrypoints/http/mcp/compat.py): pure
translation of names and values; the replay tests drive the same through the server."""

from __future__ import annotations

import pytest
from engram.entrypoints.http.mcp.compat import dotted_key, translate
from mcp.server.mcpserver.exceptions import ToolError

LIST = frozenset({"types", "status", "layer", "tag", "pinned", "fact_key", "limit", "cursor", "offset"})
UPSERT = frozenset({"fact_key", "content", "type", "layer", "importance", "confidence", "pinned", "tags"})


@pytest.mark.parametrize(
    ("theirs", "ours"),
    [
        ("project.database", "project:database"),
        ("user.pref.editor", "user:pref.editor"),
        ("home:city", "home:city"),  # already Engram's form
        ("database", "database"),  # no category: the fact-key rule refuses it with its own message
    ],
)
def test_cf_dotted_keys_become_category_slug(theirs: str, ours: str) -> None:
    assert dotted_key(theirs) == ours


def test_their_names_and_value_forms_become_engrams() -> None:
    # cf-agent-memory's memory_list and Aelios' (a single type and status)
    assert translate("memory_list", {"kind": "fact", "layer": "L2", "offset": 4}, LIST) == {
        "types": ["fact"],
        "layer": "event",
        "offset": 4,
    }
    assert translate("memory_list", {"type": "fact", "status": "active"}, LIST) == {
        "types": ["fact"],
        "status": ["active"],
    }
    # a list stays a list; Engram's own names pass as they are
    assert translate("memory_list", {"types": ["fact", "event"], "status": ["all"]}, LIST)["types"] == ["fact", "event"]
    assert translate("memory_upsert", {"key": "project.db", "kind": "task", "content": "x"}, UPSERT) == {
        "fact_key": "project:db",
        "type": "task",
        "content": "x",
    }


def test_an_unknown_argument_is_refused_with_the_accepted_ones() -> None:
    with pytest.raises(ToolError) as caught:
        translate("memory_list", {"types": ["fact"], "sort": "new", "page": 2}, LIST)
    message = str(caught.value)
    assert "'page', 'sort'" in message and "cursor, fact_key, layer" in message and "kind (= types)" in message


def test_one_argument_under_two_names_is_refused() -> None:
    with pytest.raises(ToolError, match="either type or kind"):
        translate("memory_upsert", {"type": "fact", "kind": "task", "fact_key": "a:b", "content": "x"}, UPSERT)


def test_value_forms_are_read_only_where_they_mean_the_same() -> None:
    # reminder_list's status is one value of its own: it is not turned into a list
    assert translate("reminder_list", {"status": "missed"}, frozenset({"status"})) == {"status": "missed"}
