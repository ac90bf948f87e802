"""The job Lambda handlers, invoked with real event JSON against a moto-backed DynamoDB store."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("aws_lambda_powertools")
pytest.importorskip("moto")

from aws_lambda_powertools.utilities.batch.exceptions import BatchProcessingError
from engram.bootstrap import Overrides, build_container
from engram.domain.errors import NotConfigured
from engram.domain.models import IdempotencyRecord
from engram.entrypoints.lambdas import cleanup, dream, extract, runtime
from engram.services.jobs.registry import JobRunner, JobServices
from engram.settings import Settings

from tests.fakes.clock import ManualClock
from tests.fakes.moto_aws import dynamo_store

EVENTS = Path(__file__).resolve().parents[1] / "events"


def event(name: str) -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads((EVENTS / name).read_text())
    return loaded


@dataclass
class LambdaContextStub:
    function_name: str = "Engram-JobsFunction"
    function_version: str = "$LATEST"
    invoked_function_arn: str = "arn:aws:lambda:us-east-1:111122223333:function:Engram-JobsFunction"
    memory_limit_in_mb: int = 1024
    aws_request_id: str = "52fdfc07-2182-154f-163f-5f0f9a621d72"
    log_group_name: str = "/aws/lambda/Engram-JobsFunction"
    log_stream_name: str = "2025/03/01/[$LATEST]abc"

    def get_remaining_time_in_millis(self) -> int:
        return 900_000


@dataclass
class Report:
    data: dict[str, Any]

    def to_dict(self) -> dict[str, Any]:
        return self.data


@dataclass
class RecordingService:
    """Stands in for a job service: records each run's arguments, returns a report."""

    is_async: bool = False
    fail_for: set[str] = field(default_factory=set)
    calls: list[dict[str, Any]] = field(default_factory=list)

    def run(self, namespace: str | None = None, **kwargs: Any) -> Any:
        self.calls.append({"namespace": namespace, **kwargs})
        if namespace in self.fail_for:
            raise RuntimeError(f"cleanup of {namespace} failed")
        report = Report({"created": 2, "errors": 0, "date": kwargs.get("date")})
        if self.is_async:

            async def done() -> Report:
                return report

            return done()
        return report


@dataclass
class FakeContainer:
    """The parts of a container the job handlers reach: the store, and the job runner over the services."""

    store: Any
    extraction: Any = None
    dreaming: Any = None
    cleanup: Any = None
    settings: Settings = field(default_factory=lambda: Settings(store="memory", search="memory", embedder="none"))
    clock: ManualClock = field(default_factory=ManualClock)
    history: Any = None

    @property
    def jobs(self) -> JobRunner:
        services = JobServices(
            extraction=self.extraction,
            dreaming=self.dreaming,
            cleanup=self.cleanup,
            upkeep=self.extraction,
            reindex=lambda: self.cleanup,
            history=self.history,
        )
        return JobRunner(services)


@pytest.fixture
def container() -> Iterator[FakeContainer]:
    clock = ManualClock()
    with dynamo_store(clock=clock) as store:
        fake = FakeContainer(
            store=store,
            clock=clock,
            extraction=RecordingService(is_async=True),
            dreaming=RecordingService(is_async=True),
            cleanup=RecordingService(),
        )
        runtime.set_container_factory(lambda: fake)
        yield fake
        runtime.set_container_factory(None)


def test_extract_handler_runs_extraction_for_every_namespace(container: FakeContainer) -> None:
    # Given the Scheduler's input / When ExtractFunction is invoked
    result = extract.handler(event("scheduler_extract.json"), LambdaContextStub())
    # Then extraction ran once over every namespace and its report is returned
    assert container.extraction.calls == [{"namespace": None}]
    assert result["created"] == 2


def test_dream_handler_passes_date_force_and_namespace(container: FakeContainer) -> None:
    # Given the nightly input, then a manual run with options
    dream.handler(event("scheduler_dream.json"), LambdaContextStub())
    dream.handler(event("manual_dream.json"), LambdaContextStub())
    # Then the first dreams yesterday for everyone, the second the given date for one namespace
    assert container.dreaming.calls == [
        {"namespace": None, "date": None, "force": False},
        {"namespace": "alice", "date": "2025-03-01", "force": True},
    ]


