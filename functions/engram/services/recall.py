"""Recall: the few memories that matter for a query, fast, never stale, never another user's.

One pipeline serves search, the chat gateway and MCP (docs/ARCHITECTURE.md, "Where each behaviour lives"):

    query -> keyword candidates + vector candidates (kNN over the namespace's active memories)
          -> weighted fusion (normalized scores, or reciprocal ranks with k = 60)
          -> importance and recency weighting -> store re-check (active, same namespace, not expired)
          -> dedup (same folded text / near-identical tokens) and boot-block exclusion
          -> optional reranker -> score floor -> anti-repeat decay -> top k -> optional compression

Every stage degrades instead of failing; ``RecallResult.meta`` says what ran, what degraded and how
long each stage took. The pure scoring helpers below are unit-tested on their own.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import re
import threading
import time
import unicodedata
from collections import OrderedDict
from collections.abc import Callable, Collection, Mapping, Sequence, Set
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, fields
from datetime import datetime, timedelta
from functools import lru_cache
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from engram.domain import fusion
from engram.domain.errors import NotConfigured
from engram.domain.models import GlossaryTerm, Memory, SearchHit
from engram.domain.ports import ChatModel, Clock, Embedder, MemoryStore, Reranker, SearchIndex
from engram.domain.text import is_cjk, tokenize
from engram.services.loop import run_sync
from engram.services.search_guard import is_index_unavailable

log = logging.getLogger(__name__)

Fusion = Literal["adaptive", "score", "rrf"]

# Query vectors kept per service: chat retries, MCP clients and regenerated answers repeat the same
# query, and the embedding is most of a recall's time.
QUERY_VECTOR_CACHE = 256


@dataclass(frozen=True)
class RecallConfig:
    """Weights and thresholds of the pipeline: each field is the setting ``recall_<field>`` (``settings.py``
    holds the defaults, written once; ``from_settings`` builds it)."""

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
    repeat_window_minutes: int
    repeat_decay: float
    dedup_jaccard: float
    diversity: float
    rerank_candidates: int
    compress: bool
    compress_model: str
    compress_timeout_s: float
    max_query_chars: int

    @classmethod
    def from_settings(cls, settings: Any) -> RecallConfig:
        """Every field ``<name>`` is the setting ``recall_<name>``."""
        return cls(**{f.name: getattr(settings, f"recall_{f.name}") for f in fields(cls)})


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


class RecallResult(BaseModel):
    hits: list[RecallHit] = Field(default_factory=list)
    glossary_hits: list[GlossaryTerm] = Field(default_factory=list)
    meta: dict[str, Any] = Field(default_factory=dict)


def render_prompt(result: RecallResult) -> str:
    """The injectable memory block: one short line per memory, best first, then glossary terms.

    Format (stable, no ids): ``- <content> (<type>, <YYYY-MM-DD>)`` and ``- <term>: <definition>``.
    """
    lines: list[str] = []
    for hit in result.hits:
        text = " ".join((getattr(hit, "text", None) or hit.memory.content).split())
        lines.append(f"- {text} ({hit.memory.type}, {hit.memory.created_at.date().isoformat()})")
    if result.glossary_hits:
        lines.append("Glossary:")
        for term in result.glossary_hits:
            name = term.term + (f" ({', '.join(term.aliases)})" if term.aliases else "")
            lines.append(f"- {name}: {' '.join(term.definition.split())}")
    return "\n".join(lines)


# -- pure scoring helpers ---------------------------------------------------------------------
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


def normalize_scores(hits: Sequence[SearchHit], *, floor_at_last: bool) -> dict[str, float]:
    """Scores to [0, 1]: divided by the best (``floor_at_last=False``, BM25) or min-max over the
    list (``True``, cosine: its raw range depends on the model)."""
    pairs = [(h.memory_id, h.score) for h in hits]
    return fusion.min_max(pairs) if floor_at_last else fusion.max_normalized(pairs)


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


def fold_text(text: str) -> str:
    """Case, width, whitespace and punctuation folded away (``same_meaning_text`` in one key)."""
    text = unicodedata.normalize("NFKC", text).casefold()
    return "".join(ch for ch in text if ch.isalnum())


def jaccard(a: Set[str], b: Set[str]) -> float:
    if not a or not b:
        return 0.0
    return len(a & b) / len(a | b)


@lru_cache(maxsize=16384)
def _token_set(text: str) -> frozenset[str]:
    return frozenset(tokenize(text))


@lru_cache(maxsize=16384)
def _script(text: str) -> fusion.Script:
    return fusion.script_of(text)


def dedup_memories(memories: Sequence[Memory], jaccard_threshold: float) -> tuple[list[Memory], int]:
    """Drop later memories whose folded text equals, or whose token set nearly equals, an earlier one."""
    kept: list[Memory] = []
    seen_folds: set[str] = set()
    kept_tokens: list[frozenset[str]] = []
    dropped = 0
    for memory in memories:
        folded = fold_text(memory.content)
        tokens = _token_set(memory.content)
        if folded in seen_folds or (
            jaccard_threshold < 1.0
            and len(tokens) >= 3
            and any(jaccard(tokens, t) >= jaccard_threshold for t in kept_tokens)
        ):
            dropped += 1
            continue
        seen_folds.add(folded)
        kept_tokens.append(tokens)
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


class RecallService:
    def __init__(
        self,
        store: MemoryStore,
        index: SearchIndex,
        embedder: Embedder | None,
        reranker: Reranker | None,
        compressor: ChatModel | None,
        clock: Clock,
        config: RecallConfig | Callable[[], RecallConfig],
    ) -> None:
        self._store = store
        self._index = index
        self._embedder = embedder
        self._reranker = reranker
        self._compressor = compressor
        self._clock = clock
        # A callable is read per recall: runtime settings (admin panel) change it without a restart.
        self._config_of: Callable[[], RecallConfig] = config if callable(config) else (lambda: config)
        self._pool_lock = threading.Lock()
        self._embed_pool: ThreadPoolExecutor | None = None
        # Keyed by namespace too: a hit (``embed_cached``, or a faster answer) must not tell one namespace
        # which texts another one recently sent.
        self._vectors: OrderedDict[tuple[str, str, str], Sequence[float]] = OrderedDict()
        self._vectors_lock = threading.Lock()

    @property
    def config(self) -> RecallConfig:
        return self._config_of()

    @property
    def _config(self) -> RecallConfig:
        return self._config_of()

    def recall(  # noqa: C901, PLR0915 - split into stages next (issue 15 item 5)
        self,
        namespace: str,
        query: str,
        *,
        top_k: int | None = None,
        types: Sequence[str] = (),
        exclude_ids: Collection[str] = (),
        record_injection: bool = False,
        min_relevance: float | None = None,
    ) -> RecallResult:
        """The best ``top_k`` live memories of ``namespace`` for ``query`` (see the module docstring)."""
        cfg = self._config
        k = max(1, top_k or cfg.top_k)
        stages = _Stages()
        started = time.perf_counter()
        now = self._clock.now()
        text = (query or "").strip()
        if len(text) > cfg.max_query_chars:
            # The end of a long turn is usually the question; keep it.
            text = text[-cfg.max_query_chars :]
        wanted_types = tuple(dict.fromkeys(types))
        counts: dict[str, int] = {}

        # The query embedding (the slowest stage) runs on a helper thread while the glossary and the
        # keyword search run here; both release the GIL (C engine, SQLite).
        pending_vector: Future[tuple[Sequence[float], bool, float]] | None = None
        if text and self._embedder is not None:
            pending_vector = self._embed_async(namespace, text)

        glossary: list[GlossaryTerm] = []
        if text:
            try:
                glossary = glossary_matches(text, self._store.list_glossary(namespace))
                stages.ran.append("glossary")
            except Exception as exc:
                stages.fail("glossary", exc)
        stages.lap("glossary")

        keyword_hits: list[SearchHit] = []
        vector_hits: list[SearchHit] = []
        if text:
            try:
                keyword_hits = self._index.keyword_search(namespace, text, k=cfg.candidates, types=wanted_types)
                stages.ran.append("keyword")
            except Exception as exc:
                stages.fail("keyword", exc)
            stages.lap("keyword")
            if pending_vector is None:
                stages.skipped.append("vector")
            else:
                try:
                    vector, cached, embed_ms = pending_vector.result()
                    counts["embed_cached"] = int(cached)
                    stages.lap("embed_wait")
                    stages.timings["embed"] = round(embed_ms, 3)
                    vector_hits = self._index.vector_search(namespace, vector, k=cfg.candidates, types=wanted_types)
                    stages.ran.append("vector")
                except Exception as exc:
                    stages.fail("vector", exc)
                stages.lap("vector")
        counts["keyword"] = len(keyword_hits)
        counts["vector"] = len(vector_hits)

        keyword_rank = {h.memory_id: i + 1 for i, h in enumerate(keyword_hits)}
        vector_rank = {h.memory_id: i + 1 for i, h in enumerate(vector_hits)}

        # Re-check every candidate against the store first (the index is only a mirror: a superseded or
        # deleted memory may linger there), so stale documents shape neither the fusion nor the relevance.
        candidate_ids = list(dict.fromkeys([h.memory_id for h in keyword_hits] + [h.memory_id for h in vector_hits]))
        found = self._store.get_memories(namespace, candidate_ids) if candidate_ids else []
        by_id = {m.id: m for m in found if is_live(m, namespace, now, wanted_types)}
        counts["stale"] = len(candidate_ids) - len(by_id)
        keyword_live = [(h.memory_id, h.score) for h in keyword_hits if h.memory_id in by_id]
        vector_live = [(h.memory_id, h.score) for h in vector_hits if h.memory_id in by_id]
        stages.lap("fetch")

        fused, evidence = fusion.adaptive_fuse(
            tokenize(text),
            keyword_live,
            vector_live,
            lambda mid: _token_set(by_id[mid].content),
            {mid: _script(m.content) for mid, m in by_id.items()},
            keyword_weight=cfg.keyword_weight,
            vector_weight=cfg.vector_weight,
        )
        if cfg.fusion == "rrf":
            fused = fuse_rrf(
                [
                    ([m for m, _ in keyword_live], cfg.keyword_weight if keyword_live else 0.0),
                    ([m for m, _ in vector_live], cfg.vector_weight if vector_live else 0.0),
                ],
                cfg.rrf_k,
            )
        elif cfg.fusion == "score":
            fused = fuse_scores(
                [
                    (fusion.max_normalized(keyword_live), cfg.keyword_weight if keyword_live else 0.0),
                    (fusion.min_max(vector_live), cfg.vector_weight if vector_live else 0.0),
                ]
            )
        excluded = set(exclude_ids)
        ranked = [mid for mid in sorted(fused, key=lambda m: (-fused[m], m)) if mid not in excluded]
        counts["fused"] = len(fused)
        counts["excluded"] = len(fused) - len(ranked)
        stages.lap("fusion")

        # Weight the head by importance/recency, then drop near-duplicates.
        pool_size = max(k * 4, cfg.rerank_candidates if self._reranker else 0, 20)
        live = [by_id[mid] for mid in ranked[:pool_size]]
        factor = {
            m.id: importance_factor(m.importance, cfg.importance_weight)
            * recency_factor(m.created_at, now, cfg.recency_weight, cfg.recency_half_life_days)
            for m in live
        }
        weighted = {m.id: fused[m.id] * factor[m.id] for m in live}
        live.sort(key=lambda m: (-weighted[m.id], m.id))
        live, counts["duplicates"] = dedup_memories(live, cfg.dedup_jaccard)
        if cfg.diversity > 0:
            order = [m.id for m in live]
            weighted.update(
                fusion.diversify(order, weighted, lambda mid: _token_set(by_id[mid].content), cfg.diversity)
            )
            live.sort(key=lambda m: (-weighted[m.id], m.id))
        stages.lap("filter")

        scores = dict(weighted)
        reranked: dict[str, float] = {}
        if self._reranker is not None and live:
            head = live[: cfg.rerank_candidates]
            try:
                rerank_scores = self._reranker.rerank(text, [m.content for m in head])
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
        else:
            stages.skipped.append("rerank")

        # Relevance: the reranker's score where it ran, else the calibrated estimate (docs/recall.md).
        floor = cfg.min_relevance if min_relevance is None else min_relevance
        final: list[tuple[Memory, float, float]] = []
        floored = irrelevant = 0
        for m in live:
            score = scores[m.id]
            if score < cfg.min_score:
                floored += 1
                continue
            relevance = reranked.get(m.id)
            if relevance is None:
                relevance = fusion.relevance(evidence, m.id)
            if relevance < floor:
                irrelevant += 1
                continue
            score *= repeat_factor(m.last_injected_at, now, cfg.repeat_window_minutes, cfg.repeat_decay)
            final.append((m, score, relevance))
        final.sort(key=lambda item: (-item[1], item[0].id))
        final = final[:k]
        counts["floored"] = floored
        counts["below_min_relevance"] = irrelevant

        hits = [
            RecallHit(
                memory=m,
                score=round(s, 6),
                relevance=round(r, 4),
                keyword_rank=keyword_rank.get(m.id),
                vector_rank=vector_rank.get(m.id),
            )
            for m, s, r in final
        ]
        if (cfg.compress or cfg.compress_model) and self._compressor is not None and hits:
            try:
                lines = run_sync(
                    self._compress(text, [h.memory.content for h in hits]),
                    timeout=self._config.compress_timeout_s + 1,
                )
                hits = [h.model_copy(update={"text": line}) for h, line in zip(hits, lines, strict=True)]
                stages.ran.append("compress")
            except Exception as exc:
                stages.fail("compress", exc)
            stages.lap("compress")
        else:
            stages.skipped.append("compress")

        if record_injection and hits:
            try:
                self._record_injection(namespace, [h.memory.id for h in hits], now)
                stages.ran.append("record_injection")
            except Exception as exc:
                stages.fail("record_injection", exc)
            stages.lap("record_injection")

        counts["returned"] = len(hits)
        stages.timings["total"] = round((time.perf_counter() - started) * 1000, 3)
        meta = {
            "stages": stages.ran,
            "skipped": stages.skipped,
            "degraded": stages.degraded,
            "fusion": cfg.fusion,
            "keyword_confidence": round(evidence.keyword_confidence, 4),
            "min_relevance": floor,
            "timings_ms": stages.timings,
            "counts": counts,
        }
        if stages.index_unavailable:
            # The search index is asleep or unreachable: the caller says so (chat: x-engram-reason).
            meta["index"] = "unavailable"
        return RecallResult(hits=hits, glossary_hits=glossary, meta=meta)

    # -- helpers ------------------------------------------------------------------------------
    def _embed_async(self, namespace: str, text: str) -> Future[tuple[Sequence[float], bool, float]]:
        """The query vector as a future: done at once from the LRU, else computed on the helper thread."""

        def run() -> tuple[Sequence[float], bool, float]:
            t = time.perf_counter()
            vector, cached = self._query_vector(namespace, text)
            return vector, cached, (time.perf_counter() - t) * 1000

        with self._vectors_lock:
            hit = self._vector_key(namespace, text) in self._vectors
        if hit:
            done: Future[tuple[Sequence[float], bool, float]] = Future()
            try:
                done.set_result(run())
            except Exception as exc:
                done.set_exception(exc)
            return done
        with self._pool_lock:
            if self._embed_pool is None:
                # Several at once: the embedder bounds its own parallelism (the local model pool).
                self._embed_pool = ThreadPoolExecutor(max_workers=4, thread_name_prefix="recall-embed")
            pool = self._embed_pool
        return pool.submit(run)

    def _vector_key(self, namespace: str, text: str) -> tuple[str, str, str]:
        return namespace, str(getattr(self._embedder, "model_id", "")), text

    def query_vector(self, namespace: str, text: str) -> Sequence[float]:
        """The query's embedding, from the cache a recall of the same text filled (conversation recall)."""
        if self._embedder is None:
            raise NotConfigured("no embedder")
        return self._query_vector(namespace, text[-self._config.max_query_chars :])[0]

    def _query_vector(self, namespace: str, text: str) -> tuple[Sequence[float], bool]:
        """The query's embedding from a small LRU (keyed by namespace, model and text), else from the embedder."""
        assert self._embedder is not None
        key = self._vector_key(namespace, text)
        with self._vectors_lock:
            vector = self._vectors.get(key)
            if vector is not None:
                self._vectors.move_to_end(key)
                return vector, True
        vector = tuple(self._embedder.embed_query(text))
        with self._vectors_lock:
            self._vectors[key] = vector
            while len(self._vectors) > QUERY_VECTOR_CACHE:
                self._vectors.popitem(last=False)
        return vector, False

    def _record_injection(self, namespace: str, ids: Sequence[str], now: datetime) -> None:
        for memory in self._store.get_memories(namespace, ids):
            if memory.status != "active":
                continue
            self._store.update_memory(
                memory.model_copy(update={"last_injected_at": now, "recall_count": memory.recall_count + 1})
            )

    async def _compress(self, query: str, contents: Sequence[str]) -> list[str]:
        assert self._compressor is not None
        numbered = "\n".join(f"{i + 1}. {c}" for i, c in enumerate(contents))
        messages = [
            {
                "role": "system",
                "content": "You shorten memories about a user for injection into a chat prompt. For each numbered "
                "memory write one short line (at most 20 words) keeping every fact, name, number and date that "
                "could matter for the message. Same language as the memory. Reply with JSON: "
                '{"lines": ["...", ...]} with exactly one line per memory, in order.',
            },
            {"role": "user", "content": f"Message: {query[:500]}\n\nMemories:\n{numbered}"},
        ]
        raw = await asyncio.wait_for(
            self._compressor.complete(messages, json_mode=True, max_tokens=60 * len(contents) + 50, temperature=0.0),
            timeout=self._config.compress_timeout_s,
        )
        data = json.loads(raw)
        lines = data.get("lines") if isinstance(data, dict) else None
        if not isinstance(lines, list) or len(lines) != len(contents):
            raise ValueError("compressor returned the wrong number of lines")
        out = [" ".join(str(line).split()) for line in lines]
        if any(not line for line in out):
            raise ValueError("compressor returned an empty line")
        return out
