"""Skills: a named ``SKILL.md`` (markdown, optional front matter) plus small resource files, kept per
namespace with every version (README, "Skills").

Pure rules only: names and file paths that are safe everywhere (a DynamoDB sort key, a file name, an
S3 key), the front matter a SKILL.md may carry, and the digest that decides whether an import changed
anything.
"""

from __future__ import annotations

import hashlib
import json
import re
from datetime import datetime

from engram.domain.errors import InvalidInput
from engram.domain.models import Frozen

MAX_SKILL_CHARS = 100_000  # one SKILL.md
MAX_DESCRIPTION_CHARS = 500
MAX_SKILL_TAGS = 20
MAX_FILE_BYTES = 256 * 1024  # one resource file
MAX_SKILL_FILES_BYTES = 2 * 1024 * 1024  # every resource file of one version together
MAX_SKILL_FILES = 50
MAX_AGENTS = 50
RESTORE_DAYS = 30  # a deleted skill can be restored this long

# What the API accepts, exactly: the patterns the OpenAPI document states (README, "Skills for coding
# agents"); ASCII spaces around a name or an agent id are ignored, a name's case is folded.
SKILL_NAME_PATTERN = "^ *[A-Za-z0-9][A-Za-z0-9._-]{0,63} *$"
AGENT_ID_PATTERN = "^ *[A-Za-z0-9][A-Za-z0-9._:@-]{0,63} *$"
# The `x-engram-agent` header: an agent id, or empty for none (as if not sent).
OPTIONAL_AGENT_ID_PATTERN = f"^$|{AGENT_ID_PATTERN}"
_NAME = re.compile(SKILL_NAME_PATTERN)
_AGENT = re.compile(AGENT_ID_PATTERN)
_PATH_PART = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9._-]{0,99}$")


class SkillFile(Frozen):
    """A resource file of a skill version: its path and the content's SHA-256 (the blob's key)."""

    path: str
    sha256: str
    size: int


class SkillVersion(Frozen):
    namespace: str
    name: str
    version: int
    content: str
    description: str = ""
    tags: tuple[str, ...] = ()
    files: tuple[SkillFile, ...] = ()
    digest: str  # of content, description, tags and files: equal digest = nothing changed
    restored_from: int | None = None
    created_at: datetime


class Skill(Frozen):
    """The head of a skill: its latest version, allocation and deletion."""

    namespace: str
    name: str
    version: int
    description: str = ""
    tags: tuple[str, ...] = ()
    agents: tuple[str, ...] = ()
    created_at: datetime
    updated_at: datetime
    deleted_at: datetime | None = None


class SkillVector(Frozen):
    """The embedding of a skill's latest version (its name, description, tags and text), kept beside the
    skill's rows; stale when the skill has a newer version or the embedder changed."""

    name: str
    version: int
    model_id: str
    vector: tuple[float, ...]

    def fresh(self, skill: Skill, model_id: str) -> bool:
        return self.version == skill.version and self.model_id == model_id


def embedding_text(skill: Skill | SkillVersion, content: str) -> str:
    """What is embedded for a skill: what a searcher would say it is for, then its text."""
    return f"{skill.name.replace('-', ' ')}: {skill.description}\n{' '.join(skill.tags)}\n\n{content}"


def skill_name(raw: str) -> str:
    """Trimmed and lower-cased; ``InvalidInput`` unless ``raw`` matches ``SKILL_NAME_PATTERN``: 1..64 of
    ``a-z 0-9 . _ -`` (either case) starting with a letter or digit."""
    if not _NAME.fullmatch(raw):
        raise InvalidInput(
            f"invalid skill name {raw[:80]!r}: 1-64 characters a-z, 0-9, '.', '_', '-', "
            "starting with a letter or digit",
            code="invalid_skill_name",
        )
    return raw.strip(" ").lower()


def agent_id(raw: str) -> str:
    """Trimmed; ``InvalidInput`` unless ``raw`` matches ``AGENT_ID_PATTERN``."""
    if not _AGENT.fullmatch(raw):
        raise InvalidInput(
            f"invalid agent id {raw[:80]!r}: 1-64 characters A-Z a-z 0-9 . _ : @ - starting with a letter or digit",
            code="invalid_agent_id",
        )
    return raw.strip(" ")


def file_path(raw: str) -> str:
    """A relative path of at most 4 parts, each a plain name: no ``..``, no absolute path, no hidden file."""
    parts = raw.split("/")
    if not raw or len(raw) > 200 or len(parts) > 4 or not all(_PATH_PART.match(p) for p in parts):
        raise InvalidInput(
            f"invalid file path {raw[:80]!r}: up to 4 parts separated by '/', each 1-100 characters "
            "A-Z a-z 0-9 . _ - not starting with '.' or '-'",
            code="invalid_file_path",
        )
    if raw.upper() == "SKILL.MD":
        raise InvalidInput("SKILL.md is the skill itself, not a resource file", code="invalid_file_path")
    return raw


def parse_front_matter(content: str) -> dict[str, object]:
    """The ``name``, ``description`` and ``tags`` of a ``---`` front matter block (simple YAML only)."""
    lines = content.lstrip("\ufeff").splitlines()
    if not lines or lines[0].strip() != "---":
        return {}
    out: dict[str, object] = {}
    for line in lines[1:]:
        if line.strip() == "---":
            return out
        key, sep, value = line.partition(":")
        if not sep or key.strip() not in ("name", "description", "tags"):
            continue
        text = value.strip()
        if key.strip() == "tags":
            inner = text[1:-1] if text.startswith("[") and text.endswith("]") else text
            out["tags"] = [t.strip().strip("'\"") for t in inner.split(",") if t.strip().strip("'\"")]
        else:
            out[key.strip()] = text.strip("'\"")
    return {}  # no closing line: not front matter


def first_line_description(content: str) -> str:
    """The first line of prose after the front matter and headings (a skill without a description)."""
    lines = content.lstrip("\ufeff").splitlines()
    if lines and lines[0].strip() == "---":
        closing = next((n for n, line in enumerate(lines[1:], start=1) if line.strip() == "---"), 0)
        lines = lines[closing + 1 :]
    for line in lines:
        text = line.strip()
        if text and not text.startswith(("#", "```", "---")):
            return text[:MAX_DESCRIPTION_CHARS]
    return ""


def version_digest(content: str, description: str, tags: tuple[str, ...], files: tuple[SkillFile, ...]) -> str:
    body = json.dumps([content, description, list(tags), sorted((f.path, f.sha256) for f in files)], ensure_ascii=False)
    return hashlib.sha256(body.encode()).hexdigest()
