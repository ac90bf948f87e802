"""One translation table from botocore errors to Engram's errors, shared by the AWS adapters."""

from __future__ import annotations

from engram.domain.errors import (
    EngramError,
    InvalidInput,
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
}
UNAVAILABLE = {
    "ServiceUnavailableException",
    "InternalServerException",
    "InternalFailure",
    "ModelNotReadyException",
    "ServiceUnavailable",
}
TIMEOUT = {"ModelTimeoutException", "RequestTimeout", "RequestTimeoutException"}
DENIED = {"AccessDeniedException", "UnrecognizedClientException", "ExpiredTokenException", "InvalidSignatureException"}


def translate(exc: Exception, what: str) -> EngramError:
    """The Engram error for a botocore exception raised while doing ``what`` (raise it ``from exc``)."""
    response = getattr(exc, "response", None)
    if isinstance(response, dict):
        error = response.get("Error", {})
        code = str(error.get("Code", ""))
        message = str(error.get("Message", ""))[:300]
        status = int(response.get("ResponseMetadata", {}).get("HTTPStatusCode") or 502)
        if code in THROTTLED:
            return UpstreamRateLimited(f"{what}: throttled ({code})")
        if code in TIMEOUT:
            return UpstreamTimeout(f"{what}: timed out ({code})")
        if code in UNAVAILABLE or status >= 500:
            return UpstreamUnavailable(f"{what}: {code or status} {message}".strip())
        if code == "ValidationException":
            return InvalidInput(f"{what}: rejected: {message}")
        if code in DENIED:
            return UpstreamRejected(f"{what}: access denied ({code}): {message}", status=502)
        return UpstreamRejected(f"{what}: {code} {message}".strip(), status=502)
    name = type(exc).__name__
    if "Timeout" in name:
        return UpstreamTimeout(f"{what}: timed out ({name})")
    return UpstreamUnavailable(f"{what}: {name}")
