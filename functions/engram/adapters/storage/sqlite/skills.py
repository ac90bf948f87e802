"""``SkillStore`` in the SQLite store's file: the ``skills``, ``skill_versions`` and ``skill_vectors``
tables of ``schema.MIGRATIONS`` (9), through the store's connection plumbing and table mapping.

Skills lived in a ``skills.db`` of their own before; ``adopt_skills_db`` copies such a file in on first
start and renames it aside (``<name>.migrated``), never deleting it (README, "Skills").
"""

from __future__ import annotations

import contextlib
import logging
import sqlite3
from collections.abc import Sequence
from pathlib import Path

from engram.adapters.files import SQLITE_SIDE_FILES
from engram.adapters.storage.skills import pack_vector, unpack_vector
from engram.adapters.storage.sqlite.base import SqliteStoreBase
from engram.adapters.storage.sqlite.tables import SKILL_VERSIONS, SKILLS
from engram.domain.errors import Conflict
from engram.domain.skills import Skill, SkillVector, SkillVersion

log = logging.getLogger(__name__)

LEGACY_SKILLS_DB = "skills.db"  # where skills lived before migration 9, beside the store's file
_PAIRS_PER_QUERY = 400  # (name, version) pairs: two bound parameters each, under SQLite's limit
_INSERT_VECTOR = "INSERT INTO skill_vectors (namespace, name, version, model_id, vector) VALUES (?, ?, ?, ?, ?)"
_PUT_VECTOR = (
    f"{_INSERT_VECTOR} ON CONFLICT (namespace, name) DO UPDATE SET version = excluded.version, "
    "model_id = excluded.model_id, vector = excluded.vector"
)


