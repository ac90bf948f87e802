"""``Embedder`` on Amazon Bedrock: Titan Text Embeddings v2 (256/512/1024) and Cohere Embed multilingual.

Vectors come back unit length (Titan with ``normalize: true``; Cohere re-normalized here). Cohere
distinguishes documents from queries (``input_type``), Titan does not.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from engram.adapters.aws_clients import ClientOptions, new_client
from engram.adapters.aws_errors import translate
from engram.domain.deployment import TITAN_DIMENSIONS, TITAN_V2
from engram.domain.errors import InvalidInput

EMBED_OPTIONS = ClientOptions(connect_timeout=3, read_timeout=20, max_attempts=3, retry_mode="adaptive")
COHERE_DIMENSION = 1024
COHERE_BATCH = 96
COHERE_MAX_CHARS = 2048
TITAN_MAX_CHARS = 50_000


def _unit(vector: Sequence[float]) -> list[float]:
    norm = math.sqrt(sum(x * x for x in vector))
    return [float(x) / norm for x in vector] if norm > 0 else [float(x) for x in vector]


def _family(model_id: str) -> str:
    base = model_id.split(".", 1)[1] if model_id.split(".", 1)[0] in ("us", "eu", "apac", "global") else model_id
    if base.startswith("amazon.titan-embed-text-v2"):
        return "titan"
    if base.startswith("cohere.embed-"):
        return "cohere"
    raise InvalidInput(f"unsupported Bedrock embedding model {model_id!r} (Titan Text v2 or Cohere Embed)")


class BedrockEmbedder:
    def __init__(
        self,
        model_id: str = TITAN_V2,
        dimension: int | None = None,
        *,
        region: str | None = None,
        client: Any | None = None,
    ) -> None:
        self._family = _family(model_id)
        if self._family == "titan":
            dimension = dimension or 1024
            if dimension not in TITAN_DIMENSIONS:
                raise InvalidInput(f"Titan Text Embeddings v2 has {TITAN_DIMENSIONS} dimensions, not {dimension}")
        else:
            if dimension not in (None, COHERE_DIMENSION):
                raise InvalidInput(f"Cohere Embed vectors have {COHERE_DIMENSION} dimensions, not {dimension}")
            dimension = COHERE_DIMENSION
        if client is None:
            client = new_client("bedrock-runtime", region, EMBED_OPTIONS)
        self._client = client
        self._model_id = model_id
        self._dimension = dimension

    @property
    def model_id(self) -> str:
        return self._model_id

    @property
    def dimension(self) -> int:
        return self._dimension

    def _invoke(self, body: dict[str, Any]) -> dict[str, Any]:
        try:
            response = self._client.invoke_model(
                modelId=self._model_id,
                body=json.dumps(body, ensure_ascii=False),
                contentType="application/json",
                accept="application/json",
            )
            answer: dict[str, Any] = json.loads(response["body"].read())
            return answer
        except (ClientError, BotoCoreError) as exc:
            raise translate(exc, f"Bedrock embeddings ({self._model_id})") from exc

    def _titan(self, text: str) -> list[float]:
        body = {"inputText": text[:TITAN_MAX_CHARS], "dimensions": self._dimension, "normalize": True}
        vector = self._invoke(body)["embedding"]
        return self._checked(vector)

    def _cohere(self, texts: Sequence[str], input_type: str) -> list[list[float]]:
        out: list[list[float]] = []
        for start in range(0, len(texts), COHERE_BATCH):
            batch = [t[:COHERE_MAX_CHARS] for t in texts[start : start + COHERE_BATCH]]
            body = {"texts": batch, "input_type": input_type, "truncate": "END"}
            embeddings = self._invoke(body)["embeddings"]
            if isinstance(embeddings, dict):  # embedding_types requested: {"float": [...]}
                embeddings = embeddings.get("float", [])
            out += [self._checked(v) for v in embeddings]
        return out

    def _checked(self, vector: Sequence[float]) -> list[float]:
        if len(vector) != self._dimension:
            raise InvalidInput(f"Bedrock returned {len(vector)} dimensions, expected {self._dimension}")
        return _unit(vector)

    def embed_documents(self, texts: Sequence[str]) -> list[list[float]]:
        if not texts:
            return []
        if self._family == "cohere":
            return self._cohere(texts, "search_document")
        return [self._titan(text) for text in texts]

    def embed_query(self, text: str) -> list[float]:
        if self._family == "cohere":
            return self._cohere([text], "search_query")[0]
        return self._titan(text)
