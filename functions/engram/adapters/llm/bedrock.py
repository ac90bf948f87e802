"""Amazon Bedrock for Engram's own model calls: ``BedrockChatModel`` (Converse / ConverseStream) and
``BedrockReranker`` (the bedrock-agent-runtime Rerank API, in a region that has it).

boto3 is synchronous: calls run in a worker thread so the event loop keeps serving other requests.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import AsyncIterator, Iterator, Sequence
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from engram.adapters.aws_errors import translate
from engram.domain.errors import InvalidInput

BEDROCK_PREFIX = "bedrock/"
JSON_INSTRUCTION = "Answer with exactly one JSON object and nothing else: no prose, no code fence."
RERANK_MAX_DOCUMENTS = 1000


def _client(service: str, region: str | None, read_timeout: int) -> Any:
    import boto3
    from botocore.config import Config

    config = Config(connect_timeout=3, read_timeout=read_timeout, retries={"max_attempts": 3, "mode": "adaptive"})
    return boto3.client(service, region_name=region or None, config=config)


def _text_of(content: Any) -> str:
    """OpenAI/Anthropic-style content (a string or a list of parts) as plain text."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for part in content:
            if isinstance(part, str):
                parts.append(part)
            elif isinstance(part, dict) and isinstance(part.get("text"), str):
                parts.append(part["text"])
        return "\n".join(parts)
    return "" if content is None else str(content)


def to_converse(messages: Sequence[dict[str, Any]], *, json_mode: bool = False) -> dict[str, Any]:
    """Chat messages -> Converse ``system`` and ``messages`` (roles alternate, user first)."""
    system: list[dict[str, str]] = []
    turns: list[dict[str, Any]] = []
    for message in messages:
        role = message.get("role")
        text = _text_of(message.get("content"))
        if role == "system":
            if text:
                system.append({"text": text})
            continue
        if role not in ("user", "assistant"):
            role = "user"  # tool results and the like are read as user context
        if not text:
            continue
        if turns and turns[-1]["role"] == role:
            turns[-1]["content"].append({"text": text})
        else:
            turns.append({"role": role, "content": [{"text": text}]})
    if not turns or turns[0]["role"] != "user":
        turns.insert(0, {"role": "user", "content": [{"text": "(conversation follows)"}]})
    if json_mode:
        system.append({"text": JSON_INSTRUCTION})
    request: dict[str, Any] = {"messages": turns}
    if system:
        request["system"] = system
    return request


