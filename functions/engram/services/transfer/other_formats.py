"""Foreign memory exports read as Engram rows: Aelios, Pawwake, mem0 or a plain text file (one converter
per format). The import that runs them: ``services/transfer/other_systems.py``.

What the converter cannot read (a row that is not an object, a memory without text) is refused here with
its reason; fields Engram has no place for are counted in ``dropped_fields``, never silently lost from the
report. Foreign ids become ``external_id`` (and, prefixed with the format, the memory's id, so the version
links between rows of one file survive). Where a row has no id, identical content is the duplicate test.

The shapes read are the ones each system's exporter writes (README, "Moving in"): Aelios' default
(Vectorize) export ``{"data": [{"id", "content", "metadata": {...}}], "meta"}`` and its D1 fallback (the
full record in ``metadata``: ``fact_key``, ``seen_count``, ``last_seen_at``, version links, ...);
Pawwake's backup (schema 5: ``backup_id``, ``merged_from``, ``superseded_by``, ``source_session``,
``source_message_ids``, ``remind_at`` / ``reminder_delivered_at``; older files with ``id`` still read);
mem0's ``Memory.get_all()`` and the platform client's ``get_all()`` (``expiration_date``, ``immutable``).

Over 450 lines on purpose: four small converters and the field rules they share (ids, times, layers,
the dropped-field count) in one module, so a rule changes for every format at once.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal, get_args

from engram.domain.errors import InvalidInput
from engram.domain.models import MEMORY_TYPES

# The systems Engram moves in from: the one list the REST `from` parameter, the CLI's `--from` and the MCP
# and panel imports take.
ForeignFormat = Literal["aelios", "pawwake", "mem0", "text"]
FORMATS: tuple[str, ...] = get_args(ForeignFormat)
_ID = re.compile(r"^[A-Za-z0-9_.:\-]{1,90}$")
PAWWAKE_LAYERS = {1: "fragment", 2: "event", 3: "core"}
# Memory fields an Aelios export carries under ``metadata`` with Engram's own names.
_SEEN = ("remind_at", "last_seen_at", "last_injected_at")
_TIMES = (*_SEEN, "created_at", "updated_at", "status_changed_at", "expires_at")
AELIOS_FIELDS = (
    *("type", "fact_key", "layer", "importance", "confidence", "pinned", "tags", "status"),
    *("seen_count", "recall_count", "supersedes_id", "superseded_by_id", "source_message_ids"),
    *_TIMES,
)
# Aelios metadata that only describes the export itself (the namespace it came from, the vector's id, a
# search score): read and not reported as lost.
AELIOS_BOOKKEEPING = ("namespace", "vector_id", "score")


class _Skip(Exception):
    """A row the converter cannot read: refused with this reason."""

    def __init__(self, code: str, reason: str) -> None:
        super().__init__(reason)
        self.code = code
        self.reason = reason


@dataclass
class Row:
    kind: str  # "memories" or "messages"
    source: str  # where it is in the file: "data[3]", "line 7", ...
    data: dict[str, Any]
    user: str | None = None  # mem0's user_id
    order: int = 0  # position in the file (problems are listed in file order)


@dataclass
class Converted:
    """A foreign file as Engram rows, with what could not be read and the fields left behind."""

    format: str
    rows: list[Row] = field(default_factory=list)
    refused: list[dict[str, Any]] = field(default_factory=list)
    dropped: Counter[str] = field(default_factory=Counter)
    scoring: dict[str, int] | None = None

    def add(self, row: Row) -> None:
        row.order = len(self.rows) + len(self.refused)
        self.rows.append(row)

    def refuse(self, kind: str, source: str, code: str, reason: str) -> None:
        order = len(self.rows) + len(self.refused)
        self.refused.append(
            {"kind": kind, "row": None, "id": None, "outcome": "refused", "code": code, "reason": reason}
            | {"source": source, "order": order}
        )


# -- small readers ---------------------------------------------------------------------------------
def _time(value: Any) -> datetime | None:
    """An ISO 8601 string (a space for the ``T``, no zone = UTC) or Unix seconds/milliseconds."""
    if isinstance(value, bool):
        raise ValueError("not a date-time")
    if isinstance(value, int | float):
        seconds = value / 1000 if value > 10**11 else value
        return datetime.fromtimestamp(seconds, UTC)
    if isinstance(value, str) and value.strip():
        text = value.strip().replace("Z", "+00:00")
        parsed = datetime.fromisoformat(text)
        return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)
    return None


def _put_times(out: dict[str, Any], src: dict[str, Any], names: dict[str, str], conv: Converted) -> None:
    """Copy timestamps (``names``: source name -> Engram name); an unreadable one is dropped and counted."""
    for name, target in names.items():
        if src.get(name) in (None, ""):
            continue
        try:
            when = _time(src[name])
        except (ValueError, OverflowError, OSError):
            conv.dropped[f"{name} (not a date-time)"] += 1
            continue
        if when is not None:
            out[target] = when.isoformat()


def _source_id(value: Any) -> str | None:
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, int | str) and str(value).strip():
        return str(value).strip()[:200]
    return None


def _engram_id(fmt: str, source_id: str | None) -> str | None:
    """The id a foreign row keeps in Engram (format-prefixed), when it is a well-formed id."""
    if source_id is None:
        return None
    candidate = f"{fmt}-{source_id}"
    return candidate if _ID.match(candidate) else None


def _content(value: Any) -> str:
    if not isinstance(value, str):
        raise _Skip("invalid_field", "the memory text is missing or not text")
    return value


def _rows_of(raw: Any, *names: str) -> tuple[list[Any], str]:
    """The row list of a document: a bare list, or the first of ``names`` that is a list."""
    if isinstance(raw, list):
        return raw, ""
    if isinstance(raw, dict):
        for name in names:
            if isinstance(raw.get(name), list):
                return raw[name], name
    raise InvalidInput(f"expected a list of rows or an object with {' / '.join(repr(n) for n in names)}")


# -- one converter per format ------------------------------------------------------------------------
def _each_row(
    conv: Converted, raw: Any, names: tuple[str, ...], one: Callable[[dict[str, Any], Converted], Row]
) -> None:
    """Convert every row of the document's row list with ``one``; a row it cannot read is refused."""
    rows, name = _rows_of(raw, *names)
    for number, item in enumerate(rows):
        where = f"{name or 'rows'}[{number}]"
        try:
            if not isinstance(item, dict):
                raise _Skip("invalid_row", "a row must be an object")
            row = one(item, conv)
        except _Skip as exc:
            conv.refuse("memories", where, exc.code, exc.reason)
            continue
        row.source = where
        conv.add(row)


