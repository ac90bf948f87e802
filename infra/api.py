"""ApiFunction (the ASGI app under uvicorn + Lambda Web Adapter) behind a Regional REST API that streams."""

from __future__ import annotations

from aws_cdk import Aws, Duration
from aws_cdk import aws_apigateway as apigw
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from constructs import Construct

from infra.functions import engram_function

# API Gateway streams for at most 15 minutes; the function may run exactly that long.
STREAM_TIMEOUT = Duration.minutes(15)


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


class Api(Construct):
    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        environment: dict[str, str],
        layers: list[lambda_.ILayerVersion],
        memory_size: int,
    ):
        super().__init__(scope, construct_id)
        self.function = engram_function(
            self,
            "ApiFunction",
            handler="run.sh",
            description="Engram HTTP API: chat gateway, REST, admin (uvicorn under the Lambda Web Adapter)",
            # REST, chat and admin only: no MCP SDK in this function's cold start (the McpFunction has it).
            environment={**environment, **web_adapter_env("api")},
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
            description="Engram: OpenAI/Anthropic-compatible chat gateway, REST API and admin panel",
            endpoint_types=[apigw.EndpointType.REGIONAL],
            cloud_watch_role=True,
            deploy_options=apigw.StageOptions(
                stage_name="prod",
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
        self.rest_api.root.add_method("ANY", integration)
        self.rest_api.root.add_resource("{proxy+}").add_method("ANY", integration)
        self.url = self.rest_api.url
