"""A spy around the real recall service: records every query; ``fail=True`` makes every call raise
(to test that a recall failure never fails a chat)."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import Any


class SpyRecall:
    def __init__(self, inner: Any, *, fail: bool = False) -> None:
        self.inner = inner
        self.fail = fail
        self.calls: list[str] = []

    def recall(
        self,
        namespace: str,
        query: str,
        *,
        top_k: int | None = None,
        types: Sequence[str] = (),
        exclude_ids: Collection[str] = (),
        record_injection: bool = False,
        **options: Any,
    ) -> Any:
        self.calls.append(query)
        if self.fail:
            raise RuntimeError("recall is down")
        return self.inner.recall(
            namespace,
            query,
            top_k=top_k,
            types=types,
            exclude_ids=exclude_ids,
            record_injection=record_injection,
            **options,
        )

    @property
    def config(self) -> Any:
        return self.inner.config

    def query_vector(self, namespace: str, text: str) -> Sequence[float]:
        vector: Sequence[float] = self.inner.query_vector(namespace, text)
        return vector
