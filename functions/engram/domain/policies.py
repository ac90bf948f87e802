"""Pure rules about memories: fact keys, upsert decisions, content limits, retention."""

from __future__ import annotations

import math
import re
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Literal

from pydantic_core import PydanticCustomError

from engram.domain.errors import InvalidInput
from engram.domain.models import DURABLE_TYPES, Memory
from engram.domain.wording import salient_difference, same_wording

MAX_CONTENT_CHARS = 4000
# The REST cache (README, REST table): a key of at most 256 characters, a value of at most 64 KiB as JSON.
CACHE_KEY_MAX_CHARS = 256
CACHE_VALUE_MAX_BYTES = 64 * 1024
# One thread id grammar wherever ids enter (the x-engram-thread header, ingest, MCP, merges;
# docs/threads.md): 1-200 characters, no '/', no control character, not '.' or '..' — an id that
# cannot be one URL path segment could be stored but never read, renamed, deleted or merged.
MAX_THREAD_ID_CHARS = 200
INVALID_THREAD_ID = "invalid_thread_id"
THREAD_ID_BAD_CHARS = re.compile(r"[/\x00-\x1f\x7f]")
MAX_TAGS = 20
MAX_TAG_CHARS = 64
# The digest rule, the same for REST, MCP and import (``clean_digest``): at most DIGEST_MAX_CHARS are
# kept, a longer digest is cut at a sentence end; one over DIGEST_REFUSE_CHARS is refused.
DIGEST_MAX_CHARS = 500
DIGEST_REFUSE_CHARS = 4 * DIGEST_MAX_CHARS
DIGEST_RULE = (
    f"At most {DIGEST_MAX_CHARS} characters are kept: a longer digest is cut after the last whole sentence "
    f"that fits; one over {DIGEST_REFUSE_CHARS:,} characters is refused (digest_too_long)."
)
# A day's log (written by dreaming): title, summary and at most LOG_SECTIONS sections.
LOG_TITLE_CHARS = 200
LOG_SUMMARY_CHARS = 4000
LOG_SECTIONS = 12
LOG_SECTION_CHARS = 4000

# A fact key is `category:slug` (README, "Fact keys"). What the API accepts is exactly FACT_KEY_PATTERN,
# the pattern the OpenAPI document states (ECMA-262 and Python read it alike): a category of ASCII letters,
# digits and `_` starting with a letter (up to 40 characters), a colon, and a slug of letters or digits of
# any script and `_ . - /` (up to 120 characters); ASCII spaces around it are ignored and spaces inside
# become `_`. Non-ASCII punctuation and symbols count as letters; whitespace, controls and ASCII
# punctuation other than `_ . - /` are refused. The slug's character class is written as what it
# excludes, so it needs no Unicode property escapes.
_SLUG_CHAR = (
    "[^\\x00-\\x2c\\x3a-\\x40\\x5b-\\x5e\\x60\\x7b-\\xa0"
    "\\u1680\\u2000-\\u200b\\u2028\\u2029\\u202f\\u205f\\u3000\\ufeff]"
)
FACT_KEY_PATTERN = f"^ *[A-Za-z][A-Za-z0-9_ ]{{0,39}}:(?: |{_SLUG_CHAR}){{0,119}}{_SLUG_CHAR} *$"
_FACT_KEY = re.compile(FACT_KEY_PATTERN)
# A request's `fact_key` field: a key, or empty for none.
OPTIONAL_FACT_KEY_PATTERN = f"^$|{FACT_KEY_PATTERN}"
# The stored form: lower-case category, no spaces (a canonical key is itself an accepted key).
_CANONICAL = re.compile(f"^[a-z][a-z0-9_]{{0,39}}:{_SLUG_CHAR}{{1,120}}$")
FACT_KEY_RULE = (
    "'category:slug': category a-z A-Z 0-9 _ starting with a letter, up to 40 characters; slug letters or "
    "digits of any script and _ . - /, up to 120 characters; spaces inside become _, case is folded"
)


