"""CloudWatch alarms a self-hoster needs, all notifying one SNS topic (optionally by e-mail).

- a dead-letter queue holds a message (a job run or cleanup message failed for good),
- a job function reported errors (the invocation failed),
- a job run failed for a namespace (its error metric: the invocation itself succeeds, so the run of every
  other namespace is kept and Lambda's retries never repeat it; the next run retries that namespace),
- the REST API answered 5xx to 5 % or more of its requests in 15 minutes (with at least 5 requests),
- the MCP Function URL did the same,
- the API or MCP function reported errors (crashes, timeouts, out of memory: not the app's own 5xx),
- (replica backend) a function's index nears the ceiling the stack is sized for.
What each one means and what to do: docs/aws.md, "Alarms".
"""

from __future__ import annotations

from aws_cdk import Duration
from aws_cdk import aws_apigateway as apigw
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_cloudwatch_actions as actions
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from aws_cdk import aws_sns as sns
from aws_cdk import aws_sns_subscriptions as subscriptions
from aws_cdk import aws_sqs as sqs
from constructs import Construct
from engram.domain.deployment import METRICS_NAMESPACE, METRICS_SERVICE, REPLICA_CEILING_MESSAGE

PERIOD = Duration.minutes(5)
# The job functions' Powertools metrics go to METRICS_NAMESPACE / METRICS_SERVICE (engram.domain.deployment,
# which infra/config.py sets as POWERTOOLS_*). A job's error metric counts the failures of one run
# (docs/aws.md, Alarms). The replica's warning starts with REPLICA_CEILING_MESSAGE.
REPLICA_CEILING_METRIC = "ReplicaNearCeiling"
API_PERIOD = Duration.minutes(15)
API_5XX_RATE = 0.05
API_MIN_REQUESTS = 5


class Alarms(Construct):
    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        dead_letter_queues: dict[str, sqs.IQueue],
        job_functions: dict[str, lambda_.IFunction],
        job_error_metrics: dict[str, str],
        rest_api: apigw.RestApi,
        http_functions: dict[str, lambda_.IFunction],
        mcp_function: lambda_.IFunction,
        replica_log_groups: list[logs.ILogGroup] | None = None,
        email: str = "",
    ):
        super().__init__(scope, construct_id)
        self.topic = sns.Topic(self, "Topic", display_name="Engram alarms", enforce_ssl=True)
        if email:
            self.topic.add_subscription(subscriptions.EmailSubscription(email))
        self.alarms: list[cloudwatch.Alarm] = []

        for name, queue in dead_letter_queues.items():
            metric = queue.metric_approximate_number_of_messages_visible(period=PERIOD, statistic="Maximum")
            self._add(
                f"{name}NotEmpty",
                metric,
                threshold=0,
                description=f"Engram: the {name} dead-letter queue holds failed work; read its messages "
                "(docs/aws.md, Alarms), fix the cause, then purge or redrive them.",
            )
        for name, fn in job_functions.items():
            self._add(
                f"{name}Errors",
                fn.metric_errors(period=PERIOD, statistic="Sum"),
                threshold=0,
                description=f"Engram: the {name} job failed; its log group has the error (docs/aws.md, Alarms).",
            )
        for name, metric_name in job_error_metrics.items():
            self._add(
                f"{name}RunFailed",
                cloudwatch.Metric(
                    namespace=METRICS_NAMESPACE,
                    metric_name=metric_name,
                    dimensions_map={"service": METRICS_SERVICE},
                    period=PERIOD,
                    statistic="Sum",
                ),
                threshold=0,
                description=f"Engram: a {name} run failed for a namespace (model unreachable, an unreadable answer, "
                "a window skipped); the next run retries it; the function's log has the error (docs/aws.md, Alarms).",
            )
        self._rate(
            "Api5xxRate",
            errors=rest_api.metric_server_error(period=API_PERIOD, statistic="Sum"),
            requests=rest_api.metric_count(period=API_PERIOD, statistic="Sum"),
            label="5xx share of API requests",
            description="Engram: 5 % or more of API requests failed with 5xx in 15 minutes (upstream model "
            "down, 502/504, or a function error); see the API function's log group (docs/aws.md, Alarms).",
        )
        # The Function URL's own metrics (AWS/Lambda Url5xxCount, UrlRequestCount), by function name.
        self._rate(
            "Mcp5xxRate",
            errors=mcp_function.metric("Url5xxCount", period=API_PERIOD, statistic="Sum"),
            requests=mcp_function.metric("UrlRequestCount", period=API_PERIOD, statistic="Sum"),
            label="5xx share of MCP requests",
            description="Engram: 5 % or more of MCP requests failed with 5xx in 15 minutes; see the MCP "
            "function's log group (docs/aws.md, Alarms).",
        )
        for name, fn in http_functions.items():
            self._add(
                f"{name}FunctionErrors",
                fn.metric_errors(period=PERIOD, statistic="Sum"),
                threshold=0,
                description=f"Engram: the {name} function crashed, timed out or ran out of memory; its log "
                "group has the error (docs/aws.md, Alarms).",
            )

        # The replica's "near its ceiling" warning (adapters/search/replica.py), counted from every log group.
        if replica_log_groups:
            for i, group in enumerate(replica_log_groups):
                logs.MetricFilter(
                    self,
                    f"ReplicaCeilingFilter{i}",
                    log_group=group,
                    metric_namespace=METRICS_NAMESPACE,
                    metric_name=REPLICA_CEILING_METRIC,
                    filter_pattern=logs.FilterPattern.literal(f'"{REPLICA_CEILING_MESSAGE}"'),
                    metric_value="1",
                )
            self._add(
                "ReplicaNearCeiling",
                cloudwatch.Metric(
                    namespace=METRICS_NAMESPACE,
                    metric_name=REPLICA_CEILING_METRIC,
                    period=Duration.hours(1),
                    statistic="Sum",
                ),
                threshold=0,
                description="Engram: a function's replica index holds 80 % or more of the memories the stack is "
                "sized for; raise engram:replica_expected_memories or move to OpenSearch (docs/aws.md, Replica sizes "
                "and ceiling). Writes are never refused.",
            )

    def _rate(
        self,
        construct_id: str,
        *,
        errors: cloudwatch.IMetric,
        requests: cloudwatch.IMetric,
        label: str,
        description: str,
    ) -> None:
        """Alarm when 5 % or more of at least ``API_MIN_REQUESTS`` requests in 15 minutes were errors."""
        rate = cloudwatch.MathExpression(
            expression=f"IF(requests >= {API_MIN_REQUESTS}, errors / requests, 0)",
            using_metrics={"errors": errors, "requests": requests},
            period=API_PERIOD,
            label=label,
        )
        self._add(
            construct_id,
            rate,
            threshold=API_5XX_RATE,
            operator=cloudwatch.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
            description=description,
        )

    def _add(
        self,
        construct_id: str,
        metric: cloudwatch.IMetric,
        *,
        threshold: float,
        description: str,
        operator: cloudwatch.ComparisonOperator = cloudwatch.ComparisonOperator.GREATER_THAN_THRESHOLD,
    ) -> None:
        alarm = cloudwatch.Alarm(
            self,
            construct_id,
            metric=metric,
            threshold=threshold,
            comparison_operator=operator,
            evaluation_periods=1,
            treat_missing_data=cloudwatch.TreatMissingData.NOT_BREACHING,
            alarm_description=description,
        )
        alarm.add_alarm_action(actions.SnsAction(self.topic))
        self.alarms.append(alarm)
