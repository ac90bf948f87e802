"""The skills library: import with versions, read any version, restore, allocate to agents, search,
soft delete, resource files (README, "Skills"; rules in ``domain/skills.py``).

- Importing a name again makes version n+1 when anything changed (text, description, tags, files);
  the same content returns the current version and writes nothing.
- Every version stays readable; restoring version k writes it again as the newest (n+1).
- Deleting is soft: the skill disappears from listings, search and injection, and can be restored
  for ``RESTORE_DAYS``; after that the cleanup job purges it (``purge_deleted``: every version, and the
  resource files no other skill of the namespace uses), or the next lookup of the name purges its rows
  (only the cleanup job deletes files: ``collect_orphan_files`` takes those a lookup left).
- Resource files are stored once per content (key: namespace + SHA-256) in the ``BlobStore``, so each
  version's manifest keeps pointing at the bytes it had.

Over 400 lines on purpose: one service per port (``SkillStore`` + ``BlobStore``) whose use cases share
the version and file rules; the pure rules are in ``domain/skills.py``.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import logging
import math
import operator
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from engram.domain.deployment import SKILL_FILES_PREFIX  # the only prefix the stack grants (infra/skill_files.py)
from engram.domain.errors import InvalidInput, NotConfigured, NotFound
from engram.domain.fusion import adaptive_fuse, script_of
from engram.domain.policies import clean_tags
from engram.domain.ports import BlobStore, Clock, Embedder, SkillStore
from engram.domain.skills import (
    MAX_AGENTS,
    MAX_DESCRIPTION_CHARS,
    MAX_FILE_BYTES,
    MAX_SKILL_CHARS,
    MAX_SKILL_FILES,
    MAX_SKILL_FILES_BYTES,
    RESTORE_DAYS,
    Skill,
    SkillFile,
    SkillVector,
    SkillVersion,
    agent_id,
    embedding_text,
    file_path,
    first_line_description,
    parse_front_matter,
    skill_name,
    version_digest,
)
from engram.domain.text import tokenize
from engram.services.index.fair_embedder import embedding_for

log = logging.getLogger(__name__)

EMBED_PER_SEARCH = 32  # skills embedded within one search (missing or stale vectors); the rest next time


@dataclass(frozen=True)
class ImportResult:
    skill: Skill
    version: SkillVersion
    created: bool  # False: the content was unchanged, nothing written


# A file no version names is deleted only once it is this old: an import uploads its files before it
# writes the version row that names them.
ORPHAN_GRACE = timedelta(days=1)


def blob_key(namespace: str, sha256: str) -> str:
    """Where a file's bytes live: the namespace (hashed, so any namespace string is a safe key) + content hash."""
    return f"{SKILL_FILES_PREFIX}{hashlib.sha256(namespace.encode()).hexdigest()[:32]}/{sha256}"


