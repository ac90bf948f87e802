"""An in-process ``SearchIndex``: BM25 over ``engram.domain.text.tokenize`` tokens + exact cosine kNN.

The reference implementation of the port (tests, ``ENGRAM_SEARCH=memory``). Everything lives in
dicts guarded by one lock; nothing is persisted.
"""

from __future__ import annotations

import math
import threading
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, overload

import numpy as np

from engram.domain.errors import InvalidInput
from engram.domain.models import IndexedDoc, IndexInfo, SearchHit
from engram.domain.text import tokenize

BM25_K1 = 1.2
BM25_B = 0.3  # SqliteSearchIndex re-scores with the same (engram.adapters.search.fts)


# BM25 in three expressions that every local keyword path uses (this reference, FTS5's re-scoring in
# search/fts.py, big namespaces' postings in search/keyword_cache.py), so their scores agree to the bit.
def bm25_idf(n: int, df: int) -> float:
    """A term's weight among ``n`` documents of which ``df`` hold it."""
    return math.log(1.0 + (n - df + 0.5) / (df + 0.5))


@overload
def bm25_norm(length: float, avgdl: float, b: float) -> float: ...
@overload
def bm25_norm(length: np.ndarray, avgdl: float, b: float) -> np.ndarray: ...
def bm25_norm(length: Any, avgdl: float, b: float) -> Any:
    """A document's length normalisation (element-wise over an array of lengths)."""
    return BM25_K1 * (1.0 - b + b * length / avgdl)


@overload
def bm25_term(weight: float, tf: float, norm: float) -> float: ...
@overload
def bm25_term(weight: float, tf: np.ndarray, norm: np.ndarray) -> np.ndarray: ...
def bm25_term(weight: float, tf: Any, norm: Any) -> Any:
    """One term's share of a document's score (element-wise over arrays of counts and norms)."""
    return weight * tf * (BM25_K1 + 1.0) / (tf + norm)


# Long chat turns make long queries; the rarest terms carry the signal, so cap the unique terms.
MAX_QUERY_TERMS = 128


def query_terms(query: str) -> list[str]:
    """Unique tokens of ``query`` in first-seen order, at most ``MAX_QUERY_TERMS``."""
    return list(dict.fromkeys(tokenize(query)))[:MAX_QUERY_TERMS]


def unit_vector(vector: Sequence[float]) -> np.ndarray:
    """``vector`` as float32 scaled to length 1 (a zero vector stays zero)."""
    arr = np.asarray(vector, dtype=np.float32).reshape(-1)
    norm = float(np.linalg.norm(arr))
    return arr / norm if norm > 0 else arr


def best_rows(scores: np.ndarray, k: int) -> np.ndarray:
    """The rows of the ``k`` highest ``scores``, best first, ties in row order: what a stable sort of the
    whole array gives, from a partition and a sort of the candidates (the top 50 of 1,000 vectors)."""
    n = scores.shape[0]
    if k >= n:
        return np.argsort(-scores, kind="stable")
    kth = np.partition(scores, n - k)[n - k]
    held = np.flatnonzero(scores >= kth)  # the k best and every row tied with the k-th, in row order
    return held[np.argsort(-scores[held], kind="stable")][:k]


def neighbour_density(ids: Sequence[str], matrix: np.ndarray, k: int) -> dict[str, float]:
    """Each row's mean cosine to its ``k`` most similar other rows (unit-length rows; docs/recall.md, "Hubness")."""
    n = len(ids)
    if n < 2 or k <= 0:
        return {}
    sims = matrix @ matrix.T
    np.fill_diagonal(sims, -np.inf)
    k = min(k, n - 1)
    top = np.partition(sims, n - k, axis=1)[:, n - k :]
    return {mid: float(v) for mid, v in zip(ids, top.mean(axis=1), strict=True)}


@dataclass
class _Doc:
    memory_id: str
    type: str
    tf: Counter[str]
    length: int
    vector: np.ndarray | None


@dataclass
class _Stack:
    docs: list[_Doc]
    matrix: np.ndarray | None
    row_of: dict[str, int]


