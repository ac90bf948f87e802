"""Query-adaptive fusion and relevance (engram.domain.fusion): pure, fast."""

from __future__ import annotations

from typing import Any

import pytest
from engram.domain import fusion, recall_scoring
from engram.domain.text import tokenize
from hypothesis import given, settings
from hypothesis import strategies as st

DOCS = {
    "plate": "开一辆银色的丰田卡罗拉，车牌 SKL 4821 K",
    "cat": "We have a cat called Niangao, ginger and always hungry",
    "meeting": "Long meeting about the quarterly budget today",
    "gym": "Strength training at the gym every Monday",
    "tea": "Afternoons I brew a pot of Longjing tea",
}


def tokens_of(mid: str) -> frozenset[str]:
    return frozenset(tokenize(DOCS.get(mid, "")))


def scripts() -> dict[str, fusion.Script]:
    return {mid: fusion.script_of(text) for mid, text in DOCS.items()}


def fuse(
    query: str, keyword: list[tuple[str, float]], vector: list[tuple[str, float]], **kw: Any
) -> tuple[dict[str, float], fusion.Evidence]:
    return fusion.adaptive_fuse(tokenize(query), keyword, vector, tokens_of, scripts(), **kw)


def top(scores: dict[str, float]) -> str:
    return max(scores, key=lambda m: (scores[m], m))


def test_script_of_tells_chinese_latin_and_mixed_apart() -> None:
    assert fusion.script_of("我对芒果过敏") == "cjk"
    assert fusion.script_of("My cat is called 小满, a ginger tabby") == "latin"
    assert fusion.script_of("每天早上一杯 Americano，no sugar") == "mixed"
    assert fusion.script_of("4827# !!") == "none"


def test_an_incidental_keyword_match_does_not_outrank_the_vector_answer() -> None:
    # Given a paraphrase: the only keyword hit shares one common word with the query, vectors know better
    keyword = [("meeting", 2.1)]
    vector = [("cat", 0.86), ("gym", 0.81), ("tea", 0.80), ("meeting", 0.79)]
    # When fusing
    scores, evidence = fuse("who waits for me at home today, what a long day", keyword, vector)
    # Then keyword confidence is near zero and the vector answer leads
    assert evidence.keyword_confidence < 0.1
    assert top(scores) == "cat"


def test_an_exact_rare_term_match_leads_even_when_vectors_disagree() -> None:
    # Given a question repeating a plate number, and vectors slightly preferring something else
    keyword = [("plate", 14.0), ("gym", 1.0)]
    vector = [("gym", 0.84), ("plate", 0.835), ("cat", 0.79), ("tea", 0.78)]
    scores, evidence = fuse("车牌 SKL 4821 K 是哪辆车", keyword, vector)
    # Then the keyword side counts (4 of the 7 query tokens match) and the plate memory comes first
    assert evidence.keyword_confidence > 0.2
    assert top(scores) == "plate"
    # While with vectors alone the other memory would have led
    assert top(fuse("车牌 SKL 4821 K 是哪辆车", [], vector)[0]) == "gym"


def test_weights_follow_the_vector_side_whatever_its_score_range() -> None:
    # Given the same candidates with cosines from two very different models (an affine map of each other)
    keyword = [("meeting", 2.0), ("gym", 1.5)]
    weak = [("cat", 0.86), ("gym", 0.85), ("tea", 0.84), ("meeting", 0.83), ("plate", 0.82)]
    strong = [(m, 0.2 + 4 * (s - 0.8)) for m, s in weak]
    # When fusing either
    a, _ = fuse("who waits for me at home", keyword, weak)
    b, _ = fuse("who waits for me at home", keyword, strong)
    # Then the ranking is the same: no constant depends on one model's cosine range
    assert sorted(a, key=lambda m: -a[m]) == sorted(b, key=lambda m: -b[m])


def test_script_centring_lets_another_language_through_only_in_mixed_lists() -> None:
    # Given an English query whose vector list holds 5 English and 5 Chinese memories, Chinese ones scored lower
    en = [(f"en{i}", 0.90 - 0.01 * i) for i in range(5)]
    zh = [(f"zh{i}", 0.86 - 0.01 * i) for i in range(5)]
    zh[0] = ("zh0", 0.895)  # the Chinese answer stands out among Chinese memories
    script = {**{m: "latin" for m, _ in en}, **{m: "cjk" for m, _ in zh}}
    centred = dict(fusion.script_centred(sorted(en + zh, key=lambda h: -h[1]), script))  # type: ignore[arg-type]
    # Then the Chinese standout moves to the top
    assert max(centred, key=lambda m: centred[m]) == "zh0"
    # And a single-script list is left as it is
    assert fusion.script_centred(en, script) == en  # type: ignore[arg-type]


