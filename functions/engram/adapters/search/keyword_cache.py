"""The in-memory keyword postings of one big namespace for ``SqliteSearchIndex`` (``search/sqlite.py``).

FTS5's ``bm25()`` is evaluated for every matching row before ``ORDER BY ... LIMIT`` can cut: a few µs a
row, so a query word found in most of 100k memories costs tens of milliseconds however few hits are
kept (bench/README.md, "Latency"). A namespace of at least ``KEYWORD_THRESHOLD`` documents is therefore
ranked here instead, from its postings held as numpy arrays (term -> documents and term counts, loaded
once from the FTS table's pre-tokenized text and patched by this process's writes, like the vectors in
``search/vector_cache.py``): BM25 over every matching document in vectorised passes, no per-hit Python.

The scoring is the in-memory reference's (``search/inmemory.py``: k1 = ``BM25_K1``, the index's ``b``,
idf ``log(1 + (N - df + 0.5) / (df + 0.5))``, the namespace's own document count, lengths and document
frequencies), term by term in the same floating-point order, so it equals the reference's scores; the
FTS5 path of small namespaces ranks its top ``RESCORE_DEPTH`` by ``bm25()`` and re-scores only those.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

import numpy as np

from engram.adapters.search.inmemory import bm25_idf, bm25_norm, bm25_term

# Namespaces with at least this many documents are ranked from in-memory postings (below it FTS5 is fast).
KEYWORD_THRESHOLD = 5_000


class KeywordCache:
    """One namespace's postings: built rows in CSR arrays, rows written since in small Python dicts.

    A write replaces or removes a row (the built arrays are immutable; a removed built row is masked out);
    ``stale`` says when enough has changed since the build that the caller should load it afresh.
    """

    def __init__(self, generation: int, docs: Sequence[tuple[str, str, str]]) -> None:
        """``docs``: (memory_id, type, tokens joined by spaces) of every document of the namespace."""
        self.generation = generation
        n = len(docs)
        self.ids: list[str] = [d[0] for d in docs]
        self.rows: dict[str, int] = {mid: i for i, mid in enumerate(self.ids)}
        self.type_codes: dict[str, int] = {}
        self.codes = np.fromiter((self._code(d[1]) for d in docs), dtype=np.int32, count=n)
        split = [d[2].split() for d in docs]
        lengths = np.fromiter(map(len, split), dtype=np.int64, count=n)
        self.lengths = lengths.astype(np.float64)
        self.alive = np.ones(n, dtype=bool)
        self.built = n
        flat = [token for tokens in split for token in tokens]
        # dict.fromkeys and map run in C: ~10x a setdefault per token in a generator at 1.2M tokens.
        self.vocab: dict[str, int] = {term: i for i, term in enumerate(dict.fromkeys(flat))}
        term_ids = np.fromiter(map(self.vocab.__getitem__, flat), dtype=np.int64, count=len(flat))
        doc_ids = np.repeat(np.arange(n, dtype=np.int64), lengths)
        keys, counts = np.unique(term_ids * max(n, 1) + doc_ids, return_counts=True)
        terms = keys // max(n, 1)
        self.post_doc = (keys % max(n, 1)).astype(np.int32)
        self.post_tf = counts.astype(np.float64)
        self.ptr = np.searchsorted(terms, np.arange(len(self.vocab) + 1)).astype(np.int64)
        self.n_alive = n
        self.total_length = int(lengths.sum())
        # Rows written after the build: row -> (term counts, length, type code); their document frequencies.
        self.extra: dict[int, tuple[Counter[str], int, int]] = {}
        self.extra_df: Counter[str] = Counter()
        self.dead = 0
        # Every built row's length normalisation for one (avgdl, b): a query gathers it per posting instead
        # of recomputing it from the lengths term by term (the same element-wise values); a write moves avgdl.
        self._norms: tuple[float, float, np.ndarray] | None = None

    def _code(self, type_: str) -> int:
        return self.type_codes.setdefault(type_, len(self.type_codes))

    @property
    def stale(self) -> bool:
        """Enough rows written since the build that a fresh load is due (the extras are scored in Python)."""
        return len(self.extra) + self.dead > max(1_000, self.built // 10)

    def put(self, memory_id: str, type_: str, tokens: str) -> None:
        self.remove(memory_id)
        row = len(self.ids)
        self.ids.append(memory_id)
        self.rows[memory_id] = row
        counts = Counter(tokens.split())
        length = sum(counts.values())
        self.extra[row] = (counts, length, self._code(type_))
        self.extra_df.update(counts.keys())
        self.n_alive += 1
        self.total_length += length

    def remove(self, memory_id: str) -> None:
        row = self.rows.pop(memory_id, None)
        if row is None:
            return
        if row < self.built:
            self.alive[row] = False
            self.dead += 1
            length = int(self.lengths[row])
        else:
            counts, length, _ = self.extra.pop(row)
            self.extra_df.subtract(counts.keys())
        self.n_alive -= 1
        self.total_length -= length

    def _postings(self, term: str) -> tuple[np.ndarray, np.ndarray]:
        """The built rows holding ``term`` (removed ones left out) and its count in each."""
        tid = self.vocab.get(term)
        if tid is None:
            return np.zeros(0, dtype=np.int32), np.zeros(0, dtype=np.float64)
        lo, hi = int(self.ptr[tid]), int(self.ptr[tid + 1])
        docs, tf = self.post_doc[lo:hi], self.post_tf[lo:hi]
        if self.dead:
            live = self.alive[docs]
            docs, tf = docs[live], tf[live]
        return docs, tf

    def _norm(self, avgdl: float, b: float) -> np.ndarray:
        if self._norms is None or self._norms[:2] != (avgdl, b):
            self._norms = (avgdl, b, bm25_norm(self.lengths, avgdl, b))
        return self._norms[2]

    def search(self, terms: Sequence[str], k: int, types: Sequence[str], b: float) -> list[tuple[str, float]]:
        """The best ``k`` (memory_id, BM25) with a positive score, best first, ties by memory_id."""
        n = self.n_alive
        if n == 0 or k <= 0:
            return []
        avgdl = self.total_length / n
        norm = self._norm(avgdl, b)
        scores = np.zeros(self.built, dtype=np.float64)
        weights: list[tuple[str, float]] = []
        for term in terms:
            docs, tf = self._postings(term)
            df = len(docs) + self.extra_df[term]
            if df <= 0:
                continue
            idf = bm25_idf(n, df)
            weights.append((term, idf))
            if len(docs):
                # The reference's expressions (search/inmemory.py), element-wise.
                scores[docs] += bm25_term(idf, tf, norm[docs])
        if not weights:
            return []
        wanted = {self.type_codes[t] for t in types if t in self.type_codes}
        if types:
            scores[~np.isin(self.codes, list(wanted))] = 0.0
        hits = np.flatnonzero(scores > 0)
        if len(hits) > k:
            # The k best, and every row tied with the k-th (the memory_id order decides among those).
            kth = np.partition(scores[hits], len(hits) - k)[len(hits) - k]
            hits = hits[scores[hits] >= kth]
        out = [(self.ids[i], float(scores[i])) for i in hits.tolist()]
        out += self._extra_scores(weights, wanted if types else None, avgdl, b)
        out.sort(key=lambda pair: (-pair[1], pair[0]))
        return out[:k]

    def _extra_scores(
        self, weights: Sequence[tuple[str, float]], wanted: set[int] | None, avgdl: float, b: float
    ) -> list[tuple[str, float]]:
        """Rows written since the build (at most ~a thousand: ``stale``), scored one by one."""
        out: list[tuple[str, float]] = []
        for row, (counts, length, code) in self.extra.items():
            if wanted is not None and code not in wanted:
                continue
            norm = bm25_norm(length, avgdl, b)
            score = 0.0
            for term, weight in weights:
                c = counts.get(term)
                if c:
                    score += bm25_term(weight, c, norm)
            if score > 0:
                out.append((self.ids[row], score))
        return out
