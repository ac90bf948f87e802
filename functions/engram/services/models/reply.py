"""Reading what a model answered (extraction, dreaming, scoring on moving in, recall compression): the
first JSON object of the reply and lenient readers of its fields (a wrong type becomes empty or the
default, never an exception)."""

from __future__ import annotations

import json
from typing import Any

from engram.domain.errors import InvalidInput


def parse_json_object(text: str) -> dict[str, Any]:
    """The first JSON object in a model reply: bare, in a ```json fence, or wrapped in prose.

    Raises ``InvalidInput`` (code ``invalid_model_output``) when there is none.
    """
    decoder = json.JSONDecoder()
    stripped = text.strip()
    candidates = [stripped]
    # Fenced blocks first: prose around a fence often contains stray braces.
    # The language tag ("json") before the first brace is skipped by the brace search below.
    candidates[:0] = stripped.split("```")[1::2]
    for candidate in candidates:
        start = candidate.find("{")
        while start != -1:
            try:
                value, _ = decoder.raw_decode(candidate, start)
            except json.JSONDecodeError:
                start = candidate.find("{", start + 1)
                continue
            if isinstance(value, dict):
                return value
            start = candidate.find("{", start + 1)
    raise InvalidInput("the model did not answer with a JSON object", code="invalid_model_output")


def as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def as_str(value: Any) -> str:
    return value.strip() if isinstance(value, str) else ""


def as_unit(value: Any, default: float) -> float:
    """A number clamped to [0, 1]; ``default`` when it is not a number."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        try:
            value = float(str(value))
        except ValueError:
            return default
    number = float(value)
    if number != number:  # NaN
        return default
    return min(max(number, 0.0), 1.0)


def as_str_list(value: Any, limit: int = 20) -> list[str]:
    return [v.strip() for v in as_list(value) if isinstance(v, str) and v.strip()][:limit]
