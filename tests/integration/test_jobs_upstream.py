"""Extraction through the real OpenAI-compatible ``ChatModel`` adapter against the scripted fake
upstream on loopback: the bootstrap wiring from settings, JSON mode, and a retry after a 500.

Skipped until the LLM adapters and the fake upstream are in this build.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

import pytest

pytest.importorskip("engram.adapters.llm.openai_compat")
upstream = pytest.importorskip("tests.fakes.upstream")

from tests.conftest import EngramServer  # noqa: E402

if TYPE_CHECKING:
    from tests.fakes.upstream import FakeUpstream


@pytest.fixture
def fake_upstream() -> Iterator[object]:
    with upstream.FakeUpstream() as up:
        yield up


def test_extraction_calls_the_configured_upstream_and_retries_after_an_error(
    make_server: Callable[..., EngramServer], fake_upstream: FakeUpstream
) -> None:
    up = fake_upstream
    # Given a server whose extraction model is built from settings
    server = make_server(upstream_base_url=up.openai_base_url, chat_model="fake-chat", extract_model="fake-extract")
    with server.client() as owner:
        owner.post("/v1/ingest/messages", json={"messages": [{"role": "user", "content": "I live in Porto"}]})
        up.script(
            upstream.Reply(status=500, error_body={"error": {"message": "overloaded"}}),
            upstream.Reply(
                text=json.dumps(
                    {
                        "memories": [
                            {
                                "content": "The user lives in Porto",
                                "type": "fact",
                                "fact_key": "profile:city",
                                "importance": 0.8,
                                "confidence": 0.9,
                                "tags": [],
                                "source_message_ids": [],
                            }
                        ]
                    }
                )
            ),
        )
        # When extraction runs (the upstream fails) and runs again
        first = owner.post("/v1/jobs/extract").json()
        second = owner.post("/v1/jobs/extract").json()
    # Then the first left the window for the second, which stored the memory
    assert first["errors"] == 1 and first["created"] == 0
    assert second["created"] == 1
    sent = up.last().json
    assert sent["model"] == "fake-extract" and sent["response_format"] == {"type": "json_object"}
    assert "source_message_ids" in sent["messages"][0]["content"]
