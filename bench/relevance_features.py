"""What the relevance estimate saw for each hit (bench only): ``capture()`` wraps ``fusion.relevance`` so a
benchmark can read, after a recall, each memory's standout, coverage and the number of real vector
candidates behind them. ``bench/quality.py --dump`` stores them with every simulated chat turn, so the
relevance model and the injection default can be re-fitted and re-chosen from one run
(``bench/injection_curve.py --from DUMP``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
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


@dataclass(frozen=True)
class FusionCall:
    """The inputs of one ``fusion.adaptive_fuse`` call, replayable (``bench/relevance_replay.py``)."""

    query_tokens: tuple[str, ...]
    keyword: tuple[tuple[str, float], ...]
    vector: tuple[tuple[str, float], ...]
    tokens: dict[str, frozenset[str]]
    scripts: dict[str, fusion.Script]
    options: dict[str, Any]

    def replay(self, **overrides: Any) -> tuple[dict[str, float], fusion.Evidence]:
        return fusion.adaptive_fuse(
            self.query_tokens,
            self.keyword,
            self.vector,
            self.tokens.__getitem__,
            self.scripts,
            **{**self.options, **overrides},
        )


_calls: list[FusionCall] = []
_original_fuse: Callable[..., tuple[dict[str, float], fusion.Evidence]] | None = None


def capture_fusion() -> None:
    """Also record every ``adaptive_fuse`` call's inputs (idempotent); ``take_fusion`` reads the last."""
    global _original_fuse
    if _original_fuse is not None:
        return
    _original_fuse = fusion.adaptive_fuse

    def recording(
        query_tokens: Sequence[str],
        keyword: Sequence[tuple[str, float]],
        vector: Sequence[tuple[str, float]],
        tokens_of: Callable[[str], frozenset[str]],
        script_of_id: Mapping[str, fusion.Script],
        **options: Any,
    ) -> tuple[dict[str, float], fusion.Evidence]:
        assert _original_fuse is not None
        ids = dict.fromkeys([m for m, _ in keyword] + [m for m, _ in vector])
        _calls.append(
            FusionCall(
                tuple(query_tokens),
                tuple(keyword),
                tuple(vector),
                {m: tokens_of(m) for m in ids},
                dict(script_of_id),
                dict(options),
            )
        )
        return _original_fuse(query_tokens, keyword, vector, tokens_of, script_of_id, **options)

    fusion.adaptive_fuse = recording


def take_fusion() -> FusionCall | None:
    """The last recorded fusion call since the previous ``take_fusion`` (``None``: none, or not capturing)."""
    last = _calls[-1] if _calls else None
    _calls.clear()
    return last
