"""The CDK app, synthesized offline and asserted on properties (plus cfn-lint and cdk-nag)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

os.environ.setdefault("JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION", "1")
os.environ.setdefault("JSII_SILENCE_WARNING_DEPRECATED_NODE_VERSION", "1")

cdk = pytest.importorskip("aws_cdk")
from aws_cdk.assertions import Annotations, Match, Template  # noqa: E402
from cdk_nag import AwsSolutionsChecks  # noqa: E402
from engram.settings import Settings  # noqa: E402

from infra.config import EngramConfig  # noqa: E402
from infra.stack import EngramStack  # noqa: E402

LWA_LAYER = "753240598075:layer:LambdaAdapterLayerX86:"


def _synth(layer_dir: Path, **config: Any) -> tuple[EngramStack, Template]:
    app = cdk.App()
    stack = EngramStack(app, "Engram", config=EngramConfig(layer_dir=str(layer_dir), **config))
    cdk.Aspects.of(app).add(AwsSolutionsChecks())
    return stack, Template.from_stack(stack)


@pytest.fixture(scope="module")
def layer_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    # A stand-in for layers/build (the real build is layers/build.py; tests need only the folder).
    root = tmp_path_factory.mktemp("layer")
    (root / "python").mkdir()
    (root / "python" / "placeholder.txt").write_text("layer contents are built by layers/build.py\n")
    return root


@pytest.fixture(scope="module")
def synth(layer_dir: Path) -> tuple[EngramStack, Template]:
    return _synth(layer_dir)


@pytest.fixture(scope="module")
def template(synth: tuple[EngramStack, Template]) -> Template:
    return synth[1]


@pytest.fixture(scope="module")
def custom(layer_dir: Path) -> tuple[EngramStack, Template]:
    return _synth(
        layer_dir,
        timezone="Europe/Berlin",
        collection_generation="nextgen",
        reranker="bedrock",
        rerank_region="us-west-2",
        vector_dimension=512,
        bedrock_models=("us.anthropic.claude-haiku-4-5-20251001-v1:0",),
        chat_model="bedrock/eu.anthropic.claude-sonnet-4-5-20250929-v1:0",
        vision_model="bedrock/amazon.nova-lite-v1:0",
        data_access_principals=("arn:aws:iam::111122223333:role/Admin",),
    )


def _resources(template: Template, type_: str) -> dict[str, dict[str, Any]]:
    return template.find_resources(type_)


def _function(template: Template, handler: str) -> dict[str, Any]:
    found = [r for r in _resources(template, "AWS::Lambda::Function").values() if r["Properties"]["Handler"] == handler]
    assert len(found) == (2 if handler == "run.sh" else 1)
    return found[0]


def _policy_statements(template: Template) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for policy in _resources(template, "AWS::IAM::Policy").values():
        out += policy["Properties"]["PolicyDocument"]["Statement"]
    return out


def _as_list(x: Any) -> list[Any]:
    return x if isinstance(x, list) else [x]


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
    assert props["Timeout"] == 900
    assert props["Runtime"] == "python3.12"
    assert LWA_LAYER in json.dumps(props["Layers"])
    assert len(props["Layers"]) == 2


def test_run_sh_execs_uvicorn_factory() -> None:
    # Given the LWA bootstrap script / Then it is executable and starts the app factory with uvicorn
    run_sh = Path(__file__).resolve().parents[2] / "functions" / "run.sh"
    text = run_sh.read_text()
    assert os.access(run_sh, os.X_OK)
    assert "uvicorn --factory engram.entrypoints.http.app:create_app" in text
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
    # Given a deployment in Berlin / Then extraction runs every 4 h and dreaming at 04:10 Berlin time
    _, template = custom
    schedules = {
        s["Properties"]["ScheduleExpression"]: s["Properties"]
        for s in _resources(template, "AWS::Scheduler::Schedule").values()
    }
    assert set(schedules) == {"cron(0 */4 * * ? *)", "cron(10 4 * * ? *)", "cron(30 3 * * ? *)"}
    assert schedules["cron(0 */4 * * ? *)"]["ScheduleExpressionTimezone"] == "Etc/UTC"
    assert schedules["cron(10 4 * * ? *)"]["ScheduleExpressionTimezone"] == "Europe/Berlin"
    assert schedules["cron(30 3 * * ? *)"]["ScheduleExpressionTimezone"] == "Europe/Berlin"
    for props in schedules.values():
        assert props["Target"]["RetryPolicy"] == {"MaximumEventAgeInSeconds": 3600, "MaximumRetryAttempts": 2}
        assert "DeadLetterConfig" in props["Target"]
    dream = schedules["cron(10 4 * * ? *)"]["Target"]
    assert json.loads(dream["Input"]) == {"job": "dream"}


def test_job_handlers_point_at_lambda_entrypoints(template: Template) -> None:
    # Then each job function uses its thin handler module
    for name in ("extract", "dream", "cleanup"):
        props = _function(template, f"engram.entrypoints.lambdas.{name}.handler")["Properties"]
        assert props["Environment"]["Variables"]["ENGRAM_CLEANUP_QUEUE_URL"]


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
    assert {name(r) for r in wanted} <= layer


def test_bedrock_models_named_in_extra_env_are_granted() -> None:
    # Given a chat model set through extra_env instead of the chat_model key
    cfg = EngramConfig(extra_env={"ENGRAM_CHAT_MODEL": "bedrock/mistral.mistral-large-2407-v1:0"}, chat_model="gpt-x")
    # Then it is among the models the functions may invoke, and a non-Bedrock name is not
    ids = cfg.bedrock_model_ids()
    assert "mistral.mistral-large-2407-v1:0" in ids and "gpt-x" not in ids
