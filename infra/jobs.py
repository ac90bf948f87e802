"""Scheduled and queued jobs: extraction every N hours, nightly dreaming and cleanup; cleanup, index
repair and reindex from the SQS jobs queue.

The schedule times are the deploy-time ENGRAM_DREAM_HOUR/..., ENGRAM_TIMEZONE the functions also get
(EngramConfig.schedule_times); docs/aws.md says what a time zone changed later in the panel moves.
"""

from __future__ import annotations

from aws_cdk import Duration, TimeZone
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_lambda_destinations as destinations
from aws_cdk import aws_lambda_event_sources as sources
from aws_cdk import aws_scheduler as scheduler
from aws_cdk import aws_scheduler_targets as targets
from aws_cdk import aws_sqs as sqs
from constructs import Construct

from infra.functions import engram_function

JOB_TIMEOUT = Duration.minutes(15)
CLEANUP_TIMEOUT = Duration.minutes(5)
SCHEDULE_RETRIES = 2
SCHEDULE_MAX_EVENT_AGE = Duration.hours(1)
# Scheduler invokes Lambda asynchronously: its retry policy covers delivery only. A run that fails
# inside the function is retried by Lambda's async queue (2 retries, ~1 and ~2 min apart), then
# recorded in the schedule DLQ. A full-length run (15 min) plus two retries fits in 1 h.
ASYNC_RETRIES = 2
ASYNC_MAX_EVENT_AGE = Duration.hours(1)
CLEANUP_MAX_RECEIVES = 3


def _queue(scope: Construct, construct_id: str, **kwargs: object) -> sqs.Queue:
    return sqs.Queue(
        scope,
        construct_id,
        encryption=sqs.QueueEncryption.SQS_MANAGED,
        enforce_ssl=True,
        **kwargs,  # type: ignore[arg-type]
    )


class Jobs(Construct):
    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        environment: dict[str, str],
        layers: list[lambda_.ILayerVersion],
        memory_size: int,
        timezone: str,
        times: dict[str, int],
    ):
        super().__init__(scope, construct_id)
        tz = TimeZone.of(timezone)
        every = times["extract_interval_hours"]

        # -- cleanup: SQS queue (+DLQ) consumed with partial batch failures -----------------
        self.cleanup_dlq = _queue(self, "CleanupDlq", retention_period=Duration.days(14))
        self.cleanup_queue = _queue(
            self,
            "CleanupQueue",
            # AWS guidance: at least 6x the consumer's timeout, so retries don't overlap a running batch.
            visibility_timeout=Duration.minutes(30),
            dead_letter_queue=sqs.DeadLetterQueue(queue=self.cleanup_dlq, max_receive_count=CLEANUP_MAX_RECEIVES),
        )
        env = {**environment, "ENGRAM_CLEANUP_QUEUE_URL": self.cleanup_queue.queue_url}
        self.cleanup_function = engram_function(
            self,
            "CleanupFunction",
            handler="engram.entrypoints.lambdas.cleanup.handler",
            # The jobs queue's consumer: cleanup, index repair and the admin panel's reindex, which stops
            # before this timeout at a checkpoint and queues its own continuation (services/index/reindex.py).
            description="Engram jobs from the queue: cleanup (retention), index repair, reindex",
            environment=env,
            layers=layers,
            timeout=CLEANUP_TIMEOUT,
            memory_size=memory_size,
        )
        self.cleanup_function.add_event_source(
            sources.SqsEventSource(self.cleanup_queue, batch_size=10, report_batch_item_failures=True)
        )

        # -- extraction and dreaming: EventBridge Scheduler with retries and a DLQ ----------
        self.schedule_dlq = _queue(self, "ScheduleDlq", retention_period=Duration.days(14))
        self.extract_function = engram_function(
            self,
            "ExtractFunction",
            handler="engram.entrypoints.lambdas.extract.handler",
            description="Engram extraction job: new messages -> memories or review candidates",
            environment=env,
            layers=layers,
            timeout=JOB_TIMEOUT,
            memory_size=memory_size,
        )
        self.dream_function = engram_function(
            self,
            "DreamFunction",
            handler="engram.entrypoints.lambdas.dream.handler",
            description="Engram dreaming job: nightly consolidation, digest and daily log",
            environment=env,
            layers=layers,
            timeout=JOB_TIMEOUT,
            memory_size=memory_size,
        )
        for fn in (self.extract_function, self.dream_function):
            fn.configure_async_invoke(
                on_failure=destinations.SqsDestination(self.schedule_dlq),
                retry_attempts=ASYNC_RETRIES,
                max_event_age=ASYNC_MAX_EVENT_AGE,
            )
        self.extract_schedule = scheduler.Schedule(
            self,
            "ExtractSchedule",
            description=f"Engram extraction every {every} hours",
            # Whole UTC hours divisible by the interval, like `engram serve`'s own scheduler.
            schedule=scheduler.ScheduleExpression.cron(
                minute="0", hour="0" if every == 24 else f"*/{every}", time_zone=TimeZone.ETC_UTC
            ),
            target=self._lambda_target(self.extract_function, {"job": "extract"}),
        )
        self.dream_schedule = scheduler.Schedule(
            self,
            "DreamSchedule",
            description="Engram dreaming, nightly in the user's time zone",
            schedule=scheduler.ScheduleExpression.cron(
                minute=str(times["dream_minute"]), hour=str(times["dream_hour"]), time_zone=tz
            ),
            target=self._lambda_target(self.dream_function, {"job": "dream"}),
        )
        # Nightly cleanup of every namespace goes through the same queue as the chat path's requests.
        self.cleanup_schedule = scheduler.Schedule(
            self,
            "CleanupSchedule",
            description="Engram nightly cleanup of every namespace (via the cleanup queue)",
            schedule=scheduler.ScheduleExpression.cron(
                minute=str(times["cleanup_minute"]), hour=str(times["cleanup_hour"]), time_zone=tz
            ),
            target=targets.SqsSendMessage(
                self.cleanup_queue,
                input=scheduler.ScheduleTargetInput.from_object({"job": "cleanup", "payload": {"all": True}}),
                dead_letter_queue=self.schedule_dlq,
                retry_attempts=SCHEDULE_RETRIES,
                max_event_age=SCHEDULE_MAX_EVENT_AGE,
            ),
        )

    def _lambda_target(self, fn: lambda_.IFunction, payload: dict[str, str]) -> targets.LambdaInvoke:
        return targets.LambdaInvoke(
            fn,
            input=scheduler.ScheduleTargetInput.from_object(payload),
            dead_letter_queue=self.schedule_dlq,
            retry_attempts=SCHEDULE_RETRIES,
            max_event_age=SCHEDULE_MAX_EVENT_AGE,
        )

    @property
    def functions(self) -> list[lambda_.Function]:
        return [self.extract_function, self.dream_function, self.cleanup_function]
