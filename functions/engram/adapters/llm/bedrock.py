"""Amazon Bedrock: ``BedrockChatModel`` (Converse / ConverseStream) for Engram's own model calls,
``BedrockChatUpstream`` (the chat gateway's ``ChatUpstream`` for ``bedrock/<model-id>``) and
``BedrockReranker`` (the bedrock-agent-runtime Rerank API, in a region that has it).

boto3 is synchronous: calls run in a worker thread so the event loop keeps serving other requests; a
streamed answer is read by its own thread and handed over through a queue.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import os
import threading
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from engram.adapters.aws_clients import ClientOptions, new_client
from engram.adapters.aws_errors import translate
from engram.domain.errors import InvalidInput, NotConfigured
from engram.domain.wire.converse import (
    BEDROCK_PREFIX,
    ConverseToOpenAIStream,
    converse_to_openai,
    model_id_of,
    openai_to_converse,
    stream_error,
    to_converse,
)

RERANK_MAX_DOCUMENTS = 1000


# The jobs' model waits up to 5 minutes for a reply; the reranker up to its deadline (rerank_options).
CHAT_MODEL_OPTIONS = ClientOptions(connect_timeout=3, read_timeout=300, max_attempts=3, retry_mode="adaptive")


def rerank_options(timeout_s: float) -> ClientOptions:
    """The reranker's client: the deadline (ENGRAM_RERANK_TIMEOUT_S) bounds each read."""
    return ClientOptions(
        connect_timeout=3, read_timeout=max(1, math.ceil(timeout_s)), max_attempts=3, retry_mode="adaptive"
    )


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
        self._client = client or new_client("bedrock-runtime", region, CHAT_MODEL_OPTIONS)
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


def resolve_region(region: str | None) -> str:
    """The region boto3 would use: the setting, else the SDK's (environment, ~/.aws/config); no network."""
    if region:
        return region
    try:
        import botocore.session

        return str(botocore.session.get_session().get_config_variable("region") or "")
    except Exception:  # an unreadable AWS config file reads as "no region"
        return os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION") or ""


_END = object()


class _WholeReply:
    """A whole Converse answer already converted to an OpenAI ``chat.completion`` (``UpstreamReply``)."""

    status = 200
    content_type = "application/json"

    def __init__(self, data: bytes) -> None:
        self._data = data

    async def aread(self) -> bytes:
        return self._data

    async def aiter_bytes(self) -> AsyncIterator[bytes]:
        yield self._data

    async def aclose(self) -> None:
        return None


class _StreamReply:
    """A ConverseStream as OpenAI SSE chunks (``UpstreamReply``).

    One thread per stream iterates botocore's blocking ``EventStream`` and hands each event to the event
    loop through an ``asyncio.Queue``; ``aclose`` (also on client disconnect) stops the thread and
    closes the HTTP stream to Bedrock.
    """

    status = 200
    content_type = "text/event-stream"

    def __init__(self, events: Any, converter: ConverseToOpenAIStream, what: str) -> None:
        self._events = events
        self._converter = converter
        self._what = what
        self._loop = asyncio.get_running_loop()
        self._queue: asyncio.Queue[Any] = asyncio.Queue()
        self._closed = threading.Event()
        self._thread = threading.Thread(target=self._pump, name="bedrock-converse-stream", daemon=True)
        self._thread.start()

    def _put(self, item: Any) -> None:
        try:
            self._loop.call_soon_threadsafe(self._queue.put_nowait, item)
        except RuntimeError:  # the loop is gone: nobody reads any more
            self._closed.set()

    def _pump(self) -> None:
        try:
            for event in self._events:
                if self._closed.is_set():
                    return
                self._put(event)
        except Exception as exc:  # raised on the loop side as an Engram error
            if not self._closed.is_set():
                self._put(exc)
        finally:
            self._put(_END)

    def _convert(self, item: Any) -> list[bytes]:
        if isinstance(item, Exception):
            raise translate(item, f"{self._what} stream") from item
        failure = stream_error(item)
        if failure is not None:
            code, message = failure
            error = ClientError({"Error": {"Code": code, "Message": message}}, "ConverseStream")
            raise translate(error, f"{self._what} stream") from error
        return self._converter.feed(item)

    async def aiter_bytes(self) -> AsyncIterator[bytes]:
        while True:
            items = [await self._queue.get()]
            while not self._queue.empty():  # whatever else already arrived goes out in the same write
                items.append(self._queue.get_nowait())
            out: list[bytes] = []
            ended = False
            for item in items:
                if item is _END:
                    ended = True
                    break
                try:
                    out += self._convert(item)
                except Exception:
                    if out:  # what came before the failure still reaches the client
                        yield b"".join(out)
                    raise
            if ended:
                out += self._converter.finish()
            if out:
                yield b"".join(out)
            if ended:
                return

    async def aread(self) -> bytes:
        return b"".join([chunk async for chunk in self.aiter_bytes()])

    async def aclose(self) -> None:
        if self._closed.is_set():
            return
        self._closed.set()
        close = getattr(self._events, "close", None)
        if close is not None:
            with contextlib.suppress(Exception):  # closing a half-read HTTP stream is best effort
                close()


