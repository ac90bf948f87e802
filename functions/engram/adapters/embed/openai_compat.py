"""An ``Embedder`` over any OpenAI-compatible ``POST {base_url}/embeddings`` endpoint."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import httpx

from engram.adapters.llm.http import JsonApiClient, status_error
from engram.domain.errors import InvalidInput, UpstreamRejected, UpstreamTimeout, UpstreamUnavailable


def _normalize(vector: Sequence[float]) -> list[float]:
    norm = math.sqrt(sum(x * x for x in vector))
    return [float(x) / norm for x in vector] if norm > 0 else [float(x) for x in vector]


class OpenAIEmbedder:
    """Remote embeddings, batched; vectors are re-normalized to unit length.

    Without ``dimensions`` the vector size is learned from the first response (reading
    ``dimension`` before any call embeds a short probe text).
    """

    def __init__(
        self,
        base_url: str,
        api_key: str | None,
        model: str,
        dimensions: int | None = None,
        timeout: float = 30.0,
        *,
        batch_size: int = 64,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        if not base_url:
            raise InvalidInput("the embeddings base URL is empty (ENGRAM_EMBEDDING_BASE_URL)")
        if not model:
            raise InvalidInput("the embedding model is empty (ENGRAM_EMBEDDING_MODEL)")
        self._url = base_url.rstrip("/") + "/embeddings"
        self._model = model
        self._requested = dimensions  # sent to the API only when the user asked for it
        self._dimensions = dimensions
        self._timeout = timeout
        self._batch_size = max(1, batch_size)
        self._api = JsonApiClient(api_key, timeout, transport)

    @property
    def model_id(self) -> str:
        return f"openai/{self._model}" + (f"@{self._requested}" if self._requested else "")

    @property
    def dimension(self) -> int:
        if self._dimensions is None:
            self._dimensions = len(self.embed_query("dimension probe"))
        return self._dimensions

    def close(self) -> None:
        self._api.close()

    def _post(self, texts: list[str]) -> list[list[float]]:
        body: dict[str, Any] = {"model": self._model, "input": texts, "encoding_format": "float"}
        if self._requested is not None:
            body["dimensions"] = self._requested
        try:
            resp = self._api.get().post(self._url, json=body)
        except httpx.TimeoutException as exc:
            raise UpstreamTimeout(f"embeddings request timed out after {self._timeout}s") from exc
        except httpx.HTTPError as exc:
            raise UpstreamUnavailable(f"embeddings endpoint unreachable: {exc.__class__.__name__}") from exc
        error = status_error(resp, "embeddings endpoint")
        if error is not None:
            raise error
        try:
            data = resp.json()["data"]
            ordered = sorted(data, key=lambda item: int(item.get("index", 0)))
            vectors = [_normalize([float(x) for x in item["embedding"]]) for item in ordered]
        except (ValueError, KeyError, TypeError) as exc:
            raise UpstreamRejected("embeddings endpoint sent a malformed response", status=502) from exc
        if len(vectors) != len(texts):
            raise UpstreamRejected(
                f"embeddings endpoint returned {len(vectors)} vectors for {len(texts)} inputs", status=502
            )
        return vectors

    def embed_documents(self, texts: Sequence[str]) -> list[list[float]]:
        items = [t if t.strip() else " " for t in texts]
        out: list[list[float]] = []
        for start in range(0, len(items), self._batch_size):
            out.extend(self._post(items[start : start + self._batch_size]))
        if out and self._dimensions is None:
            self._dimensions = len(out[0])
        return out

    def embed_query(self, text: str) -> list[float]:
        vector = self._post([text if text.strip() else " "])[0]
        if self._dimensions is None:
            self._dimensions = len(vector)
        return vector