@dataclass
class _Namespace:
    docs: dict[str, _Doc] = field(default_factory=dict)
    df: Counter[str] = field(default_factory=Counter)
    # term -> the documents holding it: a query scores only the documents that match one of its terms
    # (scanning every document was most of a keyword recall's cost at 1,000 memories; bench/gateway.py).
    postings: dict[str, set[str]] = field(default_factory=dict)
    total_length: int = 0
    # Each document's row in a query's score array (a removed document's row is reused by the next one).
    rows: dict[str, int] = field(default_factory=dict)
    ids: list[str] = field(default_factory=list)
    free: list[int] = field(default_factory=list)
    # term -> its holders' rows and each one's BM25 share of it (``bm25_term``), computed on the term's
    # first query since the last write: the documents' scores are sums of these, added term by term into
    # one array (numpy, instead of a dict update per holder: most of a keyword recall at 1,000 memories;
    # bench/gateway.py). Any write changes the document count and average length every share depends
    # on, so it empties the cache.
    shares: dict[str, tuple[np.ndarray, np.ndarray]] = field(default_factory=dict)
    # The documents with a vector (in ``docs`` order), their vectors stacked and each one's row in the
    # stack, built on the first vector query since the last write (stacking 1,000 vectors per query was
    # most of a vector recall's own cost; bench/gateway.py --embedder local); any write drops it.
    stacked: _Stack | None = None

    def add(self, doc: _Doc) -> None:
        self.shares.clear()
        self.stacked = None
        self.docs[doc.memory_id] = doc
        if self.free:
            row = self.free.pop()
            self.ids[row] = doc.memory_id
        else:
            row = len(self.ids)
            self.ids.append(doc.memory_id)
        self.rows[doc.memory_id] = row
        self.df.update(doc.tf.keys())
        for term in doc.tf:
            self.postings.setdefault(term, set()).add(doc.memory_id)
        self.total_length += doc.length

    def remove(self, memory_id: str) -> None:
        doc = self.docs.pop(memory_id, None)
        if doc is None:
            return
        self.shares.clear()
        self.stacked = None
        row = self.rows.pop(memory_id)
        self.ids[row] = ""
        self.free.append(row)
        self.df.subtract(doc.tf.keys())
        for term in doc.tf:
            if self.df[term] <= 0:
                del self.df[term]
            holders = self.postings.get(term)
            if holders is not None:
                holders.discard(memory_id)
                if not holders:
                    del self.postings[term]
        self.total_length -= doc.length

    def stack(self) -> _Stack:
        """The documents with a vector and their vectors stacked (kept until a write)."""
        if self.stacked is None:
            held = [d for d in self.docs.values() if d.vector is not None]
            matrix = np.stack([d.vector for d in held if d.vector is not None]) if held else None
            self.stacked = _Stack(held, matrix, {d.memory_id: i for i, d in enumerate(held)})
        return self.stacked

    def shares_of(self, term: str) -> tuple[np.ndarray, np.ndarray]:
        """The rows of the documents holding ``term`` and the term's share of each one's BM25 score
        (float64, each the same float ``bm25_term`` gives; cached until a write)."""
        cached = self.shares.get(term)
        if cached is None:
            n_docs = len(self.docs)
            avg_len = self.total_length / n_docs if n_docs else 0.0
            weight = bm25_idf(n_docs, self.df[term])
            docs, rows = self.docs, self.rows
            holders = list(self.postings[term])
            values: list[float] = []
            for mid in holders:
                doc = docs[mid]
                norm = bm25_norm(doc.length, avg_len, BM25_B) if avg_len else BM25_K1
                values.append(bm25_term(weight, doc.tf[term], norm))
            cached = (np.fromiter((rows[mid] for mid in holders), dtype=np.intp, count=len(holders)), np.array(values))
            self.shares[term] = cached
        return cached

    def scores(self, terms: Sequence[str], wanted: set[str]) -> tuple[np.ndarray, np.ndarray]:
        """The rows matching one of ``terms`` (of the ``wanted`` types, when given) and their scores. Each
        row's score is the same sum, in the same order (the query's terms), as scoring document by
        document: each term adds its share to each of its holders once."""
        total = np.zeros(len(self.ids))
        for term in terms:
            if not self.df[term]:
                continue
            rows, values = self.shares_of(term)
            if wanted:
                keep = np.fromiter(
                    (self.docs[self.ids[r]].type in wanted for r in rows.tolist()), dtype=bool, count=len(rows)
                )
                rows, values = rows[keep], values[keep]
            total[rows] += values
        # The rows with a positive sum, in row order (a row no term touched holds 0): what the touched rows
        # sorted (np.unique), then cut to the positive ones, gave, without sorting them.
        hit = np.flatnonzero(total > 0)
        return hit, total[hit]