def test_job_handler_without_a_model_is_not_configured(container: FakeContainer, tmp_path: Path) -> None:
    # Given a deployment whose extraction has no model configured
    settings = Settings(store="memory", search="memory", embedder="none", data_dir=tmp_path, extract_model="")
    built = build_container(settings, Overrides(store=container.store))
    container.extraction = built.extraction
    # Then the invocation fails loudly
    with pytest.raises(NotConfigured):
        extract.handler(event("scheduler_extract.json"), LambdaContextStub())


def test_cleanup_reports_only_the_failed_record(container: FakeContainer) -> None:
    # Given an SQS batch: a namespace job, the nightly job and a foreign body
    batch = event("sqs_cleanup_batch.json")
    # When CleanupFunction processes it
    result = cleanup.handler(batch, LambdaContextStub())
    # Then the two jobs ran and only the foreign message is reported for retry
    assert container.cleanup.calls == [{"namespace": "alice"}, {"namespace": None}]
    assert result == {"batchItemFailures": [{"itemIdentifier": "c80e8021-a70a-42c7-a470-796e1186f753"}]}
    # And the processed message ids are kept as idempotency keys
    key = container.store.get_idempotency(cleanup.JOBS_NAMESPACE, "sqs:059f36b4-87a3-44ab-83d2-661975830a7d")
    assert isinstance(key, IdempotencyRecord) and key.value["namespace"] == "alice"


def test_cleanup_redelivery_is_not_processed_twice(container: FakeContainer) -> None:
    # Given a batch processed once
    batch = event("sqs_cleanup_batch.json")
    batch["Records"] = batch["Records"][:1]
    cleanup.handler(batch, LambdaContextStub())
    # When SQS delivers the same message again
    result = cleanup.handler(batch, LambdaContextStub())
    # Then it is acknowledged without running the cleanup again
    assert result == {"batchItemFailures": []}
    assert container.cleanup.calls == [{"namespace": "alice"}]


def _emf(out: str) -> list[dict[str, Any]]:
    """The EMF blobs (metrics) Powertools printed."""
    return [json.loads(line) for line in out.splitlines() if line.startswith("{") and '"_aws"' in line]


def test_an_invocation_that_runs_no_job_publishes_no_metrics_and_says_nothing(
    container: FakeContainer, capsys: pytest.CaptureFixture[str], recwarn: pytest.WarningsRecorder
) -> None:
    # Given a batch processed once: its invocation published the job's metric
    batch = event("sqs_cleanup_batch.json")
    batch["Records"] = batch["Records"][:1]
    cleanup.handler(batch, LambdaContextStub())
    assert any("CleanupRuns" in blob for blob in _emf(capsys.readouterr().out))
    # When SQS delivers it again (acknowledged without running it) and a job is refused before it runs
    cleanup.handler(batch, LambdaContextStub())
    container.cleanup.fail_for = {"alice"}
    batch["Records"][0]["messageId"] = "another-delivery"
    with pytest.raises(BatchProcessingError):
        cleanup.handler(batch, LambdaContextStub())
    # Then neither published an application metric, and Powertools warned of nothing (runtime.log_metrics)
    assert _emf(capsys.readouterr().out) == []
    assert [str(w.message) for w in recwarn if "metrics" in str(w.message)] == []


