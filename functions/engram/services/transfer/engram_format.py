"""Export every row kind of a namespace as JSON, and import the same format.

Import is idempotent and validated row by row:

- every row is checked with the rules the API applies to the same data (content 1..4,000
  characters, a valid ``fact_key``, at most 20 tags, non-negative counters, a digest the API would
  take, ...); a bad row is refused and reported, never stored, and the other rows still import;
- a row keeps its id unless the id is malformed; a row already present (same id, same external id,
  or identical content) is skipped, so importing one file twice adds nothing, and references from
  other rows (versions, candidates, message links) point at the row that is there;
- a day's log or the digest is imported only where the namespace has none (nothing of the owner's
  is overwritten);
- links between memories (``supersedes_id``, ``superseded_by_id``) and to messages (``source_message_ids``)
  must name a row of the file or of the namespace: a link to anything else is dropped and reported
  (``links_dropped``); rows whose supersede links form a cycle are refused;
- a memory's reminder is armed with its state (``reminder`` on an exported memory row: pending,
  delivered or cancelled, and when it was delivered); a ``remind_at`` without one arms a pending
  reminder, so an imported reminder is listed and told when it comes due;
- date-times a store cannot hold (``9999-12-31T23:59:59-14:00``) refuse their row, naming the field;
- a memory moving in from another system (``foreign``) counts as seen at import time unless the source
  kept its own last-seen time, and comes in ``expired`` if the source's own expiry has passed;
- imported active memories are embedded and indexed in bounded batches, with progress;
- a dry run makes the same checks and reports the same counts without writing anything.

Over 400 lines on purpose: export and import are the two sides of one document format, kept in one
module so they change together; foreign formats are converted elsewhere (``services/transfer/other_formats.py``).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from datetime import date as Date
from datetime import datetime
from typing import Any, Protocol

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from engram.domain.errors import Conflict, InvalidInput, NotFound
from engram.domain.models import (
    Candidate,
    DailyLog,
    Digest,
    GlossaryTerm,
    Memory,
    Message,
    Precious,
    Reminder,
    Thread,
    UsageRecord,
    new_id,
)
from engram.domain.policies import (
    LOG_SECTION_CHARS,
    LOG_SECTIONS,
    LOG_SUMMARY_CHARS,
    LOG_TITLE_CHARS,
    clean_content,
    clean_digest,
    clean_tags,
    in_range,
    normalize_fact_key,
)
from engram.domain.ports import (
    AuditRows,
    CandidateRows,
    Clock,
    MemoryRows,
    MessageRows,
    NoteRows,
    ReminderRows,
    ThreadRows,
)
from engram.services.library.journal import Journal, Run
from engram.services.library.memories import MemoryService
from engram.services.library.messages import MessageIn
from engram.services.library.notes import GlossaryIn
from engram.services.library.skills import SkillService

EXPORT_VERSION = 1
KINDS = (
    *("memories", "candidates", "messages", "precious", "glossary", "daily_logs", "digest", "skills"),
    *("threads", "usage"),
)
MAX_EXTERNAL_ID_CHARS = 200
MAX_REASON_CHARS = 1000
MAX_THREAD_TITLE_CHARS = 200  # the API's limit on a thread's title (PATCH /v1/threads/{id})
MAX_PROBLEMS = 200  # problems listed in a report; the counts cover every row
_ID = re.compile(r"^[A-Za-z0-9_.:\-]{1,100}$")

# ``progress(stage, total)`` -> a callback taking the number of items just done (the CLI's bar).
ProgressFactory = Callable[[str, int], Callable[[int], None]]


class TransferStore(MemoryRows, CandidateRows, MessageRows, ThreadRows, NoteRows, ReminderRows, AuditRows, Protocol):
    """Every row kind an export holds."""


class ExportDocument(BaseModel):
    model_config = ConfigDict(extra="forbid")

    version: int = EXPORT_VERSION
    namespace: str | None = None
    exported_at: str | None = None
    memories: list[dict[str, Any]] = Field(default_factory=list)
    candidates: list[dict[str, Any]] = Field(default_factory=list)
    messages: list[dict[str, Any]] = Field(default_factory=list)
    precious: list[dict[str, Any]] = Field(default_factory=list)
    glossary: list[dict[str, Any]] = Field(default_factory=list)
    digest: dict[str, Any] | None = None
    daily_logs: list[dict[str, Any]] = Field(default_factory=list)
    # Skills with every version and their files' bytes (base64): services/library/skills.py, ``export``.
    skills: list[dict[str, Any]] = Field(default_factory=list)
    # Threads (their titles and recycle-bin marks; the counts follow the messages) and the token usage log.
    threads: list[dict[str, Any]] = Field(default_factory=list)
    usage: list[dict[str, Any]] = Field(default_factory=list)

    def row_count(self) -> int:
        """Every row the document holds, all kinds together (the digest counts as one)."""
        lists = (self.memories, self.candidates, self.messages, self.precious, self.glossary, self.daily_logs)
        more = (self.skills, self.threads, self.usage)
        return sum(len(rows) for rows in (*lists, *more)) + (self.digest is not None)


@dataclass
class ImportReport:
    """What an import did, per row kind: created, skipped (already present), refused (invalid)."""

    created: dict[str, int] = field(default_factory=lambda: dict.fromkeys(KINDS, 0))
    skipped: dict[str, int] = field(default_factory=lambda: dict.fromkeys(KINDS, 0))
    refused: dict[str, int] = field(default_factory=lambda: dict.fromkeys(KINDS, 0))
    problems: list[dict[str, Any]] = field(default_factory=list)
    indexed: int = 0
    links_dropped: int = 0
    reminders_armed: int = 0

    def note(self, outcome: str, kind: str, row: int | None, row_id: str | None, code: str, reason: str) -> None:
        getattr(self, outcome)[kind] += 1
        self.listing(kind, row, row_id, outcome, code, reason)

    def listing(self, kind: str, row: int | None, row_id: str | None, outcome: str, code: str, reason: str) -> None:
        if len(self.problems) < MAX_PROBLEMS:
            entry = {"kind": kind, "row": row, "id": row_id, "outcome": outcome, "code": code, "reason": reason[:300]}
            self.problems.append(entry)

    def to_dict(self) -> dict[str, Any]:
        listed = sum(self.skipped.values()) + sum(self.refused.values()) + self.links_dropped
        return {
            "created": self.created,
            "skipped": self.skipped,
            "refused": self.refused,
            "indexed": self.indexed,
            "links_dropped": self.links_dropped,
            "reminders_armed": self.reminders_armed,
            "problems": self.problems,
            "problems_not_listed": max(listed - len(self.problems), 0),
        }


class _Refused(Exception):
    def __init__(self, code: str, reason: str) -> None:
        super().__init__(reason)
        self.code = code
        self.reason = reason


def _dump(row: BaseModel) -> dict[str, Any]:
    data = row.model_dump(mode="json")
    data.pop("namespace", None)
    return data


def _validation_reason(exc: ValidationError) -> str:
    first = exc.errors()[0]
    where = ".".join(str(part) for part in first["loc"]) or "row"
    return f"{where}: {first['msg']}"


def _created(row: Candidate | Precious) -> tuple[Any, str]:
    return row.created_at, row.id


def _all_candidates(store: TransferStore, namespace: str) -> list[Candidate]:
    out: list[Candidate] = []
    cursor = None
    while True:
        page = store.list_candidates(namespace, None, limit=500, cursor=cursor)
        out.extend(page.items)
        if not page.next_cursor:
            return out
        cursor = page.next_cursor


def _text(row: dict[str, Any], name: str) -> str:
    """A text field checked like the API checks content: 1..4,000 characters once trimmed."""
    value = row.get(name)
    if value is not None and not isinstance(value, str):
        raise _Refused("invalid_field", f"{name} must be text")
    return clean_content(value or "")


def _check_times(row: BaseModel, prefix: str = "") -> None:
    """Refuse a row with a date-time no store can hold, naming the field (``policies.in_range``)."""
    for name, value in row:
        if isinstance(value, datetime):
            try:
                in_range(value)
            except ValueError as exc:
                raise _Refused("invalid_date", f"{prefix}{name}: {exc}") from exc


def _tags(row: dict[str, Any]) -> tuple[str, ...]:
    value = row.get("tags") or []
    if not isinstance(value, list | tuple) or not all(isinstance(t, str) for t in value):
        raise _Refused("invalid_field", "tags must be a list of text")
    return clean_tags(value)


class TransferService:
    def __init__(
        self,
        store: TransferStore,
        memories: MemoryService,
        clock: Clock,
        skills: SkillService | None = None,
        journal: Journal | None = None,
    ) -> None:
        self._store = store
        self._memories = memories
        self._clock = clock
        self._skills = skills  # services.skills.SkillService (None: exports and imports carry no skills)
        self._journal = journal  # an import is a run of the change journal (docs/journal.md)

    # -- export -----------------------------------------------------------------------------
    def export(self, namespace: str) -> dict[str, Any]:
        digest = self._store.get_digest(namespace)
        return ExportDocument(
            namespace=namespace,
            exported_at=self._clock.now().isoformat(),
            memories=self._memory_rows(namespace),
            candidates=[
                _dump(c) for c in sorted(_all_candidates(self._store, namespace), key=lambda c: (c.created_at, c.id))
            ],
            messages=[_dump(m) for m in self._all_messages(namespace)],
            precious=[_dump(p) for p in sorted(self._all_precious(namespace), key=_created)],
            glossary=[_dump(g) for g in self._store.list_glossary(namespace)],
            digest=_dump(digest) if digest else None,
            daily_logs=[_dump(d) for d in self._store.list_daily_logs(namespace, limit=100_000)],
            skills=self._skills.export(namespace) if self._skills is not None else [],
            threads=[_dump(t) for t in self._all_threads(namespace)],
            usage=[_dump(u) for u in sorted(self._store.list_usage(namespace), key=lambda u: (u.created_at, u.id))],
        ).model_dump()

    def _all_threads(self, namespace: str) -> list[Thread]:
        out: list[Thread] = []
        for deleted in (False, True):
            cursor = None
            while True:
                page = self._store.list_threads(namespace, deleted=deleted, limit=500, cursor=cursor)
                out.extend(page.items)
                if not page.next_cursor:
                    break
                cursor = page.next_cursor
        return sorted(out, key=lambda t: t.id)

    def _memory_rows(self, namespace: str) -> list[dict[str, Any]]:
        """Every memory, each with its reminder's state (``reminder``) when it has one."""
        reminders: dict[str, Reminder] = {}
        for status in ("pending", "delivered", "cancelled"):
            reminders.update((r.memory_id, r) for r in self._store.list_reminders(namespace, status, limit=1_000_000))
        rows = []
        for memory in self._store.iter_memories(namespace):
            row = _dump(memory)
            if (reminder := reminders.get(memory.id)) is not None:
                row["reminder"] = {
                    "remind_at": reminder.remind_at.isoformat(),
                    "status": reminder.status,
                    "delivered_at": reminder.delivered_at.isoformat() if reminder.delivered_at else None,
                }
            rows.append(row)
        return rows

    def _all_precious(self, namespace: str) -> list[Precious]:
        return self._store.list_precious(namespace, limit=1_000_000)

    def _all_messages(self, namespace: str) -> list[Message]:
        out: list[Message] = []
        after: str | None = None
        while True:
            batch = self._store.list_messages(namespace, limit=1000, after_id=after)
            out.extend(batch)
            if len(batch) < 1000:
                return out
            after = batch[-1].id

    # -- import -----------------------------------------------------------------------------
    def import_(
        self,
        namespace: str,
        document: ExportDocument,
        *,
        progress: ProgressFactory | None = None,
        dry_run: bool = False,
        foreign: bool = False,
    ) -> dict[str, Any]:
        """Import ``document`` into ``namespace``; returns the report (``ImportReport.to_dict``).

        With ``dry_run`` nothing is written: the report says what a real run would create, skip and refuse.
        ``foreign``: the rows come from another system (``services/transfer/other_systems.py``): importing counts as
        seeing them, and their own expiry applies. A real import is a run of the change journal: the report's
        ``run_id`` undoes it (docs/journal.md).
        """
        journaled: AbstractContextManager[Run | None] = nullcontext()
        if self._journal is not None and not dry_run:
            detail = {"namespace": namespace, "from": "other_system" if foreign else "engram_export"}
            journaled = self._journal.run("import", detail=detail)
        with journaled as journal_run:
            run = _Import(self._store, self._clock, namespace, dry_run=dry_run, foreign=foreign)
            run.survey(document.memories)
            total = sum(len(getattr(document, k)) for k in KINDS if k != "digest") + int(document.digest is not None)
            step = progress("import", total) if progress else (lambda n: None)
            # Messages and memories first: candidates and notes refer to them.
            run.rows("messages", document.messages, run.message, step)
            run.rows("memories", document.memories, run.memory, step)
            run.rows("candidates", document.candidates, run.candidate, step)
            run.rows("precious", document.precious, run.precious, step)
            run.rows("glossary", document.glossary, run.glossary, step)
            run.rows("daily_logs", document.daily_logs, run.daily_log, step)
            if document.digest is not None:
                run.rows("digest", [document.digest], run.digest, step)
            run.rows("threads", document.threads, run.thread, step)
            run.rows("usage", document.usage, run.usage, step)
            if document.skills and self._skills is not None:
                skills = self._skills

                def skill(row: dict[str, Any]) -> tuple[str, str | None, str]:
                    outcome, detail = skills.import_exported(namespace, row, dry_run=dry_run)
                    return (outcome, row.get("name"), detail) if outcome == "skipped" else (outcome, detail, "")

                run.rows("skills", document.skills, skill, step)
            if not dry_run:
                embed = progress("embed", len(run.inserted_active)) if progress else None
                run.report.indexed = self._memories.upkeep.reindex_ids(namespace, run.inserted_active, progress=embed)
        report = {**run.report.to_dict(), "dry_run": dry_run}
        if journal_run is not None:
            report["run_id"] = journal_run.id  # undo: POST /v1/runs/{run_id}/undo
        return report


