"""The pure scoring of recall (``services/recall/pipeline.py`` runs the stages): fusion by ranks or scores, the
importance, recency and anti-repeat factors, dedup, the liveness check, glossary matches and the final
selection under the score and relevance floors. Query-adaptive fusion and relevance: ``domain/fusion.py``.
"""

from __future__ import annotations

import math
import re
import unicodedata
from collections.abc import Callable, Collection, Mapping, Sequence, Set
from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import lru_cache

from engram.domain import fusion
from engram.domain.models import GlossaryTerm, Memory
from engram.domain.text import is_cjk, tokenize


def fuse_rrf(ranked_lists: Sequence[tuple[Sequence[str], float]], k: int = 60) -> dict[str, float]:
    """Weighted reciprocal-rank fusion, normalized so a document first in every list scores 1."""
    total = sum(w for _, w in ranked_lists) / (k + 1)
    scores: dict[str, float] = {}
    if total <= 0:
        return scores
    for ids, weight in ranked_lists:
        for rank, mid in enumerate(ids):
            scores[mid] = scores.get(mid, 0.0) + weight / (k + rank + 1) / total
    return scores


def fuse_scores(weighted: Sequence[tuple[Mapping[str, float], float]]) -> dict[str, float]:
    """Weighted sum of normalized scores, divided by the weight sum (a document best everywhere scores 1)."""
    total = sum(w for _, w in weighted)
    scores: dict[str, float] = {}
    if total <= 0:
        return scores
    for normed, weight in weighted:
        for mid, s in normed.items():
            scores[mid] = scores.get(mid, 0.0) + weight * s / total
    return scores


def importance_factor(importance: float, weight: float) -> float:
    """1 at importance 0.5; ``1 ± weight/2`` at the extremes."""
    return 1.0 + weight * (importance - 0.5)


def recency_factor(created_at: datetime, now: datetime, weight: float, half_life_days: float) -> float:
    """``1 + weight`` for a brand-new memory, halving the bonus every ``half_life_days``."""
    age_days = max(0.0, (now - created_at).total_seconds() / 86400.0)
    return 1.0 + weight * math.pow(0.5, age_days / half_life_days)


def repeat_factor(last_injected_at: datetime | None, now: datetime, window_minutes: int, decay: float) -> float:
    """``decay`` for a memory injected within the last ``window_minutes``, else 1."""
    if last_injected_at is None or window_minutes <= 0:
        return 1.0
    return decay if now - last_injected_at < timedelta(minutes=window_minutes) else 1.0


@lru_cache(maxsize=16384)
def fold_text(text: str) -> str:
    """Case, width, whitespace and punctuation folded away (``same_meaning_text`` in one key; cached like
    ``token_set``: the same memories come back query after query)."""
    text = unicodedata.normalize("NFKC", text).casefold()
    return "".join(ch for ch in text if ch.isalnum())


def jaccard(a: Set[str], b: Set[str]) -> float:
    if not a or not b:
        return 0.0
    shared = len(a & b)  # the union's size without building it
    return shared / (len(a) + len(b) - shared)


@lru_cache(maxsize=16384)
def token_set(text: str) -> frozenset[str]:
    """The token set of a memory's text (cached: the same memories come back query after query)."""
    return frozenset(tokenize(text))


@lru_cache(maxsize=16384)
def text_script(text: str) -> fusion.Script:
    """The script of a memory's text (cached like ``token_set``)."""
    return fusion.script_of(text)


def dedup_memories(
    memories: Sequence[Memory], jaccard_threshold: float, bits: Sequence[int] | None = None
) -> tuple[list[Memory], int]:
    """Drop later memories whose folded text equals, or whose token set nearly equals, an earlier one.
    ``bits``: the memories' token sets as ``fusion.token_bits`` gives them, when the caller has them."""
    kept: list[Memory] = []
    seen_folds: set[str] = set()
    sets = [token_set(memory.content) for memory in memories]
    if jaccard_threshold >= 1.0:
        bits = []
    elif bits is None:
        bits = fusion.token_bits(sets)
    kept_tokens: list[tuple[int, int]] = []
    dropped = 0
    for i, memory in enumerate(memories):
        folded = fold_text(memory.content)
        size = len(sets[i])
        if folded in seen_folds or (
            jaccard_threshold < 1.0 and size >= 3 and _near_any(bits[i], size, kept_tokens, jaccard_threshold)
        ):
            dropped += 1
            continue
        seen_folds.add(folded)
        if bits:
            kept_tokens.append((bits[i], size))
        kept.append(memory)
    return kept, dropped


