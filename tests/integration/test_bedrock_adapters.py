"""Bedrock adapters at the SDK edge: request shapes with botocore's Stubber, errors translated."""

from __future__ import annotations

import io
import json
import math
from typing import Any

import pytest

pytest.importorskip("boto3")

import boto3
from botocore.response import StreamingBody
from botocore.stub import ANY, Stubber
from engram.adapters.embed.bedrock import BedrockEmbedder
from engram.adapters.llm.bedrock import BedrockChatModel, BedrockReranker
from engram.domain.errors import InvalidInput, UpstreamRateLimited, UpstreamRejected, UpstreamTimeout
from engram.domain.ports import ChatModel, Embedder, Reranker


def client(service: str) -> Any:
    return boto3.client(service, region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="x")


def body(data: dict[str, Any]) -> StreamingBody:
    raw = json.dumps(data).encode()
    return StreamingBody(io.BytesIO(raw), len(raw))


# -- embeddings -------------------------------------------------------------------------------


def test_titan_v2_asks_for_the_dimension_and_normalized_vectors() -> None:
    # Given a Titan v2 embedder of 256 dimensions
    runtime = client("bedrock-runtime")
    embedder = BedrockEmbedder("amazon.titan-embed-text-v2:0", 256, client=runtime)
    assert isinstance(embedder, Embedder) and embedder.dimension == 256
    with Stubber(runtime) as stub:
        expected = {
            "modelId": "amazon.titan-embed-text-v2:0",
            "body": json.dumps({"inputText": "我对花生过敏", "dimensions": 256, "normalize": True}, ensure_ascii=False),
            "contentType": "application/json",
            "accept": "application/json",
        }
        stub.add_response(
            "invoke_model", {"body": body({"embedding": [3.0] + [0.0] * 255}), "contentType": "x"}, expected
        )
        # When a query is embedded
        vector = embedder.embed_query("我对花生过敏")
    # Then the request matched and the vector has unit length
    assert len(vector) == 256 and math.isclose(sum(x * x for x in vector), 1.0)


def test_titan_rejects_unsupported_dimensions_and_models() -> None:
    with pytest.raises(InvalidInput):
        BedrockEmbedder("amazon.titan-embed-text-v2:0", 300, client=object())
    with pytest.raises(InvalidInput):
        BedrockEmbedder("amazon.titan-embed-image-v1", client=object())


def test_cohere_separates_documents_from_queries_and_batches() -> None:
    # Given the Cohere multilingual model and 100 documents (batches of 96)
    runtime = client("bedrock-runtime")
    embedder = BedrockEmbedder("cohere.embed-multilingual-v3", client=runtime)
    docs = [f"doc {n}" for n in range(100)]
    with Stubber(runtime) as stub:
        for batch in (docs[:96], docs[96:]):
            stub.add_response(
                "invoke_model",
                {"body": body({"embeddings": [[1.0, 1.0] + [0.0] * 1022 for _ in batch]}), "contentType": "x"},
                {
                    "modelId": "cohere.embed-multilingual-v3",
                    "body": json.dumps({"texts": batch, "input_type": "search_document", "truncate": "END"}),
                    "contentType": "application/json",
                    "accept": "application/json",
                },
            )
        stub.add_response(
            "invoke_model",
            {"body": body({"embeddings": [[0.0, 2.0] + [0.0] * 1022]}), "contentType": "x"},
            {"modelId": ANY, "body": ANY, "contentType": ANY, "accept": ANY},
        )
        vectors = embedder.embed_documents(docs)
        query = embedder.embed_query("q")
        stub.assert_no_pending_responses()
    # Then every vector is unit length
    assert len(vectors) == 100 and embedder.dimension == 1024
    assert math.isclose(vectors[0][0], 1 / math.sqrt(2)) and query[1] == 1.0


