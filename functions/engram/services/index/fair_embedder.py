"""Embedding work shared fairly between namespaces (docs/ARCHITECTURE.md, "Recall in bounded time").

One process (locally) or one Lambda instance (on AWS) serves several namespaces with one embedder.
``FairEmbedder`` hands its ``slots`` (the embeddings that may run at once: the local model copies, or
the remote calls in flight) to waiting work in this order:

1. queries before documents (a chat turn waits for its query's vector; a memory write or an import
   does not wait for anyone);
2. within each lane, namespaces in turn: the namespace served longest ago goes first, so one
   namespace's many queries (a flood of long searches) or its bulk import never keep another
   namespace's query waiting for more than one embedding already running;
3. within a namespace, first come first served.

Documents are embedded a small batch at a time (each batch takes a slot), so a query waits for at most
one batch. From two slots up, the last free slot is kept for a query of a namespace that holds none:
documents never take it, nor does a namespace that already has an embedding running — so a flood of one
namespace's queries runs on at most all slots but one, and another namespace's query finds a free
slot at once (one embedding's wait at most for a third, and so on). The namespace of the work in
hand is named by ``embedding_for(namespace)`` around the call (the services that embed know it);
work outside one shares the unnamed namespace ``""``.
"""

from __future__ import annotations

import contextvars
import itertools
import threading
from collections import deque
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any, Literal

from engram.domain.ports import Embedder
from engram.domain.text import text_batches

Lane = Literal["query", "document"]

SERVED_MEMORY = 4096  # namespaces whose last turn is remembered
_NAMESPACE: contextvars.ContextVar[str] = contextvars.ContextVar("engram_embedding_namespace", default="")


@contextmanager
def embedding_for(namespace: str) -> Iterator[None]:
    """Name the namespace the embeddings made inside this block are for (``FairEmbedder``'s turns)."""
    token = _NAMESPACE.set(namespace)
    try:
        yield
    finally:
        _NAMESPACE.reset(token)


class _Ticket:
    __slots__ = ("granted",)

    def __init__(self) -> None:
        self.granted = False


class FairEmbedder:
    """An ``Embedder`` whose calls take turns by lane and namespace (module docstring).

    ``document_items`` and ``document_chars`` bound one document batch (about one window of the local
    e5 model by default). Other attributes of ``inner`` (``count_tokens``) are passed through.
    """

    def __init__(self, inner: Embedder, *, slots: int, document_items: int = 32, document_chars: int = 1020) -> None:
        self._inner = inner
        self._slots = max(1, slots)
        self._document_items = max(1, document_items)
        self._document_chars = max(1, document_chars)
        self._cond = threading.Condition()
        self._running: dict[Lane, int] = {"query": 0, "document": 0}
        # lane -> namespace -> its waiting tickets, oldest first
        self._waiting: dict[Lane, dict[str, deque[_Ticket]]] = {"query": {}, "document": {}}
        self._held: dict[str, int] = {}  # namespace -> slots it holds now
        self._served_at: dict[str, int] = {}  # namespace -> the turn it was last given a slot
        self._turns = itertools.count(1)

    @property
    def model_id(self) -> str:
        return self._inner.model_id

    @property
    def dimension(self) -> int:
        return self._inner.dimension

    def __getattr__(self, name: str) -> Any:
        # Optional extras of the wrapped embedder (``count_tokens``: ``ClippedEmbedder`` reads it).
        if name.startswith("_"):
            raise AttributeError(name)
        return getattr(self._inner, name)

    def embed_query(self, text: str) -> list[float]:
        with self._slot("query"):
            return self._inner.embed_query(text)

    def embed_documents(self, texts: Sequence[str]) -> list[list[float]]:
        out: list[list[float]] = []
        for batch in self._batches(texts):
            with self._slot("document"):
                out.extend(self._inner.embed_documents(batch))
        return out

    def waiting(self) -> dict[str, int]:
        """Tickets waiting per lane (for tests and the benchmark)."""
        with self._cond:
            return {lane: sum(len(q) for q in by_ns.values()) for lane, by_ns in self._waiting.items()}

    # -- scheduling ---------------------------------------------------------------------------------
    @contextmanager
    def _slot(self, lane: Lane) -> Iterator[None]:
        namespace = _NAMESPACE.get()
        ticket = _Ticket()
        with self._cond:
            self._waiting[lane].setdefault(namespace, deque()).append(ticket)
            self._grant()
            try:
                while not ticket.granted:
                    self._cond.wait()
            except BaseException:  # interrupted while waiting: give back what may have been granted
                self._withdraw(lane, namespace, ticket)
                raise
        try:
            yield
        finally:
            with self._cond:
                self._release(lane, namespace)

    def _release(self, lane: Lane, namespace: str) -> None:
        self._running[lane] -= 1
        held = self._held.pop(namespace) - 1
        if held:
            self._held[namespace] = held
        self._grant()

    def _withdraw(self, lane: Lane, namespace: str, ticket: _Ticket) -> None:
        if ticket.granted:
            self._release(lane, namespace)
            return
        queue = self._waiting[lane].get(namespace)
        if queue is not None and ticket in queue:
            queue.remove(ticket)
            if not queue:
                del self._waiting[lane][namespace]

    def _may_take(self, lane: Lane, namespace: str) -> bool:
        busy = self._running["query"] + self._running["document"]
        if busy >= self._slots:
            return False
        if self._slots < 2 or busy < self._slots - 1:
            return True
        # The last free slot: only for a query of a namespace with nothing running.
        return lane == "query" and namespace not in self._held

    def _grant(self) -> None:
        """Hand free slots to the waiting tickets, queries first, the namespace served longest ago first."""
        granted = False
        for lane in ("query", "document"):
            by_ns = self._waiting[lane]
            while by_ns:
                eligible = [ns for ns in by_ns if self._may_take(lane, ns)]
                if not eligible:
                    break
                namespace = min(eligible, key=lambda ns: self._served_at.get(ns, 0))
                queue = by_ns[namespace]
                queue.popleft().granted = True
                if not queue:
                    del by_ns[namespace]
                self._served_at[namespace] = next(self._turns)
                self._held[namespace] = self._held.get(namespace, 0) + 1
                self._running[lane] += 1
                granted = True
        if granted:
            if len(self._served_at) > SERVED_MEMORY:  # forget namespaces long idle (their turn is then first)
                keep = sorted(self._served_at, key=self._served_at.__getitem__)[-SERVED_MEMORY // 2 :]
                self._served_at = {ns: self._served_at[ns] for ns in keep}
            self._cond.notify_all()

    def _batches(self, texts: Sequence[str]) -> Iterator[list[str]]:
        return text_batches(texts, max_items=self._document_items, max_chars=self._document_chars)