class SkillService:
    def __init__(self, store: SkillStore, blobs: BlobStore, clock: Clock, embedder: Embedder | None = None) -> None:
        self._store = store
        self._blobs = blobs
        self._clock = clock
        # Skill vectors live beside the skill rows and are scored here (a namespace has few skills), so
        # vector search works the same over every search backend (README, "Skills for coding agents").
        self._embedder = embedder

    # -- reading --------------------------------------------------------------------------------
    def _head(self, namespace: str, name: str, *, deleted: bool = False) -> Skill:
        """The skill (``deleted``: also a deleted one still in its restore window); ``NotFound`` otherwise."""
        skill = self._store.find_skill(namespace, skill_name(name))
        if skill is not None and skill.deleted_at is not None:
            if skill.deleted_at + timedelta(days=RESTORE_DAYS) <= self._clock.now():
                self._purge(namespace, skill.name, files=False)  # its restore window is over
                skill = None
            elif not deleted:
                raise NotFound(
                    f"skill {skill.name!r} is deleted (restore it with POST /v1/skills/{skill.name}/restore)"
                )
        if skill is None:
            raise NotFound(f"no skill {skill_name(name)!r}")
        return skill

    def get(self, namespace: str, name: str, version: int | None = None) -> tuple[Skill, SkillVersion]:
        skill = self._head(namespace, name)
        number = skill.version if version is None else version
        row = self._store.get_version(namespace, skill.name, number)
        if row is None:
            raise NotFound(f"skill {skill.name!r} has no version {number} (latest: {skill.version})")
        return skill, row

    def versions(self, namespace: str, name: str) -> list[SkillVersion]:
        skill = self._head(namespace, name, deleted=True)
        return self._store.list_versions(namespace, skill.name)

    def list_skills(
        self, namespace: str, *, agent: str | None = None, tag: str | None = None, deleted: bool = False
    ) -> list[Skill]:
        """Skills by name; ``deleted``: the deleted ones still restorable instead of the live ones."""
        out = []
        for skill in self._store.list_skills(namespace):
            if skill.deleted_at is not None:
                if skill.deleted_at + timedelta(days=RESTORE_DAYS) <= self._clock.now():
                    self._purge(namespace, skill.name, files=False)
                    continue
                if not deleted:
                    continue
            elif deleted:
                continue
            if agent is not None and agent not in skill.agents:
                continue
            if tag is not None and tag not in skill.tags:
                continue
            out.append(skill)
        return out

    def search(self, namespace: str, query: str, *, limit: int = 10) -> list[tuple[Skill, float]]:
        """Live skills matching ``query``, best first, with a score in [0, 1].

        Keyword search (the memories' tokenizer, CJK included) over name, description, tags and body,
        BM25-weighted by field; with an embedder, fused with the cosine of the query and each skill's
        vector (``domain/fusion.py``'s adaptive fusion, as recall does), so a paraphrase or another
        language finds a skill that shares no word with the query. Without vectors: BM25's own order,
        matches only."""
        query_tokens = tokenize(query)
        skills = self.list_skills(namespace)
        if not skills or not query.strip():
            return []
        rows = self._store.get_versions(namespace, [(s.name, s.version) for s in skills])
        bodies = {s.name: row.content if (row := rows.get((s.name, s.version))) else "" for s in skills}
        counts = {s.name: _field_counts(s, bodies[s.name]) for s in skills}
        keyword = _bm25(set(query_tokens), counts)
        vector = self._vector_scores(namespace, query, skills, bodies)
        by_name = {s.name: s for s in skills}
        if not vector:
            best = keyword[0][1] if keyword else 1.0
            return [(by_name[n], round(score / best, 4)) for n, score in keyword[:limit]]
        fused, _ = adaptive_fuse(
            query_tokens,
            keyword,
            vector,
            lambda name: frozenset(counts[name]),
            {s.name: script_of(f"{s.description} {bodies[s.name]}") for s in skills},
        )
        ranked = sorted(((n, score) for n, score in fused.items() if score > 0), key=lambda p: (-p[1], p[0]))
        return [(by_name[n], round(score, 4)) for n, score in ranked[:limit]]

    def _vector_scores(
        self, namespace: str, query: str, skills: Sequence[Skill], bodies: Mapping[str, str]
    ) -> list[tuple[str, float]]:
        """(name, cosine) of every live skill, best first; skills whose vector is missing or stale (a
        newer version, another embedder) are embedded now, at most ``EMBED_PER_SEARCH`` per call. Empty
        without an embedder or when it fails (keyword search still answers)."""
        if self._embedder is None:
            return []
        try:
            model = self._embedder.model_id
            stored = self._store.list_vectors(namespace)
            stale = [s for s in skills if s.name not in stored or not stored[s.name].fresh(s, model)]
            for skill in stale[:EMBED_PER_SEARCH]:
                stored[skill.name] = self._embed(namespace, skill, bodies[skill.name])
            with embedding_for(namespace):
                query_vector = self._embedder.embed_query(query)
        except Exception:
            log.warning("skill vectors unavailable; skill search is keyword-only", exc_info=True)
            return []
        return rank_by_vector(skills, stored, model, query_vector)

    def _embed(self, namespace: str, skill: Skill, content: str) -> SkillVector:
        if self._embedder is None:
            raise NotConfigured("no embedder")
        [vector] = self._embedder.embed_documents([embedding_text(skill, content)])
        row = SkillVector(
            name=skill.name, version=skill.version, model_id=self._embedder.model_id, vector=tuple(vector)
        )
        self._store.put_vector(namespace, row)
        return row

    def _embed_quietly(self, namespace: str, skill: Skill, content: str) -> None:
        """Embed a new version as it is written; a failure is logged and the next search embeds it."""
        if self._embedder is None:
            return
        try:
            self._embed(namespace, skill, content)
        except Exception:
            log.warning("embedding skill %s failed; the next search embeds it", skill.name, exc_info=True)

    def for_agent(self, namespace: str, agent: str) -> list[Skill]:
        """What an agent should know about: the live skills allocated to it."""
        return self.list_skills(namespace, agent=agent)

    # -- writing --------------------------------------------------------------------------------
    def import_(
        self,
        namespace: str,
        content: str,
        *,
        name: str | None = None,
        description: str | None = None,
        tags: Sequence[str] | None = None,
        files: Mapping[str, bytes] | None = None,
    ) -> ImportResult:
        """Store a SKILL.md as the skill's newest version (name, description and tags from the
        arguments, else its front matter; description else its first line of prose). ``files``
        replaces the resource files (``None``: the latest version's are kept)."""
        if not content.strip():
            raise InvalidInput("the skill's content (SKILL.md) is empty", code="empty_content")
        if len(content) > MAX_SKILL_CHARS:
            raise InvalidInput(f"SKILL.md is {len(content)} characters; the limit is {MAX_SKILL_CHARS}")
        front = parse_front_matter(content)
        front_name = front.get("name")
        raw_name = name or (front_name if isinstance(front_name, str) else None)
        if not raw_name:
            raise InvalidInput(
                "a skill needs a name (the argument or `name:` in its front matter)", code="missing_name"
            )
        desc = description if description is not None else front.get("description")
        text = (desc if isinstance(desc, str) else "") or first_line_description(content)
        if len(text) > MAX_DESCRIPTION_CHARS:
            raise InvalidInput(f"description is over {MAX_DESCRIPTION_CHARS} characters")
        raw_tags = tags if tags is not None else front.get("tags")
        tag_list = clean_tags([t for t in raw_tags if isinstance(t, str)] if isinstance(raw_tags, list | tuple) else [])
        return self._write(namespace, skill_name(raw_name), content, text.strip(), tag_list, files)

    def _write(
        self,
        namespace: str,
        name: str,
        content: str,
        description: str,
        tags: tuple[str, ...],
        files: Mapping[str, bytes] | None,
        *,
        restored_from: int | None = None,
        manifest: tuple[SkillFile, ...] | None = None,
        embed: bool = True,
    ) -> ImportResult:
        now = self._clock.now()
        head = self._store.find_skill(namespace, name)
        if head is not None and not self._restorable(head):
            self._purge(namespace, name, files=False)  # deleted longer ago than the restore window: start over
            head = None
        latest = self._store.get_version(namespace, name, head.version) if head is not None else None
        if manifest is None:
            manifest = self._store_files(namespace, files) if files is not None else (latest.files if latest else ())
        digest = version_digest(content, description, tags, manifest)
        if head is not None and latest is not None and latest.digest == digest and head.deleted_at is None:
            return ImportResult(head, latest, created=False)
        number = head.version + 1 if head is not None else 1
        version = SkillVersion(
            namespace=namespace,
            name=name,
            version=number,
            content=content,
            description=description,
            tags=tags,
            files=manifest,
            digest=digest,
            restored_from=restored_from,
            created_at=now,
        )
        skill = Skill(
            namespace=namespace,
            name=name,
            version=number,
            description=description,
            tags=tags,
            agents=head.agents if head is not None else (),
            created_at=head.created_at if head is not None else now,
            updated_at=now,
        )
        self._store.add_version(skill, version)  # Conflict if another import took this number first
        if embed:
            self._embed_quietly(namespace, skill, content)
        return ImportResult(skill, version, created=True)

    # -- purging (after the restore window) ------------------------------------------------------
    def purge_deleted(self, namespace: str, *, now: datetime | None = None) -> tuple[int, int]:
        """Purge the skills deleted ``RESTORE_DAYS`` ago or more (the cleanup job, nightly); returns
        (skills purged, resource files deleted)."""
        before = (now or self._clock.now()) - timedelta(days=RESTORE_DAYS)
        doomed = [s.name for s in self._store.list_skills(namespace) if s.deleted_at and s.deleted_at <= before]
        return len(doomed), sum(self._purge(namespace, name) for name in doomed)

    def namespaces(self) -> list[str]:
        return self._store.list_namespaces()

    def collect_orphan_files(self, *, now: datetime | None = None) -> int:
        """Delete the resource files no version of any skill uses any more, written ``ORPHAN_GRACE`` ago
        or earlier (the cleanup job, nightly); returns how many.

        A lookup that meets a skill past its restore window purges its rows only (the HTTP functions may
        not delete files on AWS, docs/aws.md "What each function may do"), and an import that failed after
        its upload leaves a file no version names: this collects both. The grace keeps a file uploaded by
        an import whose version row is not written yet (files go first)."""
        before = (now or self._clock.now()) - ORPHAN_GRACE
        used = {
            blob_key(namespace, f.sha256)
            for namespace in self._store.list_namespaces()
            for skill in self._store.list_skills(namespace)
            for version in self._store.list_versions(namespace, skill.name)
            for f in version.files
        }
        doomed = [
            key for key, written in self._blobs.list_keys(SKILL_FILES_PREFIX) if key not in used and written <= before
        ]
        for key in doomed:
            self._blobs.delete(key)
        return len(doomed)

    def _purge(self, namespace: str, name: str, *, files: bool = True) -> int:
        """Remove a skill for good: first the bytes of its files that no other skill of the namespace
        uses (files are stored once per content), then its rows, so a failure leaves the rows and the
        next run tries again. Returns how many files were deleted. ``files=False`` (a lookup on the
        request path): the rows only; ``collect_orphan_files`` deletes the files later."""
        files_of = {f.sha256 for v in self._store.list_versions(namespace, name) for f in v.files} if files else set()
        if files_of:
            for other in self._store.list_skills(namespace):
                if other.name != name:
                    files_of -= {f.sha256 for v in self._store.list_versions(namespace, other.name) for f in v.files}
        for sha in sorted(files_of):
            self._blobs.delete(blob_key(namespace, sha))
        self._store.purge(namespace, name)
        return len(files_of)

    def _restorable(self, skill: Skill) -> bool:
        return skill.deleted_at is None or skill.deleted_at + timedelta(days=RESTORE_DAYS) > self._clock.now()

    def _store_files(self, namespace: str, files: Mapping[str, bytes]) -> tuple[SkillFile, ...]:
        checked = self._check_files(files)
        out = []
        for path, data in checked:
            sha = hashlib.sha256(data).hexdigest()
            self._blobs.put(blob_key(namespace, sha), data)
            out.append(SkillFile(path=path, sha256=sha, size=len(data)))
        return tuple(out)

    @staticmethod
    def _check_files(files: Mapping[str, bytes]) -> list[tuple[str, bytes]]:
        """Safe paths and sizes (``InvalidInput`` otherwise), sorted by path."""
        if len(files) > MAX_SKILL_FILES:
            raise InvalidInput(f"at most {MAX_SKILL_FILES} files per skill", code="too_many_files")
        checked = [(file_path(path), data) for path, data in sorted(files.items())]
        for path, data in checked:
            if len(data) > MAX_FILE_BYTES:
                raise InvalidInput(
                    f"file {path!r} is {len(data)} bytes; the limit is {MAX_FILE_BYTES}", code="file_too_large"
                )
        total = sum(len(data) for _, data in checked)
        if total > MAX_SKILL_FILES_BYTES:
            raise InvalidInput(
                f"the skill's files add up to {total} bytes; the limit is {MAX_SKILL_FILES_BYTES}",
                code="files_too_large",
            )
        return checked

    def put_file(self, namespace: str, name: str, path: str, data: bytes) -> ImportResult:
        """Add or replace one resource file: a new version when the bytes differ."""
        skill, latest = self.get(namespace, name)
        current = {f.path: f for f in latest.files}
        path = file_path(path)
        wanted = {p: self._read_blob(namespace, f) for p, f in current.items() if p != path}
        wanted[path] = data
        return self._write(namespace, skill.name, latest.content, latest.description, latest.tags, wanted)

    def _read_blob(self, namespace: str, file: SkillFile) -> bytes:
        data = self._blobs.get(blob_key(namespace, file.sha256))
        if data is None:
            raise NotFound(f"the bytes of file {file.path!r} are missing from the file store")
        return data

    def get_file(self, namespace: str, name: str, path: str, version: int | None = None) -> tuple[SkillFile, bytes]:
        _, row = self.get(namespace, name, version)
        for file in row.files:
            if file.path == path:
                return file, self._read_blob(namespace, file)
        raise NotFound(f"skill {row.name!r} version {row.version} has no file {path!r}")

    # -- export / import (services/transfer/engram_format.py) -------------------------------------------------
    def export(self, namespace: str) -> list[dict[str, Any]]:
        """Every skill (deleted ones still restorable included) with every version and its files' bytes."""
        out = []
        for skill in self.list_skills(namespace) + self.list_skills(namespace, deleted=True):
            versions = []
            for row in self._store.list_versions(namespace, skill.name):
                data = version_json(row)
                data["files"] = [
                    {**f.model_dump(), "data_base64": base64.b64encode(self._read_blob(namespace, f)).decode()}
                    for f in row.files
                ]
                versions.append(data)
            out.append({**skill_json(skill), "versions": versions})
        return sorted(out, key=lambda s: s["name"])

    def import_exported(self, namespace: str, row: dict[str, Any], *, dry_run: bool = False) -> tuple[str, str]:
        """One skill of an export: every version replayed in order (same numbers when the export's are
        1..n), then its allocation and deletion. A name already present is skipped (its versions are the
        owner's); a row that breaks a rule raises ``InvalidInput`` and nothing of it is written."""
        name = skill_name(str(row.get("name") or ""))
        versions = row.get("versions")
        if not isinstance(versions, list) or not versions or not all(isinstance(v, dict) for v in versions):
            raise InvalidInput("a skill needs a non-empty list of versions")
        if self._store.find_skill(namespace, name) is not None:
            return "skipped", "a skill with this name is present"
        plan = []
        for version in sorted(versions, key=lambda v: v.get("version") if isinstance(v.get("version"), int) else 0):
            content = version.get("content")
            if not isinstance(content, str) or not content.strip() or len(content) > MAX_SKILL_CHARS:
                raise InvalidInput(f"version {version.get('version')}: content must be 1..{MAX_SKILL_CHARS} characters")
            files: dict[str, bytes] = {}
            for file in version.get("files") or []:
                try:
                    files[file_path(str(file["path"]))] = base64.b64decode(file["data_base64"], validate=True)
                except (KeyError, TypeError, binascii.Error) as exc:
                    raise InvalidInput(f"version {version.get('version')}: a file without path or base64 data") from exc
            self._check_files(files)
            description = version.get("description")
            tags = version.get("tags")
            plan.append(
                (
                    content,
                    description if isinstance(description, str) else "",
                    clean_tags([t for t in tags if isinstance(t, str)] if isinstance(tags, list) else []),
                    files,
                    version.get("restored_from") if isinstance(version.get("restored_from"), int) else None,
                )
            )
        agents = _exported_agents(row.get("agents"))
        if dry_run:
            return "created", name
        for n, (content, description, tags, files, restored_from) in enumerate(plan, start=1):
            self._write(
                namespace,
                name,
                content,
                description[:MAX_DESCRIPTION_CHARS],
                tags,
                files,
                restored_from=restored_from,
                embed=n == len(plan),  # only the newest version is searched
            )
        head = self._store.find_skill(namespace, name)
        if head is not None:
            deleted = row.get("deleted_at")
            update: dict[str, Any] = {"agents": agents}
            if isinstance(deleted, str) and deleted:
                update["deleted_at"] = deleted
            self._store.put_skill(Skill.model_validate({**head.model_dump(), **update}))
        return "created", name

    def restore_version(self, namespace: str, name: str, version: int) -> ImportResult:
        """Write version ``version`` again as the newest (a no-op when it is the newest's content)."""
        skill, old = self.get(namespace, name, version)
        return self._write(
            namespace,
            skill.name,
            old.content,
            old.description,
            old.tags,
            None,
            restored_from=version,
            manifest=old.files,
        )

    def allocate(self, namespace: str, name: str, agent: str, *, allocated: bool = True) -> Skill:
        skill = self._head(namespace, name)
        agent = agent_id(agent)
        agents = [a for a in skill.agents if a != agent] + ([agent] if allocated else [])
        if len(agents) > MAX_AGENTS:
            raise InvalidInput(f"a skill can be allocated to at most {MAX_AGENTS} agents")
        updated = skill.model_copy(update={"agents": tuple(agents), "updated_at": self._clock.now()})
        self._store.put_skill(updated)
        return updated

    def delete(self, namespace: str, name: str) -> Skill:
        skill = self._head(namespace, name)
        deleted = skill.model_copy(update={"deleted_at": self._clock.now(), "updated_at": self._clock.now()})
        self._store.put_skill(deleted)
        return deleted

    def restore(self, namespace: str, name: str) -> Skill:
        skill = self._head(namespace, name, deleted=True)
        restored = skill.model_copy(update={"deleted_at": None, "updated_at": self._clock.now()})
        self._store.put_skill(restored)
        return restored