def test_embedding_errors_are_translated() -> None:
    runtime = client("bedrock-runtime")
    embedder = BedrockEmbedder(client=runtime)
    with Stubber(runtime) as stub:
        stub.add_client_error("invoke_model", service_error_code="ThrottlingException", http_status_code=429)
        stub.add_client_error("invoke_model", service_error_code="AccessDeniedException", http_status_code=403)
        stub.add_client_error("invoke_model", service_error_code="ModelTimeoutException", http_status_code=408)
        with pytest.raises(UpstreamRateLimited):
            embedder.embed_query("a")
        with pytest.raises(UpstreamRejected):
            embedder.embed_query("a")
        with pytest.raises(UpstreamTimeout):
            embedder.embed_query("a")


# -- chat (Converse) --------------------------------------------------------------------------


async def test_complete_calls_converse_with_inference_config() -> None:
    runtime = client("bedrock-runtime")
    model = BedrockChatModel("bedrock/amazon.nova-lite-v1:0", client=runtime)
    assert isinstance(model, ChatModel) and model.model_id == "bedrock/amazon.nova-lite-v1:0"
    with Stubber(runtime) as stub:
        stub.add_response(
            "converse",
            {
                "output": {"message": {"role": "assistant", "content": [{"text": '{"facts": '}, {"text": "[]}"}]}},
                "stopReason": "end_turn",
                "usage": {"inputTokens": 5, "outputTokens": 3, "totalTokens": 8},
                "metrics": {"latencyMs": 10},
            },
            {
                "modelId": "amazon.nova-lite-v1:0",
                "messages": [{"role": "user", "content": [{"text": "extract"}]}],
                "system": [{"text": ANY}],
                "inferenceConfig": {"maxTokens": 500, "temperature": 0.0},
            },
        )
        text = await model.complete(
            [{"role": "user", "content": "extract"}], json_mode=True, max_tokens=500, temperature=0
        )
    assert text == '{"facts": []}'


async def test_complete_translates_throttling() -> None:
    runtime = client("bedrock-runtime")
    model = BedrockChatModel("amazon.nova-lite-v1:0", client=runtime)
    with Stubber(runtime) as stub:
        stub.add_client_error("converse", service_error_code="ThrottlingException", http_status_code=429)
        with pytest.raises(UpstreamRateLimited):
            await model.complete([{"role": "user", "content": "hi"}])


# -- rerank -----------------------------------------------------------------------------------


def test_rerank_returns_scores_in_document_order() -> None:
    # Given a reranker in us-west-2 and three documents
    agent = boto3.client(
        "bedrock-agent-runtime", region_name="us-west-2", aws_access_key_id="x", aws_secret_access_key="x"
    )
    reranker = BedrockReranker("amazon.rerank-v1:0", region="us-west-2", client=agent)
    assert isinstance(reranker, Reranker)
    docs = ["peanut allergy", "likes tea", "lives in Lyon"]
    with Stubber(agent) as stub:
        stub.add_response(
            "rerank",
            {
                "results": [
                    {"index": 0, "relevanceScore": 0.91},
                    {"index": 2, "relevanceScore": 0.2},
                    {"index": 1, "relevanceScore": 0.01},
                ]
            },
            {
                "queries": [{"type": "TEXT", "textQuery": {"text": "what can't I eat"}}],
                "sources": [
                    {"type": "INLINE", "inlineDocumentSource": {"type": "TEXT", "textDocument": {"text": d}}}
                    for d in docs
                ],
                "rerankingConfiguration": {
                    "type": "BEDROCK_RERANKING_MODEL",
                    "bedrockRerankingConfiguration": {
                        "numberOfResults": 3,
                        "modelConfiguration": {
                            "modelArn": "arn:aws:bedrock:us-west-2::foundation-model/amazon.rerank-v1:0"
                        },
                    },
                },
            },
        )
        # When reranked / Then one score per document, in the documents' order
        assert reranker.rerank("what can't I eat", docs) == [0.91, 0.01, 0.2]
    assert reranker.rerank("q", []) == []


def test_rerank_needs_a_region() -> None:
    with pytest.raises(InvalidInput):
        BedrockReranker(region="", client=object())
