"""The reference background's vectors for recall's relevance in small namespaces (``domain/background.py``).

Embedded once per process and embedding model: on a helper thread the first time a namespace has fewer
vector candidates than recall fetches, or at start-up (``RecallService.warm``; docs/recall.md,
"Relevance at every size"). Until they are there, and for ``RETRY`` after a failure, recall goes on
without the padding: a small namespace's best hit is then at most "maybe" (``fusion.UNPADDED_CAP``).

Where no thread may outlive a response (Lambda freezes the instance after the last byte and a
helper thread would resume inside a later request: docs/aws.md, "How Lambda runs it"), the service is
built with ``helper_thread=False``: each recall that wants the background then embeds one more
``PACE_BATCH`` sentences itself, within its own time, until the set is complete.
"""

from __future__ import annotations

import logging
import operator
import threading
import time
from collections.abc import Sequence
from datetime import datetime, timedelta

from engram.domain.background import BACKGROUND_TEXTS
from engram.domain.fusion import Script, script_of
from engram.domain.ports import Clock, Embedder

log = logging.getLogger(__name__)

RETRY = timedelta(seconds=60)
# Off the request path the background is embedded PACE_BATCH sentences at a time, PACE_S apart.
PACE_BATCH = 4
PACE_S = 0.05


def dot(a: Sequence[float], b: Sequence[float]) -> float:
    """Cosine of two unit vectors (the ``Embedder`` port returns unit length); plain Python: the API
    function ships no numpy."""
    return float(sum(map(operator.mul, a, b)))


class BackgroundVectors:
    def __init__(
        self, embedder: Embedder, clock: Clock, texts: Sequence[str] = BACKGROUND_TEXTS, *, helper_thread: bool = True
    ) -> None:
        self._embedder = embedder
        self._helper_thread = helper_thread
        self._partial: list[tuple[float, ...]] = []  # ``helper_thread=False``: embedded so far, by ``_partial_model``
        self._partial_model = ""
        self._clock = clock
        self._texts = tuple(texts)
        # By the first cosines() that has vectors: the background's Chinese sentences take the CJK patterns
        # of domain/text.py, which a process that sees only ASCII text never compiles otherwise.
        self._scripts: tuple[Script, ...] | None = None
        self._lock = threading.Lock()
        self._fill_lock = threading.Lock()
        self._model = ""
        self._vectors: list[tuple[float, ...]] | None = None
        self._failed_at: datetime | None = None
        self._warming: threading.Thread | None = None

    def vectors(self, *, wait: bool = True) -> list[tuple[float, ...]] | None:
        """The background's vectors by the embedder's current model, or ``None`` while they cannot be had.
        Without ``wait`` a missing set is embedded on a helper thread, a few sentences at a time with a
        pause between (``PACE_S``) so the writes and queries of the moment keep the model and the CPU,
        and this call does not wait for it (the first chat turn of a process must not pay for it); with
        no helper thread, this call embeds the next few sentences itself (module docstring)."""
        ready = self._vectors
        if ready is not None and self._model == str(self._embedder.model_id):
            return ready
        if not wait and not self._helper_thread:
            return self._step()
        if not wait:
            with self._lock:
                if self._warming is None or not self._warming.is_alive():
                    self._warming = threading.Thread(target=self._fill, args=(True,), name="recall-background")
                    self._warming.daemon = True
                    self._warming.start()
            return None
        return self._fill(paced=False)

    def _fill(self, paced: bool) -> list[tuple[float, ...]] | None:
        model = str(self._embedder.model_id)
        with self._fill_lock:
            if self._vectors is not None and self._model == model:
                return self._vectors
            if self._failed_at is not None and self._clock.now() - self._failed_at < RETRY:
                return None
            vectors: list[tuple[float, ...]] = []
            try:
                for start in range(0, len(self._texts), PACE_BATCH):
                    chunk = list(self._texts[start : start + PACE_BATCH])
                    vectors += [tuple(v) for v in self._embedder.embed_documents(chunk)]
                    if paced:
                        time.sleep(PACE_S)
            except Exception as exc:
                log.warning("recall background not embedded (%s): small-namespace relevance is conservative", exc)
                self._failed_at = self._clock.now()
                return None
            if len(vectors) != len(self._texts):
                self._failed_at = self._clock.now()
                return None
            self._vectors, self._model, self._failed_at = vectors, model, None
            return vectors

    def _step(self) -> list[tuple[float, ...]] | None:
        """One ``PACE_BATCH`` more of the background on the calling thread; the whole set once complete."""
        model = str(self._embedder.model_id)
        if not self._fill_lock.acquire(blocking=False):  # another recall is at it: no wait here
            return None
        try:
            if self._vectors is not None and self._model == model:
                return self._vectors
            if self._failed_at is not None and self._clock.now() - self._failed_at < RETRY:
                return None
            if self._partial_model != model:
                self._partial, self._partial_model = [], model
            chunk = list(self._texts[len(self._partial) : len(self._partial) + PACE_BATCH])
            try:
                vectors = self._embedder.embed_documents(chunk)
                if len(vectors) != len(chunk):
                    raise ValueError(f"{len(vectors)} vectors for {len(chunk)} texts")
                self._partial += [tuple(v) for v in vectors]
            except Exception as exc:
                log.warning("recall background not embedded (%s): small-namespace relevance is conservative", exc)
                self._failed_at = self._clock.now()
                return None
            if len(self._partial) < len(self._texts):
                return None
            self._vectors, self._model, self._failed_at = self._partial[: len(self._texts)], model, None
            self._partial = []
            return self._vectors
        finally:
            self._fill_lock.release()

    def cosines(self, query_vector: Sequence[float], *, wait: bool = False) -> list[tuple[float, Script]] | None:
        """The query's cosine to each background sentence, with the sentence's script (``None`` while the
        background is being embedded, unless ``wait``)."""
        vectors = self.vectors(wait=wait)
        if vectors is None or not vectors or len(vectors[0]) != len(query_vector):
            return None
        scripts = self._scripts
        if scripts is None:
            scripts = self._scripts = tuple(script_of(t) for t in self._texts)
        return [(dot(query_vector, v), s) for v, s in zip(vectors, scripts, strict=True)]
