"""Embedder wrappers: ``ClippedEmbedder`` caps the text embedded per item in tokens (an embedding's cost
grows with its text); ``GatedEmbedder`` also writes and searches vectors only while the index was built by
the current embedder."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from typing import Literal

from engram.domain.errors import NotConfigured
from engram.domain.ports import Embedder, SearchIndex
from engram.domain.text import clip_to_tokens, estimate_tokens

log = logging.getLogger(__name__)

GateState = Literal["unknown", "ok", "reindex_needed"]

# While the index records another model, look again this often: a reindex in another process (or
# Lambda instance) resets the shared index, and this process must then embed with the new model.
RECHECK_SECONDS = 10.0


class ClippedEmbedder:
    """An ``Embedder`` that cuts every text to ``max_tokens`` (0: no cap) before the model sees it,
    counted by the model's own tokenizer when it has one (``count_tokens``: the local e5), else
    estimated conservatively (``estimate_tokens``). Documents keep their start, queries their end (the
    question is usually last)."""

    def __init__(self, inner: Embedder, max_tokens: int = 0) -> None:
        self._inner = inner
        self._max_tokens = max_tokens
        counter = getattr(inner, "count_tokens", None)
        self._count: Callable[[str], int] = counter if callable(counter) else estimate_tokens

    @property
    def model_id(self) -> str:
        return self._inner.model_id

    @property
    def dimension(self) -> int:
        return self._inner.dimension

    def embed_documents(self, texts: Sequence[str]) -> list[list[float]]:
        return self._inner.embed_documents([self._clip(t, "head") for t in texts])

    def embed_query(self, text: str) -> list[float]:
        return self._inner.embed_query(self._clip(text, "tail"))

    def _clip(self, text: str, keep: Literal["head", "tail"]) -> str:
        return clip_to_tokens(text, self._max_tokens, self._count, keep=keep)


class GatedEmbedder(ClippedEmbedder):
    """An ``Embedder`` that refuses to embed (``NotConfigured``) while the index records another
    model or dimension, so writes fall back to keyword-only documents and recall to keyword search
    instead of mixing vector spaces. ``rebuild`` resets the index to this model and re-opens the gate.

    The check is lazy: nothing is asked of the index until the first embedding (building the app
    touches no network, docs/aws.md). A check that fails (index unreachable) raises and is retried on
    the next call; a mismatch is looked at again every ``recheck_seconds``.

    Every text is cut to ``max_tokens`` (``ClippedEmbedder``). Keyword search still indexes the whole
    text.
    """

    def __init__(
        self,
        inner: Embedder,
        index: SearchIndex,
        *,
        recheck_seconds: float = RECHECK_SECONDS,
        monotonic: Callable[[], float] = time.monotonic,
        max_tokens: int = 0,
    ) -> None:
        super().__init__(inner, max_tokens)
        self._index = index
        self._lock = threading.Lock()
        self._ok: bool | None = None
        self._checked_at = 0.0
        self._recheck = recheck_seconds
        self._monotonic = monotonic

    @property
    def state(self) -> GateState:
        """What the last check found (no index call): unknown | ok | reindex_needed."""
        return "unknown" if self._ok is None else "ok" if self._ok else "reindex_needed"

    @property
    def matches_index(self) -> bool:
        """Whether the index was built by this embedder (asks the index on first use; may raise)."""
        with self._lock:
            stale = self._ok is False and self._monotonic() - self._checked_at >= self._recheck
            if self._ok is None or stale:
                info = self._index.info()
                if info.model_id is None:
                    self._index.reset(self._inner.model_id, self._inner.dimension)
                    ok = True
                else:
                    ok = info.model_id == self._inner.model_id and info.dimension == self._inner.dimension
                if not ok and self._ok is None:
                    log.warning(
                        "the search index was built with %s (%s dims) but the embedder is %s (%s dims): "
                        "vector search is off until `engram reindex` rebuilds it",
                        info.model_id,
                        info.dimension,
                        self._inner.model_id,
                        self._inner.dimension,
                    )
                self._ok, self._checked_at = ok, self._monotonic()
            return self._ok

    def refresh(self) -> None:
        """Forget the last check (another process rebuilt the index)."""
        with self._lock:
            self._ok = None

    def embed_documents(self, texts: Sequence[str]) -> list[list[float]]:
        self._check()
        return super().embed_documents(texts)

    def embed_query(self, text: str) -> list[float]:
        self._check()
        return super().embed_query(text)

    def rebuild(self, reindex: Callable[[], int]) -> int:
        """Reset the index to this embedder, then run ``reindex`` (which re-adds every document)."""
        self.reset_index()
        return reindex()

    def reset_index(self) -> None:
        """Record this embedder in the index (dropping other vectors) and open the gate."""
        with self._lock:
            self._index.reset(self._inner.model_id, self._inner.dimension)
            self._ok, self._checked_at = True, self._monotonic()

    def _check(self) -> None:
        if not self.matches_index:
            raise NotConfigured(
                f"the search index was built with another embedding model than {self._inner.model_id} "
                f"({self._inner.dimension} dims): run `engram reindex`",
                code="reindex_needed",
            )