def _memory_base(fmt: str, item: dict[str, Any], text_field: str) -> dict[str, Any]:
    """Text, source, and the foreign id as ``external_id`` (and as a format-prefixed Engram id)."""
    out: dict[str, Any] = {"content": _content(item.get(text_field)), "source": f"import:{fmt}"}
    source_id = _source_id(item.get("id"))
    if (engram_id := _engram_id(fmt, source_id)) is not None:
        out["id"] = engram_id
    if source_id is not None:
        out["external_id"] = f"{fmt}:{source_id}"
    return out


def _aelios_row(item: dict[str, Any], conv: Converted) -> Row:
    meta = item.get("metadata") or {}
    if not isinstance(meta, dict):
        raise _Skip("invalid_field", "metadata must be an object")
    out = _memory_base("aelios", item, "content")
    for key in AELIOS_FIELDS:
        if key not in _TIMES and meta.get(key) is not None:
            out[key] = meta[key]
    if out.get("type") is not None and out["type"] not in MEMORY_TYPES:
        conv.dropped[f"metadata.type={str(out.pop('type'))[:40]} (unknown type, stored as fact)"] += 1
    for link in ("supersedes_id", "superseded_by_id"):
        if link in out:
            out[link] = _engram_id("aelios", _source_id(out[link]))
    if "source_message_ids" in out:
        ids = out["source_message_ids"] if isinstance(out["source_message_ids"], list) else []
        out["source_message_ids"] = [i for i in (_engram_id("aelios", _source_id(x)) for x in ids) if i]
    _put_times(out, meta, {t: t for t in _TIMES}, conv)
    _put_times(out, item, {t: t for t in ("created_at", "updated_at") if t not in out}, conv)
    conv.dropped.update(f"metadata.{key}" for key in meta if key not in (*AELIOS_FIELDS, *AELIOS_BOOKKEEPING))
    conv.dropped.update(key for key in item if key not in ("id", "content", "metadata", "created_at", "updated_at"))
    return Row("memories", "", out)


