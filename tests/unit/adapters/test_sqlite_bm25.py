"""SQLite keyword ranking: bm25() candidates re-scored with b = 0.3 match the in-memory reference BM25."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest
from engram.adapters.search.fts import varints
from engram.adapters.search.inmemory import InMemorySearchIndex
from engram.adapters.search.sqlite import SqliteSearchIndex
from engram.domain.models import IndexedDoc

T0 = datetime(2025, 1, 1, tzinfo=UTC)
DOCS = {
    "short": "peanut allergy",
    "long": "peanut butter toast every morning with coffee, then a walk in the park and emails until noon peanut",
    "other": "the dentist appointment is on friday",
    "mixed": "对花生过敏 peanut 过敏",
}


def fill(index: object) -> None:
    for mid, text in DOCS.items():
        index.upsert(IndexedDoc(memory_id=mid, namespace="a", text=text, type="fact", created_at=T0))  # type: ignore[attr-defined]


def test_varints_decode_sqlitevarints() -> None:
    # Given SQLite varints of 100000, 1, 0x7f and a 9-byte maximum
    blob = bytes.fromhex("868D20" + "01" + "7F" + "FF" * 8 + "FF")
    # Then they decode
    assert varints(blob) == [100000, 1, 127, 2**64 - 1]


@pytest.mark.parametrize("query", ["peanut", "peanut allergy", "过敏 peanut", "dentist friday"])
def test_sqlite_scores_equal_the_reference_bm25(tmp_path: Path, query: str) -> None:
    # Given the same documents in the SQLite index and the in-memory reference (both b = 0.3)
    sqlite, memory = SqliteSearchIndex(tmp_path / "e.db"), InMemorySearchIndex()
    fill(sqlite)
    fill(memory)
    # When searching, then the ranking and the scores agree
    got = [(h.memory_id, round(h.score, 6)) for h in sqlite.keyword_search("a", query)]
    want = [(h.memory_id, round(h.score, 6)) for h in memory.keyword_search("a", query)]
    assert got == want and got
    sqlite.close()


def test_length_normalization_is_milder_than_sqlite_default(tmp_path: Path) -> None:
    # Given one short memory that mentions peanuts once and a long one that mentions them twice
    mild, default = SqliteSearchIndex(tmp_path / "a.db"), SqliteSearchIndex(tmp_path / "b.db", bm25_b=0.75)
    fill(mild)
    fill(default)
    # When searching for peanuts
    mild_top = [h.memory_id for h in mild.keyword_search("a", "peanut")]
    default_top = [h.memory_id for h in default.keyword_search("a", "peanut")]
    # Then b = 0.3 lets the long memory's two mentions win; SQLite's b = 0.75 prefers the short one
    assert mild_top[0] == "long" and default_top[0] == "short"
    mild.close()
    default.close()