def test_hubness_correction_lets_a_distinctive_memory_pass_a_crowded_one() -> None:
    # Given a templated note ("hub", close to its many siblings) just above the answer, and eight others
    vector = [("hub", 0.86), ("cat", 0.85)] + [(f"o{i}", 0.80 - 0.01 * i) for i in range(8)]
    density = {"hub": 0.95, "cat": 0.70, **{f"o{i}": 0.80 for i in range(8)}}
    # When the cosines are corrected by half the neighbourhood density
    corrected = dict(fusion.hubness_corrected(vector, density))
    # Then the distinctive memory leads
    assert max(corrected, key=lambda m: corrected[m]) == "cat"
    assert corrected["cat"] == pytest.approx(0.85 - 0.5 * 0.70)
    # And so it does after fusion
    scores, _ = fuse("who waits for me at home", [], vector, density=density)
    assert top(scores) == "cat"


def test_hubness_correction_is_neutral_without_enough_densities() -> None:
    vector = [("hub", 0.86), ("cat", 0.85), ("tea", 0.80)]
    # Too few densities to judge, or the correction turned off: the cosines are left as they are
    assert fusion.hubness_corrected(vector, {"hub": 0.95, "cat": 0.7}) == vector
    many = {**{m: 0.8 for m, _ in vector}, **{f"x{i}": 0.8 for i in range(8)}}
    assert fusion.hubness_corrected(vector, many, weight=0.0) == vector
    # A hit without a density gets the median one: its order among equals does not change
    assert [m for m, _ in fusion.hubness_corrected(vector, {k: v for k, v in many.items() if k != "tea"})] == [
        "hub",
        "cat",
        "tea",
    ]


def test_relevance_is_a_probability_rising_with_standout_and_coverage() -> None:
    ev = fusion.Evidence(
        keyword_confidence=0.0,
        keyword_weight=0.0,
        vector_weight=1.0,
        coverage={"a": 0.0, "b": 0.9, "c": 0.0},
        vector_standout={"a": 0.5, "b": 0.5, "c": 4.0},
        has_vectors=True,
    )
    low, covered, distinct = (fusion.relevance(ev, m) for m in ("a", "b", "c"))
    assert 0.0 <= low < covered <= 1.0
    assert low < distinct <= 1.0
    # A memory below the vector candidates is no more distinct than the last of them
    assert fusion.relevance(ev, "unknown") == pytest.approx(low)


def test_keyword_only_relevance_uses_coverage() -> None:
    ev = fusion.Evidence(0.0, 1.5, 0.0, {"a": 1.0, "b": 0.1}, {}, has_vectors=False)
    assert fusion.relevance(ev, "a") > 2 * fusion.relevance(ev, "b")


def test_keyword_only_with_a_handful_of_matches_uses_their_coverage() -> None:
    # Given keyword-only recall and a single hit holding two of the query's three words
    _, evidence = fuse("Longjing tea or coffee", [("tea", 3.0)], [])
    # Then its relevance is its coverage, not the large-namespace estimate
    assert 0.5 < evidence.coverage["tea"] < 1.0
    assert fusion.relevance(evidence, "tea") == pytest.approx(evidence.coverage["tea"])


def test_the_best_of_a_tiny_namespace_is_not_relevant_for_being_the_best() -> None:
    # Given three memories only and no reference background (it could not be embedded)
    vector = [("cat", 0.82), ("tea", 0.80), ("gym", 0.79)]
    _, evidence = fuse("who waits for me at home", [], vector)
    # Then the best is at most "maybe" (three cosines are no background to stand out from), the last nothing
    assert fusion.relevance(evidence, "cat") == pytest.approx(fusion.UNPADDED_CAP)
    assert fusion.relevance(evidence, "gym") < 0.1


BACKGROUND: list[tuple[float, fusion.Script]] = [(0.70 + 0.002 * i, "latin") for i in range(60)]


def test_a_tiny_namespace_is_judged_against_the_reference_background() -> None:
    # Given three memories, one far above the query's cosines to everyday reference sentences (0.70-0.82)
    vector = [("cat", 0.97), ("tea", 0.74), ("gym", 0.73)]
    _, evidence = fuse("who waits for me at home", [], vector, background=BACKGROUND)
    # Then it stands out and is relevant; the others sit inside the background and are not
    assert fusion.relevance(evidence, "cat") > 0.5
    assert fusion.relevance(evidence, "tea") < 0.05 and fusion.relevance(evidence, "gym") < 0.05
    # And three memories all inside the background: none is relevant, the best included
    _, flat = fuse("who waits for me at home", [], [("cat", 0.80), ("tea", 0.79), ("gym", 0.78)], background=BACKGROUND)
    assert max(fusion.relevance(flat, m) for m in ("cat", "tea", "gym")) < 0.1


