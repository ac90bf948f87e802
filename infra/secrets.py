"""The Secrets Manager secret holding Engram's keys and the upstream API keys (JSON)."""

from __future__ import annotations

import json

from aws_cdk import RemovalPolicy
from aws_cdk import aws_secretsmanager as secretsmanager
from constructs import Construct

# Fields the owner fills after deploy; the names are Settings fields (functions/engram/settings.py).
SECRET_TEMPLATE = {
    "admin_password": "",
    "upstream_api_key": "",
    "anthropic_api_key": "",
    "embedding_api_key": "",
}


class Secrets(Construct):
    """One JSON secret; ``api_key`` (the owner key) is generated at deploy time."""

    def __init__(self, scope: Construct, construct_id: str):
        super().__init__(scope, construct_id)
        self.secret = secretsmanager.Secret(
            self,
            "Secret",
            description="Engram: owner API key (generated), admin password and upstream API keys (JSON).",
            generate_secret_string=secretsmanager.SecretStringGenerator(
                secret_string_template=json.dumps(SECRET_TEMPLATE),
                generate_string_key="api_key",
                exclude_punctuation=True,
                password_length=40,
            ),
            removal_policy=RemovalPolicy.RETAIN,
        )
