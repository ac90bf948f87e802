"""Logging for every entry point: the ``engram`` loggers at ``ENGRAM_LOG_LEVEL``, with the request id.

Each process's entry point calls ``configure_logging`` once it has its settings: the ``engram`` CLI
(``serve`` and the job commands), the ASGI factory that ``functions/run.sh`` starts on Lambda, and
the Lambda job handlers. On Lambda (``AWS_LAMBDA_FUNCTION_NAME`` set) records are JSON lines through
Powertools' formatter, which CloudWatch Logs Insights reads field by field; elsewhere plain lines on
stderr. Log calls never carry keys, prompts or memory text above DEBUG (docs/aws.md, "Logs").
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Mapping
from contextvars import ContextVar, Token
from typing import TextIO

LOGGER = "engram"
LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s%(request_tag)s: %(message)s"

# Fields of the HTTP request being served (RequestIdMiddleware binds them), stamped on its records.
_request_fields: ContextVar[Mapping[str, str] | None] = ContextVar("engram_log_fields", default=None)


def bind_request(**fields: str) -> Token[Mapping[str, str] | None]:
    """Stamp ``fields`` (``request_id``, ...) on every record logged in this context; ``unbind`` ends it."""
    return _request_fields.set({k: v for k, v in fields.items() if v})


def unbind(token: Token[Mapping[str, str] | None]) -> None:
    _request_fields.reset(token)


class RequestFieldsFilter(logging.Filter):
    """Adds the bound fields to each record (JSON fields on Lambda) and, for text lines, `` [<id>]``."""

    def __init__(self, *, text: bool) -> None:
        super().__init__()
        self.text = text

    def filter(self, record: logging.LogRecord) -> bool:
        for key, value in (_request_fields.get() or {}).items():
            if not hasattr(record, key):
                setattr(record, key, value)
        if self.text:
            rid = getattr(record, "request_id", None)
            record.request_tag = f" [{rid}]" if rid else ""
        return True


class _StderrHandler(logging.StreamHandler[TextIO]):
    """Writes to whatever ``sys.stderr`` is when a record is emitted (tests swap it)."""

    engram_handler = True

    @property
    def stream(self) -> TextIO:
        return sys.stderr

    @stream.setter
    def stream(self, value: TextIO) -> None:
        pass


def on_lambda() -> bool:
    return bool(os.environ.get("AWS_LAMBDA_FUNCTION_NAME"))


def configure_logging(level: str) -> None:
    """Emit ``engram.*`` records at ``level`` and above, once each (idempotent: safe to call again).

    On Lambda, Powertools' JSON handler sits on the ``engram`` logger (it also keeps the Lambda
    runtime's root handler from printing the same records again). Elsewhere one text handler sits on
    the root logger, so other libraries' warnings come out in the same format; the root level stays.
    """
    name = level.strip().upper()
    if name not in LEVELS:
        raise ValueError(f"ENGRAM_LOG_LEVEL must be one of {', '.join(LEVELS)}, got {level!r}")
    logger = logging.getLogger(LOGGER)
    text = not on_lambda()
    if not text:
        from aws_lambda_powertools import Logger

        Logger(service=LOGGER, level=name)
        handlers = list(logger.handlers)
    else:
        root = logging.getLogger()
        if not any(getattr(h, "engram_handler", False) for h in root.handlers):
            ours = _StderrHandler()
            ours.setFormatter(logging.Formatter(TEXT_FORMAT))
            root.addHandler(ours)
        handlers = [h for h in root.handlers if getattr(h, "engram_handler", False)]
    for handler in handlers:
        if not any(isinstance(f, RequestFieldsFilter) for f in handler.filters):
            handler.addFilter(RequestFieldsFilter(text=text))
    logger.setLevel(name)