def test_a_small_namespace_that_all_shares_the_query_s_name_vouches_for_none_of_it() -> None:
    # Given five memories all well above the everyday background (each names the person the question
    # names), none standing out from the others
    names = {m: f"Melanie: {DOCS[m]}" for m in DOCS}
    background: list[tuple[float, fusion.Script]] = [(0.75 + 0.0005 * i, "latin") for i in range(60)]
    vector = [("cat", 0.84), ("tea", 0.835), ("gym", 0.83), ("meeting", 0.83), ("plate", 0.825)]

    def evidence_of(*, common_words: bool = True) -> fusion.Evidence:
        return fusion.adaptive_fuse(
            tokenize("What did Melanie paint?"),
            [],
            vector,
            lambda m: frozenset(tokenize(names[m])),
            scripts(),
            background=background,
            common_words=common_words,
        )[1]

    evidence = evidence_of()
    # Then what they share with the question, they share with each other: it counts for less
    plain = fusion.standout(fusion.padded_background(vector, {}, background, 50)[0])
    assert evidence.vector_standout["cat"] < plain["cat"] - 0.4
    # And the name in all five memories is no evidence for any of them (the rule can be turned off)
    assert evidence.coverage["cat"] == 0.0
    assert evidence_of(common_words=False).coverage["cat"] > 0.0
    # So none is called relevant, where the background alone would have made the best one "maybe"
    before = fusion.Evidence(0.0, 0.0, 1.0, {"cat": 0.25}, {"cat": plain["cat"]}, has_vectors=True)
    assert fusion.relevance(before, "cat") > 0.25
    assert max(fusion.relevance(evidence, m) for m in DOCS) < 0.15


def test_a_memory_that_stands_out_from_its_namespace_mates_is_still_relevant() -> None:
    # Given five memories near the background and one far above both
    vector = [("cat", 0.97), ("tea", 0.80), ("gym", 0.79), ("meeting", 0.79), ("plate", 0.78)]
    fused, evidence = fuse("who waits for me at home", [], vector, background=BACKGROUND)
    # Then it is relevant and the others are not; the ranking is the vectors' own
    assert fusion.relevance(evidence, "cat") > 0.5
    assert max(fusion.relevance(evidence, m) for m in ("tea", "gym", "meeting", "plate")) < 0.1
    assert top(fused) == "cat"


def test_a_word_in_most_of_a_small_namespace_weighs_nothing() -> None:
    docs = [frozenset({"melani", "paint"}), frozenset({"melani", "run"}), frozenset({"melani"}), frozenset({"car"})]
    weights = fusion.token_weights(["melani", "paint"], docs)
    common = fusion.without_common(weights, docs)
    # "melani" is in 3 of 4 memories: no weight; "paint" keeps its rarity weight
    assert common == {"melani": 0.0, "paint": weights["paint"]}
    # Three memories are too few to say what "most" of them hold
    assert fusion.without_common(weights, docs[:3]) == weights


def test_the_namespace_s_own_location_is_shrunk_toward_the_background_s() -> None:
    padded = [("a", 1.0), ("b", 0.9)] + [(f"{fusion.BACKGROUND_PREFIX}{i}", 0.5) for i in range(8)]
    plain = fusion.standout(padded)
    within = fusion.standout_in_namespace(padded, {"a", "b"}, prior=1.0)
    # One namespace-mate at 0.9 with a prior of one pseudo-memory: the location is halfway, 0.7 (not 0.5)
    sd = (1.0 - 0.9) / (plain["a"] - plain["b"])  # the list's spread, from two of its standouts
    assert within["a"] == pytest.approx(plain["a"] - (0.7 - 0.5) / sd)
    # The background's entries are not scored; a list with one memory is the plain standout
    assert set(within) == {"a", "b"}
    assert fusion.standout_in_namespace(padded, {"a"}) == {"a": plain["a"]}


def test_the_padding_is_never_ranked_and_a_full_list_is_not_padded() -> None:
    vector = [("cat", 0.90), ("tea", 0.74), ("gym", 0.73)]
    fused, _ = fuse("who waits for me at home", [], vector, background=BACKGROUND)
    assert set(fused) == {"cat", "tea", "gym"}
    padded, scripts_of = fusion.padded_background(vector, {}, BACKGROUND, 10, shift=0.1)
    # The nearest 7 reference cosines (minus the hubness share), each with its script
    assert len(padded) == 10 and padded[:3] == vector
    assert [round(s, 3) for _, s in padded[3:]] == [round(0.818 - 0.002 * i - 0.1, 3) for i in range(7)]
    assert all(scripts_of[m] == "latin" for m, _ in padded[3:])
    full = [(f"m{i}", 0.5) for i in range(10)]
    assert fusion.padded_background(full, {}, BACKGROUND, 10)[0] == full
    assert fusion.padded_background(vector, {}, None, 10)[0] == vector