def test_the_cold_start_is_counted_by_the_first_invocation_that_succeeds(
    container: FakeContainer, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a new process (no invocation has succeeded yet)
    monkeypatch.setattr(runtime, "_cold_start", True)
    batch = event("sqs_cleanup_batch.json")
    batch["Records"] = batch["Records"][:1]
    container.cleanup.fail_for = {"alice"}
    # When its first invocation fails, then two succeed
    with pytest.raises(BatchProcessingError):
        cleanup.handler(batch, LambdaContextStub())
    container.cleanup.fail_for = set()
    cleanup.handler(batch, LambdaContextStub())
    batch["Records"][0]["messageId"] = "another-delivery"
    cleanup.handler(batch, LambdaContextStub())
    # Then ColdStart was published once, with the function's name, and each run's metric with its run
    blobs = _emf(capsys.readouterr().out)
    cold = [blob for blob in blobs if "ColdStart" in blob]
    assert len(cold) == 1 and cold[0]["function_name"] == "Engram-JobsFunction"
    assert sum("CleanupRuns" in blob for blob in blobs) == 2


def test_cleanup_failure_is_retried_and_not_marked_done(container: FakeContainer) -> None:
    # Given the cleanup of one namespace fails
    container.cleanup.fail_for = {"alice"}
    batch = event("sqs_cleanup_batch.json")
    batch["Records"] = batch["Records"][:1]
    # When the batch is processed / Then the whole (one-record) batch fails, so SQS retries it,
    # and no idempotency key is kept
    with pytest.raises(BatchProcessingError):
        cleanup.handler(batch, LambdaContextStub())
    assert container.store.get_idempotency(cleanup.JOBS_NAMESPACE, "sqs:059f36b4-87a3-44ab-83d2-661975830a7d") is None


def test_queue_and_consumer_agree_on_the_message_format() -> None:
    # Given a job sent through SqsJobQueue / Then the cleanup handler decodes it
    from engram.adapters.queue.sqs import encode_job

    assert cleanup.decode_job(encode_job("cleanup", {"namespace": "alice"})) == ("cleanup", {"namespace": "alice"})


def test_two_deliveries_of_one_message_at_once_run_it_once(container: FakeContainer) -> None:
    # Given a cleanup that is still running when SQS delivers the same message a second time
    inside, second_done = threading.Event(), threading.Event()
    service = container.cleanup

    class SlowCleanup:
        def run(self, namespace: str | None = None) -> Any:
            if not inside.is_set():  # the first run waits for the duplicate; any later one does not
                inside.set()
                assert second_done.wait(10)
            return service.run(namespace)

    container.cleanup = SlowCleanup()
    batch = event("sqs_cleanup_batch.json")
    batch["Records"] = batch["Records"][:1]
    first_result: list[Any] = []
    first = threading.Thread(target=lambda: first_result.append(cleanup.handler(batch, LambdaContextStub())))
    first.start()
    assert inside.wait(10)
    # When the duplicate is processed meanwhile
    with pytest.raises(BatchProcessingError):
        cleanup.handler(batch, LambdaContextStub())
    second_done.set()
    first.join(10)
    # Then the first delivery succeeded (its batch is not mixed with the duplicate's failure), the
    # duplicate failed back to the queue (retried later, then acknowledged) and the cleanup ran once
    assert first_result == [{"batchItemFailures": []}]
    assert service.calls == [{"namespace": "alice"}]
    assert cleanup.handler(batch, LambdaContextStub()) == {"batchItemFailures": []}
    assert service.calls == [{"namespace": "alice"}]


@dataclass
class RecordingHistory:
    calls: list[tuple[str, str]] = field(default_factory=list)

    async def rotate(self, namespace: str, thread: str) -> dict[str, Any]:
        self.calls.append((namespace, thread))
        return {"job": "history", "thread": thread, "folded": 2, "errors": 0}


def test_a_history_rotation_job_runs_on_the_jobs_queue(container: FakeContainer) -> None:
    # Given the chat path queued a rotation of one thread's kept history (services/chat/history.py)
    history = RecordingHistory()
    container.history = history
    batch = event("sqs_cleanup_batch.json")
    batch["Records"] = batch["Records"][:1]
    batch["Records"][0]["body"] = json.dumps(
        {"job": "history", "payload": {"namespace": "alice", "thread": "my-thread"}}
    )
    # When CleanupFunction processes it / Then the thread's rotation ran once, and the message is done
    assert cleanup.handler(batch, LambdaContextStub()) == {"batchItemFailures": []}
    assert history.calls == [("alice", "my-thread")]
    assert container.store.get_idempotency(cleanup.JOBS_NAMESPACE, "sqs:" + batch["Records"][0]["messageId"])