class InMemorySearchIndex:
    """``SearchIndex`` held in process memory."""

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self._namespaces: dict[str, _Namespace] = {}
        self._model_id: str | None = None
        self._dimension: int | None = None

    def upsert(self, doc: IndexedDoc) -> str:
        vector: np.ndarray | None = None
        if doc.vector is not None:
            vector = unit_vector(doc.vector)
        tokens = tokenize(doc.text)
        with self._lock:
            if vector is not None:
                if self._dimension is None:
                    self._dimension = int(vector.shape[0])
                elif vector.shape[0] != self._dimension:
                    raise InvalidInput(
                        f"vector has {vector.shape[0]} dimensions; the index holds {self._dimension}",
                        code="dimension_mismatch",
                    )
            ns = self._namespaces.setdefault(doc.namespace, _Namespace())
            ns.remove(doc.memory_id)
            ns.add(_Doc(doc.memory_id, doc.type, Counter(tokens), len(tokens), vector))
        return doc.memory_id

    def upsert_many(self, docs: Sequence[IndexedDoc]) -> None:
        with self._lock:
            for doc in docs:
                self.upsert(doc)

    def delete(self, namespace: str, memory_id: str, ref: str | None = None) -> None:
        with self._lock:
            ns = self._namespaces.get(namespace)
            if ns is not None:
                ns.remove(memory_id)

    def keyword_search(self, namespace: str, query: str, *, k: int = 50, types: Sequence[str] = ()) -> list[SearchHit]:
        terms = query_terms(query)
        if not terms or k <= 0:
            return []
        wanted = set(types)
        with self._lock:
            ns = self._namespaces.get(namespace)
            if ns is None or not ns.docs:
                return []
            rows, scores = ns.scores(terms, wanted)
            if len(rows) > k:  # the k best and every row tied with the k-th: ties are broken by id below
                kth = np.partition(scores, len(scores) - k)[len(scores) - k]
                best = scores >= kth
                rows, scores = rows[best], scores[best]
            ids = ns.ids
            # (-score, id): best first, ties by id. At most k rows and the k-th's ties are left, so a sort
            # of them is what ``heapq.nsmallest(k, ...)`` gave (the same as ``sorted(...)[:k]``), cheaper.
            scored = sorted(zip((-scores).tolist(), [ids[row] for row in rows.tolist()], strict=True))
        # Only the top k become SearchHit objects (building one per matching document dominated the cost).
        return [SearchHit(memory_id=mid, score=-neg) for neg, mid in scored[:k]]

    def vector_search(
        self, namespace: str, vector: Sequence[float], *, k: int = 50, types: Sequence[str] = ()
    ) -> list[SearchHit]:
        query = unit_vector(vector)
        wanted = set(types)
        with self._lock:
            if self._dimension is not None and query.shape[0] != self._dimension:
                raise InvalidInput(
                    f"query vector has {query.shape[0]} dimensions; the index holds {self._dimension}",
                    code="dimension_mismatch",
                )
            ns = self._namespaces.get(namespace)
            if ns is None or k <= 0:
                return []
            if not wanted:  # every document with a vector: the stack kept until the next write
                stack = ns.stack()
                if stack.matrix is None:
                    return []
                rows, matrix = stack.docs, stack.matrix
            else:
                rows = [d for d in ns.docs.values() if d.vector is not None and d.type in wanted]
                if not rows:
                    return []
                matrix = np.stack([d.vector for d in rows if d.vector is not None])
        scores = np.clip(matrix @ query, -1.0, 1.0)
        order = best_rows(scores, k)
        return [
            SearchHit(memory_id=rows[i].memory_id, score=score)
            for i, score in zip(order.tolist(), scores[order].tolist(), strict=True)
        ]

    def neighbour_density(self, namespace: str, memory_ids: Sequence[str], *, k: int = 10) -> dict[str, float]:
        with self._lock:
            ns = self._namespaces.get(namespace)
            if ns is None:
                return {}
            stack = ns.stack()  # the vector query before this one built it: its rows, not a new stack
            ids = [mid for mid in dict.fromkeys(memory_ids) if mid in stack.row_of]
            if not ids or stack.matrix is None:
                return {}
            matrix = stack.matrix[[stack.row_of[mid] for mid in ids]]
        return neighbour_density(ids, matrix, k)

    def info(self, namespace: str | None = None) -> IndexInfo:
        with self._lock:
            spaces = [ns for name, ns in self._namespaces.items() if namespace is None or name == namespace]
            docs = sum(len(ns.docs) for ns in spaces)
            vectors = sum(1 for ns in spaces for d in ns.docs.values() if d.vector is not None)
            return IndexInfo(model_id=self._model_id, dimension=self._dimension, documents=docs, vectors=vectors)

    def reset(self, model_id: str, dimension: int) -> None:
        if dimension <= 0:
            raise InvalidInput("dimension must be positive")
        with self._lock:
            for ns in self._namespaces.values():
                ns.stacked = None
                for doc in ns.docs.values():
                    doc.vector = None
            self._model_id = model_id
            self._dimension = dimension

    def ping(self) -> None:
        return None
