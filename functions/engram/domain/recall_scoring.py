"""The pure scoring of recall (``services/recall/pipeline.py`` runs the stages): fusion by ranks or scores, the
importance, recency and anti-repeat factors, the pool's pairwise stages (dedup, diversity: the head's token sets
as bits once, a pair compared only where a stage needs it), the liveness check, glossary matches and the final
selection under the score and relevance floors. Query-adaptive fusion and relevance: ``domain/fusion.py``.
"""

from __future__ import annotations

import heapq
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
    so ``(a & b).bit_count()`` is ``len(set_a & set_b)`` without building the intersection, and
    ``a.bit_count()`` is ``len(set_a)`` (``dedup_memories``, ``diversify``)."""
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


def diversify(
    ranked: Sequence[str],
    scores: Mapping[str, float],
    tokens_of: Callable[[str], frozenset[str]],
    penalty: float,
    bits: Sequence[int] | None = None,
) -> dict[str, float]:
    """Maximal-marginal-relevance scores: greedily, each next memory's score minus ``penalty`` times its
    highest token overlap (Jaccard) with the memories already placed above it. Templated notes ("晚上做了
    X，味道一般", "Had X with Y") then stop filling every slot for a vague query. ``bits``: the token sets of
    ``ranked`` as ``token_bits`` gives them (in ``ranked``'s order), when the caller has them.

    Lazily (the same picks and floats as rescanning every pair after each pick: tests/unit/test_fusion.py):
    a memory's score only falls as memories are placed, so each one waits in a heap under the score it had
    when last looked at, an upper bound of its score now; the top of the heap is brought up to date (its
    overlaps with the memories placed since, from the bits) and placed when it stays on top, else it goes
    back under its new score. A pick is the best score, the earliest in ``ranked`` on a tie, as the heap
    orders ``(-score, position)``. Each pair is compared once at most, when the later of the two is looked
    at, with no matrix of every pair built first (bench/README.md, "The e5 turn, session 11").
    """
    if penalty <= 0 or len(ranked) < 2:
        return {mid: scores[mid] for mid in ranked}
    if bits is None:
        bits = token_bits([tokens_of(mid) for mid in ranked])
    sizes = [b.bit_count() for b in bits]
    base = [scores[mid] for mid in ranked]
    overlap = [0.0] * len(ranked)  # each one's highest overlap with the placed ones it was compared with
    compared = [0] * len(ranked)  # how many of ``placed`` (its first ones) that covers
    placed: list[tuple[int, int]] = []  # the placed ones' bits and sizes, in order
    heap = [(-score, at) for at, score in enumerate(base)]
    heapq.heapify(heap)
    out: dict[str, float] = {}
    while heap:
        key, at = heap[0]
        seen = compared[at]
        if seen == len(placed):  # up to date and on top: the next pick
            heapq.heappop(heap)
            out[ranked[at]] = -key
            placed.append((bits[at], sizes[at]))
            continue
        compared[at] = len(placed)
        size = sizes[at]
        if size:  # an empty set overlaps nothing (and with an empty set ``shared`` is 0: 0.0)
            mine, highest = bits[at], overlap[at]
            for theirs, other in placed[seen:]:
                shared = (mine & theirs).bit_count()
                share = shared / (size + other - shared)
                if share > highest:
                    highest = share
            if highest > overlap[at]:
                overlap[at] = highest
                heapq.heapreplace(heap, (-(base[at] - penalty * highest), at))
    return out


def dedup_memories(
    memories: Sequence[Memory], jaccard_threshold: float, bits: Sequence[int] | None = None
) -> tuple[list[Memory], int]:
    """Drop later memories whose folded text equals, or whose token set nearly equals (an overlap at or above
    ``jaccard_threshold``, for sets of 3 tokens or more), an earlier kept one. ``bits``: the memories' token
    sets as ``token_bits`` gives them, when the caller has them.

    A memory is compared only with the kept ones that share a token with it among the first few of each
    (prefix filtering: two sets whose overlap reaches the threshold share a token among their first
    ``size - ceil(threshold * size) + 1`` in any one order of the tokens; here the latest-seen token first,
    a memory's own words before the ones the pool shares), so a pool of memories that are not near
    copies compares few of its pairs (bench/README.md, "The e5 turn, session 11")."""
    kept: list[Memory] = []
    seen_folds: set[str] = set()
    near = jaccard_threshold < 1.0
    if near and bits is None:
        bits = token_bits([token_set(memory.content) for memory in memories])
    # The kept sets by their prefix's tokens (a token's bit), and all those tokens as one int: a set whose
    # own prefix shares none of them is near no kept one (one ``&``, the usual answer).
    by_prefix: dict[int, list[int]] = {}
    indexed = 0
    any_kept = False
    dropped = 0
    for i, memory in enumerate(memories):
        folded = fold_text(memory.content)
        if folded in seen_folds:
            dropped += 1
            continue
        if near:
            assert bits is not None
            mine = bits[i]
            size = mine.bit_count()
            prefix = _prefix(mine, size, jaccard_threshold)
            shared_prefix = prefix & indexed
            if (
                size >= 3
                and any_kept
                and (
                    jaccard_threshold <= 0.0  # every overlap reaches it, 0 with an empty set included
                    or (shared_prefix and _near_one(mine, size, shared_prefix, by_prefix, jaccard_threshold))
                )
            ):
                dropped += 1
                continue
            any_kept = True
            indexed |= prefix
            rest = prefix
            while rest:
                bit = rest & -rest
                by_prefix.setdefault(bit, []).append(mine)
                rest ^= bit
        seen_folds.add(folded)
        kept.append(memory)
    return kept, dropped


def _prefix(bits: int, size: int, threshold: float) -> int:
    """The first tokens (bits, highest first) of a set of ``size`` tokens that every set overlapping it at
    ``threshold`` or more shares one of with it (with the other's own first ones): ``size - α + 1`` of them,
    ``α`` a lower bound of the shared tokens (an overlap ``≥ t`` shares ``≥ t * size``; taken a little under,
    so a rounded overlap just at the threshold is never missed), as one int."""
    count = size - max(0, int((threshold - 1e-9) * size)) + 1
    if count >= size:
        return bits
    out = 0
    for _ in range(count):
        top = 1 << (bits.bit_length() - 1)
        out |= top
        bits ^= top
    return out


def _near_one(
    mine: int, size: int, shared_prefix: int, by_prefix: Mapping[int, Sequence[int]], threshold: float
) -> bool:
    """Whether the set ``mine`` overlaps at ``threshold`` or more one of the kept sets filed under a token of
    ``shared_prefix`` (the tokens its prefix shares with theirs)."""
    while shared_prefix:
        bit = shared_prefix & -shared_prefix
        shared_prefix ^= bit
        for theirs in by_prefix[bit]:
            other = theirs.bit_count()
            shared = (mine & theirs).bit_count()
            if shared / (size + other - shared) >= threshold:
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
