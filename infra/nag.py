"""cdk-nag (AwsSolutions) suppressions, each with the reason it does not apply here.

Kept narrow: IAM findings list the exact wildcard they accept (``applies_to``), everything else is
attached to the one resource it concerns.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from cdk_nag import NagPackSuppression, NagSuppressions

if TYPE_CHECKING:
    from infra.stack import EngramStack


def _regex(pattern: str) -> dict[str, str]:
    return {"regex": f"/{pattern}/g"}


def add_suppressions(stack: EngramStack) -> None:
    NagSuppressions.add_stack_suppressions(
        stack,
        [
            NagPackSuppression(
                id="AwsSolutions-IAM4",
                reason="AWSLambdaBasicExecutionRole (write own logs) and the API Gateway CloudWatch push role are "
                "the AWS-maintained minimal policies for these two service roles.",
                applies_to=[
                    "Policy::arn:<AWS::Partition>:iam::aws:policy/service-role/AWSLambdaBasicExecutionRole",
                    "Policy::arn:<AWS::Partition>:iam::aws:policy/service-role/AmazonAPIGatewayPushToCloudWatchLogs",
                ],
            ),
            NagPackSuppression(
                id="AwsSolutions-IAM5",
                reason="table.grant_read_write_data also covers the table's own GSIs (<table>/index/*), which "
                "the store queries.",
                applies_to=[_regex(r"^Resource::<StorageTable[A-Za-z0-9]+\.Arn>\/index\/\*$")],
            ),
            NagPackSuppression(
                id="AwsSolutions-IAM5",
                reason="Resource '*' only for actions without a resource type: X-Ray PutTraceSegments/"
                "PutTelemetryRecords (active tracing) and bedrock:Rerank (the model is still limited by the "
                "InvokeModel statement).",
                applies_to=["Resource::*"],
            ),
            NagPackSuppression(
                id="AwsSolutions-IAM5",
                reason="A cross-region inference profile routes to the named foundation model in any region of "
                "its geography, so that one model is granted in every region.",
                applies_to=[_regex(r"^Resource::arn:<AWS::Partition>:bedrock:\*::foundation-model\/[^*]+$")],
            ),
            NagPackSuppression(
                id="AwsSolutions-IAM5",
                reason="The Scheduler target role (created by the CDK LambdaInvoke target) may invoke the named "
                "job function and its versions (<fn>:*), nothing else.",
                applies_to=[_regex(r"^Resource::<Jobs(Extract|Dream)Function[A-Za-z0-9]+\.Arn>:\*$")],
            ),
            NagPackSuppression(
                id="AwsSolutions-L1",
                reason="Runtime pinned to python3.12 to match the dependency layer built by layers/build.py "
                "(--python-version 3.12); both are bumped together.",
            ),
        ],
    )
    NagSuppressions.add_resource_suppressions(
        stack.secrets.secret,
        [
            NagPackSuppression(
                id="AwsSolutions-SMG4",
                reason="The secret holds keys the owner pastes in (upstream provider keys, the admin password); "
                "AWS cannot rotate third-party keys.",
            )
        ],
    )
    NagSuppressions.add_resource_suppressions(
        stack.skill_files.bucket,
        [
            NagPackSuppression(
                id="AwsSolutions-S1",
                reason="The bucket holds skill resource files written only through Engram's API (each write is in "
                "the access log of the API); only the functions' roles read or write it.",
            )
        ],
    )
    NagSuppressions.add_stack_suppressions(
        stack,
        [
            NagPackSuppression(
                id="AwsSolutions-IAM5",
                reason="bucket.grant_read/grant_put/grant_delete limited to the skill files prefix (skills/*): the "
                "CDK grants name the object actions with a trailing wildcard (s3:GetObject*, s3:List*, s3:Abort*, "
                "s3:DeleteObject*).",
                applies_to=[
                    "Action::s3:GetObject*",
                    "Action::s3:GetBucket*",
                    "Action::s3:List*",
                    "Action::s3:Abort*",
                    "Action::s3:DeleteObject*",
                    _regex(r"^Resource::<SkillFilesBucket[A-Za-z0-9]+\.Arn>\/skills\/\*$"),
                ],
            )
        ],
    )
    if stack.snapshots is not None:
        NagSuppressions.add_resource_suppressions(
            stack.snapshots.bucket,
            [
                NagPackSuppression(
                    id="AwsSolutions-S1",
                    reason="The bucket holds search snapshots only, derived data rebuildable from the table; "
                    "only the functions' roles read or write it (CloudTrail data events can be enabled if needed).",
                )
            ],
        )
        NagSuppressions.add_stack_suppressions(
            stack,
            [
                NagPackSuppression(
                    id="AwsSolutions-IAM5",
                    reason="bucket.grant_read/grant_put limited to the snapshot prefix (search/*): the CDK grants "
                    "name the object actions with a trailing wildcard (s3:GetObject*, s3:List*, s3:Abort*).",
                    applies_to=[
                        "Action::s3:GetObject*",
                        "Action::s3:GetBucket*",
                        "Action::s3:List*",
                        "Action::s3:Abort*",
                        _regex(r"^Resource::<SnapshotsBucket[A-Za-z0-9]+\.Arn>\/search\/\*$"),
                    ],
                )
            ],
        )
    NagSuppressions.add_resource_suppressions(
        stack.jobs.schedule_dlq,
        [
            NagPackSuppression(
                id="AwsSolutions-SQS3",
                reason="This queue is the dead-letter queue of the EventBridge Scheduler schedules.",
            )
        ],
    )
    NagSuppressions.add_resource_suppressions(
        stack.api.rest_api,
        [
            NagPackSuppression(
                id="AwsSolutions-APIG2",
                reason="A catch-all proxy to the ASGI app, which validates every request body with pydantic.",
            ),
            NagPackSuppression(
                id="AwsSolutions-APIG3",
                reason="No WAF by default (a one-person deployment; the app checks API keys and limits body size). "
                "Attach a web ACL to the stage when exposing it more widely.",
            ),
            NagPackSuppression(
                id="AwsSolutions-APIG4",
                reason="The app authorizes every request (Bearer API keys with scopes, admin session cookie); "
                "OpenAI/Anthropic/MCP clients cannot sign IAM requests or do Cognito logins.",
            ),
            NagPackSuppression(
                id="AwsSolutions-COG4",
                reason="No Cognito: clients authenticate with API keys that the app checks (see APIG4).",
            ),
        ],
        apply_to_children=True,
    )
