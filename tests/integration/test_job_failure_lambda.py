"""A namespace's failure reaches the owner through the job Lambda (issue 21, item 5; docs/aws.md,
"Alarms"): the ExtractFunction handler, with a real container and a scripted model that is down for one
namespace, returns its report (the invocation succeeds, so Lambda's automatic retries never repeat the
namespaces that succeeded) and publishes the failure on the ``ExtractionErrors`` metric that the
``ExtractRunFailed`` alarm reads; the next invocation retries only that namespace."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("aws_lambda_powertools")

from engram.bootstrap import Container, Overrides, build_container
from engram.domain.errors import UpstreamUnavailable
from engram.domain.models import Message, new_id
from engram.entrypoints.lambdas import extract, runtime
from engram.settings import Settings

from tests.fakes.chat_model import ScriptedChatModel
from tests.fakes.clock import ManualClock
from tests.integration.test_lambda_handlers import LambdaContextStub


@pytest.fixture
def world(tmp_path: Path) -> Iterator[tuple[Container, ScriptedChatModel, ManualClock]]:
    model, clock = ScriptedChatModel(), ManualClock()
    settings = Settings(store="memory", search="memory", embedder="none", data_dir=tmp_path, scheduler_enabled=False)
    container = build_container(settings, Overrides(embedder=None, clock=clock, extract_model=model, dream_model=model))
    runtime.set_container_factory(lambda: container)
    yield container, model, clock
    runtime.set_container_factory(None)
    container.close()


def _say(container: Container, clock: ManualClock, namespace: str, text: str) -> None:
    at = clock.now() - timedelta(minutes=5)
    container.store.insert_message(
        Message(id=new_id("msg"), namespace=namespace, role="user", content=text, created_at=at, stored_at=at)
    )


def _metric(out: str, name: str) -> list[float]:
    """The values of ``name`` in the EMF lines Powertools printed."""
    values = []
    for line in out.splitlines():
        if line.startswith("{") and '"_aws"' in line:
            blob = json.loads(line)
            if name in blob:
                value = blob[name]
                values.extend(value if isinstance(value, list) else [value])
    return values


def test_a_failed_namespace_succeeds_the_invocation_counts_on_the_metric_and_is_retried_alone(
    world: tuple[Container, ScriptedChatModel, ManualClock], capsys: pytest.CaptureFixture[str]
) -> None:
    container, model, clock = world
    _say(container, clock, "alice", "I am Alice")
    _say(container, clock, "bob", "I am Bob")
    ok = json.dumps({"memories": [{"content": "The user is Alice", "type": "fact", "confidence": 0.9}]})
    model.script(ok, UpstreamUnavailable("provider down"))
    # When the scheduled invocation runs
    report: dict[str, Any] = extract.handler({"job": "extract"}, LambdaContextStub())
    # Then it returns (no exception: Lambda does not retry it) with bob failed, and the metric counts it
    assert report["failed"] == ["bob"] and report["errors"] == 1
    assert _metric(capsys.readouterr().out, "ExtractionErrors") == [1.0]
    # When the next scheduled invocation runs and the model answers
    clock.advance(hours=4)
    model.script(json.dumps({"memories": [{"content": "The user is Bob", "type": "fact", "confidence": 0.9}]}))
    again: dict[str, Any] = extract.handler({"job": "extract"}, LambdaContextStub())
    # Then only bob's window went to the model, and the metric is back to 0
    assert len(model.calls) == 3 and "I am Bob" in model.calls[2].user
    assert again["failed"] == [] and _metric(capsys.readouterr().out, "ExtractionErrors") == [0.0]
