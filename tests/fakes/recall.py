"""A spy around the real recall service: records every query; ``fail=True`` makes every call raise
(to test that a recall failure never fails a chat); with ``hold`` set to an event, each call waits for
it first (the turn's context deadline). It is a ``Recall`` (services/recall/pipeline.py), so mypy checks
it against what the gateway asks of recall."""

from __future__ import annotations

import threading
from collections.abc import Collection, Sequence

from engram.services.recall.pipeline import Recall, RecallConfig, RecallResult


class SpyRecall(Recall):
    def __init__(self, inner: Recall, *, fail: bool = False) -> None:
        self.inner = inner
        self.fail = fail
        self.hold: threading.Event | None = None
        self.calls: list[str] = []
        self.returned = 0
        self.recorded: list[tuple[str, ...]] = []

    def recall(
        self,
        namespace: str,
        query: str,
        *,
        top_k: int | None = None,
        types: Sequence[str] = (),
        exclude_ids: Collection[str] = (),
        record_injection: bool = False,
        min_relevance: float | None = None,
        budget_tokens: int | None = None,
        refine: bool = True,
    ) -> RecallResult:
        self.calls.append(query)
        if self.hold is not None:
            self.hold.wait(30)
        if self.fail:
            raise RuntimeError("recall is down")
        result = self.inner.recall(
            namespace,
            query,
            top_k=top_k,
            types=types,
            exclude_ids=exclude_ids,
            record_injection=record_injection,
            min_relevance=min_relevance,
            budget_tokens=budget_tokens,
            refine=refine,
        )
        self.returned += 1
        return result

    def start_embedding(self, namespace: str, query: str) -> None:
        self.inner.start_embedding(namespace, query)

    def record_injected(self, namespace: str, memory_ids: Sequence[str]) -> None:
        self.recorded.append(tuple(memory_ids))
        self.inner.record_injected(namespace, memory_ids)

    @property
    def config(self) -> RecallConfig:
        return self.inner.config

    def query_vector(self, namespace: str, text: str) -> Sequence[float]:
        return self.inner.query_vector(namespace, text)
