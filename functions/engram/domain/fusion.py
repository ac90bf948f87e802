"""Query-adaptive fusion of keyword and vector candidates, and a calibrated relevance per hit (pure).

Why adaptive: one constant keyword:vector ratio cannot serve both a question that repeats a memory's
rare words ("车牌 SKL 4821 K", "ORCA-7") and one that shares none of them (过年 -> 春节, or an English
question about a Chinese memory). Max-normalized BM25 gives its best hit 1.0 even when that hit only
shares a common word with the query, which pushed the right vector hit down. So each query gets:

- a keyword weight scaled by *keyword confidence*: how much of the query (its informative tokens,
  weighted by rarity among the candidates) the best keyword hits contain. Exact rare-term matches
  (names, codes, numbers) cover most of the query -> full weight; an incidental common word -> ~0.
- vector scores corrected for *hubness* (CSLS): a memory whose neighbourhood is crowded (templated
  notes, generic sentences) is close to every query; each cosine loses half the memory's mean cosine to
  its 10 nearest fellow candidates, so a distinctive memory that answers the query can pass it.
- vector scores corrected for *script*: multilingual embedders score same-script text higher than
  other-script text of the same meaning, so each script group of the vector candidates is centred on
  its own median (when both groups are present) before min-max normalization.

Nothing here depends on one embedding model's score range: vector features are ranks, medians and
standard deviations of the query's own candidate list, keyword features are token coverages. See
docs/recall.md ("Fusion" and "Relevance") for the measurements behind the defaults.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from statistics import median
from typing import Literal

from engram.domain.text import script_letters

Script = Literal["cjk", "latin", "mixed", "none"]

# Fewer vector candidates than this and a hit's "standout" means nothing (no background to compare).
MIN_BACKGROUND = 8
# CSLS's neighbourhood size and weight (docs/recall.md, "Hubness"): cosine - 0.5 * mean cosine to the
# memory's 10 nearest fellow candidates, i.e. the published 2 cos - r_d up to a per-query constant.
# A list shorter than MIN_BACKGROUND with no reference background to pad it: its best hit's relevance
# is at most this (below ``ENGRAM_RECALL_SURE_RELEVANCE``'s default, so injected as less certain).
UNPADDED_CAP = 0.45
HUBNESS_NEIGHBOURS = 10
HUBNESS_WEIGHT = 0.5
# In a small namespace (a padded candidate list) the relevance estimate also measures a candidate against
# the namespace's other memories (docs/recall.md, "Relevance at every size"): the location its standout is
# measured from is raised to their median, shrunk toward the background's by this many pseudo-memories
# (the weakest shrinkage that kept the tuning rows' confident strays <= 5 %: bench/relevance_replay.py).
NAMESPACE_PRIOR = 20.0
# And a query word found in more than this share of a small namespace's memories (the speakers' names,
# "the user") is no evidence for any of them; from this many memories on (fewer say nothing about "most").
COMMON_SHARE = 0.5
COMMON_MIN_MEMORIES = 4


def script_of(text: str) -> Script:
    """``cjk`` or ``latin`` when one script holds at least three quarters of ``text``'s letters (a CJK
    character counts as 3 Latin letters, about one word each), ``mixed`` when both have a real share."""
    cjk, latin = script_letters(text)
    if not cjk and not latin:
        return "none"
    share = cjk * 3 / (cjk * 3 + latin)
    return "cjk" if share >= 0.75 else "latin" if share <= 0.25 else "mixed"


def token_weights(query_tokens: Iterable[str], docs: Sequence[frozenset[str]]) -> dict[str, float]:
    """Rarity of each distinct query token among the candidate documents: ``log(1 + N / (1 + df))``."""
    n = len(docs)
    return {t: math.log(1.0 + n / (1.0 + sum([t in d for d in docs]))) for t in dict.fromkeys(query_tokens)}


def coverage(weights: Mapping[str, float], doc: frozenset[str]) -> float:
    """Share of the query's (rarity-weighted) tokens that ``doc`` contains, in [0, 1]."""
    return coverages(weights, {"": doc})[""]


