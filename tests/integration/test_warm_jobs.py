"""One process, many invocations: the job Lambda handlers, the CLI's runners and recall compression
call the real OpenAI-compatible model adapter (one HTTP client per process) against the fake upstream,
several times in a row. Each call must succeed; a per-call event loop used to fail every second one
with "Event loop is closed" (issue 11, "One bridge from sync to async")."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from engram.bootstrap import build_container
from engram.services.library.memories import MemoryWrite
from engram.services.library.messages import MessageIn
from engram.settings import Settings

from tests.fakes.upstream import FakeUpstream, Reply

NS = "alice"


@pytest.fixture(scope="module")
def upstream() -> Iterator[FakeUpstream]:
    with FakeUpstream() as up:
        yield up


@pytest.fixture
def container(upstream: FakeUpstream, tmp_path: Path) -> Iterator[Any]:
    upstream.reset()
    settings = Settings(
        store="sqlite",
        search="memory",
        embedder="none",
        data_dir=tmp_path,
        api_key="ek-test-owner-key",
        upstream_base_url=upstream.openai_base_url,
        upstream_api_key="sk-upstream-secret-0001",
        chat_model="fake-chat",
        timezone="UTC",
        recall_compress_model="fake-small",
        scheduler_enabled=False,
    )
    c = build_container(settings)
    yield c
    c.close()


def extraction_reply(n: int) -> Reply:
    item = {"content": f"The user has hobby number {n}", "type": "fact", "importance": 0.6, "confidence": 0.9}
    return Reply(text=json.dumps({"memories": [item]}))


def dream_reply(day: str) -> Reply:
    plan = {
        "date": day,
        "title": "A day",
        "summary": "The user talked about hobbies.",
        "sections": [],
        "important_excerpts": [],
        "memories_to_update": [],
        "memories_to_delete": [],
    }
    return Reply(text=json.dumps(plan))


def say(container: Any, text: str) -> str:
    """Store a user message a moment ago; returns its day (UTC) for the dream."""
    at = datetime.now(UTC) - timedelta(seconds=1)
    container.messages.ingest(NS, [MessageIn(role="user", content=text, created_at=at)])
    return at.date().isoformat()


@pytest.fixture
def handlers(container: Any) -> Iterator[Any]:
    pytest.importorskip("aws_lambda_powertools")
    from engram.entrypoints.lambdas import dream, extract, runtime

    from tests.integration.test_lambda_handlers import LambdaContextStub

    runtime.set_container_factory(lambda: container)
    yield extract, dream, LambdaContextStub()
    runtime.set_container_factory(None)


def test_each_job_handler_runs_three_times_in_one_process(
    container: Any, upstream: FakeUpstream, handlers: Any
) -> None:
    extract, dream, context = handlers
    for n in range(3):
        # Given a new message and the upstream's answers for it
        day = say(container, f"I picked up hobby number {n}")
        upstream.script(extraction_reply(n), dream_reply(day))
        # When the warm environment runs the extract handler, then the dream handler for that day
        extracted = extract.handler({"job": "extract", "namespace": NS}, context)
        dreamt = dream.handler({"job": "dream", "namespace": NS, "date": day, "force": True}, context)
        # Then both reached the model and succeeded, on every run
        assert extracted["errors"] == 0 and extracted["created"] == 1, (n, extracted)
        assert dreamt["errors"] == 0 and dreamt["namespaces"][0]["status"] == "done", (n, dreamt)
    assert [r.path for r in upstream.requests] == ["/v1/chat/completions"] * 6


def test_the_cli_runners_run_three_times_in_one_process(container: Any, upstream: FakeUpstream) -> None:
    for n in range(3):
        day = say(container, f"I picked up hobby number {n}")
        upstream.script(extraction_reply(n), dream_reply(day))
        extracted = container.jobs.run("extract", {"namespace": NS}).report
        dreamt = container.jobs.run("dream", {"date": day, "force": True, "namespace": NS}).report
        assert extracted["errors"] == 0 and extracted["created"] == 1, (n, extracted)
        assert dreamt["errors"] == 0, (n, dreamt)


def test_recall_compression_works_on_consecutive_calls(container: Any, upstream: FakeUpstream) -> None:
    # Given one memory and a compression model on the upstream
    container.memories.write(NS, MemoryWrite(content="The user is allergic to peanuts since childhood, badly."))
    for n in range(3):
        upstream.script(Reply(text=json.dumps({"lines": [f"Allergic to peanuts ({n})."]})))
        # When recalling from sync code, again and again
        result = container.recall.recall(NS, "peanuts allergy")
        # Then every call is compressed by the model
        assert [h.text for h in result.hits] == [f"Allergic to peanuts ({n})."], result.meta
        assert "compress" in result.meta["stages"]
