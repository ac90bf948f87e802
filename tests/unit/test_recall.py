"""Recall pipeline: pure scoring helpers, every stage, degradation, and what must never be recalled."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from engram.adapters.search.inmemory import InMemorySearchIndex
from engram.adapters.storage.inmemory import InMemoryMemoryStore
from engram.bootstrap import configs
from engram.domain import fusion
from engram.domain.errors import UpstreamUnavailable
from engram.domain.models import GlossaryTerm, IndexedDoc, Memory, SearchHit
from engram.domain.recall_scoring import (
    dedup_memories,
    fold_text,
    fuse_rrf,
    fuse_scores,
    glossary_matches,
    importance_factor,
    is_live,
    jaccard,
    recency_factor,
    repeat_factor,
    token_bits,
    token_set,
)
from engram.services.recall.pipeline import RecallConfig, RecallResult, RecallService, render_prompt
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.configs import config
from tests.fakes.embeddings_server import fake_vector

NOW = datetime(2025, 6, 1, 12, 0, tzinfo=UTC)
DIM = 64


class FixedClock:
    def __init__(self, now: datetime = NOW) -> None:
        self.current = now

    def now(self) -> datetime:
        return self.current


class HashEmbedder:
    """Deterministic bag-of-words vectors (same as the fake embeddings server)."""

    model_id = "fake/hash"
    dimension = DIM

    def __init__(self, fail: bool = False) -> None:
        self.fail = fail

    def embed_documents(self, texts: Sequence[str]) -> list[list[float]]:
        return [fake_vector(t, DIM) for t in texts]

    def embed_query(self, text: str) -> list[float]:
        if self.fail:
            raise UpstreamUnavailable("embeddings down")
        return fake_vector(text, DIM)


class ScriptedReranker:
    def __init__(self, prefer: str | None = None, fail: bool = False) -> None:
        self.prefer, self.fail = prefer, fail

    def rerank(self, query: str, documents: Sequence[str]) -> list[float]:
        if self.fail:
            raise UpstreamUnavailable("rerank down")
        return [0.99 if self.prefer and self.prefer in d else 0.1 for d in documents]


class ScriptedCompressor:
    model_id = "fake/compress"

    def __init__(self, reply: str | None = None, fail: bool = False) -> None:
        self.reply, self.fail = reply, fail
        self.calls = 0

    async def complete(self, messages: Sequence[dict[str, Any]], **kwargs: Any) -> str:
        self.calls += 1
        if self.fail:
            raise UpstreamUnavailable("model down")
        if self.reply is not None:
            return self.reply
        numbered = messages[-1]["content"].split("Memories:\n", 1)[1].splitlines()
        return json.dumps({"lines": [line.split(". ", 1)[1][:13] for line in numbered]})


class World:
    """A store and an index kept in sync the way MemoryService does it."""

    def __init__(self) -> None:
        self.clock = FixedClock()
        self.store = InMemoryMemoryStore(clock=self.clock)
        self.index = InMemorySearchIndex()
        self.n = 0

    def add(self, content: str, *, ns: str = "u", index: bool = True, **fields: Any) -> Memory:
        self.n += 1
        created = fields.pop("created_at", NOW - timedelta(days=1))
        memory = Memory(
            id=f"m{self.n:03d}", namespace=ns, content=content, created_at=created, updated_at=created, **fields
        )
        self.store.insert_memory(memory)
        if index:
            self.index.upsert(
                IndexedDoc(
                    memory_id=memory.id,
                    namespace=ns,
                    text=content,
                    type=memory.type,
                    vector=tuple(fake_vector(content, DIM)),
                    created_at=created,
                )
            )
        return memory

    def service(
        self, embedder: Any = "hash", reranker: Any = None, compressor: Any = None, **cfg: Any
    ) -> RecallService:
        emb = HashEmbedder() if embedder == "hash" else embedder
        cfg.setdefault("min_relevance", 0.0)  # ranking tests; relevance has its own tests
        return RecallService(self.store, self.index, emb, reranker, compressor, self.clock, config(RecallConfig, **cfg))


def ids(result: RecallResult) -> list[str]:
    return [h.memory.content for h in result.hits]


# -- pure helpers -----------------------------------------------------------------------------
def test_rrf_is_weighted_and_normalized() -> None:
    # Given two ranked lists, keyword weighted twice
    scores = fuse_rrf([(["a", "b"], 2.0), (["b", "c"], 1.0)], k=60)
    # Then a document first everywhere would score 1, and weights tilt the order
    assert fuse_rrf([(["x"], 2.0), (["x"], 1.0)], k=60)["x"] == pytest.approx(1.0)
    assert scores["b"] > scores["a"] > scores["c"]  # in both lists beats first in one
    assert fuse_rrf([(["a"], 0.0)]) == {}


def test_score_fusion_normalizes_each_retriever() -> None:
    # Given BM25 scores (unbounded) and cosines (narrow range)
    # (normalized as the pipeline does: BM25 divided by the best, cosines min-max over the list)
    kw = fusion.max_normalized([("a", 12.0), ("b", 6.0)])
    vec = fusion.min_max([("b", 0.85), ("c", 0.80), ("a", 0.75)])
    # When fused 1.5 : 1
    fused = fuse_scores([(kw, 1.5), (vec, 1.0)])
    # Then each list spans [0, 1] and the weighted sum is divided by the weight total
    assert kw == {"a": 1.0, "b": 0.5}
    assert vec == pytest.approx({"b": 1.0, "c": 0.5, "a": 0.0})
    assert fused["a"] == pytest.approx(0.6)
    assert fused["b"] == pytest.approx((0.75 + 1.0) / 2.5)
    assert fused["c"] == pytest.approx(0.2)
    assert fusion.min_max([("z", 0.5)]) == {"z": 1.0}


def test_importance_recency_and_repeat_factors() -> None:
    assert importance_factor(0.5, 0.2) == 1.0
    assert importance_factor(1.0, 0.2) == pytest.approx(1.1)
    assert importance_factor(0.0, 0.2) == pytest.approx(0.9)
    assert recency_factor(NOW, NOW, 0.1, 30) == pytest.approx(1.1)
    assert recency_factor(NOW - timedelta(days=30), NOW, 0.1, 30) == pytest.approx(1.05)
    assert recency_factor(NOW + timedelta(days=1), NOW, 0.1, 30) == pytest.approx(1.1)  # clock skew
    assert repeat_factor(None, NOW, 30, 0.5) == 1.0
    assert repeat_factor(NOW - timedelta(minutes=10), NOW, 30, 0.5) == 0.5
    assert repeat_factor(NOW - timedelta(minutes=31), NOW, 30, 0.5) == 1.0
    assert repeat_factor(NOW - timedelta(minutes=1), NOW, 0, 0.5) == 1.0


def _m(mid: str, content: str, **kw: Any) -> Memory:
    return Memory(id=mid, namespace="u", content=content, created_at=NOW, updated_at=NOW, **kw)


def test_dedup_drops_same_folded_text_and_near_identical_tokens() -> None:
    memories = [
        _m("1", "User likes green tea."),
        _m("2", "user likes GREEN tea"),
        _m("3", "The user lives in Lisbon near the river Tagus"),
        _m("4", "the user lives in Lisbon, near the river Tagus!"),
        _m("5", "用户喜欢绿茶"),
        _m("6", "用户 喜欢 绿茶。"),
        _m("7", "User likes black tea"),
    ]
    kept, dropped = dedup_memories(memories, 0.9)
    assert [m.id for m in kept] == ["1", "3", "5", "7"]
    assert dropped == 3
    assert len(dedup_memories(memories, 1.0)[0]) == 4  # folded equality still applies


@given(
    st.lists(
        st.lists(
            st.sampled_from(["tea", "green", "user", "likes", "lisbon", "river", "black", "x1", "x2", "x3", "y", "z"]),
            max_size=12,
        ),
        max_size=20,
    ),
    st.sampled_from([0.0, 0.3, 0.5, 0.75, 0.8, 0.9, 0.95, 1.0]),
)
@settings(max_examples=300, deadline=None)
def test_dedup_equals_the_plain_pairwise_check(texts: list[list[str]], threshold: float) -> None:
    # Given memories whose token sets repeat, nest and differ in size
    memories = [_m(str(i), " ".join(words) + "." * (i % 2)) for i, words in enumerate(texts)]
    # Then the bit-set dedup keeps exactly what comparing every kept pair with jaccard keeps
    kept: list[Memory] = []
    folds: set[str] = set()
    for m in memories:
        tokens = token_set(m.content)
        near = (
            threshold < 1.0
            and len(tokens) >= 3
            and any(jaccard(tokens, token_set(k.content)) >= threshold for k in kept)
        )
        if fold_text(m.content) in folds or near:
            continue
        folds.add(fold_text(m.content))
        kept.append(m)
    out, dropped = dedup_memories(memories, threshold)
    assert [m.id for m in out] == [m.id for m in kept] and dropped == len(memories) - len(kept)
    # And the same with the token bits given (as the pipeline hands them over)
    given = dedup_memories(memories, threshold, token_bits([token_set(m.content) for m in memories]))
    assert [m.id for m in given[0]] == [m.id for m in kept] and given[1] == dropped


def test_is_live_rejects_other_namespaces_statuses_expired_and_types() -> None:
    assert is_live(_m("1", "x"), "u", NOW, ())
    assert not is_live(_m("1", "x"), "other", NOW, ())
    for status in ("superseded", "archived", "deleted", "expired"):
        assert not is_live(_m("1", "x", status=status), "u", NOW, ())
    assert not is_live(_m("1", "x", expires_at=NOW), "u", NOW, ())
    assert is_live(_m("1", "x", expires_at=NOW + timedelta(seconds=1)), "u", NOW, ())
    assert not is_live(_m("1", "x", type="fact"), "u", NOW, ("preference",))


def test_glossary_matches_terms_and_aliases_by_word() -> None:
    terms = [
        GlossaryTerm(
            id="g1",
            namespace="u",
            term="Engram",
            aliases=("EG",),
            definition="the memory layer",
            created_at=NOW,
            updated_at=NOW,
        ),
        GlossaryTerm(id="g2", namespace="u", term="小满", definition="the cat", created_at=NOW, updated_at=NOW),
        GlossaryTerm(id="g3", namespace="u", term="AI", definition="x", created_at=NOW, updated_at=NOW),
    ]
    assert [t.id for t in glossary_matches("how does engram store things?", terms)] == ["g1"]
    assert [t.id for t in glossary_matches("ask eg about it", terms)] == ["g1"]
    assert [t.id for t in glossary_matches("今天小满吃饭了吗", terms)] == ["g2"]
    assert glossary_matches("the main idea", terms) == []  # "ai" inside a word is not a hit
    assert [t.id for t in glossary_matches("用AI写代码", terms)] == ["g3"]


# -- the service ------------------------------------------------------------------------------
def test_recall_finds_by_keyword_and_vector_and_reports_stages() -> None:
    # Given a few memories
    w = World()
    w.add("I am allergic to peanuts")
    w.add("My sister lives in Toronto")
    w.add("Favourite editor is vim")
    # When recalling
    result = w.service().recall("u", "peanuts allergy")
    # Then the matching memory is first with ranks from both retrievers, and meta says what ran
    assert ids(result)[0] == "I am allergic to peanuts"
    top = result.hits[0]
    assert top.keyword_rank == 1 and top.vector_rank == 1
    assert {"keyword", "vector", "glossary"} <= set(result.meta["stages"])
    assert result.meta["degraded"] == {}
    assert result.meta["counts"]["returned"] == len(result.hits)
    assert "total" in result.meta["timings_ms"]


def test_top_k_and_types() -> None:
    w = World()
    for i in range(8):
        w.add(f"coffee note number {i}", type="note" if i % 2 else "preference")
    result = w.service().recall("u", "coffee", top_k=3, types=["preference"])
    assert len(result.hits) == 3
    assert {h.memory.type for h in result.hits} == {"preference"}


def test_stale_index_entries_never_come_back() -> None:
    # Given memories that are superseded, archived, deleted, expired, or in another namespace,
    # but still present in the index (the index is only a mirror and may lag)
    w = World()
    live = w.add("tea preference: green tea")
    old = w.add("tea preference: black tea")
    w.store.update_memory(old.model_copy(update={"status": "superseded", "superseded_by_id": live.id}))
    for status in ("archived", "deleted", "expired"):
        m = w.add(f"tea preference {status} oolong")
        w.store.update_memory(m.model_copy(update={"status": status}))
    w.add("tea preference: expiring matcha", expires_at=NOW - timedelta(minutes=1))
    w.add("tea preference: other user's tea", ns="someone-else")
    # When recalling with a generous top_k
    result = w.service().recall("u", "tea preference", top_k=20)
    # Then only the live memory of this namespace is returned
    assert ids(result) == ["tea preference: green tea"]
    assert result.meta["counts"]["stale"] >= 5


def test_other_namespace_is_never_searched() -> None:
    w = World()
    w.add("secret launch code is 1234", ns="alice")
    result = w.service().recall("bob", "secret launch code")
    assert result.hits == []


def test_exclude_ids_drops_boot_block_memories() -> None:
    w = World()
    pinned = w.add("name is Ada", pinned=True)
    w.add("Ada likes chess")
    result = w.service().recall("u", "Ada", exclude_ids={pinned.id})
    assert ids(result) == ["Ada likes chess"]
    assert result.meta["counts"]["excluded"] == 1


def test_duplicates_are_collapsed() -> None:
    w = World()
    w.add("User likes green tea.")
    w.add("user likes green tea")
    w.add("User likes green tea very much in the morning")
    result = w.service().recall("u", "green tea", top_k=5)
    assert len(result.hits) == 2
    assert result.meta["counts"]["duplicates"] == 1


def test_importance_and_recency_break_ties() -> None:
    # Given two equally matching memories, one important, one recent
    w = World()
    w.add("project alpha deadline", importance=0.9, created_at=NOW - timedelta(days=300))
    w.add("project alpha kickoff", importance=0.5, created_at=NOW - timedelta(days=300))
    assert ids(w.service().recall("u", "project alpha"))[0] == "project alpha deadline"
    w2 = World()
    w2.add("project beta deadline", created_at=NOW - timedelta(days=300))
    w2.add("project beta kickoff", created_at=NOW - timedelta(hours=1))
    assert ids(w2.service(importance_weight=0.0).recall("u", "project beta"))[0] == "project beta kickoff"


def test_score_floor_drops_weak_hits() -> None:
    w = World()
    w.add("rust borrow checker tips")
    w.add("rust cargo workspaces and rust editions")
    full = w.service().recall("u", "rust editions")
    floored = w.service(min_score=0.5).recall("u", "rust editions")
    assert len(full.hits) == 2
    assert ids(floored) == ["rust cargo workspaces and rust editions"]
    assert floored.meta["counts"]["floored"] == 1


def test_nothing_relevant_skips_the_pool_stages_and_returns_what_they_would() -> None:
    # Given templated memories a vague question matches only by a common word
    w = World()
    for i in range(30):
        w.add(f"note number {i} about the garden shed and the {('red', 'blue', 'green')[i % 3]} paint")
    service = w.service(embedder=None, min_relevance=0.15)
    floor = service.config.min_relevance
    # When no candidate's relevance reaches the floor
    skipped = service.recall("u", "what is the weather like today in the garden", budget_tokens=120)
    # Then nothing is returned and the weighing, dedup and diversity stages were not run
    assert skipped.hits == []
    assert "filter" in skipped.meta["skipped"] and "filter" not in skipped.meta["timings_ms"]
    assert skipped.meta["counts"]["below_min_relevance"] == skipped.meta["counts"]["fused"]
    # And the full pipeline, floor 0, ranks the same candidates with every relevance under that floor
    full = service.recall("u", "what is the weather like today in the garden", min_relevance=0.0)
    assert full.hits and all(h.relevance < floor for h in full.hits)
    assert "filter" in full.meta["timings_ms"]
    # And a reranker (whose scores replace the estimate) always gets the pool
    reranked = w.service(embedder=None, reranker=ScriptedReranker(prefer="red"), min_relevance=0.15).recall(
        "u", "what is the weather like today in the garden", budget_tokens=120
    )
    assert "filter" not in reranked.meta["skipped"] and reranked.hits


def test_recently_injected_memories_decay_and_injection_is_recorded() -> None:
    # Given two memories about the same thing
    w = World()
    a = w.add("dentist appointment on Friday at 9")
    w.add("dentist is Dr. Smith on Main street")
    svc = w.service()
    first = svc.recall("u", "dentist appointment Friday", record_injection=True, top_k=1)
    # When the first is injected, then recalled again within 30 minutes
    assert first.hits[0].memory.id == a.id
    stored = w.store.get_memory("u", a.id)
    assert stored.last_injected_at == NOW and stored.recall_count == 1
    w.clock.current = NOW + timedelta(minutes=5)
    again = svc.recall("u", "dentist appointment Friday", top_k=2)
    # Then its score is halved
    assert again.hits[0].score == pytest.approx(first.hits[0].score * 0.5, rel=1e-3) or again.hits[0].memory.id != a.id
    decayed = next(h for h in again.hits if h.memory.id == a.id)
    assert decayed.score == pytest.approx(first.hits[0].score * 0.5, rel=1e-3)
    # And after the window it is back to full strength
    w.clock.current = NOW + timedelta(minutes=45)
    later = svc.recall("u", "dentist appointment Friday", top_k=1)
    assert later.hits[0].memory.id == a.id
    assert later.hits[0].score == pytest.approx(first.hits[0].score, rel=1e-3)


def test_no_embedder_means_keyword_only() -> None:
    w = World()
    w.add("I am allergic to peanuts")
    result = w.service(embedder=None).recall("u", "peanuts")
    assert ids(result) == ["I am allergic to peanuts"]
    assert "vector" in result.meta["skipped"]
    assert result.hits[0].vector_rank is None


def test_failing_embedder_degrades_to_keyword() -> None:
    w = World()
    w.add("I am allergic to peanuts")
    result = w.service(embedder=HashEmbedder(fail=True)).recall("u", "peanuts")
    assert ids(result) == ["I am allergic to peanuts"]
    assert "vector" in result.meta["degraded"]
    assert "UpstreamUnavailable" in result.meta["degraded"]["vector"]


def test_failing_keyword_search_degrades_to_vector() -> None:
    class BrokenKeyword(InMemorySearchIndex):
        def keyword_search(self, *a: Any, **k: Any) -> list[SearchHit]:
            raise RuntimeError("fts down")

    w = World()
    w.index = BrokenKeyword()
    w.add("I am allergic to peanuts")
    result = w.service().recall("u", "allergic to peanuts")
    assert ids(result) == ["I am allergic to peanuts"]
    assert "keyword" in result.meta["degraded"]


def test_hubness_correction_runs_when_the_index_can_and_degrades_when_it_fails() -> None:
    class BrokenDensity(InMemorySearchIndex):
        def neighbour_density(self, *a: Any, **k: Any) -> dict[str, float]:
            raise RuntimeError("no vectors at hand")

    def world(index: InMemorySearchIndex) -> World:
        w = World()
        w.index = index
        for i in range(12):
            w.add(f"note {i} about the garden and the weather")
        w.add("I am allergic to peanuts")
        return w

    w = world(InMemorySearchIndex())
    # With an index that offers neighbourhood densities (and enough vector candidates), the stage runs
    result = w.service().recall("u", "allergic to peanuts")
    assert "hubness" in result.meta["stages"] and ids(result)[0] == "I am allergic to peanuts"
    # Turned off, it does not
    assert "hubness" not in w.service(hubness=0.0).recall("u", "allergic to peanuts").meta["stages"]
    # And an index whose densities fail only loses the correction, not the recall
    degraded = world(BrokenDensity()).service().recall("u", "allergic to peanuts")
    assert "hubness" in degraded.meta["degraded"] and ids(degraded)[0] == "I am allergic to peanuts"


def test_reranker_reorders_and_failing_reranker_keeps_fused_order() -> None:
    w = World()
    w.add("hiking boots size 42")
    w.add("hiking trip to the Alps in July with boots")
    fused = w.service().recall("u", "hiking boots")
    reranked = w.service(reranker=ScriptedReranker(prefer="Alps")).recall("u", "hiking boots")
    broken = w.service(reranker=ScriptedReranker(fail=True)).recall("u", "hiking boots")
    assert ids(reranked)[0] == "hiking trip to the Alps in July with boots"
    assert "rerank" in reranked.meta["stages"]
    assert ids(broken) == ids(fused)
    assert [h.score for h in broken.hits] == [h.score for h in fused.hits]
    assert "rerank" in broken.meta["degraded"]


def test_a_rerank_endpoint_sets_relevance_and_a_slow_one_fails_open() -> None:
    from engram.adapters.llm.rerank_http import HttpReranker

    from tests.fakes.rerank_server import FakeRerankServer

    w = World()
    w.add("hiking boots size 42")
    w.add("hiking trip to the Alps in July with boots")
    w.add("dentist on Friday")
    with FakeRerankServer() as server:
        reranker = HttpReranker(server.base_url, "bge-reranker-v2-m3", timeout_s=0.5)
        # Given a /v1/rerank endpoint: its scores are the relevance, so the floor reads them
        ranked = w.service(reranker=reranker, min_relevance=0.5).recall("u", "Alps trip in July")
        assert ids(ranked) == ["hiking trip to the Alps in July with boots"]
        assert ranked.hits[0].relevance == pytest.approx(1.0)
        # And past its deadline recall keeps the fused order and the estimated relevance, in time
        server.slow_next(2.0)
        started = time.perf_counter()
        slow = w.service(reranker=reranker).recall("u", "Alps trip in July")
        assert time.perf_counter() - started < 1.8
        assert "rerank" in slow.meta["degraded"]
        assert ids(slow) == ids(w.service().recall("u", "Alps trip in July"))
        reranker.close()


def test_a_token_budget_injects_what_fits_and_marks_the_less_certain() -> None:
    w = World()
    for i in range(8):
        w.add(f"hiking note number {i}: boots, maps and a long list of things to pack for the Alps")
    # Given a budget for about three lines and a "sure" threshold above every hit's relevance
    service = w.service(sure_relevance=1.01)
    result = service.recall("u", "hiking boots Alps", budget_tokens=100)
    # Then only what fits is kept, best first, every hit marked tentative, and the block says so
    assert 1 <= len(result.hits) < 8 and all(h.tentative for h in result.hits)
    block = render_prompt(result)
    assert block.startswith("Less certain (may be unrelated):\n- hiking note")
    assert len(block) // 3 <= 100
    # And a budget of 0 (or a top_k given) keeps the top-k rule, nothing marked
    plain = service.recall("u", "hiking boots Alps", budget_tokens=0)
    assert len(plain.hits) == 5 and not any(h.tentative for h in plain.hits)
    assert len(service.recall("u", "hiking boots Alps", top_k=2, budget_tokens=100).hits) == 2
    # And a sure hit is listed before the heading of the less certain ones
    sure = w.service(sure_relevance=0.0).recall("u", "hiking boots Alps", budget_tokens=100)
    assert "Less certain" not in render_prompt(sure)


def test_compression_sets_lines_and_failure_keeps_content() -> None:
    w = World()
    w.add("I am allergic to peanuts and also to shellfish since childhood")
    ok = w.service(compressor=ScriptedCompressor(), compress=True).recall("u", "peanuts")
    assert ok.hits[0].text == "I am allergic"
    assert render_prompt(ok).startswith("- I am allergic (fact, ")
    failing = ScriptedCompressor(fail=True)
    bad = w.service(compressor=failing, compress=True).recall("u", "peanuts")
    assert failing.calls == 1 and bad.hits[0].text is None and "compress" in bad.meta["degraded"]
    wrong = w.service(compressor=ScriptedCompressor(reply='{"lines": []}'), compress=True).recall("u", "peanuts")
    assert wrong.hits[0].text is None and "compress" in wrong.meta["degraded"]
    off = ScriptedCompressor()
    w.service(compressor=off).recall("u", "peanuts")
    assert off.calls == 0  # off by default


def test_a_fenced_compression_answer_is_read_like_a_bare_one() -> None:
    # Given a compression model that wraps its JSON in a code fence and a sentence (Anthropic models do)
    w = World()
    w.add("I am allergic to peanuts and also to shellfish since childhood")
    fenced = 'Here you go:\n```json\n{"lines": ["Allergic to peanuts and shellfish."]}\n```'
    result = w.service(compressor=ScriptedCompressor(reply=fenced), compress=True).recall("u", "peanuts")
    # Then its line is used, as a bare JSON answer would be
    assert result.hits[0].text == "Allergic to peanuts and shellfish."
    assert "compress" not in result.meta.get("degraded", [])


async def test_compression_works_when_called_from_an_event_loop_thread() -> None:
    # Given recall called synchronously from inside a running event loop
    w = World()
    w.add("I am allergic to peanuts")
    result = w.service(compressor=ScriptedCompressor(), compress=True).recall("u", "peanuts")
    # Then compression still ran (on a helper thread)
    assert result.hits[0].text == "I am allergic"


def test_glossary_hits_and_render_prompt() -> None:
    w = World()
    w.add("Engram stores memories in SQLite", type="project", created_at=datetime(2025, 5, 2, tzinfo=UTC))
    w.store.put_glossary_term(
        GlossaryTerm(
            id="g1",
            namespace="u",
            term="Engram",
            aliases=("记忆层",),
            definition="the memory\nlayer",
            created_at=NOW,
            updated_at=NOW,
        )
    )
    w.store.put_glossary_term(
        GlossaryTerm(id="g2", namespace="other", term="Engram", definition="not yours", created_at=NOW, updated_at=NOW)
    )
    result = w.service().recall("u", "where does Engram keep data?")
    assert [g.id for g in result.glossary_hits] == ["g1"]
    assert render_prompt(result) == (
        "- Engram stores memories in SQLite (project, 2025-05-02)\nGlossary:\n- Engram (记忆层): the memory layer"
    )
    assert render_prompt(RecallResult()) == ""


def test_empty_query_returns_nothing() -> None:
    w = World()
    w.add("anything")
    assert w.service().recall("u", "   ").hits == []


def test_long_queries_keep_their_end() -> None:
    w = World()
    w.add("the password manager is Bitwarden")
    query = "lorem ipsum " * 500 + " which password manager do I use?"
    result = w.service().recall("u", query)
    assert ids(result)[0] == "the password manager is Bitwarden"


def test_rrf_fusion_mode() -> None:
    w = World()
    w.add("I am allergic to peanuts")
    w.add("peanut butter sandwich recipe")
    result = w.service(fusion="rrf").recall("u", "allergic peanuts")
    assert ids(result)[0] == "I am allergic to peanuts"
    assert result.meta["fusion"] == "rrf"


def test_config_maps_every_recall_setting() -> None:
    from engram.settings import Settings

    s = Settings(recall_top_k=7, recall_fusion="rrf", recall_keyword_weight=2.0, recall_compress=True)
    cfg = configs.recall(s)
    assert (cfg.top_k, cfg.fusion, cfg.keyword_weight, cfg.compress) == (7, "rrf", 2.0, True)
    recall_fields = {n[len("recall_") :] for n in Settings.model_fields if n.startswith("recall_")}
    assert recall_fields <= set(RecallConfig.__dataclass_fields__)


class CountingEmbedder(HashEmbedder):
    def __init__(self) -> None:
        super().__init__()
        self.queries: list[str] = []

    def embed_query(self, text: str) -> list[float]:
        self.queries.append(text)
        return super().embed_query(text)


def test_repeated_queries_reuse_the_query_vector_and_failures_are_not_cached() -> None:
    # Given a service whose embedder counts its calls
    w = World()
    w.add("I am allergic to peanuts")
    embedder = CountingEmbedder()
    service = w.service(embedder=embedder)
    # When the same query is recalled twice and another once
    first = service.recall("u", "peanuts")
    second = service.recall("u", "peanuts")
    service.recall("u", "allergic")
    # Then the repeat did not embed again and gave the same answer, and meta says it was cached
    assert embedder.queries == ["peanuts", "allergic"]
    assert ids(first) == ids(second) == ["I am allergic to peanuts"]
    assert (first.meta["counts"]["embed_cached"], second.meta["counts"]["embed_cached"]) == (0, 1)
    # Given an embedder that fails once, then works
    embedder.fail = True
    assert "vector" in service.recall("u", "new query").meta["degraded"]
    embedder.fail = False
    # When asked again, then it embeds (the failure was not cached) and vector search runs
    result = service.recall("u", "new query")
    assert "vector" in result.meta["stages"] and embedder.queries[-1] == "new query"


def test_the_query_vector_cache_is_bounded() -> None:
    # Given a service and more distinct queries than the cache holds
    from engram.services.recall import pipeline as recall_module

    w = World()
    w.add("I am allergic to peanuts")
    embedder = CountingEmbedder()
    service = w.service(embedder=embedder)
    for i in range(recall_module.QUERY_VECTOR_CACHE + 5):
        service.recall("u", f"query {i}")
    # When the oldest query comes back, then it is embedded again (evicted), the newest is not
    before = len(embedder.queries)
    service.recall("u", "query 0")
    service.recall("u", f"query {recall_module.QUERY_VECTOR_CACHE + 4}")
    assert len(embedder.queries) == before + 1


def test_the_query_vector_cache_tells_no_namespace_what_another_asked() -> None:
    # Given alice recalled a text
    w = World()
    embedder = CountingEmbedder()
    service = w.service(embedder=embedder)
    service.recall("alice", "my secret diagnosis")
    # When bob recalls the same text, Then his answer does not say it was cached (it is embedded anew)
    bob = service.recall("bob", "my secret diagnosis")
    assert bob.meta["counts"]["embed_cached"] == 0
    assert embedder.queries == ["my secret diagnosis", "my secret diagnosis"]
    # And alice's own repeat still comes from the cache
    assert service.recall("alice", "my secret diagnosis").meta["counts"]["embed_cached"] == 1


class HeldEmbedder(CountingEmbedder):
    """Embeds only once ``release`` is set (``fail``: raises instead)."""

    def __init__(self) -> None:
        super().__init__()
        self.started = threading.Event()
        self.release = threading.Event()

    def embed_query(self, text: str) -> list[float]:
        self.started.set()
        assert self.release.wait(10)
        return super().embed_query(text)


@pytest.mark.parametrize("fail", [False, True])
def test_a_text_being_embedded_is_waited_for_not_embedded_twice(fail: bool) -> None:
    # Given a service whose embedder is held mid-embedding of a query (a turn's recall, say)
    w = World()
    w.add("I am allergic to peanuts")
    embedder = HeldEmbedder()
    embedder.fail = fail
    service = w.service(embedder=embedder)
    with ThreadPoolExecutor(2) as pool:
        first = pool.submit(service.query_vector, "u", "peanuts")
        assert embedder.started.wait(10)
        # When the same text is asked for meanwhile (the turn's conversation search) and the first finishes
        second = pool.submit(service.query_vector, "u", "peanuts")
        while not second.running():
            time.sleep(0.001)
        time.sleep(0.05)  # past the cache and in-flight lookups, into the wait
        embedder.release.set()
        outcomes: list[object] = []
        for future in (first, second):
            try:
                outcomes.append(future.result(10))
            except Exception as exc:
                outcomes.append(type(exc))
    # Then it was embedded once and both callers got its vector (or both its failure, which is not kept)
    assert embedder.queries == ["peanuts"]
    if fail:
        assert outcomes[0] is outcomes[1] is UpstreamUnavailable
        embedder.fail = False
        service.query_vector("u", "peanuts")
        assert embedder.queries == ["peanuts", "peanuts"]
    else:
        assert outcomes[0] == outcomes[1] and isinstance(outcomes[0], tuple) and len(outcomes[0]) > 0


def test_start_embedding_embeds_the_query_on_the_side_once() -> None:
    # Given a service whose embedder is held
    w = World()
    w.add("I am allergic to peanuts")
    embedder = HeldEmbedder()
    service = w.service(embedder=embedder)
    # When a turn starts its query's embedding / Then the call returns while the embedding runs elsewhere
    service.start_embedding("u", "  peanuts ")
    assert embedder.started.wait(10)
    # And the recall of that query (its text as recall clips it), asked meanwhile, joins that embedding
    with ThreadPoolExecutor(1) as pool:
        recalled = pool.submit(service.recall, "u", "peanuts")
        while not recalled.running():
            time.sleep(0.001)
        time.sleep(0.05)
        embedder.release.set()
        result = recalled.result(10)
    assert embedder.queries == ["peanuts"]
    assert result.meta["counts"]["embed_cached"] == 0 and "vector" in result.meta["stages"]
    assert ids(result) == ["I am allergic to peanuts"]
    # And a cached text, an empty one or a service without an embedder starts nothing
    service.start_embedding("u", "peanuts")
    service.start_embedding("u", "   ")
    w.service(embedder=None).start_embedding("u", "peanuts")
    assert embedder.queries == ["peanuts"]
    assert service.recall("u", "peanuts").meta["counts"]["embed_cached"] == 1
