"""Vectors are only written and searched while the index was built by the current embedder."""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence

from engram.domain.errors import NotConfigured
from engram.domain.ports import Embedder, SearchIndex


class GatedEmbedder:
    """An ``Embedder`` that refuses to embed (``NotConfigured``) while the index records another
    model or dimension, so writes fall back to keyword-only documents and recall to keyword search
    instead of mixing vector spaces. ``rebuild`` resets the index to this model and re-opens the gate.
    """

    def __init__(self, inner: Embedder, index: SearchIndex) -> None:
        self._inner = inner
        self._index = index
        self._lock = threading.Lock()
        self._ok: bool | None = None

    @property
    def model_id(self) -> str:
        return self._inner.model_id

    @property
    def dimension(self) -> int:
        return self._inner.dimension

    @property
    def matches_index(self) -> bool:
        with self._lock:
            if self._ok is None:
                info = self._index.info()
                if info.model_id is None:
                    self._index.reset(self._inner.model_id, self._inner.dimension)
                    self._ok = True
                else:
                    self._ok = info.model_id == self._inner.model_id and info.dimension == self._inner.dimension
            return self._ok

    def embed_documents(self, texts: Sequence[str]) -> list[list[float]]:
        self._check()
        return self._inner.embed_documents(texts)

    def embed_query(self, text: str) -> list[float]:
        self._check()
        return self._inner.embed_query(text)

    def rebuild(self, reindex: Callable[[], int]) -> int:
        """Reset the index to this embedder, then run ``reindex`` (which re-adds every document)."""
        with self._lock:
            self._index.reset(self._inner.model_id, self._inner.dimension)
            self._ok = True
        return reindex()

    def _check(self) -> None:
        if not self.matches_index:
            info = self._index.info()
            raise NotConfigured(
                f"the search index was built with {info.model_id} ({info.dimension} dims), not "
                f"{self._inner.model_id} ({self._inner.dimension} dims): run `engram reindex`",
                code="reindex_needed",
            )