def coverages(weights: Mapping[str, float], docs: Mapping[str, frozenset[str]]) -> dict[str, float]:
    """``coverage`` of each document, the weights' total summed once for all of them."""
    total, items = sum(weights.values()), list(weights.items())
    if total <= 0:
        return dict.fromkeys(docs, 0.0)
    # A list, not a generator, inside ``sum``: the same floats added in the same order, without a
    # generator's frame per document (50-70 documents per recall).
    return {mid: sum([w for t, w in items if t in doc]) / total for mid, doc in docs.items()}


def keyword_confidence(coverages: Sequence[float], floor: float = 0.3, full: float = 0.6) -> float:
    """How much to trust keyword ranking for this query, in [0, 1]: the best coverage among the top keyword
    hits, 0 up to ``floor`` (a shared common word or two), rising linearly to 1 at ``full``."""
    return ramp(max(coverages, default=0.0), floor, full)


def script_centred(
    hits: Sequence[tuple[str, float]], script: Mapping[str, Script], *, min_group: int = 5, strength: float = 1.0
) -> list[tuple[str, float]]:
    """Vector scores with each script group's median subtracted (times ``strength``) when at least two
    groups of ``min_group`` candidates are present; else unchanged. Only the ranking across scripts moves."""
    groups: dict[Script, list[float]] = {}
    for mid, s in hits:
        groups.setdefault(script.get(mid, "none"), []).append(s)
    big = {g: v for g, v in groups.items() if g != "none" and len(v) >= min_group}
    if len(big) < 2 or strength <= 0:
        return list(hits)
    centre: dict[Script, float] = {g: median(v) for g, v in big.items()}
    overall = median(centre.values())
    return [(mid, s - strength * (centre.get(script.get(mid, "none"), overall) - overall)) for mid, s in hits]


def hubness_corrected(
    hits: Sequence[tuple[str, float]], density: Mapping[str, float], weight: float = HUBNESS_WEIGHT
) -> list[tuple[str, float]]:
    """Cosines minus ``weight`` times each memory's neighbourhood density (CSLS, the cross-lingual
    retrieval fix for "hub" documents that are near every query). A hit without a density gets the
    median one (neutral). Unchanged when fewer than ``MIN_BACKGROUND`` densities are known."""
    known = [density[m] for m, _ in hits if m in density]
    if weight <= 0 or len(known) < MIN_BACKGROUND:
        return list(hits)
    neutral = median(known)
    return [(mid, s - weight * density.get(mid, neutral)) for mid, s in hits]


def max_normalized(hits: Sequence[tuple[str, float]]) -> dict[str, float]:
    """Scores divided by the best (positive scores such as BM25)."""
    best = max((s for _, s in hits), default=0.0)
    if best <= 0:
        return {mid: 1.0 for mid, _ in hits}
    return {mid: max(0.0, s / best) for mid, s in hits}


def min_max(hits: Sequence[tuple[str, float]]) -> dict[str, float]:
    """Scores mapped onto [0, 1] over the list (cosines: their raw range depends on the model)."""
    if not hits:
        return {}
    best = max(s for _, s in hits)
    low = min(s for _, s in hits)
    span = best - low
    if span <= 1e-12:
        return {mid: 1.0 for mid, _ in hits}
    return {mid: (s - low) / span for mid, s in hits}


def standout(hits: Sequence[tuple[str, float]]) -> dict[str, float]:
    """Each score in standard deviations above the list's median (a scale-free "how distinct")."""
    if len(hits) < 3:
        return {mid: 0.0 for mid, _ in hits}
    mid_value, sd = _median_sd([s for _, s in hits])
    if sd <= 1e-12:
        return {mid: 0.0 for mid, _ in hits}
    return {mid: (s - mid_value) / sd for mid, s in hits}


def _median_sd(values: Sequence[float]) -> tuple[float, float]:
    mean = sum(values) / len(values)
    return median(values), math.sqrt(sum((v - mean) ** 2 for v in values) / len(values))


