"""Session-wide servers for the Lambda harness (tests/lambda_harness.py); each starts on first use."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import ExitStack
from typing import Any

import pytest

from tests.fakes.upstream import FakeUpstream, Reply
from tests.lambda_harness import LambdaStack, MotoServer, OpenSearchProxy, lambda_stack

UPSTREAM_KEY = "sk-upstream-test-0001"
ADMIN_PASSWORD = "correct horse battery staple"


@pytest.fixture(scope="session")
def stack_template() -> dict[str, Any]:
    """The CDK app's OpenSearch template, synthesized once per session (offline); the replica backend (a new
    deployment's default) has its own harness tests (test_lambda_replica.py)."""
    pytest.importorskip("aws_cdk")
    from tests.lambda_harness import cached_template

    return cached_template(search_backend="opensearch")


@pytest.fixture(scope="session")
def moto_server() -> Iterator[Any]:
    pytest.importorskip("moto.server")
    pytest.importorskip("flask")
    from tests.lambda_harness import MotoServer

    with MotoServer() as server:
        yield server


@pytest.fixture(scope="session")
def bedrock_fake() -> Iterator[Any]:
    """Titan embeddings over Bedrock's InvokeModel wire on loopback."""
    from tests.fakes.embeddings_server import FakeEmbeddingsServer

    with FakeEmbeddingsServer() as server:
        yield server


@pytest.fixture(scope="session")
def session_upstream() -> Iterator[Any]:
    """The scripted chat upstream shared by the harness tests (reset by each test that scripts it)."""
    from tests.fakes.upstream import FakeUpstream

    with FakeUpstream() as upstream:
        yield upstream


@pytest.fixture
def make_stack(
    stack_template: dict[str, Any],
    moto_server: MotoServer,
    osmem_base: Any,
    bedrock_fake: Any,
    session_upstream: FakeUpstream,
) -> Iterator[Callable[..., LambdaStack]]:
    """Deploy the stack (fresh table, secret, queues, an osmem clone with kNN in front); the owner configures an
    upstream chat model, also used by the jobs, and puts its key into the secret."""
    session_upstream.reset()
    session_upstream.default = Reply()
    with ExitStack() as exits:

        def make(opensearch: str | None = None, **overrides: str) -> LambdaStack:
            if opensearch is None:
                clone = osmem_base.clone()
                exits.callback(clone.close)
                opensearch = exits.enter_context(OpenSearchProxy(clone.url)).url
            settings = {
                "ENGRAM_UPSTREAM_BASE_URL": session_upstream.openai_base_url,
                "ENGRAM_CHAT_MODEL": "fake-chat",
                "ENGRAM_EXTRACT_MODEL": "fake-extract",
                "ENGRAM_DREAM_MODEL": "fake-dream",
                **overrides,
            }
            return exits.enter_context(
                lambda_stack(
                    stack_template,
                    moto_server,
                    opensearch_endpoint=opensearch,
                    bedrock_endpoint=bedrock_fake.root_url,
                    secret_values={"upstream_api_key": UPSTREAM_KEY, "admin_password": ADMIN_PASSWORD},
                    overrides=settings,
                )
            )

        yield make