class _Import:
    """One import run: what the namespace already holds, the id map, the report."""

    def __init__(
        self, store: TransferStore, clock: Clock, namespace: str, *, dry_run: bool = False, foreign: bool = False
    ) -> None:
        self.store = store
        self.clock = clock
        self.namespace = namespace
        self.foreign = foreign
        self.now = clock.now()
        self.file_memory_ids: set[str] = set()  # the memory ids the file holds (links may point at them)
        self.cycles: set[str] = set()  # the ids of rows whose supersede links go round in a circle
        self.row_number = 0
        self.file_message_ids: set[str] = set()
        self.usage_ids: set[str] | None = None
        # A dry run checks everything a write would and remembers what it would have written, so
        # later rows of the same file see it (a duplicate in the file is a skip in both runs).
        self.dry_run = dry_run
        self.planned_fact_keys: set[str] = set()
        self.planned_days: set[str] = set()
        self.planned_digest = False
        self.message_keys: set[str] | None = None
        self.report = ImportReport()
        self.ids: dict[str, str] = {}  # id in the file -> id in the store (kept, new, or the present row's)
        self.inserted_active: list[str] = []
        existing = list(store.iter_memories(namespace))
        self.memory_ids = {m.id for m in existing}
        self.memory_by_external = {m.external_id: m.id for m in existing if m.external_id}
        self.memory_by_content = {m.content: m.id for m in existing}
        candidates = _all_candidates(store, namespace)
        self.candidate_ids = {c.id for c in candidates}
        self.candidate_by_content = {c.content: c.id for c in candidates}
        notes = store.list_precious(namespace, limit=1_000_000)
        self.precious_ids = {p.id for p in notes}
        self.precious_by_content = {p.content: p.id for p in notes}
        terms = store.list_glossary(namespace)
        self.term_ids = {t.id for t in terms}
        self.term_by_name = {t.term.casefold(): t.id for t in terms}

    def rows(
        self,
        kind: str,
        rows: Iterable[dict[str, Any]],
        handle: Callable[[dict[str, Any]], tuple[str, str | None, str]],
        step: Callable[[int], None],
    ) -> None:
        """Run ``handle`` on each row; it returns (outcome, row id, reason) or raises ``_Refused``."""
        for number, row in enumerate(rows):
            row_id = row.get("id") if isinstance(row.get("id"), str) else None
            self.row_number = number
            try:
                outcome, row_id, reason = handle(row)
            except _Refused as exc:
                self.report.note("refused", kind, number, row_id, exc.code, exc.reason)
            except ValidationError as exc:
                self.report.note("refused", kind, number, row_id, "invalid_row", _validation_reason(exc))
            except InvalidInput as exc:
                self.report.note("refused", kind, number, row_id, exc.code, exc.message)
            else:
                if outcome == "created":
                    self.report.created[kind] += 1
                else:
                    self.report.note(outcome, kind, number, row_id, "already_present", reason)
            step(1)

    def survey(self, rows: list[dict[str, Any]]) -> None:
        """What the file's memories are (links may point forward) and which of them form supersede cycles."""
        later: dict[str, str] = {}
        for row in rows:
            own = row.get("id")
            if isinstance(own, str):
                self.file_memory_ids.add(own)
                if isinstance(row.get("superseded_by_id"), str):
                    later[own] = row["superseded_by_id"]
        for row in rows:  # "A supersedes B" is "B superseded by A"
            own, earlier = row.get("id"), row.get("supersedes_id")
            if isinstance(own, str) and isinstance(earlier, str):
                later.setdefault(earlier, own)
        for start in later:
            seen: list[str] = []
            node: str | None = start
            while node is not None and node not in seen:
                seen.append(node)
                node = later.get(node)
            if node is not None:  # came back to a row of this walk: the loop from there on is a cycle
                self.cycles.update(seen[seen.index(node) :])

    def _link(self, target: str | None, what: str, row_id: str | None) -> str | None:
        """``target`` when it names a memory of the file or the namespace, else ``None`` (reported)."""
        if target is None:
            return None
        resolved = self._ref(target)
        if resolved in self.file_memory_ids or resolved in self.memory_ids or target in self.file_memory_ids:
            return resolved
        self._drop_link(row_id, f"{what} {target} names no memory of the file or the namespace: dropped")
        return None

    def _drop_link(self, row_id: str | None, reason: str) -> None:
        self.report.links_dropped += 1
        self.report.listing("memories", self.row_number, row_id, "link_dropped", "dangling_link", reason)

    def _message_links(self, ids: tuple[str, ...], row_id: str | None) -> tuple[str, ...]:
        """The source messages that exist (in the file, already mapped, or in the namespace)."""
        wanted = [self._ref(i) or i for i in ids]
        known = {m.id for m in self.store.get_messages(self.namespace, wanted)} if wanted else set()
        kept = tuple(i for i in wanted if i in known or i in self.file_message_ids)
        if len(kept) < len(wanted):
            missing = ", ".join(i for i in wanted if i not in kept)[:200]
            self._drop_link(row_id, f"source_message_ids {missing} name no message of the file or the namespace")
        return kept

    def _reminder(self, memory: Memory, state: Any) -> Reminder | None:
        """The memory's reminder: the state the file carries, else pending (an imported reminder fires)."""
        state_at = state.get("remind_at") if isinstance(state, dict) else None
        remind_at = memory.remind_at or state_at  # a cancelled reminder's memory has no remind_at any more
        if remind_at is None:
            return None
        status: Any = "pending"
        delivered: Any = None
        if isinstance(state, dict):
            status = state.get("status") if state.get("status") in ("pending", "delivered", "cancelled") else "pending"
            delivered = state.get("delivered_at") or None
        reminder = Reminder.model_validate(
            {
                "namespace": self.namespace,
                "memory_id": memory.id,
                "remind_at": remind_at,
                "status": status,
                "delivered_at": delivered if status == "delivered" else None,
            }
        )
        _check_times(reminder, "reminder.")
        return reminder

    # -- helpers ------------------------------------------------------------------------------
    def _own_id(self, row: dict[str, Any], prefix: str) -> str:
        """The row's id when it is well-formed, else a new one (remembered for references)."""
        old = row.get("id")
        if isinstance(old, str) and _ID.match(old):
            self.ids.setdefault(old, old)
            return old
        new = new_id(prefix)
        if isinstance(old, str):
            self.ids[old] = new
        return new

    def _ref(self, old: Any) -> str | None:
        return self.ids.get(old, old) if isinstance(old, str) and old else None

    def _stamps(self, row: dict[str, Any], *names: str) -> dict[str, Any]:
        now = self.clock.now()
        return {name: row.get(name) or now for name in names}

    def _skip(self, old_id: Any, present: str, reason: str) -> tuple[str, str | None, str]:
        if isinstance(old_id, str):
            self.ids[old_id] = present
        return "skipped", present, reason

    def _present(
        self, what: str, old_id: Any, ids: set[str], by_content: dict[str, str], content: str | None = None
    ) -> tuple[str, str | None, str] | None:
        """A skip when the row is present by id or (given ``content``) by identical content."""
        if isinstance(old_id, str) and old_id in ids:
            return self._skip(old_id, old_id, f"a {what} with this id is present")
        if content is not None and content in by_content:
            return self._skip(old_id, by_content[content], f"a {what} with identical content is present")
        return None

    def _insert(
        self, write: Callable[[Any], Any], row: Candidate | Precious, ids: set[str], by_content: dict[str, str]
    ) -> tuple[str, str | None, str]:
        if not self.dry_run:
            try:
                write(row)
            except Conflict as exc:
                raise _Refused("conflict", exc.message) from exc
        ids.add(row.id)
        by_content[row.content] = row.id
        return "created", row.id, ""

    # -- one handler per row kind ---------------------------------------------------------------
    def memory(self, row: dict[str, Any]) -> tuple[str, str | None, str]:
        old_id = row.get("id")
        if skip := self._present("memory", old_id, self.memory_ids, self.memory_by_content):
            return skip
        external_id = row.get("external_id")
        if isinstance(external_id, str) and external_id in self.memory_by_external:
            return self._skip(old_id, self.memory_by_external[external_id], "a memory with this external_id is present")
        content = _text(row, "content")
        if skip := self._present("memory", old_id, self.memory_ids, self.memory_by_content, content):
            return skip
        self._check_memory_row(old_id, external_id)
        fact_key = normalize_fact_key(row["fact_key"]) if row.get("fact_key") else None
        fields = {k: v for k, v in row.items() if k != "reminder"}
        memory = Memory.model_validate(
            {
                **fields,
                **self._stamps(row, "created_at", "updated_at"),
                "id": self._own_id(row, "mem"),
                "namespace": self.namespace,
                "content": content,
                "fact_key": fact_key,
                "tags": _tags(row),
                "index_ref": None,
            }
        )
        _check_times(memory)
        memory = self._linked(memory, old_id if isinstance(old_id, str) else None)
        if self.foreign:
            memory = self._moved_in(memory)
        reminder = self._reminder(memory, row.get("reminder"))
        if self.dry_run:
            self._plan_memory(memory)
        else:
            try:
                self.store.insert_memory(memory)
            except Conflict as exc:
                holder = self.store.find_active_by_fact_key(self.namespace, fact_key) if fact_key else None
                if holder is not None and memory.status == "active":
                    raise _Refused(
                        "fact_key_taken", f"fact_key {fact_key!r} is held by active memory {holder.id}"
                    ) from exc
                raise _Refused("conflict", exc.message) from exc
        if reminder is not None and not self.dry_run:
            self.store.put_reminder(reminder)  # armed: listed, and told in a chat turn once it is due
            self.report.reminders_armed += 1
        self.memory_ids.add(memory.id)
        self.memory_by_content[memory.content] = memory.id
        if memory.external_id:
            self.memory_by_external[memory.external_id] = memory.id
        if memory.status == "active":
            self.inserted_active.append(memory.id)
        return "created", memory.id, ""

    def _check_memory_row(self, old_id: Any, external_id: Any) -> None:
        if isinstance(external_id, str) and len(external_id) > MAX_EXTERNAL_ID_CHARS:
            raise _Refused("invalid_field", f"external_id is longer than {MAX_EXTERNAL_ID_CHARS} characters")
        if isinstance(old_id, str) and old_id in self.cycles:
            raise _Refused("supersede_cycle", "its supersede links go round in a circle back to it")

    def _linked(self, memory: Memory, row_id: str | None) -> Memory:
        """The memory with its links resolved; a link to no row of the file or namespace is dropped (a
        version that lost its successor that way is archived: nothing in Engram replaces it)."""
        later = self._link(memory.superseded_by_id, "superseded_by_id", row_id)
        status = memory.status
        if memory.superseded_by_id is not None and later is None and status == "superseded":
            status = "archived"
        return memory.model_copy(
            update={
                "supersedes_id": self._link(memory.supersedes_id, "supersedes_id", row_id),
                "superseded_by_id": later,
                "status": status,
                "source_message_ids": self._message_links(memory.source_message_ids, row_id),
            }
        )

    def _moved_in(self, memory: Memory) -> Memory:
        """A memory from another system: seen now (unless the source kept its own last-seen time), and
        expired on arrival when the source's own expiry has passed. An old version (superseded, archived)
        changed status now, as far as retention goes: its hard delete counts from the move, so the first
        cleanup does not erase the versions the person brought along."""
        update: dict[str, Any] = {}
        if memory.last_seen_at is None:
            update["last_seen_at"] = self.now
        if memory.status == "active" and memory.expires_at is not None and memory.expires_at <= self.now:
            update |= {"status": "expired", "status_changed_at": self.now}
        elif memory.status != "active":
            update["status_changed_at"] = self.now
        return memory.model_copy(update=update) if update else memory

    def _plan_memory(self, memory: Memory) -> None:
        """The checks ``insert_memory`` makes, without the write (dry run)."""
        if memory.status == "active" and memory.fact_key:
            holder = self.store.find_active_by_fact_key(self.namespace, memory.fact_key)
            if holder is not None or memory.fact_key in self.planned_fact_keys:
                held_by = holder.id if holder is not None else "an earlier row of this import"
                raise _Refused("fact_key_taken", f"fact_key {memory.fact_key!r} is held by active memory {held_by}")
            self.planned_fact_keys.add(memory.fact_key)

    def _plan_message(self, message: Message) -> tuple[str, str | None, str]:
        """What ``insert_message`` would do (dry run): skip a present id or external id."""
        if self.message_keys is None:
            self.message_keys = set()
            after: str | None = None
            while True:
                batch = self.store.list_messages(self.namespace, limit=1000, after_id=after)
                self.message_keys.update(f"id:{m.id}" for m in batch)
                self.message_keys.update(f"ext:{m.external_id}" for m in batch if m.external_id)
                if len(batch) < 1000:
                    break
                after = batch[-1].id
        if f"id:{message.id}" in self.message_keys:
            return "skipped", message.id, "a message with this id is present"
        if f"ext:{message.external_id}" in self.message_keys:
            return "skipped", message.id, "a message with this external_id is present"
        self.message_keys.update((f"id:{message.id}", f"ext:{message.external_id}"))
        return "created", message.id, ""

    def message(self, row: dict[str, Any]) -> tuple[str, str | None, str]:
        # The API's rules for a message (role, 1..100,000 characters, conversation id, model name).
        checked = MessageIn.model_validate(
            {k: row.get(k) for k in ("role", "content", "conversation_id", "model") if row.get(k) is not None}
        )
        message = Message.model_validate(
            {**row, **self._stamps(row, "created_at"), "id": self._own_id(row, "msg"), "namespace": self.namespace}
        )
        _check_times(message)
        self.file_message_ids.add(message.id)
        message = message.model_copy(
            update={
                "content": checked.content,
                "external_id": message.external_id or f"import:{message.id}",
                # From another system: stored now, whenever it was said, so extraction reads that history
                # once. Engram's own export keeps its time (its memories came along: lossless restore).
                "stored_at": message.stored_at if message.stored_at and not self.foreign else self.clock.now(),
            }
        )
        if self.dry_run:
            return self._plan_message(message)
        try:
            stored, created = self.store.insert_message(message)
        except Conflict:
            return "skipped", message.id, "a message with this id is present"
        if not created:
            return self._skip(row.get("id"), stored.id, "a message with this external_id is present")
        return "created", stored.id, ""

    def candidate(self, row: dict[str, Any]) -> tuple[str, str | None, str]:
        old_id = row.get("id")
        if skip := self._present("candidate", old_id, self.candidate_ids, self.candidate_by_content):
            return skip
        content = _text(row, "content")
        if skip := self._present("candidate", old_id, self.candidate_ids, self.candidate_by_content, content):
            return skip
        candidate = Candidate.model_validate(
            {
                **row,
                **self._stamps(row, "created_at"),
                "id": self._own_id(row, "cand"),
                "namespace": self.namespace,
                "content": content,
                "fact_key": normalize_fact_key(row["fact_key"]) if row.get("fact_key") else None,
                "tags": _tags(row),
            }
        )
        _check_times(candidate)
        candidate = candidate.model_copy(
            update={
                "target_memory_id": self._ref(candidate.target_memory_id),
                "result_memory_id": self._ref(candidate.result_memory_id),
                "source_message_ids": tuple(self._ref(i) or i for i in candidate.source_message_ids),
            }
        )
        return self._insert(self.store.insert_candidate, candidate, self.candidate_ids, self.candidate_by_content)

    def precious(self, row: dict[str, Any]) -> tuple[str, str | None, str]:
        old_id = row.get("id")
        if skip := self._present("precious note", old_id, self.precious_ids, self.precious_by_content):
            return skip
        content = _text(row, "content")
        if skip := self._present("precious note", old_id, self.precious_ids, self.precious_by_content, content):
            return skip
        reason = row.get("reason")
        if isinstance(reason, str) and len(reason) > MAX_REASON_CHARS:
            raise _Refused("invalid_field", f"reason is longer than {MAX_REASON_CHARS} characters")
        note = Precious.model_validate(
            {
                **row,
                **self._stamps(row, "created_at"),
                "id": self._own_id(row, "prc"),
                "namespace": self.namespace,
                "content": content,
                "tags": _tags(row),
            }
        )
        _check_times(note)
        note = note.model_copy(update={"source_message_ids": tuple(self._ref(i) or i for i in note.source_message_ids)})
        return self._insert(self.store.insert_precious, note, self.precious_ids, self.precious_by_content)

    def glossary(self, row: dict[str, Any]) -> tuple[str, str | None, str]:
        old_id = row.get("id")
        if skip := self._present("glossary term", old_id, self.term_ids, self.term_by_name):
            return skip
        # The API's rules for a term (1..200 characters, at most 50 aliases, a 1..2,000 definition).
        checked = GlossaryIn.model_validate(
            {k: row.get(k) for k in ("term", "aliases", "definition") if row.get(k) is not None}
        )
        name = checked.term.strip()
        if skip := self._present("glossary term", old_id, self.term_ids, self.term_by_name, name.casefold()):
            return skip
        term = GlossaryTerm.model_validate(
            {
                **row,
                **self._stamps(row, "created_at", "updated_at"),
                "id": self._own_id(row, "gls"),
                "namespace": self.namespace,
                "term": name,
                "aliases": tuple(dict.fromkeys(a.strip() for a in checked.aliases if a.strip())),
                "definition": checked.definition.strip(),
            }
        )
        _check_times(term)
        if not self.dry_run:
            self.store.put_glossary_term(term)
        self.term_ids.add(term.id)
        self.term_by_name[name.casefold()] = term.id
        return "created", term.id, ""

    def daily_log(self, row: dict[str, Any]) -> tuple[str, str | None, str]:
        day = row.get("date")
        try:
            Date.fromisoformat(day) if isinstance(day, str) else None
        except ValueError:
            day = None
        if not isinstance(day, str):
            raise _Refused("invalid_date", "date must be YYYY-MM-DD")
        log = DailyLog.model_validate({**row, **self._stamps(row, "created_at"), "namespace": self.namespace})
        _check_times(log)
        if len(log.title) > LOG_TITLE_CHARS or len(log.summary) > LOG_SUMMARY_CHARS:
            raise _Refused("invalid_field", f"title or summary over {LOG_TITLE_CHARS} / {LOG_SUMMARY_CHARS} characters")
        if len(log.sections) > LOG_SECTIONS or any(
            len(str(v)) > LOG_SECTION_CHARS for s in log.sections for v in s.values()
        ):
            raise _Refused("invalid_field", f"at most {LOG_SECTIONS} sections of {LOG_SECTION_CHARS} characters")
        if day in self.planned_days or self.store.get_daily_log(self.namespace, day) is not None:
            return "skipped", day, "a log for this date is present"
        if self.dry_run:
            self.planned_days.add(day)
        else:
            self.store.put_daily_log(log)
        return "created", day, ""

    def thread(self, row: dict[str, Any]) -> tuple[str, str | None, str]:
        """A thread's title and recycle-bin mark, set on the thread its messages made (never over the
        owner's own title); its counts follow the messages."""
        thread_id = row.get("id")
        if not isinstance(thread_id, str) or not thread_id:
            raise _Refused("invalid_field", "a thread needs its id")
        title, deleted = row.get("title"), row.get("deleted_at")
        if title is not None and (not isinstance(title, str) or len(title) > MAX_THREAD_TITLE_CHARS):
            raise _Refused("invalid_field", f"title must be text of at most {MAX_THREAD_TITLE_CHARS} characters")
        checked = Thread.model_validate(
            {**row, "namespace": self.namespace, "created_at": row.get("created_at") or self.now}
        )
        _check_times(checked)
        try:
            present = self.store.get_thread(self.namespace, thread_id)
        except NotFound:
            if self.dry_run:
                return "created", thread_id, ""
            raise _Refused("no_messages", "no message of the file or the namespace is in this thread") from None
        if present.title or present.deleted_at or (title is None and deleted is None):
            return "skipped", thread_id, "the thread has its own title" if present.title else "nothing to set"
        if not self.dry_run:
            self.store.update_thread(self.namespace, thread_id, title=title, deleted_at=checked.deleted_at)
        return "created", thread_id, ""

    def usage(self, row: dict[str, Any]) -> tuple[str, str | None, str]:
        """One usage log row, once (by its id)."""
        if self.usage_ids is None:
            self.usage_ids = {u.id for u in self.store.list_usage(self.namespace)}
        record = UsageRecord.model_validate({**row, "namespace": self.namespace})
        _check_times(record)
        if min(record.input_tokens, record.output_tokens, record.cache_read_tokens, record.cache_write_tokens) < 0:
            raise _Refused("invalid_field", "token counts cannot be negative")
        if record.id in self.usage_ids:
            return "skipped", record.id, "a usage row with this id is present"
        if not self.dry_run:
            self.store.append_usage(record)
        self.usage_ids.add(record.id)
        return "created", record.id, ""

    def digest(self, row: dict[str, Any]) -> tuple[str, str | None, str]:
        content = row.get("content")
        if not isinstance(content, str):
            raise _Refused("invalid_field", "digest content must be text")
        text = clean_digest(content)  # the API's rule (DIGEST_RULE)
        if self.planned_digest or self.store.get_digest(self.namespace) is not None:
            return "skipped", None, "the namespace has a digest"
        if self.dry_run:
            self.planned_digest = True
        elif text:
            self.store.put_digest(
                Digest(namespace=self.namespace, content=text, updated_at=row.get("updated_at") or self.clock.now())
            )
        return "created", None, ""
