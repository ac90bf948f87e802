"""The pure scoring of recall (``services/recall/pipeline.py`` runs the stages): fusion by ranks or scores, the
importance, recency and anti-repeat factors, the pool's pairwise stages (the head's token overlaps computed
once, dedup, diversity), the liveness check, glossary matches and the final selection under the score and
relevance floors. Query-adaptive fusion and relevance: ``domain/fusion.py``.
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


def token_bits(token_sets: Sequence[frozenset[str]]) -> list[int]:
    """Each token set as an int with one bit per token of the sets' own vocabulary (first seen, lowest bit),
    so ``(a & b).bit_count()`` is ``len(set_a & set_b)`` without building the intersection (``overlaps``)."""
    vocabulary: dict[str, int] = {}
    out: list[int] = []
    for tokens in token_sets:
        bits = 0
        for token in tokens:
            bit = vocabulary.get(token)
            if bit is None:
                bit = vocabulary[token] = 1 << len(vocabulary)
            bits |= bit
        out.append(bits)
    return out


def overlaps(token_sets: Sequence[frozenset[str]]) -> list[list[float]]:
    """The token overlap (Jaccard) of every pair of ``token_sets``: row ``i``, column ``j``; 0 on the diagonal
    and with an empty set. Each is the same float as ``jaccard`` (shared over the union's
    size), each pair computed once: recall's two pairwise stages (``dedup_memories``, then
    ``diversify``) read one matrix instead of each comparing the pairs again (bench/README.md, "Gateway
    overhead": the pool's pairs are the injecting recall's largest cost)."""
    bits = token_bits(token_sets)
    sizes = [len(tokens) for tokens in token_sets]
    n = len(bits)
    rows = [[0.0] * n for _ in range(n)]
    for i in range(n):
        a, size, row = bits[i], sizes[i], rows[i]
        if not size:
            continue
        for j in range(i + 1, n):
            other = sizes[j]
            if other:
                shared = (a & bits[j]).bit_count()
                row[j] = rows[j][i] = shared / (size + other - shared)
    return rows


def diversify(
    ranked: Sequence[str],
    scores: Mapping[str, float],
    tokens_of: Callable[[str], frozenset[str]],
    penalty: float,
    pairs: Sequence[Sequence[float]] | None = None,
) -> dict[str, float]:
    """Maximal-marginal-relevance scores: greedily, each next memory's score minus ``penalty`` times its
    highest token overlap (Jaccard) with the memories already placed above it. Templated notes ("晚上做了
    X，味道一般", "Had X with Y") then stop filling every slot for a vague query. ``pairs``: the overlaps of
    ``ranked`` as ``overlaps`` gives them (in ``ranked``'s order), when the caller has them."""
    if penalty <= 0 or len(ranked) < 2:
        return {mid: scores[mid] for mid in ranked}
    if pairs is None:
        pairs = overlaps([tokens_of(mid) for mid in ranked])
    base = [scores[mid] for mid in ranked]
    # By position in ``ranked``: each one's adjusted score, kept current as its overlap grows (a placed
    # one is -inf), so a pick is ``max`` and ``index`` over a list (the earliest on a tie), not a list
    # built per pick.
    adjusted = list(base)
    overlap = [0.0] * len(ranked)
    remaining = list(range(len(ranked)))
    out: dict[str, float] = {}
    placed_mark = -math.inf
    for _ in range(len(ranked)):
        best_value = max(adjusted)
        at = adjusted.index(best_value)  # the first of the best
        out[ranked[at]] = best_value
        adjusted[at] = placed_mark
        remaining.remove(at)
        row = pairs[at]
        for i in remaining:
            share = row[i]
            if share > overlap[i]:
                overlap[i] = share
                adjusted[i] = base[i] - penalty * share
    return out


def dedup_memories(
    memories: Sequence[Memory], jaccard_threshold: float, pairs: Sequence[Sequence[float]] | None = None
) -> tuple[list[Memory], int]:
    """Drop later memories whose folded text equals, or whose token set nearly equals, an earlier one.
    ``pairs``: the memories' token overlaps as ``overlaps`` gives them, when the caller has them."""
    kept: list[Memory] = []
    kept_at: list[int] = []
    seen_folds: set[str] = set()
    near = jaccard_threshold < 1.0
    sizes = [len(token_set(memory.content)) for memory in memories] if near else []
    if near and pairs is None:
        pairs = overlaps([token_set(memory.content) for memory in memories])
    dropped = 0
    for i, memory in enumerate(memories):
        folded = fold_text(memory.content)
        if folded in seen_folds:
            dropped += 1
            continue
        if near and sizes[i] >= 3 and kept_at:
            assert pairs is not None
            row = pairs[i]
            # Its highest overlap with a memory kept before it (all of them while none was dropped).
            highest = max(row[:i]) if len(kept_at) == i else max(map(row.__getitem__, kept_at))
            if highest >= jaccard_threshold:
                dropped += 1
                continue
        seen_folds.add(folded)
        kept_at.append(i)
        kept.append(memory)
    return kept, dropped


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
