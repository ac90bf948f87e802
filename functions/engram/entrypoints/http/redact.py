"""Keys never reach a log through a URL: the values of ``token``, ``key``, ``api_key`` and
``access_token`` query parameters are replaced before any log line is written (README, section Keys).

Clients that cannot send headers put keys in URLs (``/mcp?token=…``, ``?api_key=…`` on any route).
uvicorn's access log writes the path with its query string; outbound clients (httpx) log the URLs
they call. A filter on those loggers, and on the handlers that print every other logger's records,
rewrites such URLs in a record's arguments and message. The request itself is left unchanged.
"""

from __future__ import annotations

import logging
import re
from urllib.parse import unquote_plus

SECRET_PARAMS = frozenset({"token", "key", "api_key", "access_token"})
REDACTED = "[redacted]"
# Loggers whose records carry URLs; records of every other logger are filtered at the root's handlers.
URL_LOGGERS = ("uvicorn.access", "uvicorn.error", "httpx", "httpcore")
# A query string: from '?' up to whitespace or a closing quote.
_QUERY = re.compile(r"\?([^\s\"'<>]*)")


def _secret_name(raw: str) -> bool:
    return unquote_plus(raw).strip().lower().replace("-", "_") in SECRET_PARAMS


def redact_query(query: str) -> str:
    """``query`` with the values of secret parameters replaced; everything else kept byte for byte."""
    if "=" not in query:
        return query
    parts = query.split("&")
    for i, part in enumerate(parts):
        name, sep, _value = part.partition("=")
        if sep and _secret_name(name):
            parts[i] = f"{name}={REDACTED}"
    return "&".join(parts)


def redact_urls(text: str) -> str:
    """``text`` with secret query parameter values replaced in every URL or path it contains."""
    if "?" not in text or "=" not in text:
        return text
    return _QUERY.sub(lambda m: "?" + redact_query(m.group(1)), text)


class RedactQuerySecrets(logging.Filter):
    """Rewrites secret query parameters in a record's message and string arguments (never drops it)."""

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.msg, str):
            record.msg = redact_urls(record.msg)
        args = record.args
        if isinstance(args, tuple):
            record.args = tuple(redact_urls(a) if isinstance(a, str) else a for a in args)
        elif isinstance(args, dict):
            record.args = {k: redact_urls(v) if isinstance(v, str) else v for k, v in args.items()}
        return True


_FILTER = RedactQuerySecrets()


def install_redaction() -> None:
    """Attach the filter to the URL loggers and to every handler configured now (idempotent).

    Called when the app is built and again at startup, after uvicorn has configured logging.
    """
    targets: list[logging.Filterer] = [logging.getLogger(name) for name in URL_LOGGERS]
    for name in ("", "uvicorn", "engram", *URL_LOGGERS):  # "engram": Powertools' handler on Lambda
        targets.extend(logging.getLogger(name).handlers)
    for target in targets:
        if _FILTER not in target.filters:
            target.addFilter(_FILTER)