def standout_in_namespace(
    padded: Sequence[tuple[str, float]], real: Collection[str], prior: float = NAMESPACE_PRIOR
) -> dict[str, float]:
    """The standout of each ``real`` entry of a padded list (``padded_background``), measured from the
    higher of the list's median and the median of the namespace's other memories shrunk toward it: with
    ``n`` others, ``w = n / (n + prior)`` and ``w * median(others) + (1 - w) * median(list)``.

    The background sentences share nothing with a namespace, so against them alone every memory of a
    namespace whose memories all share something with the query (five dialogue turns naming the speaker
    the question names) "stands out"; what a memory holds beyond its namespace-mates is the evidence. Few
    others say little about the namespace, hence the shrinkage. Entries not in ``real`` are left out."""
    own = {mid: s for mid, s in padded if mid in real}
    if len(padded) < 3 or len(own) < 2:
        base = standout(padded)
        return {mid: base[mid] for mid in own}
    location, sd = _median_sd([s for _, s in padded])
    if sd <= 1e-12:
        return {mid: 0.0 for mid in own}
    out: dict[str, float] = {}
    for mid, s in own.items():
        others = [v for m, v in own.items() if m != mid]
        w = len(others) / (len(others) + prior)
        raised = max(location, w * median(others) + (1 - w) * location)
        out[mid] = (s - raised) / sd
    return out


def without_common(
    weights: Mapping[str, float],
    docs: Sequence[frozenset[str]],
    share: float = COMMON_SHARE,
    min_docs: int = COMMON_MIN_MEMORIES,
) -> dict[str, float]:
    """``weights`` (``token_weights``) with every query token found in more than ``share`` of ``docs`` set
    to 0, when there are at least ``min_docs``: a word in most of a namespace's memories tells none of them
    apart (with five memories, ``log(1 + N / (1 + df))`` still gives a name in all five a third of a rare
    word's weight)."""
    if len(docs) < min_docs:
        return dict(weights)
    return {t: 0.0 if sum(1 for d in docs if t in d) > share * len(docs) else w for t, w in weights.items()}


@dataclass(frozen=True)
class Evidence:
    """What the fusion learned about one query (also the inputs of ``relevance``)."""

    keyword_confidence: float
    keyword_weight: float
    vector_weight: float
    # What ``relevance`` reads per candidate (in a small namespace not what the fusion ranked by:
    # ``standout_in_namespace``, ``without_common``).
    coverage: Mapping[str, float]
    vector_standout: Mapping[str, float]
    has_vectors: bool = False
    # Min-max position in a vector list too short to judge and not padded (the reference background not
    # embedded yet): a stopgap estimate capped at ``UNPADDED_CAP`` (``relevance``).
    vector_position: Mapping[str, float] | None = None
    # Keyword-only recall over fewer than ``MIN_BACKGROUND`` matches: too little to calibrate against.
    thin_keyword: bool = False


@dataclass(frozen=True)
class RelevanceModel:
    """Logistic model of P(relevant): ``sigmoid(bias + standout * s + coverage * c)``.

    Fitted by ``bench/fusion_variants.py --calibrate`` on the tuning questions (LoCoMo conv-26/conv-30 and
    the bilingual set's two tuning people; expected calibration error 0.009 there, 0.011 on held-out);
    ``keyword_*`` is the model used when there are no vectors (keyword-only recall).
    """

    bias: float = -4.64
    standout: float = 0.934
    coverage: float = 2.026
    keyword_bias: float = -2.98
    keyword_coverage: float = 2.295


DEFAULT_RELEVANCE = RelevanceModel()


def relevance(evidence: Evidence, memory_id: str, model: RelevanceModel = DEFAULT_RELEVANCE) -> float:
    """Estimated probability in [0, 1] that ``memory_id`` helps answer the query (see ``RelevanceModel``).

    In a small namespace the standout is measured against the padded background and the namespace's other
    memories, and words most of them hold carry no coverage (``adaptive_fuse``), so the same model holds
    at every size (bench/README.md, "Namespace size")."""
    cov = evidence.coverage.get(memory_id, 0.0)
    if evidence.vector_position is not None:
        # No background yet (the first seconds of a process): the best of a handful is "maybe", never sure.
        x = model.keyword_bias + model.keyword_coverage * cov
        return max(UNPADDED_CAP * evidence.vector_position.get(memory_id, 0.0), 1.0 / (1.0 + math.exp(-x)))
    if evidence.has_vectors:
        s = evidence.vector_standout.get(memory_id)
        if s is None:  # below the vector candidates: at most as distinct as the last of them
            s = min(evidence.vector_standout.values(), default=0.0)
        x = model.bias + model.standout * s + model.coverage * cov
    else:
        x = model.keyword_bias + model.keyword_coverage * cov
        if evidence.thin_keyword:  # a handful of matches: their coverage itself is the best estimate
            return max(cov, 1.0 / (1.0 + math.exp(-x)))
    return 1.0 / (1.0 + math.exp(-x))


