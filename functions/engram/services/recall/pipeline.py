"""Recall: the few memories that matter for a query, fast, never stale, never another user's.

One pipeline serves search, the chat gateway and MCP (docs/ARCHITECTURE.md, "Where each behaviour lives"):

    query -> keyword candidates + vector candidates (kNN over the namespace's active memories)
          -> weighted fusion (normalized scores, or reciprocal ranks with k = 60)
          -> importance and recency weighting -> store re-check (active, same namespace, not expired)
          -> dedup (same folded text / near-identical tokens) and boot-block exclusion
          -> optional reranker -> score floor -> anti-repeat decay -> top k -> optional compression

Every stage degrades instead of failing; ``RecallResult.meta`` says what ran, what degraded and how
long each stage took. ``recall`` runs one method per stage; the pure scoring they call lives in
``domain/recall_scoring.py`` and ``domain/fusion.py``, unit-tested on their own.

Over 400 lines on purpose: the stages read in order in one class, beside the query-vector cache and
the compression call they use; nothing else lives here.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Collection, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field

from engram.domain import fusion
from engram.domain.errors import NotConfigured
from engram.domain.models import GlossaryTerm, Memory, SearchHit
from engram.domain.ports import (
    ChatModel,
    Clock,
    Embedder,
    MemoryRows,
    NeighbourDensity,
    NoteRows,
    Reranker,
    SearchIndex,
)
from engram.domain.recall_scoring import (
    dedup_memories,
    diversify,
    fuse_rrf,
    fuse_scores,
    glossary_matches,
    is_live,
    select,
    text_script,
    token_bits,
    token_set,
    weigh,
)
from engram.domain.text import estimate_tokens, tokenize
from engram.services.index.fair_embedder import embedding_for
from engram.services.index.guard import is_index_unavailable
from engram.services.models import prompts
from engram.services.models.reply import parse_json_object
from engram.services.recall.background import BackgroundVectors
from engram.services.runtime_settings import Live
from engram.services.sync_bridge import run_sync

log = logging.getLogger(__name__)

Fusion = Literal["adaptive", "score", "rrf"]

# Query vectors kept per service: chat retries, MCP clients and regenerated answers repeat the same
# query, and the embedding is most of a recall's time.
QUERY_VECTOR_CACHE = 256
EMBED_THREADS = 32
# The most memories a token budget may inject in one turn (the ranking's head that is weighed anyway).
BUDGET_MAX_HITS = 20


@dataclass(frozen=True)
class RecallConfig:
    """Weights and thresholds of the pipeline: each field is the setting ``recall_<field>`` (``settings.py``
    holds the defaults, written once; ``bootstrap/configs.py`` builds it)."""

    top_k: int
    candidates: int
    fusion: Fusion
    rrf_k: int
    keyword_weight: float
    vector_weight: float
    importance_weight: float
    recency_weight: float
    recency_half_life_days: float
    min_score: float
    min_relevance: float
    # Chat injection: a token budget instead of top_k (0 = top_k), and the relevance under which an
    # injected memory is marked as less certain (docs/recall.md, "How much is injected").
    budget_tokens: int
    sure_relevance: float
    repeat_window_minutes: int
    repeat_decay: float
    dedup_jaccard: float
    diversity: float
    # Weight of the hubness correction of vector scores (docs/recall.md, "Fusion"); 0 turns it off.
    hubness: float
    rerank_candidates: int
    compress: bool
    compress_model: str
    compress_timeout_s: float
    max_query_chars: int


class RecallHit(BaseModel):
    model_config = ConfigDict(frozen=True)

    memory: Memory
    score: float
    # Estimated probability that the memory helps answer the query, in [0, 1] (docs/recall.md).
    relevance: float = 1.0
    keyword_rank: int | None = None
    vector_rank: int | None = None
    # The compressed line to inject instead of the full content (compression on and successful).
    text: str | None = None
    # Injected under a token budget with a relevance below ``sure_relevance``: marked as less certain.
    tentative: bool = False


class RecallResult(BaseModel):
    hits: list[RecallHit] = Field(default_factory=list)
    glossary_hits: list[GlossaryTerm] = Field(default_factory=list)
    meta: dict[str, Any] = Field(default_factory=dict)


TENTATIVE_HEAD = "Less certain (may be unrelated):"


def memory_line(hit: RecallHit) -> str:
    """One memory's line in the injected block: ``- <content> (<type>, <YYYY-MM-DD>)``."""
    text = " ".join((hit.text or hit.memory.content).split())
    return f"- {text} ({hit.memory.type}, {hit.memory.created_at.date().isoformat()})"


