"""The recall background without a helper thread (Lambda: nothing runs after the last byte)."""

from __future__ import annotations

import threading
from datetime import UTC, datetime

from engram.services.recall.background import PACE_BATCH, BackgroundVectors

from tests.fakes.clock import ManualClock
from tests.fakes.embedder import HashEmbedder


def test_without_a_helper_thread_each_call_embeds_one_batch_on_the_calling_thread() -> None:
    # Given a background of ten sentences and no helper thread allowed
    texts = [f"sentence number {i}" for i in range(10)]
    embedder = HashEmbedder(dimension=8)
    background = BackgroundVectors(embedder, ManualClock(datetime(2026, 1, 1, tzinfo=UTC)), texts, helper_thread=False)
    threads_before = threading.active_count()
    # When recalls ask for it without waiting
    answers = [background.vectors(wait=False) for _ in range(-(-len(texts) // PACE_BATCH))]
    # Then no thread was started, the set grew a batch per call, and the last call has it whole
    assert threading.active_count() == threads_before
    assert all(a is None for a in answers[:-1])
    assert answers[-1] is not None and len(answers[-1]) == len(texts)
    assert answers[-1] == [tuple(v) for v in embedder.embed_documents(texts)]
    assert background.cosines([1.0] + [0.0] * 7) is not None


def test_a_failed_batch_waits_for_the_retry_and_keeps_what_was_embedded() -> None:
    class Flaky(HashEmbedder):
        fail = False

        def embed_documents(self, texts):  # type: ignore[no-untyped-def]
            if self.fail:
                raise RuntimeError("model away")
            return super().embed_documents(texts)

    clock = ManualClock(datetime(2026, 1, 1, tzinfo=UTC))
    embedder = Flaky(dimension=4)
    background = BackgroundVectors(embedder, clock, [f"s{i}" for i in range(2 * PACE_BATCH)], helper_thread=False)
    assert background.vectors(wait=False) is None  # the first batch
    embedder.fail = True
    assert background.vectors(wait=False) is None  # fails: no retry before RETRY
    embedder.fail = False
    assert background.vectors(wait=False) is None
    clock.advance(seconds=61)
    ready = background.vectors(wait=False)
    assert ready is not None and len(ready) == 2 * PACE_BATCH