def _aelios(raw: Any) -> Converted:
    conv = Converted("aelios")
    _each_row(conv, raw, ("data", "memories"), _aelios_row)
    if isinstance(raw, dict):
        conv.dropped.update(f"(top level) {key}" for key in raw if key not in ("data", "memories", "meta"))
    return conv


# The top-level fields of a Pawwake backup that describe the file itself.
_PAWWAKE_META = ("schema_version", "version", "source_database_id", "total", "exported_at")
_PAWWAKE_MEMORY = {
    "id",
    "backup_id",
    "source_session",
    "source_message_ids",
    "reminder_delivered_at",
    "source_content_intact",
    "content",
    "importance",
    "layer",
    "title",
    "event_date",
    "is_active",
    "external_id",
    "remind_at",
    "created_at",
    "updated_at",
    "tags",
    "superseded_by",
    "superseded_by_id",
    "supersedes",
    "supersedes_id",
    "merged_from",
    "last_accessed_at",
    "access_count",
}


def _pawwake_id(item: dict[str, Any]) -> str | None:
    """A Pawwake row's id: ``backup_id`` in a schema-5 backup, ``id`` in older files."""
    return _source_id(item.get("backup_id", item.get("id")))


def _pawwake_memory(item: dict[str, Any], conv: Converted, links: _PawwakeLinks) -> Row:
    out = _memory_base("pawwake", {**item, "id": item.get("backup_id", item.get("id"))}, "content")
    title = item.get("title")
    if isinstance(title, str) and title.strip() and title.strip() not in out["content"]:
        # Engram has no title: the text keeps it as its first line
        out["content"] = f"{title.strip()}\n{out['content'].strip()}"
    source_id = _pawwake_id(item)
    if (external := _source_id(item.get("external_id"))) is not None:
        out["external_id"] = external
    _pawwake_weight(item, out)
    if item.get("is_active") is False:
        out["status"] = "archived"
    tags = item.get("tags")
    out["tags"] = list(tags) if isinstance(tags, list) else []
    if isinstance(item.get("event_date"), str) and item["event_date"].strip():
        out["tags"].append(f"event_date:{item['event_date'].strip()[:40]}")
    if (session := _source_id(item.get("source_session"))) is not None:
        out["tags"].append(f"session:{session[:40]}")
    if isinstance(item.get("source_message_ids"), list):
        ids = (_engram_id("pawwake-msg", _source_id(m)) for m in item["source_message_ids"])
        out["source_message_ids"] = [i for i in ids if i]
    _put_times(
        out,
        item,
        {
            "remind_at": "remind_at",
            "created_at": "created_at",
            "updated_at": "updated_at",
            "last_accessed_at": "last_seen_at",
        },
        conv,
    )
    if isinstance(item.get("access_count"), int) and item["access_count"] >= 0:
        out["seen_count"] = item["access_count"]
    delivered: dict[str, Any] = {}
    _put_times(delivered, item, {"reminder_delivered_at": "delivered_at"}, conv)
    if delivered:
        out["reminder"] = {"status": "delivered", **delivered}
    _pawwake_chain(item, out, source_id, links)
    conv.dropped.update(key for key in item if key not in _PAWWAKE_MEMORY)
    return Row("memories", "", out)


