"""``JobQueue`` on SQS: the chat path and jobs enqueue, CleanupFunction consumes (AWS deployment).

Message body: ``{"job": "<name>", "payload": {...}}`` (JSON), the same shape the nightly Scheduler
target sends, with the job name also as a message attribute for filtering in the console.
"""

from __future__ import annotations

import json
from typing import Any

from engram.adapters.aws_clients import ClientOptions, new_client
from engram.adapters.aws_errors import translate
from engram.domain.errors import InvalidInput, UpstreamUnavailable

try:
    from botocore.exceptions import BotoCoreError, ClientError
except ImportError:  # pragma: no cover - only without the aws extra
    BotoCoreError = ClientError = Exception

MAX_BODY_BYTES = 256 * 1024
# Short timeouts: a slow queue never holds up a chat turn for long.
SQS_OPTIONS = ClientOptions(connect_timeout=2, read_timeout=5, max_attempts=2, retry_mode="standard")
_MISSING = {"QueueDoesNotExist", "AWS.SimpleQueueService.NonExistentQueue"}


def encode_job(job: str, payload: dict[str, Any]) -> str:
    if not job:
        raise InvalidInput("job name must not be empty")
    try:
        body = json.dumps({"job": job, "payload": payload}, ensure_ascii=False, separators=(",", ":"))
    except (TypeError, ValueError) as exc:
        raise InvalidInput(f"payload of job {job!r} is not JSON-serializable") from exc
    if len(body.encode()) > MAX_BODY_BYTES:
        raise InvalidInput(f"payload of job {job!r} exceeds the SQS message limit")
    return body


class SqsJobQueue:
    """Sends each job as one SQS message. ``client`` is a boto3 SQS client (built with short timeouts
    if omitted, so a slow queue never holds up a chat turn for long)."""

    def __init__(self, queue_url: str, client: Any | None = None, *, region_name: str | None = None) -> None:
        if not queue_url:
            raise InvalidInput("SqsJobQueue needs a queue URL (ENGRAM_CLEANUP_QUEUE_URL)")
        if client is None:
            client = new_client("sqs", region_name, SQS_OPTIONS)
        self._client = client
        self._url = queue_url

    def enqueue(self, job: str, payload: dict[str, Any]) -> None:
        body = encode_job(job, payload)
        try:
            self._client.send_message(
                QueueUrl=self._url,
                MessageBody=body,
                MessageAttributes={"job": {"DataType": "String", "StringValue": job}},
            )
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code", "") in _MISSING:
                raise UpstreamUnavailable(f"SQS queue {self._url!r} not found") from exc
            raise translate(exc, f"SQS {job} job") from exc
        except BotoCoreError as exc:
            raise translate(exc, f"SQS {job} job") from exc
