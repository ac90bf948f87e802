"""A property-based state machine over the memory service on every store (in-memory, SQLite, DynamoDB
under moto): people, jobs and recall writing at once, the index going away and coming back.

Invariants (docs/ARCHITECTURE.md, "Write rules"), checked after every step:
- at most one active memory per fact_key;
- nothing archived, deleted or superseded becomes active without an explicit restore;
- counters (recall_count, seen_count) never go down;
- every acknowledged write is readable: the content last acknowledged for a memory is the stored one;
- after a repair, the search index holds exactly the active memories.

``make test`` runs a bounded, derandomized profile (fixed seed). A longer run:
``ENGRAM_STATEFUL_EXAMPLES=500 ENGRAM_STATEFUL_STEPS=60 .venv/bin/python -m pytest
tests/integration/test_memory_state_machine.py -m slow`` (the ``slow`` variant; README, "Development").
"""

from __future__ import annotations

import os
import threading
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from engram.adapters.search.inmemory import InMemorySearchIndex
from engram.domain.errors import Conflict, UpstreamUnavailable
from engram.domain.models import IndexedDoc, new_id
from engram.domain.ports import MemoryStore
from engram.services.library.candidates import CandidateService
from engram.services.library.memories import MemoryPatch, MemoryRules, MemoryService, MemoryWrite
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from tests.contract.conftest import STORE_FACTORIES
from tests.fakes.clock import ManualClock
from tests.fakes.pausing_store import PausingStore

KEYS = [None, "profile:city", "profile:job", "pet:name"]
WORDS = ["Lisbon", "Berlin", "Porto", "nurse", "pilot", "Miso", "Nori"]
PINNED_KINDS = [{}, {"pinned": True}, {"layer": "core"}]

# Bounded for `make test`: (examples, steps) per store; moto answers a call in milliseconds, not micro.
BOUNDS = {"memory": (15, 25), "sqlite": (15, 25), "dynamodb": (3, 15)}
EXAMPLES = os.environ.get("ENGRAM_STATEFUL_EXAMPLES")
STEPS = os.environ.get("ENGRAM_STATEFUL_STEPS")


def bounded(store_name: str) -> settings:
    examples, steps = BOUNDS[store_name]
    return settings(
        max_examples=int(EXAMPLES or examples),
        stateful_step_count=int(STEPS or steps),
        derandomize=True,  # a fixed seed: the same examples on every run of `make test`
        deadline=None,
        suppress_health_check=list(HealthCheck),
    )


def long_run(store_name: str) -> settings:
    return settings(
        max_examples=int(EXAMPLES or 300),
        stateful_step_count=int(STEPS or 50),
        deadline=None,
        suppress_health_check=list(HealthCheck),
    )


class FlakyIndex(InMemorySearchIndex):
    """The in-memory index, unreachable while ``down``; ``docs`` is what it holds, per memory id."""

    def __init__(self) -> None:
        super().__init__()
        self.down = False
        self.docs: set[str] = set()
        self._docs_lock = threading.Lock()

    def upsert(self, doc: IndexedDoc) -> str:
        if self.down:
            raise UpstreamUnavailable("index unreachable")
        ref = super().upsert(doc)
        with self._docs_lock:
            self.docs.add(doc.memory_id)
        return ref

    def delete(self, namespace: str, memory_id: str, ref: str | None = None) -> None:
        if self.down:
            raise UpstreamUnavailable("index unreachable")
        super().delete(namespace, memory_id, ref)
        with self._docs_lock:
            self.docs.discard(memory_id)