def _pawwake_weight(item: dict[str, Any], out: dict[str, Any]) -> None:
    """Importance 1..10 -> 0..1; layer 1/2/3 (or its name) -> fragment/event/core (an event layer is an event)."""
    importance = item.get("importance")
    if importance is not None:
        if isinstance(importance, bool) or not isinstance(importance, int | float) or not 1 <= importance <= 10:
            raise _Skip("invalid_field", f"importance must be 1..10, got {importance!r}")
        out["importance"] = round(importance / 10, 3)
    layer = item.get("layer")
    if layer is not None:
        if layer not in PAWWAKE_LAYERS and layer not in PAWWAKE_LAYERS.values():
            raise _Skip("invalid_field", f"layer must be 1 (fragment), 2 (event) or 3 (core), got {layer!r}")
        out["layer"] = PAWWAKE_LAYERS.get(layer, layer)
        if out["layer"] == "event":
            out["type"] = "event"


def _pawwake_chain(item: dict[str, Any], out: dict[str, Any], source_id: str | None, links: _PawwakeLinks) -> None:
    """The version links: what replaced this memory (``superseded_by``, or the memory it was merged into)
    and what it replaced (its own ``supersedes``, else the first row superseded by or merged into it)."""
    later = _source_id(item.get("superseded_by_id", item.get("superseded_by")))
    if later is None and source_id is not None:
        later = links.merged_into.get(source_id)  # merged into another memory: that one replaces it
    if later is not None:
        out["superseded_by_id"] = _engram_id("pawwake", later)
        out["status"] = "superseded"  # Pawwake archives what it merged; Engram keeps it in the chain
    earlier = _source_id(item.get("supersedes_id", item.get("supersedes")))
    if earlier is None and source_id is not None:
        earlier = links.replaced.get(source_id)
    if earlier is not None:
        out["supersedes_id"] = _engram_id("pawwake", earlier)


def _message_key(*parts: Any) -> str:
    return hashlib.sha256("\x1f".join(str(p) for p in parts).encode()).hexdigest()[:32]


def _pawwake_message(item: Any, session: Any, conv: Converted) -> dict[str, Any]:
    if not isinstance(item, dict):
        raise _Skip("invalid_row", "a message must be an object")
    session_id = _source_id(item.get("session_id", session)) or "default"
    out: dict[str, Any] = {
        "conversation_id": session_id,
        "role": item.get("role"),
        "content": item.get("content"),
    }
    _put_times(out, item, {"created_at": "created_at"}, conv)
    source_id = _source_id(item.get("id"))
    if source_id is not None:
        out["external_id"] = f"pawwake:{source_id}"
        if (engram_id := _engram_id("pawwake-msg", source_id)) is not None:
            out["id"] = engram_id  # the id a memory's source_message_ids name
    else:
        key = _message_key(session_id, item.get("role"), item.get("created_at"), item.get("content"))
        out["external_id"] = f"pawwake:{key}"
    for key in item:
        if key not in ("id", "session_id", "role", "content", "created_at"):
            conv.dropped[f"messages.{key}"] += 1
    return out


def _pawwake(raw: Any) -> Converted:
    conv = Converted("pawwake")
    links = _pawwake_links(raw)
    _each_row(conv, raw, ("memories", "data"), lambda item, c: _pawwake_memory(item, c, links))
    _pawwake_conversations(raw, conv)
    if isinstance(raw, dict):
        for key in raw:
            if key not in ("memories", "data", "conversations", "messages", *_PAWWAKE_META):
                conv.dropped[f"(top level) {key}"] += 1
    return conv


@dataclass
class _PawwakeLinks:
    merged_into: dict[str, str] = field(default_factory=dict)  # source id -> the memory it was merged into
    replaced: dict[str, str] = field(default_factory=dict)  # id -> the first row it replaced


def _pawwake_links(raw: Any) -> _PawwakeLinks:
    """The version links of the whole file, both ways (a row names only what replaced it, or what was
    merged into it)."""
    rows, _ = _rows_of(raw, "memories", "data")
    links = _PawwakeLinks()
    for item in rows:
        if not isinstance(item, dict) or (own := _pawwake_id(item)) is None:
            continue
        merged = item.get("merged_from")
        for source in merged if isinstance(merged, list) else []:
            if (src := _source_id(source)) is not None:
                links.merged_into.setdefault(src, own)
                links.replaced.setdefault(own, src)
        later = _source_id(item.get("superseded_by_id", item.get("superseded_by")))
        if later is not None:
            links.replaced.setdefault(later, own)
    return links