def render_prompt(result: RecallResult) -> str:
    """The injectable memory block: one short line per memory, best first, the less certain ones (a budget's
    lower-relevance memories) after their own heading, then glossary terms.

    Format (stable, no ids): ``- <content> (<type>, <YYYY-MM-DD>)`` and ``- <term>: <definition>``.
    """
    lines = [memory_line(hit) for hit in result.hits if not hit.tentative]
    tentative = [memory_line(hit) for hit in result.hits if hit.tentative]
    if tentative:
        lines += [TENTATIVE_HEAD, *tentative]
    if result.glossary_hits:
        lines.append("Glossary:")
        for term in result.glossary_hits:
            name = term.term + (f" ({', '.join(term.aliases)})" if term.aliases else "")
            lines.append(f"- {name}: {' '.join(term.definition.split())}")
    return "\n".join(lines)


def within_budget(hits: Sequence[RecallHit], budget: int) -> list[RecallHit]:
    """The hits, best first, whose lines fit in ``budget`` tokens together (the heading of the less
    certain ones counted once); a line too long for what is left is passed over for shorter ones."""
    out: list[RecallHit] = []
    used = 0
    heading = estimate_tokens(TENTATIVE_HEAD)
    for hit in hits:
        cost = estimate_tokens(memory_line(hit)) + 1
        if hit.tentative and not any(h.tentative for h in out):
            cost += heading
        if used + cost > budget:
            continue
        used += cost
        out.append(hit)
    return out


# -- the service ------------------------------------------------------------------------------
class _Stages:
    """Collects what each stage did for ``meta``."""

    def __init__(self) -> None:
        self.ran: list[str] = []
        self.degraded: dict[str, str] = {}
        self.skipped: list[str] = []
        self.timings: dict[str, float] = {}
        self.index_unavailable = False
        self._t = time.perf_counter()

    def lap(self, name: str) -> None:
        now = time.perf_counter()
        self.timings[name] = round((now - self._t) * 1000, 3)
        self._t = now

    def fail(self, stage: str, exc: BaseException) -> None:
        log.warning("recall stage %s degraded: %s", stage, exc.__class__.__name__, exc_info=log.isEnabledFor(10))
        self.degraded[stage] = f"{exc.__class__.__name__}: {exc}"[:200]
        self.index_unavailable = self.index_unavailable or is_index_unavailable(exc)


def _query_text(query: str, max_chars: int) -> str:
    text = (query or "").strip()
    # The end of a long turn is usually the question; keep it.
    return text[-max_chars:] if len(text) > max_chars else text


@dataclass
class _Run:
    """One recall in flight: its inputs, and what the stages report for ``meta``."""

    namespace: str
    text: str
    types: tuple[str, ...]
    k: int
    now: datetime
    cfg: RecallConfig
    refine: bool = True  # False: no reranker, no compression (REST `filter: false`, as Aelios)
    stages: _Stages = field(default_factory=_Stages)
    counts: dict[str, int] = field(default_factory=dict)
    started: float = field(default_factory=time.perf_counter)
    query_vector: Sequence[float] | None = None
    budget: int | None = None

    def meta(self, evidence: fusion.Evidence, floor: float) -> dict[str, Any]:
        self.stages.timings["total"] = round((time.perf_counter() - self.started) * 1000, 3)
        meta = {
            "stages": self.stages.ran,
            "skipped": self.stages.skipped,
            "degraded": self.stages.degraded,
            "fusion": self.cfg.fusion,
            "keyword_confidence": round(evidence.keyword_confidence, 4),
            "min_relevance": floor,
            "timings_ms": self.stages.timings,
            "counts": self.counts,
        }
        if self.stages.index_unavailable:
            # The search index is asleep or unreachable: the caller says so (chat: x-engram-reason).
            meta["index"] = "unavailable"
        return meta