def test_diversify_pushes_templated_repeats_down() -> None:
    texts = {
        "a": "晚上做了牛肉面，味道一般",
        "b": "晚上做了生煎，味道一般",
        "c": "Can't stand celery, not even a little",
    }
    scores = {"a": 0.9, "b": 0.85, "c": 0.8}
    out = recall_scoring.diversify(["a", "b", "c"], scores, lambda m: frozenset(tokenize(texts[m])), 0.5)
    assert sorted(out, key=lambda m: -out[m]) == ["a", "c", "b"]
    assert recall_scoring.diversify(["a", "b", "c"], scores, lambda m: frozenset(), 0.0) == scores


def _mmr_reference(
    ranked: list[str], scores: dict[str, float], tokens: dict[str, frozenset[str]], penalty: float
) -> dict[str, float]:
    """Maximal marginal relevance written the plain way (every pick rescans every pair)."""
    out: dict[str, float] = {}
    remaining = list(ranked)
    while remaining:

        def adjusted(mid: str) -> float:
            overlaps = [
                len(tokens[mid] & tokens[p]) / len(tokens[mid] | tokens[p]) if tokens[mid] | tokens[p] else 0.0
                for p in out
            ]
            return scores[mid] - penalty * max(overlaps, default=0.0)

        values = [adjusted(mid) for mid in remaining]
        at = values.index(max(values))
        out[remaining.pop(at)] = values[at]
    return out


@given(
    st.one_of(
        st.lists(st.frozensets(st.sampled_from("abcdefghij"), max_size=7), max_size=25),
        # More tokens than one machine word of bits holds
        st.lists(st.frozensets(st.sampled_from([f"w{i}" for i in range(150)]), max_size=40), max_size=25),
    ),
    st.lists(st.sampled_from([0.0, 0.25, 0.5, 0.8, 1.0, 0.3333]), min_size=25, max_size=25),
    st.sampled_from([0.05, 0.3, 0.5, 1.0]),
)
@settings(max_examples=400, deadline=None)
def test_diversify_equals_the_plain_greedy_to_the_bit(
    sets: list[frozenset[str]], values: list[float], penalty: float
) -> None:
    # Given a pool with ties, empty token sets and repeated sets
    ranked = [f"m{i}" for i in range(len(sets))]
    tokens = dict(zip(ranked, sets, strict=True))
    scores = dict(zip(ranked, values, strict=False))
    # Then the lazy greedy picks in the same order with the same floats as the plain one (bits handed over or not)
    out = recall_scoring.diversify(ranked, scores, tokens.__getitem__, penalty)
    given = recall_scoring.diversify(ranked, scores, tokens.__getitem__, penalty, recall_scoring.token_bits(sets))
    assert list(given.items()) == list(out.items())
    reference = _mmr_reference(ranked, scores, tokens, penalty)
    assert list(out) == list(reference) and out == reference


def test_token_bits_count_shared_tokens() -> None:
    sets = [frozenset("abc"), frozenset("cd"), frozenset(), frozenset("dcb")]
    bits = recall_scoring.token_bits(sets)
    for a, sa in zip(bits, sets, strict=True):
        assert a.bit_count() == len(sa)
        for b, sb in zip(bits, sets, strict=True):
            assert (a & b).bit_count() == len(sa & sb)


@given(
    st.lists(st.floats(0.0, 1.0), max_size=60),
    st.dictionaries(st.integers(0, 80), st.floats(-3.0, 6.0), max_size=30),
    st.booleans(),
    st.booleans(),
    st.booleans(),
    st.floats(0.0, 1.0),
)
@settings(max_examples=300, deadline=None)
def test_any_relevant_answers_as_estimating_every_memory(
    covered: list[float],
    standout: dict[int, float],
    has_vectors: bool,
    thin: bool,
    unpadded: bool,
    floor: float,
) -> None:
    # Given candidates' coverages (one not covered at all), keyword-only (thin or not) or with vectors
    ids = [f"m{i}" for i in range(len(covered) + 1)]
    evidence = fusion.Evidence(
        keyword_confidence=0.5,
        keyword_weight=1.0,
        vector_weight=1.0 if has_vectors else 0.0,
        coverage={f"m{i}": c for i, c in enumerate(covered)},
        vector_standout={f"m{i}": s for i, s in standout.items()},
        has_vectors=has_vectors,
        vector_position={f"m{i}": min(1.0, abs(s) / 6) for i, s in standout.items()} if unpadded else None,
        thin_keyword=thin and not has_vectors,
    )
    # Then whether one reaches the floor is what estimating each one says, for every head of them
    for head in (ids, ids[:20], ids[-1:], []):
        expected = any(fusion.relevance(evidence, mid) >= floor for mid in head)
        assert fusion.any_relevant(evidence, head, floor) is expected
