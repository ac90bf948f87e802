"""Cleanup: retention of every row kind (docs/ARCHITECTURE.md, "Background jobs").

Per namespace: messages, usage rows, events and idempotency keys older than their periods are
deleted; active memories unseen for ``memory_expire_unseen_days`` expire (never pinned, identity or
persona ones); active memories with next to no text (``ENGRAM_EMPTY_MEMORY_MIN_CHARS``) are deleted;
memories deleted, superseded or expired for longer than ``hard_delete_after_days``
are erased — the search document first, and when that fails the row stays for the next run, so
the index never keeps a vector whose row is gone. Index writes that failed since the last run are
repaired first (``IndexUpkeep.repair``). Skills deleted longer ago than their restore window
(30 days) are purged with their resource files (``SkillService.purge_deleted``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from datetime import datetime, timedelta
from typing import Any, Protocol

from engram.domain.errors import MESSAGE_CHARS, Conflict, EngramError, NotFound
from engram.domain.models import Memory, MemoryFilter
from engram.domain.policies import expires_by_retention, too_short
from engram.domain.ports import (
    AuditRows,
    Clock,
    JournalRows,
    KeyValueRows,
    MemoryRows,
    MessageRows,
    SearchIndex,
    StoreAdmin,
    ThreadRows,
)
from engram.services.index.upkeep import IndexUpkeep
from engram.services.jobs.runs import NamespaceLocks, record_run
from engram.services.library.skills import SkillService
from engram.services.library.threads import ThreadService

log = logging.getLogger(__name__)

_PAGE = 500
HARD_DELETE_STATUSES = ("deleted", "superseded", "expired")


@dataclass(frozen=True)
class RetentionPolicy:
    """How long each kind of row is kept.

    ``settings.py`` holds the defaults (written once); ``bootstrap/configs.py`` maps them.
    """

    messages_days: int
    usage_days: int
    events_days: int
    journal_days: int  # the change journal (docs/journal.md): older runs can no longer be undone
    idempotency_days: int
    memory_unseen_days: int
    hard_delete_days: int
    empty_min_chars: int  # active memories with fewer letters or digits are deleted; 0 = never


@dataclass
class NamespaceCleanup:
    namespace: str
    messages: int = 0
    usage: int = 0
    events: int = 0
    journal: int = 0
    idempotency: int = 0
    expired: int = 0
    emptied: int = 0
    hard_deleted: int = 0
    threads_purged: int = 0
    skills_purged: int = 0
    skill_files_purged: int = 0
    kept_for_retry: int = 0
    index_repaired: int = 0
    errors: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class CleanupReport:
    namespaces: list[NamespaceCleanup] = field(default_factory=list)
    # The nightly run over every namespace (run() without one) also does what spans them:
    skill_files_collected: int = 0  # resource files no skill version names any more (SkillService)
    replicas_rebuilt: int = 0  # replica namespaces whose count differed from their log, rebuilt
    errors: list[dict[str, Any]] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        keys = (
            "messages",
            "usage",
            "events",
            "idempotency",
            "expired",
            "emptied",
            "hard_deleted",
            "threads_purged",
            "skills_purged",
            "skill_files_purged",
            "kept_for_retry",
            "index_repaired",
        )
        return {
            "job": "cleanup",
            **{k: sum(int(getattr(ns, k)) for ns in self.namespaces) for k in keys},
            "skill_files_collected": self.skill_files_collected,
            "replicas_rebuilt": self.replicas_rebuilt,
            "errors": sum(len(ns.errors) for ns in self.namespaces) + len(self.errors),
            "namespaces": [asdict(ns) for ns in self.namespaces],
        }


class CleanupStore(MemoryRows, MessageRows, ThreadRows, AuditRows, JournalRows, KeyValueRows, StoreAdmin, Protocol):
    """What the retention job deletes, and its cursors."""


class CleanupService:
    def __init__(
        self,
        store: CleanupStore,
        index: SearchIndex,
        clock: Clock,
        policy: RetentionPolicy,
        locks: NamespaceLocks | None = None,
        upkeep: IndexUpkeep | None = None,
        skills: SkillService | None = None,
        conversations: Any = None,
        reconcile: Callable[[], int] | None = None,
    ) -> None:
        self._store = store
        # services.conversations.ConversationService: messages deleted here leave its index too.
        self._conversations = conversations
        self._skills = skills
        # The replica backend's count check (bootstrap.adapters.search_reconcile): how many it rebuilt.
        self._reconcile = reconcile
        self._index = index
        # Repairs the namespace's missed index writes first, and records what a hard delete leaves behind.
        self._upkeep = upkeep or IndexUpkeep(store, index, None, clock)
        self._clock = clock
        self._policy = policy
        self._locks = locks or NamespaceLocks()

    def run(self, namespace: str | None = None) -> CleanupReport:
        """Clean every namespace (or one)."""
        namespaces = [namespace] if namespace else self._namespaces()
        report = CleanupReport(namespaces=[self._run_namespace(ns) for ns in namespaces])
        if namespace is None:
            self._across_namespaces(report)
        return report

    def _across_namespaces(self, report: CleanupReport) -> None:
        """The nightly run's steps over every namespace at once; a failure is reported, the next night retries."""
        if self._skills is not None:
            try:
                report.skill_files_collected = self._skills.collect_orphan_files(now=self._clock.now())
            except EngramError as exc:
                report.errors.append({"error": exc.code, "op": "skill_files", "message": exc.message[:MESSAGE_CHARS]})
        if self._reconcile is not None:
            try:
                report.replicas_rebuilt = self._reconcile()
            except EngramError as exc:
                report.errors.append(
                    {"error": exc.code, "op": "replica_reconcile", "message": exc.message[:MESSAGE_CHARS]}
                )

    def _namespaces(self) -> list[str]:
        """The store's namespaces, and those that only have skills (an agent that never chats)."""
        found = set(self._store.list_namespaces())
        if self._skills is not None:
            found.update(self._skills.namespaces())
        return sorted(found)

    def _run_namespace(self, namespace: str) -> NamespaceCleanup:
        result = NamespaceCleanup(namespace=namespace)
        try:
            with self._locks.hold("cleanup", namespace):
                self._clean(namespace, result)
        except EngramError as exc:
            result.errors.append({"error": exc.code, "message": exc.message[:MESSAGE_CHARS]})
        detail = asdict(result)
        detail.pop("namespace")
        record_run(self._store, self._clock, "cleanup", namespace, detail)
        return result

    def _clean(self, namespace: str, result: NamespaceCleanup) -> None:
        now = self._clock.now()
        try:
            result.index_repaired = self._upkeep.repair(namespace)
        except EngramError as exc:  # the index is still away: the record stays for the next run
            result.errors.append({"error": exc.code, "op": "index_repair"})
        p = self._policy
        messages_before = now - timedelta(days=p.messages_days)
        self._forget_messages(namespace, messages_before, result)
        result.messages = self._store.delete_messages_before(namespace, messages_before)
        result.usage = self._store.delete_usage_before(namespace, now - timedelta(days=p.usage_days))
        result.events = self._store.delete_events_before(namespace, now - timedelta(days=p.events_days))
        result.journal = self._store.delete_journal_before(namespace, now - timedelta(days=p.journal_days))
        result.idempotency = self._store.delete_idempotency_before(namespace, now - timedelta(days=p.idempotency_days))
        self._expire(namespace, now, result)
        self._sweep_empty(namespace, now, result)
        self._hard_delete(namespace, now, result)
        # Threads in the recycle bin go after the same grace as deleted memories (docs/threads.md).
        threads = ThreadService(self._store, self._clock)
        result.threads_purged = threads.purge_deleted(namespace, older_than_days=p.hard_delete_days, now=now)
        if self._skills is not None:
            result.skills_purged, result.skill_files_purged = self._skills.purge_deleted(namespace, now=now)

    def _forget_messages(self, namespace: str, before: datetime, result: NamespaceCleanup) -> None:
        """Take the messages about to be deleted out of the conversation index (docs/conversations.md);
        a failure leaves their documents there (recall re-checks every hit against the store)."""
        if self._conversations is None:
            return
        after: str | None = None
        while True:
            page = self._store.list_messages(namespace, until=before, limit=_PAGE, after_id=after)
            if not page:
                return
            try:
                self._conversations.forget(namespace, [m.id for m in page])
            except EngramError as exc:
                result.errors.append({"error": exc.code, "op": "conversation_unindex"})
                return
            after = page[-1].id

    def _expire(self, namespace: str, now: datetime, result: NamespaceCleanup) -> None:
        before = now - timedelta(days=self._policy.memory_unseen_days)
        after: tuple[datetime, str] | None = None
        while True:
            # Oldest sighting first, paged past the rows that stay (pinned, identity, core): a first page
            # full of them must not hide the expirable rows behind it.
            page = self._store.memories_unseen_since(namespace, before, limit=_PAGE, after=after)
            for memory in page:
                unseen_too_long = expires_by_retention(memory, now, self._policy.memory_unseen_days)
                if unseen_too_long and self._retire(memory, "expired", now, result):
                    result.expired += 1
            if len(page) < _PAGE:
                return
            last = page[-1]
            after = (last.last_seen_at or last.created_at, last.id)

    def _retire(self, memory: Memory, status: str, now: datetime, result: NamespaceCleanup) -> bool:
        """Move ``memory`` to ``status`` at the version read (one edited, archived or restored since is
        left for the next run: ``False``), then take it out of the index (a failure is left for the hard
        delete, which retries the vector)."""
        try:
            self._store.update_memory(
                memory.model_copy(update={"status": status, "status_changed_at": now, "updated_at": now})
            )
        except (Conflict, NotFound):
            return False
        try:
            self._index.delete(memory.namespace, memory.id, memory.index_ref)
        except EngramError as exc:
            result.errors.append({"error": exc.code, "memory_id": memory.id, "op": "unindex"})
        return True

    def _sweep_empty(self, namespace: str, now: datetime, result: NamespaceCleanup) -> None:
        """Delete (soft: restorable, then erased by the hard delete) active memories with fewer than
        ``empty_min_chars`` letters or digits, pinned ones aside (Aelios' empty-memory sweep)."""
        least = self._policy.empty_min_chars
        if least <= 0:
            return
        cursor: str | None = None
        while True:
            page = self._store.list_memories(namespace, MemoryFilter(), limit=_PAGE, cursor=cursor)
            for memory in page.items:
                if (
                    not memory.pinned
                    and too_short(memory.content, least)
                    and self._retire(memory, "deleted", now, result)
                ):
                    result.emptied += 1
            cursor = page.next_cursor
            if cursor is None:
                return

    def _hard_delete(self, namespace: str, now: datetime, result: NamespaceCleanup) -> None:
        before = now - timedelta(days=self._policy.hard_delete_days)
        failed: set[str] = set()
        while True:
            page = [
                m
                for m in self._store.memories_changed_before(namespace, HARD_DELETE_STATUSES, before, limit=_PAGE)
                if m.id not in failed
            ]
            if not page:
                return
            for memory in page:
                try:
                    self._index.delete(namespace, memory.id, memory.index_ref)
                except EngramError as exc:
                    failed.add(memory.id)
                    result.kept_for_retry += 1
                    result.errors.append({"error": exc.code, "memory_id": memory.id, "op": "hard_delete"})
                    continue
                try:  # only the row as read: one restored meanwhile stays
                    self._store.delete_memory_row(namespace, memory.id, version=memory.version)
                except Conflict as exc:
                    failed.add(memory.id)
                    # Its document may have been written by the restore before the delete above.
                    self._upkeep.record_failure(namespace, memory.id, exc.code, "upsert")
                    continue
                result.hard_deleted += 1
            if len(failed) >= _PAGE:  # a whole page keeps failing: leave the rest for the next run
                return
