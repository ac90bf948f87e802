"""McpFunction: the same ASGI app serving only /mcp, behind a Function URL in RESPONSE_STREAM mode."""

from __future__ import annotations

from aws_cdk import Duration
from aws_cdk import aws_lambda as lambda_
from constructs import Construct

from infra.api import web_adapter_env
from infra.functions import engram_function


class Mcp(Construct):
    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        environment: dict[str, str],
        layers: list[lambda_.ILayerVersion],
        memory_size: int,
        reserved_concurrency: int = 0,
    ):
        super().__init__(scope, construct_id)
        self.function = engram_function(
            self,
            "McpFunction",
            reserved_concurrency=reserved_concurrency,
            handler="run.sh",
            description="Engram MCP server (streamable HTTP, stateless) under the Lambda Web Adapter",
            environment={**environment, **web_adapter_env("mcp")},
            layers=layers,
            timeout=Duration.minutes(5),
            memory_size=memory_size,
        )
        # Auth is the app's own (Authorization: Bearer <key>, checked against the secret), so the URL is
        # public at the IAM level, like the REST API.
        self.function_url = self.function.add_function_url(
            auth_type=lambda_.FunctionUrlAuthType.NONE,
            invoke_mode=lambda_.InvokeMode.RESPONSE_STREAM,
        )
        self.url = self.function_url.url