def any_relevant(
    evidence: Evidence, memory_ids: Sequence[str], floor: float, model: RelevanceModel = DEFAULT_RELEVANCE
) -> bool:
    """Whether one of ``memory_ids`` reaches ``floor`` (``relevance``). Keyword-only, the estimate rises with
    the coverage alone (a logistic of it, or the coverage itself when thin), so only the best-covered
    memory is estimated: the same answer as estimating every one, without 50 logistics per turn."""
    if not evidence.has_vectors and evidence.vector_position is None and model.keyword_coverage >= 0:
        coverage = evidence.coverage
        best = max(memory_ids, key=lambda mid: coverage.get(mid, 0.0), default=None)
        return best is not None and relevance(evidence, best, model) >= floor
    return any(relevance(evidence, mid, model) >= floor for mid in memory_ids)


def ramp(x: float, floor: float, full: float) -> float:
    """0 up to ``floor``, rising linearly to 1 at ``full``."""
    if full <= floor:
        return 1.0 if x >= full else 0.0
    return min(1.0, max(0.0, (x - floor) / (full - floor)))


def adaptive_fuse(
    query_tokens: Sequence[str],
    keyword: Sequence[tuple[str, float]],
    vector: Sequence[tuple[str, float]],
    tokens_of: Callable[[str], frozenset[str]],
    script_of_id: Mapping[str, Script],
    *,
    keyword_weight: float = 1.5,
    vector_weight: float = 1.0,
    confidence_top: int = 3,
    confidence_floor: float = 0.3,
    confidence_full: float = 0.6,
    many_hits: int = 10,
    doc_floor: float = 0.1,
    doc_full: float = 0.4,
    script_strength: float = 1.0,
    standout_ref: float = 4.0,
    density: Mapping[str, float] | None = None,
    hubness: float = HUBNESS_WEIGHT,
    background: Sequence[tuple[float, Script]] | None = None,
    background_size: int = 50,
    namespace_prior: float = NAMESPACE_PRIOR,
    common_words: bool = True,
) -> tuple[dict[str, float], Evidence]:
    """Fused scores in [0, 1] (weighted mean of normalized keyword and vector scores) and the evidence.

    Keyword side: each hit's max-normalized BM25 times ``ramp(coverage, doc_floor, doc_full)`` (a hit
    sharing one word of a long question earns nothing), weighted by ``keyword_weight`` times the query's
    keyword confidence: full when the query matches ``many_hits`` or more memories (its words are common
    in this namespace and BM25's ranking among them carries the signal), else the best coverage among
    the top ``confidence_top`` hits ramped between ``confidence_floor`` and ``confidence_full`` (a handful
    of matches, where max-normalization would make a lone weak match look perfect). Vector side:
    cosines corrected for hubness (``density``: each candidate's neighbourhood density, see
    ``hubness_corrected``; skipped when None), then script-centred, min-max normalized. ``tokens_of(id)``
    gives a candidate's search tokens, ``script_of_id`` its script.

    ``background``: the query's cosines to the reference sentences (``domain/background.py``) with their
    scripts. A vector list shorter than ``background_size`` (a small namespace) is padded with the
    nearest of them before the script correction and the standout, so both compare each candidate with
    the background a large namespace would give (``padded_background``); the padding is never ranked.
    The relevance estimate of a padded list also reads ``standout_in_namespace`` (with
    ``namespace_prior``) and, with ``common_words``, ``without_common`` (``bench/relevance_replay.py``
    compares other values).
    """
    docs = {mid: tokens_of(mid) for mid in dict.fromkeys([m for m, _ in keyword] + [m for m, _ in vector])}
    weights = token_weights(query_tokens, list(docs.values()))
    cov = coverages(weights, docs)
    if len(keyword) >= many_hits:
        confidence = 1.0
    else:
        best = [cov[m] for m, _ in keyword[:confidence_top]]
        confidence = keyword_confidence(best, confidence_floor, confidence_full)
    shift = 0.0
    if density:
        known = [density[m] for m, _ in vector if m in density]
        vector = hubness_corrected(vector, density, hubness)
        if hubness > 0 and len(known) >= MIN_BACKGROUND:
            shift = hubness * median(known)  # a reference sentence counts as a neutral neighbourhood
    padded, scripts = padded_background(vector, script_of_id, background, background_size, shift)
    real = {mid for mid, _ in vector}
    centred_all = script_centred(padded, scripts, strength=script_strength)
    centred = [(mid, s) for mid, s in centred_all if mid in real]
    distinct = {mid: s for mid, s in standout(centred_all).items() if mid in real}
    # What the relevance estimate reads. A padded list is a small namespace whose candidates are all its
    # memories: each is also measured against its namespace-mates, and words in most of them carry no
    # evidence (``standout_in_namespace``, ``without_common``). The ranking keeps ``distinct`` and ``cov``.
    relevance_standout, relevance_coverage = distinct, cov
    if len(padded) > len(vector):
        relevance_standout = standout_in_namespace(centred_all, real, namespace_prior)
        if common_words:
            common = without_common(weights, list(docs.values()))
            relevance_coverage = coverages(common, docs)
    w_k = keyword_weight * confidence if keyword else 0.0
    w_v = vector_weight if vector else 0.0
    if standout_ref > 0 and distinct:
        # A vector list whose best hit stands far out of the query's own candidates (a strong embedder, a
        # clear match) counts more: weight x (best standout / standout_ref), never less than x 1.
        w_v *= max(1.0, max(distinct.values()) / standout_ref)
    fused: dict[str, float] = {}
    total = w_k + w_v
    if not vector:  # keyword-only recall: BM25's own order, whatever the confidence
        fused = max_normalized(keyword)
    elif total > 0:
        keyword_scores = {mid: s * ramp(cov[mid], doc_floor, doc_full) for mid, s in max_normalized(keyword).items()}
        for normed, w in ((keyword_scores, w_k), (min_max(centred), w_v)):
            for mid, s in normed.items():
                fused[mid] = fused.get(mid, 0.0) + w * s / total
    evidence = Evidence(
        keyword_confidence=confidence,
        keyword_weight=w_k,
        vector_weight=w_v,
        coverage=relevance_coverage,
        vector_standout=relevance_standout,
        has_vectors=bool(vector),
        vector_position=min_max(centred) if 0 < len(vector) < MIN_BACKGROUND and len(padded) == len(vector) else None,
        thin_keyword=not vector and len(keyword) < MIN_BACKGROUND,
    )
    return fused, evidence


BACKGROUND_PREFIX = "\x00background:"


def padded_background(
    vector: Sequence[tuple[str, float]],
    script_of_id: Mapping[str, Script],
    background: Sequence[tuple[float, Script]] | None,
    size: int,
    shift: float = 0.0,
) -> tuple[list[tuple[str, float]], dict[str, Script]]:
    """``vector`` followed by the nearest ``size - len(vector)`` background cosines (each minus ``shift``,
    the hubness correction's neutral share), and every entry's script. Unchanged when the list is
    already ``size`` long or there is no background."""
    scripts: dict[str, Script] = dict(script_of_id)
    missing = size - len(vector)
    if not background or missing <= 0 or not vector:
        return list(vector), scripts
    padded = list(vector)
    for i, (cosine, script) in enumerate(sorted(background, key=lambda b: -b[0])[:missing]):
        key = f"{BACKGROUND_PREFIX}{i}"
        padded.append((key, cosine - shift))
        scripts[key] = script
    return padded, scripts
