"""Schemathesis over `/openapi.json`: every documented operation fuzzed (examples, coverage and
fuzzing phases; positive and negative data) with every check, response-schema conformance included,
against a real server (SQLite, the fake chat upstream and fake Bedrock behind the chat doors).
Zero failures allowed.

Bounded: a fixed seed, deterministic generation and a few examples per operation keep it reproducible
and under ~30 s; ``ENGRAM_FUZZ_EXAMPLES`` raises the count (the ``slow`` variant runs 50).

One setting differs from schemathesis' defaults, on purpose: a schema-valid request may get a 400,
which the API documents as "a rule refused a value" for rules a schema cannot state (an unknown
cursor, a merge without its target). Skill names, agent ids and fact keys are not among them: the
document states the patterns their rules accept exactly (tests/unit/test_policies.py), so a value
schemathesis makes from a pattern is accepted and one against it is refused. Every other status a
schema-valid request gets still fails the run (a 422 would mean the schema and the validation
disagree), as does any 5xx.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import schemathesis
from engram.bootstrap import Overrides, build_container
from engram.entrypoints.http.app import create_app
from schemathesis.config import SchemathesisConfig
from schemathesis.engine import Status
from schemathesis.engine import events as ev

from tests.fakes.bedrock_runtime import FakeBedrockRuntime
from tests.fakes.upstream import FakeUpstream
from tests.integration.chat_support import OWNER_KEY, gateway_settings
from tests.servers import serve_app

POSITIVE_STATUSES = ["2xx", "400", "401", "403", "404", "409", "429"]


@dataclass(frozen=True)
class Failure:
    operation: str
    check: str
    message: str
    request: str

    def __str__(self) -> str:
        return f"{self.operation} [{self.check}] {self.message}\n    {self.request}"


@pytest.fixture(scope="module")
def api_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A real server: SQLite (whose encoder refuses what Python lets through), keyword search, every
    chat upstream faked so a schema-valid chat body gets a model's answer."""
    data_dir: Path = tmp_path_factory.mktemp("fuzz")
    with ExitStack() as stack:
        upstream = stack.enter_context(FakeUpstream())
        settings = gateway_settings(
            upstream,
            store="sqlite",
            search="local",
            data_dir=data_dir,
            chat_allow_model_passthrough=True,
            aws_region="us-east-1",
        )
        container = build_container(settings, Overrides(bedrock_runtime=FakeBedrockRuntime()))
        stack.callback(container.close)
        yield stack.enter_context(serve_app(create_app(container)))


def run_schemathesis(url: str, *, examples: int, seed: int = 20261201) -> tuple[list[Failure], int]:
    """Every failure schemathesis finds (first per operation and check) and the number of requests."""
    config = SchemathesisConfig.from_dict(
        {
            "seed": seed,
            "headers": {"Authorization": f"Bearer {OWNER_KEY}"},
            "generation": {"max-examples": examples, "deterministic": True, "database": "none"},
            "checks": {"enabled": True, "positive_data_acceptance": {"expected-statuses": POSITIVE_STATUSES}},
            "phases": {"stateful": {"enabled": False}},
            "suppress-health-check": ["all"],
        }
    )
    schema = schemathesis.openapi.from_url(url + "/openapi.json", config=config)
    failures: dict[tuple[str, str], Failure] = {}
    requests = 0
    for event in schemathesis.engine.from_schema(schema).execute():
        if isinstance(event, (ev.NonFatalError, ev.FatalError)):
            failures[(getattr(event, "label", "?"), "error")] = Failure(
                getattr(event, "label", "?"), "error", str(getattr(event, "value", event))[:500], ""
            )
        if not isinstance(event, ev.ScenarioFinished):
            continue
        requests += len(event.recorder.interactions)
        for case_id, checks in event.recorder.checks.items():
            for check in checks:
                if check.status != Status.FAILURE or (event.label, check.name) in failures:
                    continue
                info = check.failure_info
                case: Any = event.recorder.cases[case_id].value
                interaction = event.recorder.interactions.get(case_id)
                answer = interaction.response if interaction is not None else None
                got = f" -> {answer.status_code} {answer.content[:200]!r}" if answer is not None else ""
                failures[(str(event.label), check.name)] = Failure(
                    str(event.label),
                    check.name,
                    (info.failure.message if info else "")[:400].replace("\n", " | ") + got,
                    case.as_curl_command(headers={"Authorization": "Bearer <key>"})[:600],
                )
    return sorted(failures.values(), key=str), requests


def test_schemathesis_finds_nothing(api_url: str) -> None:
    # Given the whole REST and chat API as its OpenAPI document describes it
    examples = int(os.environ.get("ENGRAM_FUZZ_EXAMPLES", "4"))
    # When schemathesis fuzzes every operation with every check
    failures, requests = run_schemathesis(api_url, examples=examples)
    # Then nothing fails (and it really ran: hundreds of requests over 46 operations)
    assert requests > 300, requests
    assert not failures, "\n".join(str(f) for f in failures)


@pytest.mark.slow
def test_schemathesis_finds_nothing_in_a_longer_run(api_url: str) -> None:
    failures, _ = run_schemathesis(api_url, examples=50, seed=7)
    assert not failures, "\n".join(str(f) for f in failures)