class MemoryMachine(RuleBasedStateMachine):
    # One store (and its clock) per test run; each example works in a namespace of its own (a store
    # never mixes them), on the same clock, moved forward step by step.
    store: MemoryStore
    clock: ManualClock

    def __init__(self) -> None:
        super().__init__()
        self.ns = new_id("ns")
        self.index = FlakyIndex()
        self.gate = PausingStore(self.store)
        gated: Any = self.gate  # the service writes through the gate; the checks read the store itself
        self.memories = MemoryService(gated, self.index, None, self.clock, MemoryRules(dedup_cosine=0.92))
        self.candidates = CandidateService(self.store, self.memories, self.clock)
        self.ids: list[str] = []
        self.content: dict[str, str] = {}  # the content last acknowledged per memory
        self.inactive: set[str] = set()  # known non-active since an acknowledged write; only restore revives
        self.counts: dict[str, tuple[int, int]] = {}  # (recall_count, seen_count) last observed

    # -- helpers ------------------------------------------------------------------------------
    def _pick(self, n: int) -> str:
        return self.ids[n % len(self.ids)]

    def _ack(self, memory_id: str, content: str) -> None:
        if memory_id not in self.content:
            self.ids.append(memory_id)
        self.content[memory_id] = content

    def _ack_result(self, result: Any) -> None:
        self._ack(result.memory.id, result.memory.content)
        if result.previous is not None:
            self.inactive.add(result.previous.id)

    def _step(self) -> None:
        self.clock.advance(seconds=1)  # each step at its own time (index-repair cursors compare times)

    # -- writers ------------------------------------------------------------------------------
    @rule(word=st.sampled_from(WORDS), key=st.sampled_from(KEYS), kind=st.sampled_from(PINNED_KINDS))
    def person_writes(self, word: str, key: str | None, kind: dict[str, Any]) -> None:
        self._step()
        req = MemoryWrite(content=f"The user mentioned {word}", fact_key=key, **kind)
        self._ack_result(self.memories.write(self.ns, req))

    @rule(word=st.sampled_from(WORDS), key=st.sampled_from(KEYS[1:]))
    def extraction_writes(self, word: str, key: str) -> None:
        self._step()
        holder = self.store.find_active_by_fact_key(self.ns, key)
        req = MemoryWrite(content=f"The user mentioned {word}", fact_key=key, source="extraction")
        result = self.memories.write(self.ns, req, dedup=True, automated=True)
        if holder is not None and (holder.pinned or holder.layer == "core"):
            # Automation never takes over a protected memory: it is proposed, or it was the same fact.
            assert result.action in ("proposed", "seen")
            assert self.store.get_memory(self.ns, holder.id).status == "active"
        self._ack_result(result)

    @precondition(lambda self: self.ids)
    @rule(n=st.integers(0, 10**6), word=st.sampled_from(WORDS))
    def person_supersedes(self, n: int, word: str) -> None:
        self._step()
        memory_id = self._pick(n)
        try:
            result = self.memories.supersede(self.ns, memory_id, MemoryWrite(content=f"Corrected: {word}"))
        except Conflict:
            assert self.store.get_memory(self.ns, memory_id).status != "active"
            return
        self._ack_result(result)

    @precondition(lambda self: self.ids)
    @rule(n=st.integers(0, 10**6), word=st.sampled_from(WORDS))
    def person_edits(self, n: int, word: str) -> None:
        self._step()
        memory_id = self._pick(n)
        updated = self.memories.update(self.ns, memory_id, MemoryPatch(content=f"Edited: {word}", tags=[word.lower()]))
        self._ack(memory_id, updated.content)

    @precondition(lambda self: self.ids)
    @rule(n=st.integers(0, 10**6), status=st.sampled_from(["archived", "deleted"]))
    def person_retires(self, n: int, status: Any) -> None:
        self._step()
        memory_id = self._pick(n)
        self.memories.set_status(self.ns, memory_id, status)
        self.inactive.add(memory_id)

    @precondition(lambda self: self.ids)
    @rule(n=st.integers(0, 10**6))
    def person_restores(self, n: int) -> None:
        self._step()
        memory_id = self._pick(n)
        memory = self.store.get_memory(self.ns, memory_id)
        holder = self.store.find_active_by_fact_key(self.ns, memory.fact_key) if memory.fact_key else None
        revived = self.memories.restore(self.ns, memory_id)
        assert revived.status == "active"
        self.inactive.discard(memory_id)
        if holder is not None and holder.id != memory_id:
            self.inactive.add(holder.id)

    @precondition(lambda self: self.ids)
    @rule(n=st.integers(0, 10**6), word=st.sampled_from(WORDS))
    def person_saves_a_stale_edit(self, n: int, word: str) -> None:
        # A person read the memory, a job archived it, then the person saves what they edited.
        self._step()
        memory_id = self._pick(n)
        read = self.store.get_memory(self.ns, memory_id)
        self.memories.set_status(self.ns, memory_id, "archived")
        self.inactive.add(memory_id)
        moved = self.store.get_memory(self.ns, memory_id).version != read.version
        try:
            self.memories.update(self.ns, memory_id, MemoryPatch(content=f"Stale: {word}"), version=read.version)
        except Conflict as exc:
            assert moved and exc.code == "version_conflict"
            return
        assert not moved  # it was archived already: nothing moved, the edit lands
        self._ack(memory_id, f"Stale: {word}")

    @precondition(lambda self: self.ids)
    @rule(n=st.integers(0, 10**6))
    def owner_accepts_a_candidate(self, n: int) -> None:
        self._step()
        pending = self.candidates.list_candidates(self.ns).items
        if not pending:
            return
        candidate = pending[n % len(pending)]
        try:
            _, result = self.candidates.approve(self.ns, candidate.id)
        except Conflict:
            return  # its key is held and could not be taken (reported to the owner as 409)
        self._ack_result(result)

    @precondition(lambda self: self.ids)
    @rule(n=st.integers(0, 10**6), bumps=st.integers(1, 3))
    def recall_and_sighting_race_an_archive_and_an_edit(self, n: int, bumps: int) -> None:
        """Interleaved writers on one memory: recall bumps, a sighting, an archive and a tag edit on
        threads released together; every one of them lands."""
        self._step()
        memory_id = self._pick(n)
        before = self.store.get_memory(self.ns, memory_id)
        gate = threading.Barrier(4)
        errors: list[BaseException] = []

        def run(work: Any) -> None:
            gate.wait()
            try:
                work()
            except BaseException as exc:
                errors.append(exc)

        def bump() -> None:
            for _ in range(bumps):
                self.store.record_injected(self.ns, [memory_id], self.clock.now())

        works = [
            bump,
            lambda: self.memories.mark_seen(self.ns, memory_id),
            lambda: self.memories.set_status(self.ns, memory_id, "archived"),
            lambda: self.memories.update(self.ns, memory_id, MemoryPatch(tags=["raced"])),
        ]
        threads = [threading.Thread(target=run, args=(w,)) for w in works]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert not errors, errors
        after = self.store.get_memory(self.ns, memory_id)
        self.inactive.add(memory_id)
        assert after.status == "archived"
        assert after.tags == ("raced",)
        assert after.content == before.content
        assert after.recall_count == before.recall_count + bumps
        assert after.seen_count == before.seen_count + 1

    # -- a writer paused between its read and its write ----------------------------------------
    def writers_interleave(self, n: int, paused: str, meanwhile: str, other: int, word: str) -> None:
        """One writer reads a memory and is held before its write while another writer changes that
        memory (or, now and then, another one); then the held writer finishes."""
        memory_id = self._pick(n)
        thread, outcome = self._pause(paused, memory_id)
        held = self.gate.reached.is_set()  # else it had nothing to write and is done already
        try:
            target = n if other % 3 else other  # mostly the same memory
            changes: dict[str, Callable[[], object]] = {
                "archive": lambda: self.person_retires(target, "archived"),
                "delete": lambda: self.person_retires(target, "deleted"),
                "edit": lambda: self.person_edits(target, word),
                "supersede": lambda: self.person_supersedes(target, word),
                "restore": lambda: self.person_restores(target),
                "bump": lambda: self.store.record_injected(self.ns, [self._pick(target)], self.clock.now()),
                "seen": lambda: self.memories.mark_seen(self.ns, self._pick(target)),
                "write": lambda: self.person_writes(word, self.store.get_memory(self.ns, memory_id).fact_key, {}),
            }
            changes[meanwhile]()
        finally:
            self.gate.release.set()
            thread.join(60)
            self.gate.thread = None
        assert not thread.is_alive()
        if held:
            self._check_paused(paused, memory_id, outcome[0])
        elif not (paused == "supersede" and isinstance(outcome[0], Conflict)):  # refused: not active
            assert not isinstance(outcome[0], Exception), outcome[0]

    # The interleavings are what the machine is for: three rules run them, so that they make about a
    # quarter of the steps (hypothesis picks among the rules evenly).
    _interleave = rule(
        n=st.integers(0, 10**6),
        paused=st.sampled_from(["bump", "seen", "tag", "archive", "restore", "supersede"]),
        meanwhile=st.sampled_from(["archive", "delete", "edit", "supersede", "restore", "bump", "seen", "write"]),
        other=st.integers(0, 10**6),
        word=st.sampled_from(WORDS),
    )
    writers_interleave_1 = precondition(lambda self: self.ids)(_interleave(writers_interleave))
    writers_interleave_2 = precondition(lambda self: self.ids)(_interleave(writers_interleave))
    writers_interleave_3 = precondition(lambda self: self.ids)(_interleave(writers_interleave))

    def _pause(self, kind: str, memory_id: str) -> tuple[threading.Thread, list[Any]]:
        works: dict[str, Callable[[], object]] = {
            "bump": lambda: self.gate.record_injected(self.ns, [memory_id], self.clock.now()),
            "seen": lambda: self.memories.mark_seen(self.ns, memory_id),
            "tag": lambda: self.memories.update(self.ns, memory_id, MemoryPatch(tags=["paused"])),
            "archive": lambda: self.memories.set_status(self.ns, memory_id, "archived"),
            "restore": lambda: self.memories.restore(self.ns, memory_id),
            "supersede": lambda: self.memories.supersede(self.ns, memory_id, MemoryWrite(content="Paused version")),
        }
        work = works[kind]
        outcome: list[Any] = []

        def run() -> None:
            try:
                outcome.append(work())
            except Exception as exc:  # checked when the writer finishes
                outcome.append(exc)

        self._step()
        self.gate.reached.clear()
        self.gate.release.clear()
        thread = threading.Thread(target=run)
        self.gate.thread = thread
        thread.start()
        while not self.gate.reached.wait(0.01) and thread.is_alive():
            pass  # it pauses at its first write, or finishes without one (nothing to change)
        return thread, outcome

    def _check_paused(self, kind: str, memory_id: str, result: Any) -> None:
        """What the held writer must have done once released: landed on a fresh read, never undoing
        what ran meanwhile."""
        stored = self.store.get_memory(self.ns, memory_id)
        if kind == "supersede" and isinstance(result, Conflict):
            assert stored.status != "active"  # no longer active when it read again: refused, not forced
            return
        assert not isinstance(result, Exception), result
        if kind == "tag":
            assert stored.tags == ("paused",)
        elif kind == "archive":
            assert stored.status == "archived"
            self.inactive.add(memory_id)
        elif kind == "restore":
            assert stored.status == "active"
            self.inactive.discard(memory_id)
            if stored.fact_key:  # whichever memory held the key when it landed is superseded now
                for other in self.store.get_memories(self.ns, self.ids):
                    if other.id != memory_id and other.fact_key == stored.fact_key:
                        self.inactive.add(other.id)
        elif kind == "supersede":
            self._ack_result(result)

    # -- the index ----------------------------------------------------------------------------
    @rule(down=st.booleans())
    def index_goes(self, down: bool) -> None:
        self.index.down = down

    @rule()
    def repair(self) -> None:
        self._step()
        self.index.down = False
        self.clock.advance(minutes=1)  # past the settle time of event listings
        self.memories.upkeep.repair(self.ns)
        active = {m.id for m in self.store.iter_memories(self.ns, ("active",))}
        assert self.index.docs == active

    # -- invariants ---------------------------------------------------------------------------
    @invariant()
    def the_write_rules_hold(self) -> None:
        # One read of the rows per step (each check below is one invariant of the module docstring).
        rows = {m.id: m for m in self.store.get_memories(self.ns, self.ids)}
        active = list(self.store.iter_memories(self.ns, ("active",)))
        # At most one active memory per fact_key.
        keys = Counter(m.fact_key for m in active if m.fact_key)
        assert all(n == 1 for n in keys.values()), keys
        # Nothing archived, deleted or superseded comes back without a restore.
        assert not [rows[i] for i in self.inactive if rows[i].status == "active"]
        # Counters never go down.
        for memory in rows.values():
            recalls, seen = self.counts.get(memory.id, (0, 0))
            assert memory.recall_count >= recalls and memory.seen_count >= seen, memory
            self.counts[memory.id] = (memory.recall_count, memory.seen_count)
        # Every acknowledged write is readable.
        assert {i: m.content for i, m in rows.items()} == self.content


def _run(store_name: str, tmp_path: Path, profile: Any) -> None:
    clock = ManualClock()
    with STORE_FACTORIES[store_name](tmp_path, clock) as store:
        machine: type[MemoryMachine] = type(
            f"MemoryMachine_{store_name}", (MemoryMachine,), {"store": store, "clock": clock}
        )
        machine.TestCase.settings = profile
        machine.TestCase().runTest()


@pytest.mark.parametrize("store_name", list(STORE_FACTORIES))
def test_memory_invariants_hold_on_every_store(store_name: str, tmp_path: Path) -> None:
    _run(store_name, tmp_path, bounded(store_name))


@pytest.mark.slow
@pytest.mark.parametrize("store_name", list(STORE_FACTORIES))
def test_memory_invariants_hold_on_every_store_long_run(store_name: str, tmp_path: Path) -> None:
    _run(store_name, tmp_path, long_run(store_name))
