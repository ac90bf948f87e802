"""One translation table from botocore errors to Engram's errors, shared by the AWS adapters."""

from __future__ import annotations

from engram.domain.errors import (
    MESSAGE_CHARS,
    EngramError,
    InvalidInput,
    NotConfigured,
    UpstreamRateLimited,
    UpstreamRejected,
    UpstreamTimeout,
    UpstreamUnavailable,
)

THROTTLED = {
    "ThrottlingException",
    "TooManyRequestsException",
    "ProvisionedThroughputExceededException",
    "RequestLimitExceeded",
    "ServiceQuotaExceededException",
    "RequestThrottled",  # SQS
    "AWS.SimpleQueueService.RequestThrottled",
}
UNAVAILABLE = {
    "ServiceUnavailableException",
    "InternalServerException",
    "InternalFailure",
    "ModelNotReadyException",
    "ServiceUnavailable",
}
TIMEOUT = {"ModelTimeoutException", "RequestTimeout", "RequestTimeoutException"}
# The caller's IAM identity may not do this (no grant, or no model access in Bedrock): 403, the owner can fix it.
FORBIDDEN = {"AccessDeniedException", "AccessDenied", "KMS.AccessDeniedException"}
# The process's own credentials are broken: the service did not recognise them (the gateway's fault, 502).
DENIED = {
    "UnrecognizedClientException",
    "ExpiredTokenException",
    "InvalidSignatureException",
    "InvalidClientTokenId",  # SQS
}
NO_CREDENTIALS = {"NoCredentialsError", "PartialCredentialsError", "CredentialRetrievalError"}


def translate(exc: Exception, what: str) -> EngramError:
    """The Engram error for a botocore exception raised while doing ``what`` (raise it ``from exc``)."""
    response = getattr(exc, "response", None)
    if isinstance(response, dict):
        error = response.get("Error", {})
        code = str(error.get("Code", ""))
        code = code[:1].upper() + code[1:]  # stream exception events name them `throttlingException`, ...
        message = str(error.get("Message", ""))[:MESSAGE_CHARS]
        status = int(response.get("ResponseMetadata", {}).get("HTTPStatusCode") or 502)
        if code in THROTTLED:
            return UpstreamRateLimited(f"{what}: throttled ({code})")
        if code in TIMEOUT:
            return UpstreamTimeout(f"{what}: timed out ({code})")
        if code in UNAVAILABLE or status >= 500:
            return UpstreamUnavailable(f"{what}: {code or status} {message}".strip())
        if code == "ValidationException":
            return InvalidInput(f"{what}: rejected: {message}")
        if code in FORBIDDEN:
            return UpstreamRejected(f"{what}: access denied ({code}): {message}", status=403)
        if code in DENIED:
            return UpstreamRejected(f"{what}: access denied ({code}): {message}", status=502)
        return UpstreamRejected(f"{what}: {code} {message}".strip(), status=502)
    name = type(exc).__name__
    if name in NO_CREDENTIALS:
        return NotConfigured(
            f"{what}: no AWS credentials: give the process an IAM role, or set AWS_PROFILE "
            "(or AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY)"
        )
    if name == "NoRegionError":
        return NotConfigured(f"{what}: no AWS region: set ENGRAM_AWS_REGION (or AWS_REGION)")
    if "Timeout" in name:
        return UpstreamTimeout(f"{what}: timed out ({name})")
    return UpstreamUnavailable(f"{what}: {name}")