class BedrockChatUpstream:
    """The chat gateway's ``ChatUpstream`` for ``bedrock/<model-id>``: Converse / ConverseStream.

    It takes the gateway's OpenAI-wire body (``POST /chat/completions``) and answers on the OpenAI wire
    (a ``chat.completion``, or SSE chunks ending with ``[DONE]``), so the gateway treats it like any
    OpenAI-compatible upstream. No API key: boto3's credential chain (an IAM role on AWS). The boto3
    client is built on first use, in a worker thread; blocking calls run on a pool of their own so a
    long generation never holds the event loop's default executor.
    """

    name = "Bedrock"

    def __init__(
        self,
        *,
        region: str | None = None,
        client: Any | None = None,
        connect_timeout: float = 10.0,
        read_timeout: float = 300.0,
        max_workers: int = 32,
    ) -> None:
        self._region_setting = region or ""
        self._region: str | None = None if client is None else self._region_setting
        self._client = client
        self._timeouts = (connect_timeout, read_timeout)
        self._lock = threading.Lock()
        self._max_workers = max_workers
        self._pool: Any = None

    @property
    def region(self) -> str:
        if self._region is None:  # looked up once, on first use (reading the AWS config takes ~0.1 s)
            self._region = resolve_region(self._region_setting)
        return self._region

    @property
    def configured(self) -> bool:
        return self._client is not None or bool(self.region)

    def _runtime(self) -> Any:
        with self._lock:
            if self._client is None:
                if not self.region:
                    raise NotConfigured(
                        "bedrock/ models need an AWS region: set ENGRAM_AWS_REGION (or AWS_REGION), "
                        "and AWS credentials (an IAM role, AWS_PROFILE or AWS_ACCESS_KEY_ID)"
                    )
                connect, read = self._timeouts
                # No SDK retries: the client (or its user) decides; a throttle goes back as 429 at once.
                options = ClientOptions(connect_timeout=connect, read_timeout=read, max_attempts=1)
                self._client = new_client("bedrock-runtime", self.region, options)
            return self._client

    def _call(self, operation: str, request: dict[str, Any], what: str) -> Any:
        try:
            return getattr(self._runtime(), operation)(**request)
        except (ClientError, BotoCoreError) as exc:
            raise translate(exc, what) from exc

    async def _in_thread(self, operation: str, request: dict[str, Any], what: str) -> Any:
        if self._pool is None:
            from concurrent.futures import ThreadPoolExecutor

            self._pool = ThreadPoolExecutor(self._max_workers, thread_name_prefix="bedrock")
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._pool, self._call, operation, request, what)

    async def send(
        self,
        method: str,
        path: str,
        body: Mapping[str, Any] | bytes | None = None,
        *,
        headers: Mapping[str, str] | None = None,
    ) -> _WholeReply | _StreamReply:
        if method != "POST" or not path.endswith("/chat/completions") or not isinstance(body, Mapping):
            raise InvalidInput(f"Bedrock serves chat completions only, not {method} {path}")
        payload = dict(body)
        model = str(payload.get("model") or "")
        request = openai_to_converse(payload)
        what = f"Bedrock {model_id_of(model)}"
        if not payload.get("stream"):
            response = await self._in_thread("converse", request, what)
            return _WholeReply(json.dumps(converse_to_openai(response, model), ensure_ascii=False).encode())
        opening = asyncio.ensure_future(self._in_thread("converse_stream", request, what))
        try:
            response = await asyncio.shield(opening)
        except asyncio.CancelledError:
            # The thread cannot be interrupted: close the stream it opens once it has opened it.
            opening.add_done_callback(_close_opened_stream)
            raise
        include_usage = bool((payload.get("stream_options") or {}).get("include_usage"))
        request_id = str((response.get("ResponseMetadata") or {}).get("RequestId") or "bedrock")
        converter = ConverseToOpenAIStream(model, include_usage=include_usage, response_id=f"chatcmpl-{request_id}")
        return _StreamReply(response["stream"], converter, what)

    async def aclose(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
            self._pool = None


def _close_opened_stream(opening: asyncio.Future[Any]) -> None:
    if opening.cancelled() or opening.exception() is not None:
        return
    close = getattr(opening.result().get("stream"), "close", None)
    if close is not None:
        with contextlib.suppress(Exception):
            close()


class BedrockReranker:
    """The ``Reranker`` port on the Bedrock Rerank API (``amazon.rerank-v1:0``, ``cohere.rerank-v3-5:0``).

    Only some regions serve it, hence ``region`` separate from the rest of the deployment.
    """

    def __init__(
        self,
        model_id: str = "amazon.rerank-v1:0",
        *,
        region: str,
        client: Any | None = None,
        timeout_s: float = 2.0,
    ) -> None:
        if not region:
            raise InvalidInput("BedrockReranker needs a region that has the Rerank API (ENGRAM_RERANK_REGION)")
        self._model_arn = (
            model_id if model_id.startswith("arn:") else f"arn:aws:bedrock:{region}::foundation-model/{model_id}"
        )
        # Recall keeps the fused order past the deadline (rerank_options).
        self._client = client or new_client("bedrock-agent-runtime", region, rerank_options(timeout_s))

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