def _pawwake_conversations(raw: Any, conv: Converted) -> None:
    conversations = raw.get("conversations", raw.get("messages", [])) if isinstance(raw, dict) else []
    if not isinstance(conversations, list):
        raise InvalidInput("'conversations' must be a list")
    for c_number, thread in enumerate(conversations):
        where = f"conversations[{c_number}]"
        # Either a thread {session_id, messages: [...]} or one flat message {session_id, role, content}.
        if isinstance(thread, dict) and isinstance(thread.get("messages"), list):
            session = thread.get("session_id", thread.get("id"))
            items = [(f"{where}.messages[{n}]", m) for n, m in enumerate(thread["messages"])]
            for key in thread:
                if key not in ("session_id", "id", "messages"):
                    conv.dropped[f"conversations.{key}"] += 1
        else:
            session, items = None, [(where, thread)]
        for label, message in items:
            try:
                conv.add(Row("messages", label, _pawwake_message(message, session, conv)))
            except _Skip as exc:
                conv.refuse("messages", label, exc.code, exc.reason)


_MEM0_FIELDS = (
    *("id", "memory", "categories", "created_at", "updated_at", "metadata", "user_id"),
    *("expiration_date", "immutable", "hash"),  # hash: mem0's digest of the text (Engram has its own test)
)


def _mem0_row(item: dict[str, Any], conv: Converted) -> Row:
    out = _memory_base("mem0", item, "memory")
    categories = item.get("categories")
    if isinstance(categories, list):
        out["tags"] = [c for c in categories if isinstance(c, str)]
    _put_times(
        out, item, {"created_at": "created_at", "updated_at": "updated_at", "expiration_date": "expires_at"}, conv
    )
    if item.get("immutable") is True:  # mem0 lets nothing change it: pinned, so automation never does
        out["pinned"] = True
    if isinstance(meta := item.get("metadata"), dict):
        conv.dropped.update(f"metadata.{key}" for key in meta)
    conv.dropped.update(key for key in item if key not in _MEM0_FIELDS)
    return Row("memories", "", out, user=_source_id(item.get("user_id")))


def _mem0(raw: Any) -> Converted:
    conv = Converted("mem0")
    _each_row(conv, raw, ("results", "memories"), _mem0_row)
    return conv


def _text(raw: str) -> Converted:
    conv = Converted("text")
    for number, line in enumerate(raw.lstrip("\ufeff").splitlines(), start=1):
        if line.strip():
            conv.add(Row("memories", f"line {number}", {"content": line.strip(), "source": "import:text"}))
    return conv


def convert(fmt: str, data: str | bytes | Any) -> Converted:
    """Read ``data`` (text, bytes, or parsed JSON) as ``fmt``; ``InvalidInput`` if it is not that format."""
    if fmt not in FORMATS:
        raise InvalidInput(f"unknown import format {fmt!r}; one of {', '.join(FORMATS)}", code="invalid_format")
    if isinstance(data, bytes):
        try:
            data = data.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise InvalidInput("the file is not UTF-8 text", code="invalid_format") from exc
    if fmt == "text":
        if not isinstance(data, str):
            raise InvalidInput("a text import takes text: one memory per line", code="invalid_format")
        return _text(data)
    if isinstance(data, str):
        try:
            data = json.loads(data)
        except ValueError as exc:
            raise InvalidInput(f"not a {fmt} export: not JSON ({exc})", code="invalid_format") from exc
    try:
        return {"aelios": _aelios, "pawwake": _pawwake, "mem0": _mem0}[fmt](data)
    except InvalidInput as exc:
        raise InvalidInput(f"not a {fmt} export: {exc.message}", code="invalid_format") from exc