def normalize_fact_key(raw: str) -> str:
    """The stored form of a fact key: trimmed, runs of spaces to ``_``, lower-case, and in Unicode's
    compatibility form (NFKC) where that form is itself a valid key (a stored key normalizes to itself);
    ``InvalidInput`` (``invalid_fact_key``) unless ``raw`` matches ``FACT_KEY_PATTERN``."""
    if not _FACT_KEY.fullmatch(raw):
        raise InvalidInput(f"invalid fact_key {raw[:200]!r}: expected {FACT_KEY_RULE}", code="invalid_fact_key")
    key = re.sub(" +", "_", raw.strip(" "))
    lowered = key.lower()
    for candidate in (_nfkc_lower(lowered), lowered):
        if candidate is not None and _CANONICAL.fullmatch(candidate):
            return candidate
    # Lower-casing lengthened the slug past its limit (U+0130 becomes two characters): ASCII only.
    return "".join(c.lower() if c.isascii() else c for c in key)


def _nfkc_lower(text: str) -> str | None:
    """``text`` in NFKC and lower-case at once: a form both leave unchanged, so the stored key normalizes
    to itself (NFKC can bring back capitals: U+1D2C MODIFIER LETTER CAPITAL A is ``A``); None if a few
    rounds do not settle."""
    for _ in range(4):
        folded = unicodedata.normalize("NFKC", text).lower()
        if folded == text:
            return text
        text = folded
    return None


def clean_content(raw: str) -> str:
    """Trimmed content; ``InvalidInput`` if empty or longer than ``MAX_CONTENT_CHARS``."""
    text = raw.strip()
    if not text:
        raise InvalidInput("content must not be empty", code="empty_content")
    if len(text) > MAX_CONTENT_CHARS:
        raise InvalidInput(
            f"content is {len(text)} characters; the limit is {MAX_CONTENT_CHARS}", code="content_too_long"
        )
    return text


def too_short(content: str, least: int) -> bool:
    """Fewer than ``least`` letters or digits (any script: a CJK character counts as one): an empty or
    near-empty memory, swept by cleanup (``ENGRAM_EMPTY_MEMORY_MIN_CHARS``)."""
    return sum(1 for ch in content if ch.isalnum()) < least


def clean_tags(tags: Sequence[str]) -> tuple[str, ...]:
    out: list[str] = []
    for tag in tags:
        t = tag.strip()
        if not t:
            continue
        if len(t) > MAX_TAG_CHARS:
            raise InvalidInput(f"tag {t[:20]!r}... is longer than {MAX_TAG_CHARS} characters", code="tag_too_long")
        if t not in out:
            out.append(t)
    if len(out) > MAX_TAGS:
        raise InvalidInput(f"at most {MAX_TAGS} tags", code="too_many_tags")
    return tuple(out)


def same_meaning_text(a: str, b: str) -> bool:
    """True when two texts differ only in case, whitespace and punctuation."""
    return _fold(a) == _fold(b)


def _fold(text: str) -> str:
    text = unicodedata.normalize("NFKC", text).casefold()
    return "".join(ch for ch in text if ch.isalnum())


def cosine(a: Sequence[float], b: Sequence[float]) -> float:
    dot = sum(x * y for x, y in zip(a, b, strict=True))
    na = math.sqrt(sum(x * x for x in a))
    nb = math.sqrt(sum(y * y for y in b))
    if na == 0 or nb == 0:
        return 0.0
    return dot / (na * nb)


UpsertAction = Literal["create", "seen", "supersede"]


@dataclass(frozen=True)
class UpsertDecision:
    action: UpsertAction
    reason: str


def decide_upsert(
    existing: Memory | None,
    new_content: str,
    similarity: float | None,
    dedup_cosine: float,
    *,
    explicit: bool = True,
) -> UpsertDecision:
    """What an upsert by fact key does.

    No active memory with the key -> create. The same wording (case, punctuation, filler words
    aside; ``domain/wording.py``) -> the existing memory is marked seen. Any other change to an
    explicit write (the API, an MCP upsert, an approved candidate) -> supersede: the caller said what
    the fact now is. A machine-written text (extraction) may also be seen by cosine >=
    ``dedup_cosine``, unless numbers, names, places or negation differ.
    """
    if existing is None:
        return UpsertDecision("create", "no active memory with this fact_key")
    if same_wording(existing.content, new_content):
        return UpsertDecision("seen", "same text")
    if explicit:
        return UpsertDecision("supersede", "content changed")
    difference = salient_difference(existing.content, new_content)
    if difference is not None:
        return UpsertDecision("supersede", difference)
    if similarity is not None and similarity >= dedup_cosine:
        return UpsertDecision("seen", f"cosine {similarity:.3f} >= {dedup_cosine}")
    return UpsertDecision("supersede", "content changed")


