"""What the relevance estimate saw for each hit (bench only): ``capture()`` wraps ``fusion.relevance`` so a
benchmark can read, after a recall, each memory's standout, coverage and the number of real vector
candidates behind them. ``bench/quality.py --dump`` stores them with every simulated chat turn, so the
relevance model and the injection default can be re-fitted and re-chosen from one run
(``bench/injection_curve.py --from DUMP``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from engram.domain import fusion

Features = tuple[float, float, int, bool]  # standout, coverage, real vector candidates, has vectors

_seen: dict[str, Features] = {}
_original: Callable[..., float] | None = None


def capture() -> None:
    """Install the wrapper once (idempotent)."""
    global _original
    if _original is not None:
        return
    _original = fusion.relevance

    def recording(evidence: fusion.Evidence, memory_id: str, *args: Any, **kwargs: Any) -> float:
        assert _original is not None
        s = evidence.vector_standout.get(memory_id)
        if s is None:
            s = min(evidence.vector_standout.values(), default=0.0)
        _seen[memory_id] = (
            float(s),
            float(evidence.coverage.get(memory_id, 0.0)),
            len(evidence.vector_standout),
            evidence.has_vectors,
        )
        return _original(evidence, memory_id, *args, **kwargs)

    fusion.relevance = recording


def take(memory_ids: list[str]) -> tuple[Features, ...]:
    """The features of these hits from the last recall, then forget everything seen."""
    out = tuple(_seen.get(m, (0.0, 0.0, 0, False)) for m in memory_ids)
    _seen.clear()
    return out
