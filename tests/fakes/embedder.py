"""An in-process ``Embedder`` with the fake embeddings server's vectors (a hashed bag of tokens):
texts that share most words are close, so dedup thresholds can be exercised without a model."""

from __future__ import annotations

from collections.abc import Sequence

from tests.fakes.embeddings_server import fake_vector


class HashEmbedder:
    def __init__(self, dimension: int = 512) -> None:
        self._dimension = dimension

    @property
    def model_id(self) -> str:
        return f"hash-bag-{self._dimension}"

    @property
    def dimension(self) -> int:
        return self._dimension

    def embed_documents(self, texts: Sequence[str]) -> list[list[float]]:
        return [fake_vector(t, self._dimension) for t in texts]

    def embed_query(self, text: str) -> list[float]:
        return fake_vector(text, self._dimension)