class SqliteSkillStore(SqliteStoreBase):
    """Skills in the SQLite store's file at ``path`` (its own connection, like the local search index)."""

    def find_skill(self, namespace: str, name: str) -> Skill | None:
        return self._select_one(SKILLS, "namespace = ? AND name = ?", (namespace, name))

    def list_skills(self, namespace: str) -> list[Skill]:
        return self._select(SKILLS, "namespace = ? ORDER BY name", (namespace,))

    def add_version(self, skill: Skill, version: SkillVersion) -> None:
        try:
            with self._transaction() as db:
                db.execute(SKILL_VERSIONS.insert_sql, SKILL_VERSIONS.insert_params(version))
                db.execute(SKILLS.upsert_sql, SKILLS.insert_params(skill))
        except Conflict as exc:
            raise Conflict(f"skill {version.name!r} version {version.version} exists") from exc

    def put_skill(self, skill: Skill) -> None:
        self._execute(SKILLS.upsert_sql, SKILLS.insert_params(skill))

    def get_version(self, namespace: str, name: str, version: int) -> SkillVersion | None:
        return self._select_one(
            SKILL_VERSIONS, "namespace = ? AND name = ? AND version = ?", (namespace, name, version)
        )

    def get_versions(self, namespace: str, wanted: Sequence[tuple[str, int]]) -> dict[tuple[str, int], SkillVersion]:
        out: dict[tuple[str, int], SkillVersion] = {}
        keys = list(dict.fromkeys(wanted))
        for start in range(0, len(keys), _PAIRS_PER_QUERY):
            chunk = keys[start : start + _PAIRS_PER_QUERY]
            pairs = ", ".join("(?, ?)" for _ in chunk)
            params = [namespace, *(value for key in chunk for value in key)]
            rows = self._select(SKILL_VERSIONS, f"namespace = ? AND (name, version) IN (VALUES {pairs})", params)
            out.update(((row.name, row.version), row) for row in rows)
        return out

    def list_versions(self, namespace: str, name: str) -> list[SkillVersion]:
        return self._select(SKILL_VERSIONS, "namespace = ? AND name = ? ORDER BY version", (namespace, name))

    def purge(self, namespace: str, name: str) -> None:
        with self._transaction() as db:
            for table in ("skill_versions", "skill_vectors", "skills"):
                db.execute(f"DELETE FROM {table} WHERE namespace = ? AND name = ?", (namespace, name))

    def list_namespaces(self) -> list[str]:
        with self._reading() as db:
            return [row[0] for row in db.execute("SELECT DISTINCT namespace FROM skills ORDER BY namespace")]

    def put_vector(self, namespace: str, vector: SkillVector) -> None:
        params = (namespace, vector.name, vector.version, vector.model_id, pack_vector(vector.vector))
        self._execute(_PUT_VECTOR, params)

    def list_vectors(self, namespace: str) -> dict[str, SkillVector]:
        with self._reading() as db:
            rows = db.execute(
                "SELECT name, version, model_id, vector FROM skill_vectors WHERE namespace = ?", (namespace,)
            ).fetchall()
        return {
            name: SkillVector(name=name, version=version, model_id=model, vector=unpack_vector(blob))
            for name, version, model, blob in rows
        }

    def adopt_skills_db(self, old: Path) -> bool:
        """Copy the skills of an earlier version's ``skills.db`` at ``old`` into this store, then rename
        the file (and any side file SQLite left) aside to ``<name>.migrated``; whether there was one.

        Idempotent: a row already here is kept (a start that stopped between the copy and the rename
        copies nothing twice). The copy is one transaction and the file is renamed only after it
        committed, so a failure leaves the old file where it was and raises.
        """
        if not old.is_file():
            return False
        try:
            source = sqlite3.connect(f"{old.resolve().as_uri()}?mode=rw", uri=True)
        except sqlite3.OperationalError:
            if old.exists():
                raise
            return False  # another process moved it in and renamed it just now
        try:
            heads, versions, vectors = _legacy_rows(source)
        except ValueError as exc:  # a row that no longer parses (pydantic's ValidationError)
            exc.add_note(f"while moving {old} into the store: nothing was moved, the file is left as it was")
            raise
        finally:
            source.close()
        with self._transaction() as db:
            for sql, params in (
                (SKILLS.insert_sql, heads),
                (SKILL_VERSIONS.insert_sql, versions),
                (_INSERT_VECTOR, vectors),
            ):
                db.executemany(sql.replace("INSERT", "INSERT OR IGNORE", 1), params)
        aside = _free_name(old.with_name(old.name + ".migrated"))
        for suffix in ("", *SQLITE_SIDE_FILES):
            # (no such side file, or another process renamed the file first)
            with contextlib.suppress(FileNotFoundError):
                old.with_name(old.name + suffix).rename(aside.with_name(aside.name + suffix))
        log.warning(
            "skills moved into the store: %d skills, %d versions and %d vectors copied from %s into %s; "
            "the old file is kept as %s (delete it once you no longer need it)",
            len(heads),
            len(versions),
            len(vectors),
            old,
            self._path,
            aside,
        )
        return True


def _legacy_rows(source: sqlite3.Connection) -> tuple[list[list[object]], list[list[object]], list[tuple[object, ...]]]:
    """The rows of a ``skills.db`` (heads and versions as JSON text, vectors as float32 bytes) as
    parameters of this store's inserts; a row that no longer parses raises (nothing is moved)."""
    present = {row[0] for row in source.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}

    def rows(sql: str, table: str) -> list[tuple[object, ...]]:
        return source.execute(sql).fetchall() if table in present else []

    heads = [
        SKILLS.insert_params(Skill.model_validate_json(str(raw))) for (raw,) in rows("SELECT row FROM skills", "skills")
    ]
    versions = [
        SKILL_VERSIONS.insert_params(SkillVersion.model_validate_json(str(raw)))
        for (raw,) in rows("SELECT row FROM skill_versions", "skill_versions")
    ]
    vectors = rows("SELECT namespace, name, version, model_id, vector FROM skill_vectors", "skill_vectors")
    return heads, versions, vectors


def _free_name(path: Path) -> Path:
    """``path``, or ``path.2``, ``path.3``, ... : the first that does not exist (an earlier copy is kept)."""
    candidate, number = path, 1
    while candidate.exists():
        number += 1
        candidate = path.with_name(f"{path.name}.{number}")
    return candidate