def _near_any(tokens: int, size: int, kept: Sequence[tuple[int, int]], threshold: float) -> bool:
    """Whether ``jaccard(tokens, t) >= threshold`` for one of ``kept`` (token sets as ``fusion.token_bits``
    with their sizes).

    The same comparison as ``jaccard`` (the same float), inlined: the pool's pairs are the recall's largest
    cost (bench/profiles). A pair whose sizes alone put it under the threshold is skipped (Jaccard is at
    most the smaller size over the larger)."""
    for other, other_size in kept:
        if (size / other_size if other_size > size else other_size / size) < threshold:
            continue
        shared = (tokens & other).bit_count()
        if shared / (size + other_size - shared) >= threshold:
            return True
    return False


def is_live(memory: Memory, namespace: str, now: datetime, types: Collection[str]) -> bool:
    """Only active, unexpired memories of the namespace (and of the wanted types) may be recalled."""
    if memory.namespace != namespace or memory.status != "active":
        return False
    if memory.expires_at is not None and memory.expires_at <= now:
        return False
    return not types or memory.type in types


_WORDISH = re.compile(r"^[\w\s.\-+'#]+$", re.ASCII)


def _latin_word_char(ch: str) -> bool:
    return ch.isalnum() and not is_cjk(ch)


def _occurs(needle: str, haystack: str, *, whole_word: bool) -> bool:
    """``needle`` in ``haystack``; with ``whole_word`` not glued to Latin letters/digits (CJK may touch it)."""
    start = haystack.find(needle)
    while start != -1:
        end = start + len(needle)
        if not whole_word or (
            (start == 0 or not _latin_word_char(haystack[start - 1]))
            and (end == len(haystack) or not _latin_word_char(haystack[end]))
        ):
            return True
        start = haystack.find(needle, start + 1)
    return False


def glossary_matches(query: str, terms: Sequence[GlossaryTerm]) -> list[GlossaryTerm]:
    """Terms whose name or an alias occurs in the query (whole words for Latin script)."""
    folded = unicodedata.normalize("NFKC", query).casefold()
    out: list[GlossaryTerm] = []
    for term in terms:
        for name in (term.term, *term.aliases):
            needle = unicodedata.normalize("NFKC", name).casefold().strip()
            if not needle:
                continue
            if _occurs(needle, folded, whole_word=bool(_WORDISH.match(needle))):
                out.append(term)
                break
    return out


def weigh(
    memories: Sequence[Memory],
    fused: Mapping[str, float],
    now: datetime,
    *,
    importance_weight: float,
    recency_weight: float,
    recency_half_life_days: float,
) -> tuple[dict[str, float], dict[str, float]]:
    """Each memory's importance x recency factor, and its fused score times that factor."""
    factor = {
        m.id: importance_factor(m.importance, importance_weight)
        * recency_factor(m.created_at, now, recency_weight, recency_half_life_days)
        for m in memories
    }
    return factor, {m.id: fused[m.id] * factor[m.id] for m in memories}


@dataclass(frozen=True)
class Selection:
    """The hits kept, best first (memory, score, relevance), and how many each floor dropped."""

    hits: list[tuple[Memory, float, float]]
    floored: int
    irrelevant: int


def select(
    ranked: Sequence[Memory],
    scores: Mapping[str, float],
    relevance_of: Callable[[str], float],
    now: datetime,
    *,
    min_score: float,
    min_relevance: float,
    repeat_window_minutes: int,
    repeat_decay: float,
    k: int,
) -> Selection:
    """Drop hits under the score floor or the relevance floor, decay the ones injected moments ago,
    and keep the best ``k``."""
    final: list[tuple[Memory, float, float]] = []
    floored = irrelevant = 0
    for m in ranked:
        score = scores[m.id]
        if score < min_score:
            floored += 1
            continue
        relevance = relevance_of(m.id)
        if relevance < min_relevance:
            irrelevant += 1
            continue
        score *= repeat_factor(m.last_injected_at, now, repeat_window_minutes, repeat_decay)
        final.append((m, score, relevance))
    final.sort(key=lambda item: (-item[1], item[0].id))
    return Selection(final[:k], floored, irrelevant)