class BedrockChatModel:
    """The ``ChatModel`` port on Bedrock Converse. ``model_id`` may carry the ``bedrock/`` prefix."""

    def __init__(
        self,
        model_id: str,
        *,
        region: str | None = None,
        client: Any | None = None,
        default_max_tokens: int = 2048,
    ) -> None:
        model_id = model_id.removeprefix(BEDROCK_PREFIX)
        if not model_id:
            raise InvalidInput("empty Bedrock model id")
        self._model_id = model_id
        self._client = client or _client("bedrock-runtime", region, read_timeout=300)
        self._default_max_tokens = default_max_tokens

    @property
    def model_id(self) -> str:
        return f"{BEDROCK_PREFIX}{self._model_id}"

    def _request(
        self,
        messages: Sequence[dict[str, Any]],
        *,
        json_mode: bool = False,
        max_tokens: int | None = None,
        temperature: float | None = None,
    ) -> dict[str, Any]:
        inference: dict[str, Any] = {"maxTokens": max_tokens or self._default_max_tokens}
        if temperature is not None:
            inference["temperature"] = temperature
        return {"modelId": self._model_id, **to_converse(messages, json_mode=json_mode), "inferenceConfig": inference}

    def _converse(self, request: dict[str, Any]) -> str:
        try:
            response = self._client.converse(**request)
        except (ClientError, BotoCoreError) as exc:
            raise translate(exc, f"Bedrock {self._model_id}") from exc
        blocks = response.get("output", {}).get("message", {}).get("content", [])
        return "".join(block.get("text", "") for block in blocks if isinstance(block, dict))

    async def complete(
        self,
        messages: Sequence[dict[str, Any]],
        *,
        json_mode: bool = False,
        max_tokens: int | None = None,
        temperature: float | None = None,
    ) -> str:
        request = self._request(messages, json_mode=json_mode, max_tokens=max_tokens, temperature=temperature)
        return await asyncio.to_thread(self._converse, request)

    def _open_stream(self, request: dict[str, Any]) -> Iterator[dict[str, Any]]:
        try:
            return iter(self._client.converse_stream(**request)["stream"])
        except (ClientError, BotoCoreError) as exc:
            raise translate(exc, f"Bedrock {self._model_id}") from exc

    def _next_text(self, events: Iterator[dict[str, Any]]) -> str | None:
        """The next text delta, ``""`` for events without text, ``None`` at the end."""
        try:
            event = next(events)
        except StopIteration:
            return None
        except (ClientError, BotoCoreError) as exc:
            raise translate(exc, f"Bedrock {self._model_id} stream") from exc
        for name in ("internalServerException", "modelStreamErrorException", "throttlingException",
                     "validationException", "serviceUnavailableException"):  # fmt: skip
            if name in event:
                code = name[0].upper() + name[1:]
                error = ClientError({"Error": {"Code": code, "Message": str(event[name].get("message", ""))}}, "Stream")
                raise translate(error, f"Bedrock {self._model_id} stream") from error
        delta = event.get("contentBlockDelta", {}).get("delta", {})
        return str(delta.get("text", ""))

    async def stream(self, messages: Sequence[dict[str, Any]], *, max_tokens: int | None = None) -> AsyncIterator[str]:
        events = await asyncio.to_thread(self._open_stream, self._request(messages, max_tokens=max_tokens))
        while True:
            text = await asyncio.to_thread(self._next_text, events)
            if text is None:
                return
            if text:
                yield text


class BedrockReranker:
    """The ``Reranker`` port on the Bedrock Rerank API (``amazon.rerank-v1:0``, ``cohere.rerank-v3-5:0``).

    Only some regions serve it, hence ``region`` separate from the rest of the deployment.
    """

    def __init__(self, model_id: str = "amazon.rerank-v1:0", *, region: str, client: Any | None = None) -> None:
        if not region:
            raise InvalidInput("BedrockReranker needs a region that has the Rerank API (ENGRAM_RERANK_REGION)")
        self._model_arn = (
            model_id if model_id.startswith("arn:") else f"arn:aws:bedrock:{region}::foundation-model/{model_id}"
        )
        self._client = client or _client("bedrock-agent-runtime", region, read_timeout=30)

    def rerank(self, query: str, documents: Sequence[str]) -> list[float]:
        if not documents:
            return []
        if len(documents) > RERANK_MAX_DOCUMENTS:
            raise InvalidInput(f"at most {RERANK_MAX_DOCUMENTS} documents per rerank call")
        request = {
            "queries": [{"type": "TEXT", "textQuery": {"text": query}}],
            "sources": [
                {"type": "INLINE", "inlineDocumentSource": {"type": "TEXT", "textDocument": {"text": doc or " "}}}
                for doc in documents
            ],
            "rerankingConfiguration": {
                "type": "BEDROCK_RERANKING_MODEL",
                "bedrockRerankingConfiguration": {
                    "numberOfResults": len(documents),
                    "modelConfiguration": {"modelArn": self._model_arn},
                },
            },
        }
        scores = [0.0] * len(documents)
        try:
            pages = [self._client.rerank(**request)]
            while pages[-1].get("nextToken"):
                pages.append(self._client.rerank(**request, nextToken=pages[-1]["nextToken"]))
        except (ClientError, BotoCoreError) as exc:
            raise translate(exc, "Bedrock rerank") from exc
        for page in pages:
            for result in page.get("results", []):
                index, score = int(result["index"]), float(result["relevanceScore"])
                if 0 <= index < len(scores) and not math.isnan(score):
                    scores[index] = min(max(score, 0.0), 1.0)
        return scores
