"""ApiFunction (the ASGI app under uvicorn + Lambda Web Adapter) behind a Regional REST API that streams."""

from __future__ import annotations

from aws_cdk import Aws, Duration, RemovalPolicy, Stack
from aws_cdk import aws_apigateway as apigw
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from constructs import Construct

from infra.functions import engram_function

# API Gateway streams for at most 15 minutes; the function may run exactly that long.
STREAM_TIMEOUT = Duration.minutes(15)
# Request bodies API Gateway passes to the function base64-encoded (isBase64Encoded), which the Web
# Adapter decodes to the raw bytes; without them a binary upload (PUT /v1/skills/{name}/files/...) is read
# as UTF-8 text and corrupted. JSON and text stay as they are: base64 makes a body a third larger, and
# chat bodies must stay below Lambda's 6 MB event limit (docs/aws.md, "How Lambda runs it").
BINARY_MEDIA_TYPES = [
    "application/octet-stream",
    "application/zip",
    "application/gzip",
    "application/x-tar",
    "application/pdf",
    "application/wasm",
    "application/x-www-form-urlencoded",
    "multipart/form-data",
    "image/*",
    "audio/*",
    "video/*",
    "font/*",
]
STAGE = "prod"


def web_adapter_env(surface: str) -> dict[str, str]:
    """Environment that makes /opt/bootstrap (the LWA layer) run run.sh and stream responses."""
    return {
        "AWS_LAMBDA_EXEC_WRAPPER": "/opt/bootstrap",
        "AWS_LWA_INVOKE_MODE": "response_stream",
        "AWS_LWA_PORT": "8080",
        "AWS_LWA_READINESS_CHECK_PATH": "/health",
        "ENGRAM_SURFACE": surface,
        # The Host headers /mcp accepts: the Function URL and the REST API's default domain.
        "ENGRAM_MCP_ALLOWED_HOSTS": f"*.lambda-url.{Aws.REGION}.on.aws,*.execute-api.{Aws.REGION}.{Aws.URL_SUFFIX}",
        # The adapter connects from loopback and passes on the front door's X-Forwarded-For, whose last hop
        # is the address API Gateway (or the Function URL) saw: the client of the login rate limit.
        "ENGRAM_TRUSTED_PROXIES": "127.0.0.1",
    }


def api_env() -> dict[str, str]:
    """The API function's own settings: the stage prefix its pages load their URLs under (/docs, /redoc)."""
    return {"ENGRAM_ROOT_PATH": f"/{STAGE}"}


class Api(Construct):
    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        environment: dict[str, str],
        layers: list[lambda_.ILayerVersion],
        memory_size: int,
        throttle_rate: int,
        throttle_burst: int,
        reserved_concurrency: int = 0,
        cloudwatch_role: bool = True,
    ):
        super().__init__(scope, construct_id)
        self.function = engram_function(
            self,
            "ApiFunction",
            reserved_concurrency=reserved_concurrency,
            handler="run.sh",
            description="Engram HTTP API: chat gateway, REST, admin (uvicorn under the Lambda Web Adapter)",
            # REST, chat and admin only: no MCP SDK in this function's cold start (the McpFunction has it).
            environment={**environment, **web_adapter_env("api"), **api_env()},
            layers=layers,
            timeout=STREAM_TIMEOUT,
            memory_size=memory_size,
        )
        integration = apigw.LambdaIntegration(
            self.function,
            proxy=True,
            response_transfer_mode=apigw.ResponseTransferMode.STREAM,
            timeout=STREAM_TIMEOUT,
        )
        access_logs = logs.LogGroup(self, "AccessLogs", retention=logs.RetentionDays.ONE_MONTH)
        self.rest_api = apigw.RestApi(
            self,
            "RestApi",
            # Named after the stack: a second stack in the account gets its own name (and its own alarm).
            rest_api_name=f"{Stack.of(self).stack_name}-api",
            description="Engram: OpenAI/Anthropic-compatible chat gateway, REST API and admin panel",
            endpoint_types=[apigw.EndpointType.REGIONAL],
            binary_media_types=BINARY_MEDIA_TYPES,
            # The CloudWatch role is one per account and region (API Gateway's account settings): created
            # by default and kept when the stack goes, so other APIs' logging keeps working; a setting.
            cloud_watch_role=cloudwatch_role,
            cloud_watch_role_removal_policy=RemovalPolicy.RETAIN if cloudwatch_role else None,
            deploy_options=apigw.StageOptions(
                stage_name=STAGE,
                throttling_rate_limit=throttle_rate,
                throttling_burst_limit=throttle_burst,
                tracing_enabled=True,
                logging_level=apigw.MethodLoggingLevel.ERROR,
                metrics_enabled=True,
                access_log_destination=apigw.LogGroupLogDestination(access_logs),
                access_log_format=apigw.AccessLogFormat.json_with_standard_fields(
                    caller=False,
                    http_method=True,
                    ip=True,
                    protocol=True,
                    request_time=True,
                    resource_path=True,
                    response_length=True,
                    status=True,
                    user=False,
                ),
            ),
        )
        # CDK's own "Endpoint" output repeats the stack's ApiUrl output: one URL output is enough.
        self.rest_api.node.try_remove_child("Endpoint")
        self.rest_api.root.add_method("ANY", integration)
        self.rest_api.root.add_resource("{proxy+}").add_method("ANY", integration)
        self.url = self.rest_api.url
