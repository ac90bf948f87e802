"""Settings overrides from an AWS Secrets Manager secret (the deployment's keys and upstream keys).

The secret is one JSON object whose fields are ``Settings`` field names (``api_key``,
``admin_password``, ``upstream_api_key``, ...); empty values are ignored so a half-filled secret
leaves the rest of the configuration alone.
"""

from __future__ import annotations

import json
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from engram.adapters.aws_clients import new_client
from engram.adapters.aws_errors import translate
from engram.domain.errors import InvalidInput


def read_secret_json(secret_arn: str, *, region: str | None = None, client: Any | None = None) -> dict[str, Any]:
    if client is None:
        client = new_client("secretsmanager", region)
    try:
        response = client.get_secret_value(SecretId=secret_arn)
    except (ClientError, BotoCoreError) as exc:
        raise translate(exc, "Secrets Manager") from exc
    try:
        data = json.loads(response.get("SecretString") or "{}")
    except ValueError as exc:
        raise InvalidInput("the Engram secret is not a JSON object") from exc
    if not isinstance(data, dict):
        raise InvalidInput("the Engram secret is not a JSON object")
    return {k: v for k, v in data.items() if v not in (None, "")}
