"""The search index is optional at any moment: a guard that answers fast while it is unreachable.

OpenSearch Serverless may be asleep (a NextGen collection wakes in 10-30 s), refuse requests while a
new data-access policy propagates, or be unreachable. None of that may hold up a chat or a memory
write (docs/aws.md, "Cold starts"): the store is the source of truth and the index a mirror. So every
index call goes through ``GuardedIndex``:

- The first failure that says the service is unusable (``UpstreamUnavailable``, ``UpstreamRateLimited``,
  ``UpstreamRejected``) marks the index unavailable; for ``retry_seconds`` after that, calls fail at
  once with ``UpstreamUnavailable(code="index_unavailable")`` instead of waiting on the network.
- Then one caller probes with its real call while the others still fail fast; its success closes the
  guard, its failure restarts the wait.
- Other errors (a bad query, a dimension mismatch) pass through and say nothing about availability.

``describe()`` is what ``/health`` shows: the last known state, without a network call.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any, Literal, TypeVar

from engram.domain.errors import UpstreamRateLimited, UpstreamRejected, UpstreamUnavailable
from engram.domain.models import IndexedDoc, IndexInfo, SearchHit
from engram.domain.ports import Clock, NeighbourDensity, SearchIndex

log = logging.getLogger(__name__)

INDEX_UNAVAILABLE = "index_unavailable"
_DOWN = (UpstreamUnavailable, UpstreamRateLimited, UpstreamRejected)

State = Literal["unknown", "ok", "unavailable"]
T = TypeVar("T")


def is_index_unavailable(exc: BaseException) -> bool:
    """Whether ``exc`` (or what caused it) says the search index could not be used."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:  # a cause chain may loop
        if isinstance(current, UpstreamUnavailable) and current.code == INDEX_UNAVAILABLE:
            return True
        seen.add(id(current))
        current = current.__cause__
    return False


class GuardedIndex:
    """A ``SearchIndex`` that fails fast while the wrapped one is unavailable (see the module docstring).

    ``on_recovered`` runs (in the caller's thread, errors logged) when the index answers again after
    having been unavailable in this process.
    """

    def __init__(
        self,
        inner: SearchIndex,
        *,
        clock: Clock,
        retry_seconds: float = 15.0,
        monotonic: Callable[[], float] = time.monotonic,
        on_recovered: Callable[[], None] | None = None,
    ) -> None:
        self._inner = inner
        self._retry = retry_seconds
        self._monotonic = monotonic  # the retry back-off: a duration inside this process
        self._clock = clock  # stamps `since` (docs/ARCHITECTURE.md, "One clock")
        self._lock = threading.Lock()
        self._state: State = "unknown"
        self._since: datetime | None = None
        self._retry_at = 0.0
        self._probing = False
        self._error: str | None = None
        self.on_recovered = on_recovered

    @property
    def inner(self) -> SearchIndex:
        return self._inner

    @property
    def state(self) -> State:
        return self._state

    def describe(self) -> dict[str, Any]:
        """The last known state (no network call): ``status`` unknown | ok | unavailable."""
        with self._lock:
            out: dict[str, Any] = {"status": self._state}
            if self._state == "unavailable":
                out["since"] = self._since.isoformat() if self._since else None
                out["error"] = self._error
                out["retry_in_s"] = round(max(0.0, self._retry_at - self._monotonic()), 1)
            return out

    # -- the guard ------------------------------------------------------------------------------
    def _call(self, name: str, fn: Callable[[], T]) -> T:
        with self._lock:
            if self._state == "unavailable":
                if self._probing or self._monotonic() < self._retry_at:
                    raise UpstreamUnavailable(
                        f"the search index is unavailable ({self._error}); retrying in "
                        f"{max(0.0, self._retry_at - self._monotonic()):.0f} s",
                        code=INDEX_UNAVAILABLE,
                    )
                self._probing = True
        try:
            result = fn()
        except _DOWN as exc:
            self._mark_down(name, exc)
            raise UpstreamUnavailable(f"the search index is unavailable: {exc}", code=INDEX_UNAVAILABLE) from exc
        except BaseException:
            with self._lock:
                self._probing = False
            raise
        self._mark_up()
        return result

    def _mark_down(self, name: str, exc: Exception) -> None:
        with self._lock:
            was = self._state
            self._probing = False
            self._state = "unavailable"
            self._retry_at = self._monotonic() + self._retry
            self._error = str(getattr(exc, "code", type(exc).__name__))
            if was != "unavailable":
                self._since = self._clock.now()
        if was != "unavailable":
            log.warning(
                "search index unavailable (%s on %s): recall goes on without it, writes are kept and "
                "repaired later; retrying in %.0f s",
                type(exc).__name__,
                name,
                self._retry,
            )

    def _mark_up(self) -> None:
        with self._lock:
            recovered = self._state == "unavailable"
            self._state, self._probing, self._error, self._since = "ok", False, None, None
        if recovered:
            log.warning("search index available again")
            if self.on_recovered is not None:
                try:
                    self.on_recovered()
                except Exception:  # a repair that cannot start now runs with the next cleanup
                    log.exception("could not start the index repair")

    # -- port -----------------------------------------------------------------------------------
    def upsert(self, doc: IndexedDoc) -> str:
        return self._call("upsert", lambda: self._inner.upsert(doc))

    def upsert_many(self, docs: Sequence[IndexedDoc]) -> None:
        self._call("upsert_many", lambda: self._inner.upsert_many(docs))

    def delete(self, namespace: str, memory_id: str, ref: str | None = None) -> None:
        self._call("delete", lambda: self._inner.delete(namespace, memory_id, ref))

    def keyword_search(self, namespace: str, query: str, *, k: int = 50, types: Sequence[str] = ()) -> list[SearchHit]:
        return self._call("keyword_search", lambda: self._inner.keyword_search(namespace, query, k=k, types=types))

    def vector_search(
        self, namespace: str, vector: Sequence[float], *, k: int = 50, types: Sequence[str] = ()
    ) -> list[SearchHit]:
        return self._call("vector_search", lambda: self._inner.vector_search(namespace, vector, k=k, types=types))

    def neighbour_density(self, namespace: str, memory_ids: Sequence[str], *, k: int = 10) -> dict[str, float]:
        """The wrapped index's densities (recall's hubness correction), or none when it cannot say."""
        inner = self._inner
        if not isinstance(inner, NeighbourDensity):
            return {}
        return self._call("neighbour_density", lambda: inner.neighbour_density(namespace, memory_ids, k=k))

    def info(self, namespace: str | None = None) -> IndexInfo:
        return self._call("info", lambda: self._inner.info(namespace))

    def reset(self, model_id: str, dimension: int) -> None:
        self._call("reset", lambda: self._inner.reset(model_id, dimension))

    def ping(self) -> None:
        self._call("ping", self._inner.ping)

    def close(self) -> None:
        close = getattr(self._inner, "close", None)
        if callable(close):
            close()
