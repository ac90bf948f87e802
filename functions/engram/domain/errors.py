"""The closed set of errors Engram raises.

Adapters translate SDK errors into these (``raise ... from exc``); each entry point maps them once
(REST -> status + JSON body, chat -> OpenAI-style error, MCP -> ToolError, SQS -> failed record).
"""

from __future__ import annotations

# The most of an error's text kept where it is reported or recorded (a job's report, a run record, an
# upstream's or AWS's message inside ours), so one long message never bloats a row or a response.
MESSAGE_CHARS = 300


class EngramError(Exception):
    """Root of every error Engram raises on purpose."""

    code: str = "engram_error"

    def __init__(self, message: str, *, code: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code


class NotFound(EngramError):
    code = "not_found"


class Conflict(EngramError):
    code = "conflict"


# The code of a Conflict raised because a row changed since it was read (docs/ARCHITECTURE.md, "Write rules").
VERSION_CONFLICT = "version_conflict"


def version_conflict(memory_id: str, read: int, stored: int | None = None) -> Conflict:
    """The row ``memory_id`` is no longer at version ``read`` (it is at ``stored``, when known)."""
    now = f" (it is now at version {stored})" if stored is not None else ""
    return Conflict(f"memory {memory_id} changed since version {read} was read{now}", code=VERSION_CONFLICT)


def is_version_conflict(exc: EngramError) -> bool:
    return isinstance(exc, Conflict) and exc.code == VERSION_CONFLICT


class InvalidInput(EngramError):
    code = "invalid_input"


class Unauthorized(EngramError):
    code = "unauthorized"


class Forbidden(EngramError):
    code = "forbidden"


class RateLimited(EngramError):
    """This key sent more requests than its limit allows in the current window (429 with Retry-After)."""

    code = "rate_limited"

    def __init__(self, message: str, *, retry_after: float, code: str | None = None) -> None:
        super().__init__(message, code=code)
        self.retry_after = retry_after


class UpstreamUnavailable(EngramError):
    """The upstream (model provider, AWS service) could not be reached or timed out."""

    code = "upstream_unavailable"


class UpstreamTimeout(UpstreamUnavailable):
    code = "upstream_timeout"


class UpstreamRateLimited(EngramError):
    code = "upstream_rate_limited"


class UpstreamRejected(EngramError):
    """The upstream answered with an error status; ``status`` and ``body`` are kept to pass on."""

    code = "upstream_rejected"

    def __init__(self, message: str, *, status: int = 502, body: bytes | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.body = body


class NotConfigured(EngramError):
    """A feature needs a setting that is not set; the message names the setting."""

    code = "not_configured"
