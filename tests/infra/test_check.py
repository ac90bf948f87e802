"""The preflight (`python -m infra.check`) against botocore's Stubber: every check, passing and failing."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

boto3 = pytest.importorskip("boto3")
from botocore.stub import ANY, Stubber  # noqa: E402

from infra.check import run  # noqa: E402
from infra.config import EngramConfig  # noqa: E402

REGION = "eu-west-1"
ACCOUNT = "111122223333"


class Stubs:
    """One stubbed client per service (``bedrock@<region>`` for another region's Bedrock)."""

    def __init__(self) -> None:
        self.clients: dict[str, Any] = {}
        self.stubbers: dict[str, Stubber] = {}

    def __call__(self, name: str) -> Any:
        return self.stub(name)[0]

    def stub(self, name: str) -> tuple[Any, Stubber]:
        if name not in self.clients:
            service, _, region = name.partition("@")
            client = boto3.client(
                service, region_name=region or REGION, aws_access_key_id="testing", aws_secret_access_key="testing"
            )
            self.clients[name], self.stubbers[name] = client, Stubber(client)
            self.stubbers[name].activate()
        return self.clients[name], self.stubbers[name]

    def add(self, name: str, operation: str, response: dict[str, Any], params: dict[str, Any] | None = None) -> None:
        self.stub(name)[1].add_response(operation, response, params)

    def error(self, name: str, operation: str, code: str, message: str = "") -> None:
        self.stub(name)[1].add_client_error(operation, service_error_code=code, service_message=message)

    def verify(self) -> None:
        for stubber in self.stubbers.values():
            stubber.assert_no_pending_responses()


@pytest.fixture
def stubs() -> Iterator[Stubs]:
    s = Stubs()
    yield s
    s.verify()


def _identity(stubs: Stubs) -> None:
    stubs.add(
        "sts", "get_caller_identity", {"Account": ACCOUNT, "Arn": f"arn:aws:iam::{ACCOUNT}:user/me", "UserId": "x"}
    )


def _bootstrap(stubs: Stubs, status: str = "UPDATE_COMPLETE") -> None:
    stack = {
        "StackName": "CDKToolkit",
        "CreationTime": "2026-01-01T00:00:00Z",
        "StackStatus": status,
        "Outputs": [{"OutputKey": "BootstrapVersion", "OutputValue": "28"}],
    }
    stubs.add("cloudformation", "describe_stacks", {"Stacks": [stack]}, {"StackName": "CDKToolkit"})


def _available(stubs: Stubs, model: str, *, entitled: str = "AVAILABLE", client: str = "bedrock") -> None:
    stubs.add(
        client,
        "get_foundation_model_availability",
        {
            "modelId": model,
            "agreementAvailability": {"status": "AVAILABLE"},
            "authorizationStatus": "AUTHORIZED",
            "entitlementAvailability": entitled,
            "regionAvailability": "AVAILABLE",
        },
        {"modelId": model},
    )


def _profile(stubs: Stubs, profile: str) -> None:
    stubs.add(
        "bedrock",
        "get_inference_profile",
        {
            "inferenceProfileName": profile,
            "inferenceProfileArn": f"arn:aws:bedrock:{REGION}:{ACCOUNT}:inference-profile/{profile}",
            "models": [{"modelArn": "arn:aws:bedrock:eu-west-1::foundation-model/amazon.nova-lite-v1:0"}],
            "inferenceProfileId": profile,
            "status": "ACTIVE",
            "type": "SYSTEM_DEFINED",
        },
        {"inferenceProfileIdentifier": profile},
    )


def _engram_stack(stubs: Stubs, outputs: dict[str, str]) -> None:
    stack = {
        "StackName": "Engram",
        "CreationTime": "2026-01-01T00:00:00Z",
        "StackStatus": "UPDATE_COMPLETE",
        "Outputs": [{"OutputKey": k, "OutputValue": v} for k, v in outputs.items()],
    }
    stubs.add("cloudformation", "describe_stacks", {"Stacks": [stack]}, {"StackName": "Engram"})


def test_a_new_deployment_with_everything_in_place_is_ready(stubs: Stubs) -> None:
    # Given credentials, a bootstrapped eu-west-1, model access to Titan and Nova Lite (via the eu. profile)
    _identity(stubs)
    _bootstrap(stubs)
    _available(stubs, "amazon.titan-embed-text-v2:0")
    _profile(stubs, "eu.amazon.nova-lite-v1:0")
    _available(stubs, "amazon.nova-lite-v1:0")
    stubs.add("apigateway", "get_account", {})
    stubs.error("cloudformation", "describe_stacks", "ValidationError", "Stack with id Engram does not exist")
    # When the preflight runs / Then every check passes
    findings = run(stubs, REGION, EngramConfig(), "Engram")
    assert [f.level for f in findings] == ["ok"] * len(findings), [str(f) for f in findings]
    text = "\n".join(map(str, findings))
    assert "account 111122223333" in text and "CDKToolkit UPDATE_COMPLETE, version 28" in text
    assert "eu.amazon.nova-lite-v1:0 in eu-west-1" in text and "Engram is new: replica backend" in text


def test_missing_bootstrap_model_access_and_a_backend_switch_fail(stubs: Stubs) -> None:
    # Given no bootstrap stack, Titan without model access, an account that has its API Gateway logs role,
    # and a deployed OpenSearch stack while the settings say replica
    _identity(stubs)
    stubs.error("cloudformation", "describe_stacks", "ValidationError", "Stack with id CDKToolkit does not exist")
    _available(stubs, "amazon.titan-embed-text-v2:0", entitled="NOT_AVAILABLE")
    _profile(stubs, "eu.amazon.nova-lite-v1:0")
    _available(stubs, "amazon.nova-lite-v1:0")
    stubs.add("apigateway", "get_account", {"cloudwatchRoleArn": f"arn:aws:iam::{ACCOUNT}:role/apigw-logs"})
    _engram_stack(stubs, {"CollectionEndpoint": "https://x.aoss.amazonaws.com", "TableName": "Engram-Table"})
    # When the preflight runs
    findings = {f.check: f for f in run(stubs, REGION, EngramConfig(), "Engram") if f.level != "ok"}
    # Then each problem is named with what to do
    assert "npx cdk bootstrap" in findings["bootstrap"].message and findings["bootstrap"].level == "FAIL"
    assert "amazon.titan-embed-text-v2:0: no model access" in findings["bedrock"].message
    assert (
        findings["api logs role"].level == "warn" and "api_cloudwatch_role=false" in findings["api logs role"].message
    )
    assert findings["backend"].level == "FAIL" and "searches with opensearch" in findings["backend"].message


def test_a_replica_near_its_ceiling_is_warned(stubs: Stubs) -> None:
    # Given a deployed replica stack whose table holds ~70,000 memories (items / 2) in a us-east-1 account
    _identity(stubs)
    _bootstrap(stubs)
    _available(stubs, "amazon.nova-lite-v1:0", client="bedrock")
    _available(stubs, "amazon.titan-embed-text-v2:0", client="bedrock")
    stubs.add("apigateway", "get_account", {})
    _engram_stack(stubs, {"SnapshotBucket": "b", "TableName": "Engram-Table"})
    stubs.add(
        "dynamodb", "describe_table", {"Table": {"TableName": "Engram-Table", "ItemCount": 140_000}}, {"TableName": ANY}
    )
    # When the preflight runs in us-east-1 (Nova Lite in-region: no profile call)
    findings = {f.check: f for f in run(stubs, "us-east-1", EngramConfig(), "Engram")}
    # Then the replica's size is a warning that names the way on
    size = findings["replica size"]
    assert size.level == "warn" and "70,000 memories" in size.message and "OpenSearch" in size.message


def test_no_credentials_or_region_stop_early(stubs: Stubs) -> None:
    stubs.error("sts", "get_caller_identity", "InvalidClientTokenId")
    findings = run(stubs, None, EngramConfig(), "Engram")
    assert [(f.check, f.level) for f in findings] == [("credentials", "FAIL"), ("region", "FAIL")]


def test_a_region_without_the_job_model_fails_before_any_call(stubs: Stubs) -> None:
    _identity(stubs)
    findings = run(stubs, "sa-east-1", EngramConfig(), "Engram")
    assert findings[-1].level == "FAIL" and "engram:extract_model" in findings[-1].message