_SENTENCE_END = re.compile(r"[.!?。！？…](?=\s|$)|[。！？]")


def truncate_digest(text: str) -> str:
    """At most ``DIGEST_MAX_CHARS``: cut after the last whole sentence that fits, or (no sentence
    end in the second half of the limit) at the limit with an ellipsis."""
    text = text.strip()
    if len(text) <= DIGEST_MAX_CHARS:
        return text
    head = text[:DIGEST_MAX_CHARS]
    ends = [m.end() for m in _SENTENCE_END.finditer(head) if m.end() < len(text) and m.end() <= DIGEST_MAX_CHARS]
    if ends and ends[-1] >= DIGEST_MAX_CHARS // 2:
        return head[: ends[-1]].rstrip()
    return head[: DIGEST_MAX_CHARS - 1].rstrip() + "…"


def clean_digest(text: str) -> str:
    """A digest written from outside (REST, MCP, import), as stored: cut to ``DIGEST_MAX_CHARS``
    (``truncate_digest``); ``InvalidInput`` over ``DIGEST_REFUSE_CHARS``, so far over the limit that
    cutting it would keep too little of what was meant (``DIGEST_RULE``)."""
    length = len(text.strip())
    if length > DIGEST_REFUSE_CHARS:
        raise InvalidInput(
            f"digest is {length:,} characters, far over the {DIGEST_MAX_CHARS}-character limit (over "
            f"{DIGEST_REFUSE_CHARS:,} is refused; up to that it is cut at a sentence end): write a shorter one",
            code="digest_too_long",
        )
    return truncate_digest(text)


def in_range(when: datetime) -> datetime:
    """``when`` if every store can hold it (it converts to UTC within years 1..9999), else ``ValueError``:
    ``9999-12-31T23:59:59-14:00`` is year 10000 in UTC. Request models, the MCP tools and the import
    check their date-times with it, so such a value is a 400 naming the field, never a 500."""
    if when.tzinfo is None:
        return when
    try:
        when.astimezone(UTC)
    except OverflowError as exc:
        raise ValueError(f"{when.isoformat()} is out of range (years 1..9999 in UTC)") from exc
    return when


DATE_OUT_OF_RANGE = "date_out_of_range"  # the error type of ``instant_in_range``: a 400 at the HTTP edge


def thread_id_problem(value: str) -> str | None:
    """Why ``value`` is not a thread id, or None."""
    if not value or len(value) > MAX_THREAD_ID_CHARS:
        return f"a thread id has 1-{MAX_THREAD_ID_CHARS} characters"
    if value in (".", ".."):
        return "a thread id cannot be '.' or '..'"
    if THREAD_ID_BAD_CHARS.search(value):
        return "a thread id cannot contain '/' or control characters"
    return None


def checked_thread_id(value: str) -> str:
    """``value`` if it is a thread id, else InvalidInput (400 ``invalid_thread_id``) naming it."""
    problem = thread_id_problem(value)
    if problem is not None:
        raise InvalidInput(f"invalid thread id {value[:80]!r}: {problem}", code=INVALID_THREAD_ID)
    return value


def thread_id_field(value: str) -> str:
    """``checked_thread_id`` as a model validator: the HTTP edge answers 400 ``invalid_thread_id``."""
    problem = thread_id_problem(value)
    if problem is not None:
        raise PydanticCustomError(INVALID_THREAD_ID, f"invalid thread id {value[:80]!r}: {problem}")
    return value


def instant_in_range(when: datetime) -> datetime:
    """``in_range`` as a model validator: its error type (``DATE_OUT_OF_RANGE``) is a rule beyond the
    schema (a valid date-time no store can hold), so the HTTP edge answers 400 naming the field."""
    try:
        return in_range(when)
    except ValueError as exc:
        raise PydanticCustomError(DATE_OUT_OF_RANGE, str(exc)) from exc


def expires_by_retention(memory: Memory, now: datetime, unseen_days: int) -> bool:
    """Memories expire after ``unseen_days`` without a sighting, except pinned ones, ``core``-layer ones and
    identity/persona ones (imported or not: an import counts as a sighting, services/transfer/engram_format.py)."""
    if memory.status != "active" or memory.pinned or memory.layer == "core" or memory.type in DURABLE_TYPES:
        return False
    last = memory.last_seen_at or memory.created_at
    return now - last > timedelta(days=unseen_days)