def rank_by_vector(
    skills: Sequence[Skill], vectors: Mapping[str, SkillVector], model_id: str, query: Sequence[float]
) -> list[tuple[str, float]]:
    """(name, cosine with ``query``) of the skills with a fresh vector, best first (vectors are unit
    length, so the dot product is the cosine; plain Python: the API function ships no numpy)."""
    scores = []
    for skill in skills:
        row = vectors.get(skill.name)
        if row is not None and row.fresh(skill, model_id) and len(row.vector) == len(query):
            scores.append((skill.name, sum(map(operator.mul, row.vector, query))))
    return sorted(scores, key=lambda p: (-p[1], p[0]))


def _field_counts(skill: Skill, body: str) -> Counter[str]:
    """A skill's search tokens, weighted by field: name x3, description and tags x2, body x1."""
    counts: Counter[str] = Counter()
    for text, weight in ((skill.name.replace("-", " "), 3), (skill.description, 2), (" ".join(skill.tags), 2)):
        for token in tokenize(text):
            counts[token] += weight
    counts.update(tokenize(body))
    return counts


def _bm25(terms: set[str], docs: Mapping[str, Counter[str]]) -> list[tuple[str, float]]:
    """(name, BM25 score) of the documents containing a term, best first."""
    if not terms or not docs:
        return []
    avg = sum(sum(c.values()) for c in docs.values()) / len(docs) or 1.0
    scored = []
    for name, counts in docs.items():
        length = sum(counts.values())
        score = 0.0
        for term in terms:
            tf = counts.get(term, 0)
            if not tf:
                continue
            df = sum(1 for c in docs.values() if term in c)
            idf = math.log(1 + (len(docs) - df + 0.5) / (df + 0.5))
            score += idf * tf * 2.2 / (tf + 1.2 * (0.25 + 0.75 * length / avg))
        if score > 0:
            scored.append((name, score))
    return sorted(scored, key=lambda p: (-p[1], p[0]))


def skill_json(skill: Skill) -> dict[str, Any]:
    data = skill.model_dump(mode="json")
    data.pop("namespace", None)
    return data


def version_json(version: SkillVersion, *, content: bool = True) -> dict[str, Any]:
    data = version.model_dump(mode="json")
    data.pop("namespace", None)
    if not content:
        data.pop("content", None)
    return data


def _exported_agents(value: Any) -> tuple[str, ...]:
    """The agents of an exported skill, held to the API's limit (``allocate``: at most ``MAX_AGENTS``)."""
    raw = value or []
    if not isinstance(raw, list) or not all(isinstance(a, str) for a in raw):
        raise InvalidInput("agents must be a list of agent ids")
    agents = tuple(dict.fromkeys(agent_id(a) for a in raw))
    if len(agents) > MAX_AGENTS:
        raise InvalidInput(f"a skill can be allocated to at most {MAX_AGENTS} agents, this one names {len(agents)}")
    return agents
