"""Rebuilding the search index from the store: one use case for `engram reindex`, the admin panel and
REST (`POST /v1/admin/reindex`).

A run is a job, not a thread (docs/aws.md, "Reindex"): ``start`` records the run in the store and
queues it; the queue runs ``run`` (in process locally, the jobs function on AWS). The run's state and
progress live in the store, under the namespace that started it, so any process or Lambda instance
reports the same progress. A run on AWS stops before its function's deadline at a checkpoint (the last
memory done) and queues its own continuation.

Scope: the starting namespace; after an embedding model change (the index records another model)
the whole index is reset to the current model and every namespace is rebuilt. Every process turns
vectors back on by itself: the gate looks at the shared index again (``GatedEmbedder``), and a
process that reports a finished run re-checks at once.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator, Sequence
from datetime import datetime, timedelta
from typing import Any, Protocol

from engram.domain.errors import MESSAGE_CHARS, EngramError, NotConfigured
from engram.domain.models import Memory, new_id
from engram.domain.ports import Clock, JobQueue, KeyValueRows, MemoryRows, StoreAdmin
from engram.services.index.gated_embedder import GatedEmbedder
from engram.services.index.upkeep import IndexUpkeep

log = logging.getLogger(__name__)

STATE_KEY = "job:reindex"
JOB = "reindex"
BATCH = 32
# A run that has not saved progress for this long was stopped (its process died or froze): a new
# start may replace it.
STALE_AFTER = timedelta(minutes=20)

Progress = Callable[[str, int], Callable[[int], None] | None]


def _idle() -> dict[str, Any]:
    return {"state": "idle", "done": 0, "total": 0}


class ReindexStore(MemoryRows, KeyValueRows, StoreAdmin, Protocol):
    """The memories a rebuild reads and the progress it keeps."""


class ReindexService:
    """Start, run (resumably) and report index rebuilds (``IndexUpkeep.index_memories`` writes the documents)."""

    def __init__(
        self,
        store: ReindexStore,
        upkeep: IndexUpkeep,
        embedder: GatedEmbedder | None,
        clock: Clock,
        queue: JobQueue | None = None,
    ) -> None:
        self._store = store
        self._upkeep = upkeep
        self._embedder = embedder
        self._clock = clock
        self._queue = queue

    # -- reporting ------------------------------------------------------------------------------
    def status(self, namespace: str) -> dict[str, Any]:
        """The latest run started from ``namespace`` (``idle`` if none), as any process sees it."""
        state = self._store.get_cache(namespace, STATE_KEY)
        if not isinstance(state, dict):
            return _idle()
        embedder = self._embedder
        if state.get("state") == "done" and state.get("reset") and embedder and embedder.state == "reindex_needed":
            embedder.refresh()  # another process rebuilt the index: vectors on here too
        return state

    # -- starting -------------------------------------------------------------------------------
    def start(self, namespace: str, *, every_namespace: bool = False) -> dict[str, Any]:
        """Record a new run and queue it; a run of ``namespace`` still in progress is returned instead."""
        current = self._store.get_cache(namespace, STATE_KEY)
        if isinstance(current, dict) and current.get("state") == "running" and not self._stale(current):
            return current
        state = self._new_state(namespace, every_namespace)
        self._save(namespace, state)
        if self._queue is None:
            return self.run(namespace, state["run_id"])
        try:
            self._queue.enqueue(JOB, {"namespace": namespace, "run_id": state["run_id"]})
        except EngramError as exc:
            state.update(state="error", error=f"could not queue the reindex: {exc.message}"[:MESSAGE_CHARS])
            self._save(namespace, state)
            raise
        return state

    def rebuild(self, namespace: str, *, every_namespace: bool = False, progress: Progress | None = None) -> int:
        """Start and run to the end in this process (the CLI); returns how many memories were indexed.
        Raises what stopped the run."""
        state = self._new_state(namespace, every_namespace)
        self._save(namespace, state)
        state = self.run(namespace, state["run_id"], progress=progress, reraise=True)
        return int(state["done"])

    def _new_state(self, namespace: str, every_namespace: bool) -> dict[str, Any]:
        now = self._clock.now().isoformat()
        return {
            "state": "running",
            "run_id": new_id("rdx"),
            "namespace": namespace,
            "every_namespace": every_namespace,
            "done": 0,
            "total": 0,
            "reset": False,
            "namespaces": None,  # decided when the run starts
            "checkpoint": None,  # [namespace index, created_at, id] of the last memory indexed
            "started_at": now,
            "updated_at": now,
            "finished_at": None,
            "error": None,
        }

    # -- running --------------------------------------------------------------------------------
    def run(
        self,
        namespace: str,
        run_id: str,
        *,
        deadline: float | None = None,
        progress: Progress | None = None,
        reraise: bool = False,
    ) -> dict[str, Any]:
        """Run (or continue) the run ``run_id`` of ``namespace``; returns its state (a failure is recorded
        in it, and raised with ``reraise``). With ``deadline`` (a ``time.monotonic()`` value) it stops at
        a checkpoint before then and queues its continuation."""
        state = self._store.get_cache(namespace, STATE_KEY)
        if not isinstance(state, dict) or state.get("run_id") != run_id or state.get("state") != "running":
            log.info("reindex %s of %s is not running any more; nothing to do", run_id, namespace)
            return state if isinstance(state, dict) else _idle()
        try:
            if state["namespaces"] is None:
                self._plan(state)
                self._save(namespace, state)
            finished = self._work(namespace, state, deadline, progress)
        except Exception as exc:  # reported to whoever polls; the index keeps what was done
            log.exception("reindex %s failed", run_id)
            state.update(state="error", finished_at=self._clock.now().isoformat(), error=_describe(exc))
            self._save(namespace, state)
            if reraise:
                raise
            return state
        if not finished:  # stopped for the deadline: the next invocation continues from the checkpoint
            if self._queue is None:
                raise NotConfigured("a reindex with a deadline needs a job queue to continue on")
            self._queue.enqueue(JOB, {"namespace": namespace, "run_id": run_id})
            return state
        started = datetime.fromisoformat(state["started_at"])
        for ns in state["namespaces"]:
            self._upkeep.mark_repaired(ns, started)
        state.update(state="done", finished_at=self._clock.now().isoformat(), checkpoint=None)
        self._save(namespace, state)
        log.info("reindex %s done: %d memories in %d namespaces", run_id, state["done"], len(state["namespaces"]))
        return state

    def _plan(self, state: dict[str, Any]) -> None:
        """Decide the scope: a changed embedding model resets the index and rebuilds every namespace."""
        namespaces = [state["namespace"]]
        if self._embedder is not None and not self._embedder.matches_index:
            self._embedder.reset_index()
            state["reset"] = True
        if state["reset"] or state["every_namespace"]:
            namespaces = self._store.list_namespaces()
        state["namespaces"] = namespaces
        state["total"] = sum(self._active_count(ns) for ns in namespaces)

    def _active_count(self, namespace: str) -> int:
        return int(self._store.count_memories(namespace).get("status", {}).get("active", 0))

    def _work(self, namespace: str, state: dict[str, Any], deadline: float | None, progress: Progress | None) -> bool:
        """Index from the checkpoint on; ``False`` if it stopped for the deadline."""
        checkpoint = state["checkpoint"] or [0, None, None]
        worked = False
        for position in range(int(checkpoint[0]), len(state["namespaces"])):
            ns = state["namespaces"][position]
            after = (checkpoint[1], checkpoint[2]) if position == checkpoint[0] and checkpoint[1] else None
            bar = progress(ns, self._active_count(ns)) if progress is not None else None
            for chunk in self._chunks(ns, after):
                # Every invocation gets at least one batch done, whatever its deadline.
                if deadline is not None and worked and time.monotonic() >= deadline:
                    return False
                self._upkeep.index_memories(chunk, bar)
                worked = True
                last = chunk[-1]
                state["done"] += len(chunk)
                state["checkpoint"] = [position, last.created_at.isoformat(), last.id]
                state["total"] = max(state["total"], state["done"])
                self._save(namespace, state)
            close = getattr(bar, "close", None)
            if callable(close):
                close()
            checkpoint = [position + 1, None, None]
            state["checkpoint"] = checkpoint
        return True

    def _chunks(self, namespace: str, after: tuple[str, str] | None) -> Iterator[Sequence[Memory]]:
        """Active memories oldest first (the store's order), after the checkpoint, in batches."""
        chunk: list[Memory] = []
        for memory in self._store.iter_memories(namespace, ("active",)):
            if after is not None and (memory.created_at.isoformat(), memory.id) <= after:
                continue
            chunk.append(memory)
            if len(chunk) >= BATCH:
                yield chunk
                chunk = []
        if chunk:
            yield chunk

    def _stale(self, state: dict[str, Any]) -> bool:
        updated = state.get("updated_at")
        return not updated or self._clock.now() - datetime.fromisoformat(updated) > STALE_AFTER

    def _save(self, namespace: str, state: dict[str, Any]) -> None:
        state["updated_at"] = self._clock.now().isoformat()
        self._store.put_cache(namespace, STATE_KEY, state)


def _describe(exc: Exception) -> str:
    message = exc.message if isinstance(exc, EngramError) else str(exc)
    return f"{type(exc).__name__}: {message}"[:MESSAGE_CHARS]