@dataclass(frozen=True)
class _Pool:
    """The live candidates (re-checked in the store) with their keyword and vector scores and ranks."""

    by_id: dict[str, Memory]
    keyword_live: list[tuple[str, float]]
    vector_live: list[tuple[str, float]]
    keyword_rank: dict[str, int]
    vector_rank: dict[str, int]


class RecallStore(MemoryRows, NoteRows, Protocol):
    """What recall re-checks (memories) and matches (glossary terms)."""


class Recall(Protocol):
    """What the rest of Engram asks of recall (the chat turn, REST, MCP, conversation recall):
    ``RecallService`` below; a test's spy around it stands in through ``Overrides.recall``."""

    @property
    def config(self) -> RecallConfig: ...

    def recall(
        self,
        namespace: str,
        query: str,
        *,
        top_k: int | None = None,
        types: Sequence[str] = (),
        exclude_ids: Collection[str] = (),
        record_injection: bool = False,
        min_relevance: float | None = None,
        budget_tokens: int | None = None,
        refine: bool = True,
    ) -> RecallResult: ...

    def query_vector(self, namespace: str, text: str) -> Sequence[float]: ...

    def start_embedding(self, namespace: str, query: str) -> None: ...

    def record_injected(self, namespace: str, memory_ids: Sequence[str]) -> None: ...


class RecallService:
    def __init__(
        self,
        store: RecallStore,
        index: SearchIndex,
        embedder: Embedder | None,
        reranker: Reranker | None,
        compressor: ChatModel | None,
        clock: Clock,
        config: RecallConfig | Live[RecallConfig],
        *,
        helper_threads: bool = True,
    ) -> None:
        """``helper_threads=False`` where no thread may outlive a response (Lambda): the reference
        background is then embedded a little per recall, not on a helper thread (services/recall/background.py)."""
        self._store = store
        self._index = index
        self._embedder = embedder
        self._reranker = reranker
        self._compressor = compressor
        self._clock = clock
        self._config = Live.of(config)
        self._pool_lock = threading.Lock()
        self._embed_pool: ThreadPoolExecutor | None = None
        # Keyed by namespace too: a hit (``embed_cached``, or a faster answer) must not tell one namespace
        # which texts another one recently sent.
        self._vectors: OrderedDict[tuple[str, str, str], Sequence[float]] = OrderedDict()
        self._vectors_lock = threading.Lock()
        # The texts being embedded right now (same keys), so a second caller waits for the first's vector.
        self._embedding: dict[tuple[str, str, str], Future[Sequence[float]]] = {}
        self._background = (
            BackgroundVectors(embedder, clock, helper_thread=helper_threads) if embedder is not None else None
        )

    @property
    def config(self) -> RecallConfig:
        return self._config()

    def warm(self) -> bool:
        """Embed the reference background of small-namespace relevance now (start-up, tests, benchmarks)
        rather than on a helper thread after the first small recall; whether it is ready."""
        return self._background is not None and self._background.vectors(wait=True) is not None

    def recall(
        self,
        namespace: str,
        query: str,
        *,
        top_k: int | None = None,
        types: Sequence[str] = (),
        exclude_ids: Collection[str] = (),
        record_injection: bool = False,
        min_relevance: float | None = None,
        budget_tokens: int | None = None,
        refine: bool = True,
    ) -> RecallResult:
        """The best ``top_k`` live memories of ``namespace`` for ``query`` (see the module docstring); with
        ``budget_tokens`` (> 0) instead every memory above the floor, best first, while its line fits in
        that many tokens (at most ``BUDGET_MAX_HITS``), those below ``sure_relevance`` marked tentative;
        ``refine=False`` leaves out the model stages (reranker, compression)."""
        cfg = self._config()
        budget = budget_tokens if budget_tokens and budget_tokens > 0 and top_k is None else None
        run = _Run(
            namespace=namespace,
            text=_query_text(query, cfg.max_query_chars),
            types=tuple(dict.fromkeys(types)),
            k=BUDGET_MAX_HITS if budget else max(1, top_k or cfg.top_k),
            now=self._clock.now(),
            cfg=cfg,
            budget=budget,
            refine=refine,
        )
        glossary, keyword_hits, vector_hits = self._search(run)
        pool = self._live_candidates(run, keyword_hits, vector_hits)
        fused, evidence = self._fuse(run, pool)
        excluded = set(exclude_ids)
        ranked = [mid for _, mid in sorted([(-score, mid) for mid, score in fused.items()]) if mid not in excluded]
        run.counts["fused"] = len(fused)
        run.counts["excluded"] = len(fused) - len(ranked)
        run.stages.lap("fusion")
        floor = cfg.min_relevance if min_relevance is None else min_relevance
        head = ranked[: self._head_size(run)]
        if self._none_relevant(run, head, evidence, floor):
            hits: list[RecallHit] = []
        else:
            live, factor, weighted = self._weigh(run, pool, head, fused)
            live, scores, reranked = self._rerank(run, live, factor, weighted)
            hits = self._select(run, pool, live, scores, reranked, evidence, floor)
            hits = self._compress_hits(run, hits)
        if record_injection and hits:
            self._record_stage(run, hits)
        run.counts["returned"] = len(hits)
        return RecallResult(hits=hits, glossary_hits=glossary, meta=run.meta(evidence, floor))

    # -- the stages, in order -----------------------------------------------------------------------
    def _search(self, run: _Run) -> tuple[list[GlossaryTerm], list[SearchHit], list[SearchHit]]:
        """Glossary terms of the query, keyword candidates and vector candidates (each degrades alone)."""
        cfg, stages, text = run.cfg, run.stages, run.text
        # The query embedding (the slowest stage) runs on a helper thread while the glossary and the
        # keyword search run here; both release the GIL (C engine, SQLite).
        pending_vector: Future[tuple[Sequence[float], bool, float]] | None = None
        if text and self._embedder is not None:
            pending_vector = self._embed_async(run.namespace, text)

        glossary: list[GlossaryTerm] = []
        if text:
            try:
                glossary = glossary_matches(text, self._store.list_glossary(run.namespace))
                stages.ran.append("glossary")
            except Exception as exc:
                stages.fail("glossary", exc)
        stages.lap("glossary")

        keyword_hits: list[SearchHit] = []
        vector_hits: list[SearchHit] = []
        if text:
            try:
                keyword_hits = self._index.keyword_search(run.namespace, text, k=cfg.candidates, types=run.types)
                stages.ran.append("keyword")
            except Exception as exc:
                stages.fail("keyword", exc)
            stages.lap("keyword")
            if pending_vector is None:
                stages.skipped.append("vector")
            else:
                vector_hits = self._vector_candidates(run, pending_vector)
        run.counts["keyword"] = len(keyword_hits)
        run.counts["vector"] = len(vector_hits)
        return glossary, keyword_hits, vector_hits

    def _vector_candidates(
        self, run: _Run, pending_vector: Future[tuple[Sequence[float], bool, float]]
    ) -> list[SearchHit]:
        stages = run.stages
        vector_hits: list[SearchHit] = []
        try:
            vector, cached, embed_ms = pending_vector.result()
            run.query_vector = vector
            run.counts["embed_cached"] = int(cached)
            stages.lap("embed_wait")
            stages.timings["embed"] = round(embed_ms, 3)
            vector_hits = self._index.vector_search(run.namespace, vector, k=run.cfg.candidates, types=run.types)
            stages.ran.append("vector")
        except Exception as exc:
            stages.fail("vector", exc)
        stages.lap("vector")
        return vector_hits

    def _live_candidates(self, run: _Run, keyword_hits: list[SearchHit], vector_hits: list[SearchHit]) -> _Pool:
        """Every candidate re-checked against the store first (the index is only a mirror: a superseded or
        deleted memory may linger there), so stale documents shape neither the fusion nor the relevance."""
        candidate_ids = list(dict.fromkeys([h.memory_id for h in keyword_hits] + [h.memory_id for h in vector_hits]))
        found = self._store.get_memories(run.namespace, candidate_ids) if candidate_ids else []
        by_id = {m.id: m for m in found if is_live(m, run.namespace, run.now, run.types)}
        run.counts["stale"] = len(candidate_ids) - len(by_id)
        pool = _Pool(
            by_id=by_id,
            keyword_live=[(h.memory_id, h.score) for h in keyword_hits if h.memory_id in by_id],
            vector_live=[(h.memory_id, h.score) for h in vector_hits if h.memory_id in by_id],
            keyword_rank={h.memory_id: i + 1 for i, h in enumerate(keyword_hits)},
            vector_rank={h.memory_id: i + 1 for i, h in enumerate(vector_hits)},
        )
        run.stages.lap("fetch")
        return pool

    def _fuse(self, run: _Run, pool: _Pool) -> tuple[dict[str, float], fusion.Evidence]:
        """One fused score per live candidate (adaptive, or by scores or ranks), and the evidence the
        relevance estimate reads (computed by the adaptive fusion whichever fusion ranks)."""
        cfg, by_id = run.cfg, pool.by_id
        density = self._density(run, pool.vector_live) if cfg.fusion == "adaptive" else None
        background = self._background_cosines(run, pool.vector_live)
        fused, evidence = fusion.adaptive_fuse(
            tokenize(run.text),
            pool.keyword_live,
            pool.vector_live,
            lambda mid: token_set(by_id[mid].content),
            # Read by the vector side alone (its script correction): none to read keyword-only.
            {mid: text_script(m.content) for mid, m in by_id.items()} if pool.vector_live else {},
            keyword_weight=cfg.keyword_weight,
            vector_weight=cfg.vector_weight,
            density=density,
            hubness=cfg.hubness,
            background=background,
            background_size=cfg.candidates,
        )
        if cfg.fusion == "rrf":
            fused = fuse_rrf(
                [
                    ([m for m, _ in pool.keyword_live], cfg.keyword_weight if pool.keyword_live else 0.0),
                    ([m for m, _ in pool.vector_live], cfg.vector_weight if pool.vector_live else 0.0),
                ],
                cfg.rrf_k,
            )
        elif cfg.fusion == "score":
            fused = fuse_scores(
                [
                    (fusion.max_normalized(pool.keyword_live), cfg.keyword_weight if pool.keyword_live else 0.0),
                    (fusion.min_max(pool.vector_live), cfg.vector_weight if pool.vector_live else 0.0),
                ]
            )
        return fused, evidence

    def _head_size(self, run: _Run) -> int:
        """How much of the fused ranking is weighed (its head: the rest cannot reach the top k)."""
        return max(run.k * 4, run.cfg.rerank_candidates if self._reranker else 0, 20)

    def _none_relevant(self, run: _Run, head: list[str], evidence: fusion.Evidence, floor: float) -> bool:
        """Whether no memory of the head can reach the relevance ``floor``: then nothing is returned whatever
        the weighing, dedup, diversity and anti-repeat stages do (they reorder and drop, the floor reads the
        fusion's estimate alone), so they are skipped — a turn whose words match only unrelated memories
        costs the search and the fusion, not the pool's pairwise overlaps (bench/README.md, "Gateway
        overhead"). Not when a reranker would run: its scores replace the estimate."""
        if not head or (self._reranker is not None and run.refine):
            return False
        if fusion.any_relevant(evidence, head, floor):
            return False
        run.counts["below_min_relevance"] = len(head)
        if run.budget is not None:
            run.counts["budget_tokens"] = run.budget
        run.stages.skipped.extend(["filter", "rerank", "compress"])
        return True

    def _weigh(
        self, run: _Run, pool: _Pool, head: list[str], fused: dict[str, float]
    ) -> tuple[list[Memory], dict[str, float], dict[str, float]]:
        """The head of the ranking weighted by importance and recency, near-duplicates dropped, then spread
        out (diversity)."""
        cfg, by_id = run.cfg, pool.by_id
        live = [by_id[mid] for mid in head]
        factor, weighted = weigh(
            live,
            fused,
            run.now,
            importance_weight=cfg.importance_weight,
            recency_weight=cfg.recency_weight,
            recency_half_life_days=cfg.recency_half_life_days,
        )
        live.sort(key=lambda m: (-weighted[m.id], m.id))
        # The head's token sets as bits once, for both pairwise stages (dedup, then diversity).
        bits = token_bits([token_set(m.content) for m in live])
        kept, run.counts["duplicates"] = dedup_memories(live, cfg.dedup_jaccard, bits)
        if len(kept) < len(live):  # the kept ones' bits
            bits_of = {m.id: b for m, b in zip(live, bits, strict=True)}
            bits = [bits_of[m.id] for m in kept]
        live = kept
        if cfg.diversity > 0:
            order = [m.id for m in live]
            weighted.update(diversify(order, weighted, lambda mid: token_set(by_id[mid].content), cfg.diversity, bits))
            live.sort(key=lambda m: (-weighted[m.id], m.id))
        run.stages.lap("filter")
        return live, factor, weighted

    def _rerank(
        self, run: _Run, live: list[Memory], factor: dict[str, float], weighted: dict[str, float]
    ) -> tuple[list[Memory], dict[str, float], dict[str, float]]:
        """The optional reranker over the head: its scores (times the factors) order the head, and its raw
        score in [0, 1] becomes the relevance of what it scored."""
        stages = run.stages
        scores = dict(weighted)
        reranked: dict[str, float] = {}
        if self._reranker is None or not live or not run.refine:
            stages.skipped.append("rerank")
            return live, scores, reranked
        head = live[: run.cfg.rerank_candidates]
        try:
            rerank_scores = self._reranker.rerank(run.text, [m.content for m in head])
            if len(rerank_scores) != len(head):
                raise ValueError(f"reranker returned {len(rerank_scores)} scores for {len(head)} documents")
            for m, r in zip(head, rerank_scores, strict=True):
                scores[m.id] = float(r) * factor[m.id]
                reranked[m.id] = min(1.0, max(0.0, float(r)))
            head.sort(key=lambda m: (-scores[m.id], m.id))
            live = head + live[len(head) :]
            stages.ran.append("rerank")
        except Exception as exc:
            scores = dict(weighted)
            reranked = {}
            stages.fail("rerank", exc)
        stages.lap("rerank")
        return live, scores, reranked

    def _select(
        self,
        run: _Run,
        pool: _Pool,
        live: list[Memory],
        scores: dict[str, float],
        reranked: dict[str, float],
        evidence: fusion.Evidence,
        floor: float,
    ) -> list[RecallHit]:
        """The floors, the anti-repeat decay and the top k. Relevance: the reranker's score where it ran,
        else the calibrated estimate (docs/recall.md)."""
        cfg = run.cfg

        def relevance_of(memory_id: str) -> float:
            given = reranked.get(memory_id)
            return fusion.relevance(evidence, memory_id) if given is None else given

        selection = select(
            live,
            scores,
            relevance_of,
            run.now,
            min_score=cfg.min_score,
            min_relevance=floor,
            repeat_window_minutes=cfg.repeat_window_minutes,
            repeat_decay=cfg.repeat_decay,
            k=run.k,
        )
        run.counts["floored"] = selection.floored
        run.counts["below_min_relevance"] = selection.irrelevant
        hits = [
            RecallHit(
                memory=m,
                score=round(s, 6),
                relevance=round(r, 4),
                keyword_rank=pool.keyword_rank.get(m.id),
                vector_rank=pool.vector_rank.get(m.id),
                tentative=run.budget is not None and r < cfg.sure_relevance,
            )
            for m, s, r in selection.hits
        ]
        if run.budget is not None:
            hits = within_budget(hits, run.budget)
            run.counts["budget_tokens"] = run.budget
        return hits

    def _compress_hits(self, run: _Run, hits: list[RecallHit]) -> list[RecallHit]:
        """Optionally one short line per hit from the compression model (bounded in time)."""
        cfg, stages = run.cfg, run.stages
        if not ((cfg.compress or cfg.compress_model) and self._compressor is not None and hits and run.refine):
            stages.skipped.append("compress")
            return hits
        try:
            lines = run_sync(
                self._compress(run.text, [h.memory.content for h in hits]),
                timeout=self._config().compress_timeout_s + 1,
            )
            hits = [h.model_copy(update={"text": line}) for h, line in zip(hits, lines, strict=True)]
            stages.ran.append("compress")
        except Exception as exc:
            stages.fail("compress", exc)
        stages.lap("compress")
        return hits

    def _record_stage(self, run: _Run, hits: list[RecallHit]) -> None:
        try:
            self._record_injection(run.namespace, [h.memory.id for h in hits], run.now)
            run.stages.ran.append("record_injection")
        except Exception as exc:
            run.stages.fail("record_injection", exc)
        run.stages.lap("record_injection")

    # -- helpers ------------------------------------------------------------------------------
    def _background_cosines(
        self, run: _Run, vector_live: Sequence[tuple[str, float]]
    ) -> list[tuple[float, fusion.Script]] | None:
        """The query's cosines to the reference background when the namespace gave fewer vector candidates
        than recall fetches (a small namespace: docs/recall.md, "Relevance at every size")."""
        if self._background is None or run.query_vector is None or len(vector_live) >= run.cfg.candidates:
            return None
        try:
            cosines = self._background.cosines(run.query_vector)
        except Exception as exc:
            run.stages.fail("background", exc)
            return None
        if cosines is None:
            run.stages.skipped.append("background")
            return None
        run.stages.ran.append("background")
        run.stages.lap("background")
        return cosines

    def _density(self, run: _Run, vector_live: Sequence[tuple[str, float]]) -> dict[str, float] | None:
        """Neighbourhood density of the vector candidates, when the index can say (else no hubness correction)."""
        if (
            run.cfg.hubness <= 0
            or len(vector_live) < fusion.MIN_BACKGROUND
            or not isinstance(self._index, NeighbourDensity)
        ):
            return None
        try:
            ids = [m for m, _ in vector_live]
            density = self._index.neighbour_density(run.namespace, ids, k=fusion.HUBNESS_NEIGHBOURS)
        except Exception as exc:
            run.stages.fail("hubness", exc)
            return None
        if not density:  # an index that keeps no vectors at hand (behind the guard: OpenSearch)
            run.stages.skipped.append("hubness")
            return None
        run.stages.ran.append("hubness")
        return density

    def _embed_async(self, namespace: str, text: str) -> Future[tuple[Sequence[float], bool, float]]:
        """The query vector as a future (vector, from the LRU, ms): done at once from the LRU, joined to the
        embedding of the same text already running (``start_embedding``), else computed on a helper thread
        (the text noted as being embedded before it is handed over, so no second caller embeds it)."""
        t = time.perf_counter()
        key = self._vector_key(namespace, text)
        vector, pending, mine = self._claim(key)
        out: Future[tuple[Sequence[float], bool, float]] = Future()
        if vector is not None:
            out.set_result((vector, True, (time.perf_counter() - t) * 1000))
            return out
        if pending is not None:

            def relay(done: Future[Sequence[float]]) -> None:
                error = done.exception()
                if error is not None:
                    out.set_exception(error)
                else:
                    out.set_result((done.result(), False, (time.perf_counter() - t) * 1000))

            pending.add_done_callback(relay)
            return out
        assert mine is not None
        claimed = mine

        def run() -> tuple[Sequence[float], bool, float]:
            return self._fill(key, namespace, text, claimed), False, (time.perf_counter() - t) * 1000

        with self._pool_lock:
            if self._embed_pool is None:
                # Several at once: the embedder bounds its own parallelism and takes the namespaces in
                # turn (services/index/fair_embedder.py); this pool must not queue one namespace's query
                # behind another's first, so it is wider than any embedder's slots.
                self._embed_pool = ThreadPoolExecutor(max_workers=EMBED_THREADS, thread_name_prefix="recall-embed")
            pool = self._embed_pool
        try:
            return pool.submit(run)
        except BaseException as exc:  # not handed over (the interpreter is stopping): nobody waits in vain
            self._unclaim(key, claimed, exc)
            raise

    def _vector_key(self, namespace: str, text: str) -> tuple[str, str, str]:
        return namespace, self._embedder.model_id if self._embedder is not None else "", text

    def start_embedding(self, namespace: str, query: str) -> None:
        """Start embedding ``query`` as ``recall`` will (on the embedding threads; nothing when it is cached,
        being embedded, or there is no embedder), so what a chat turn reads before its recall in the same
        worker-thread hop (the reminder claim, the conversation search's keyword side) overlaps the
        embedding, and the recall and the conversation search share it (services/chat/turn_context.py)."""
        text = _query_text(query, self._config().max_query_chars)
        if text and self._embedder is not None:
            self._embed_async(namespace, text)  # its outcome is read by whoever asks for the vector

    def query_vector(self, namespace: str, text: str) -> Sequence[float]:
        """The query's embedding, from the cache a recall of the same text filled (conversation recall)."""
        if self._embedder is None:
            raise NotConfigured("no embedder")
        return self._query_vector(namespace, text[-self._config().max_query_chars :])[0]

    def _query_vector(self, namespace: str, text: str) -> tuple[Sequence[float], bool]:
        """The query's embedding from a small LRU (keyed by namespace, model and text), else from the embedder.
        A text being embedded for another caller right now is waited for, not embedded twice (a turn's
        conversation search and its recall ask for the same vector); ``True`` then too (not embedded here)."""
        assert self._embedder is not None
        key = self._vector_key(namespace, text)
        vector, pending, mine = self._claim(key)
        if vector is not None:
            return vector, True
        if pending is not None:
            return pending.result(), True  # the other caller's failure is this one's too
        assert mine is not None
        return self._fill(key, namespace, text, mine), False

    def _claim(
        self, key: tuple[str, str, str]
    ) -> tuple[Sequence[float] | None, Future[Sequence[float]] | None, Future[Sequence[float]] | None]:
        """The cached vector of ``key``; else the embedding of it already running; else a new one, noted as
        running, that the caller must ``_fill``."""
        with self._vectors_lock:
            vector = self._vectors.get(key)
            if vector is not None:
                self._vectors.move_to_end(key)
                return vector, None, None
            pending = self._embedding.get(key)
            if pending is not None:
                return None, pending, None
            mine: Future[Sequence[float]] = Future()
            self._embedding[key] = mine
            return None, None, mine

    def _fill(
        self, key: tuple[str, str, str], namespace: str, text: str, mine: Future[Sequence[float]]
    ) -> Sequence[float]:
        """Embed the text ``_claim`` handed this caller, cache it and answer whoever waits for it."""
        assert self._embedder is not None
        try:
            with embedding_for(namespace):  # its turn among the namespaces (services/index/fair_embedder.py)
                vector = tuple(self._embedder.embed_query(text))
        except BaseException as exc:
            self._unclaim(key, mine, exc)  # a failure is not cached: the next call embeds again
            raise
        with self._vectors_lock:
            self._vectors[key] = vector
            while len(self._vectors) > QUERY_VECTOR_CACHE:
                self._vectors.popitem(last=False)
            del self._embedding[key]
        mine.set_result(vector)
        return vector

    def _unclaim(self, key: tuple[str, str, str], mine: Future[Sequence[float]], error: BaseException) -> None:
        with self._vectors_lock:
            self._embedding.pop(key, None)
        mine.set_exception(error)

    def record_injected(self, namespace: str, memory_ids: Sequence[str]) -> None:
        """Note that these memories were injected into a turn now (the anti-repeat decay and the
        counters read it); the chat turn calls it once it used what ``recall`` found."""
        self._record_injection(namespace, memory_ids, self._clock.now())

    def _record_injection(self, namespace: str, ids: Sequence[str], now: datetime) -> None:
        # An atomic increment of the counters alone: it cannot undo a concurrent archive or edit
        # (docs/ARCHITECTURE.md, "Write rules").
        self._store.record_injected(namespace, ids, now)

    async def _compress(self, query: str, contents: Sequence[str]) -> list[str]:
        assert self._compressor is not None
        messages = prompts.compress_messages(query, contents)
        raw = await asyncio.wait_for(
            self._compressor.complete(messages, json_mode=True, max_tokens=60 * len(contents) + 50, temperature=0.0),
            timeout=self._config().compress_timeout_s,
        )
        lines = parse_json_object(raw).get("lines")
        if not isinstance(lines, list) or len(lines) != len(contents):
            raise ValueError("compressor returned the wrong number of lines")
        out = [" ".join(str(line).split()) for line in lines]
        if any(not line for line in out):
            raise ValueError("compressor returned an empty line")
        return out
