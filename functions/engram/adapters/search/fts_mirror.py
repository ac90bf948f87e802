"""FTS5's candidate cut of a small namespace, reproduced in memory (``SqliteSearchIndex``, ``search/sqlite.py``).

Below ``KEYWORD_THRESHOLD`` a keyword query takes FTS5's top ``RESCORE_DEPTH`` matches by ``bm25()`` (its
built-in k1 = 1.2, b = 0.75) and re-scores those (``search/fts.py``). ``bm25()`` is evaluated for every
match before SQLite can cut: ~1 ms of a chat turn over 1,000 memories (bench/README.md, "Gateway
overhead"). ``FtsMirror`` holds one namespace's documents as FTS5 holds them (rowid, term counts, row
length) and computes the same cut from the same integers FTS5 reads: the row count and token total of
its averages record, each term's document count, each row's term counts and length; with FTS5's
expression in its order (``fts5Bm25Function``: phrase by phrase, the namespace phrase first, weighted 0).

When it is the same, to the bit:

- Every token of every document is one FTS5's tokenizer keeps whole and unchanged: then its counts are
  ``str.split``'s and a row's length is its tokens plus the one namespace token. ``unicode61`` decides
  character by character (a token character or a separator, folded or not, by its own Unicode tables),
  so a token is kept whole and unchanged when each of its characters, alone, is a token equal to itself.
  ``[a-z0-9]`` are; any other character (another script: Chinese, accented Latin, Cyrillic) is asked of
  this SQLite build's tokenizer once (``Fts5Chars``: FTS5's own terms of it, on a private in-memory
  table). A namespace holding a token with any other character (one ``unicode61`` splits at, drops or
  folds) is ranked by FTS5, and so is a query with such a term or one that looks like a namespace token.
- The cut itself: two rows whose scores are within ``TIE_EPSILON`` of each other across the cut are only
  ordered the same as SQLite's arithmetic if FTS5 adds the same numbers in the same order for both (one
  row length, and the same (idf, count) for each term present, in the query's order: a term absent adds
  exactly 0.0, so rows holding different terms of one idf count too; then the same double in any
  arithmetic, and the tie goes by rowid, or memory_id with a type filter, in both); otherwise (a near-tie
  a fused multiply-add could flip) ``candidates`` returns None and FTS5 ranks.
- The document frequencies (``search_vocab``'s ``doc``, the whole index's) are counted from the mirrors
  when they hold every row of the index (``SqliteSearchIndex._frequencies``), else read from FTS5.

The mirror is loaded once per generation of the namespace, patched by this process's writes like the
other caches, and reloaded when another process moved the generation. A cut from its arrays is also
re-scored from them (``rescore_cut``: ``rescore_bm25``'s expressions element-wise, in the same order).
"""

from __future__ import annotations

import logging
import math
import re
import sqlite3
import threading
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from typing import NamedTuple

import numpy as np

from engram.adapters.search.fts import FTS5_TOKENIZER
from engram.adapters.search.inmemory import bm25_idf, bm25_norm, bm25_term

log = logging.getLogger(__name__)

# FTS5's bm25() constants (fts5_aux.c).
FTS5_K1 = 1.2
FTS5_B = 0.75
# Relative distance under which two scores across the cut count as a possible tie (float noise is ~1e-16).
TIE_EPSILON = 1e-12
_PLAIN = re.compile(r"[a-z0-9]+")
_NAMESPACE_TOKEN = re.compile(r"ns[0-9a-f]{20}")  # search/fts.py ``nskey``


class Cut(NamedTuple):
    """FTS5's candidates as (memory_id, -bm25(), rowid), best first; from the arrays (no type filter, no
    row written since the build) also each one's row length and its count of each query term (in the
    query's order), for ``rescore_cut``."""

    rows: list[tuple[str, float, int]]
    lengths: np.ndarray | None = None
    freqs: np.ndarray | None = None


def rescore_cut(
    cut: Cut, terms: Sequence[str], b: float, n_rows: int, total_tokens: int, df: Mapping[str, int]
) -> list[tuple[str, float]] | None:
    """``search/fts.py``'s ``rescore_bm25`` over a cut from the arrays, element-wise: the same expressions
    (``bm25_norm``, ``bm25_term``), the same terms in the same (FTS5's) order, each row's sum in that
    order (a term absent from a row is skipped there, as ``rescore_bm25`` skips it); ``total_tokens`` is the
    tokens column's total. None for a cut without arrays."""
    if cut.lengths is None or cut.freqs is None:
        return None
    position = {term: i for i, term in enumerate(terms)}
    norm = bm25_norm(cut.lengths - 1.0, total_tokens / n_rows, b)  # without the namespace token
    scores = np.zeros(len(cut.rows), dtype=np.float64)
    for term in sorted(set(terms)):
        if df.get(term, 0):
            tf = cut.freqs[position[term]]
            held = tf > 0
            scores[held] += bm25_term(bm25_idf(n_rows, df[term]), tf[held], norm[held])
    scored = [(row[0], score) for row, score in zip(cut.rows, scores.tolist(), strict=True) if score > 0]
    scored.sort(key=lambda pair: (-pair[1], pair[0]))
    return scored


class Fts5Chars:
    """The characters FTS5's tokenizer (``FTS5_TOKENIZER``, as this SQLite build has it) keeps as a token
    equal to themselves, and those it does not (a separator, dropped, or folded into another): each asked
    of FTS5 once per process, by indexing it alone in a private in-memory table and reading the terms back
    (``fts5vocab``). Thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._kept = set("abcdefghijklmnopqrstuvwxyz0123456789")
        self._other: set[str] = set()

    def whole(self, token: str) -> bool:
        """Whether FTS5 keeps ``token`` whole and unchanged (module docstring)."""
        if token.isascii():
            return _PLAIN.fullmatch(token) is not None
        if self._kept.issuperset(token):
            return True
        self.learn(token)
        return self._kept.issuperset(token)

    def learn(self, chars: Iterable[str]) -> None:
        """Ask FTS5 about the characters of ``chars`` not asked yet, in one go (a mirror's load)."""
        unknown = set(chars) - self._kept - self._other
        if not unknown:
            return
        with self._lock:
            unknown -= self._kept | self._other
            if not unknown:
                return
            asked = sorted(unknown)
            try:
                terms = _fts5_terms(asked)
            except sqlite3.Error as exc:  # not asked: ranked by FTS5, asked again next time
                log.warning("could not ask FTS5's tokenizer about %d characters: %s", len(asked), exc)
                return
            for i, char in enumerate(asked):
                (self._kept if terms.get(i) == [char] else self._other).add(char)


def _fts5_terms(texts: Sequence[str]) -> dict[int, list[str]]:
    """FTS5's terms of each text (by position), tokenized as search_fts's columns are."""
    conn = sqlite3.connect(":memory:")
    try:
        conn.execute(f"CREATE VIRTUAL TABLE probe USING fts5(t, tokenize = '{FTS5_TOKENIZER}')")
        conn.execute("CREATE VIRTUAL TABLE probe_terms USING fts5vocab(probe, 'instance')")
        conn.executemany("INSERT INTO probe (rowid, t) VALUES (?, ?)", enumerate(texts))
        found: dict[int, list[str]] = {}
        for row, term in conn.execute("SELECT doc, term FROM probe_terms ORDER BY doc, offset"):
            found.setdefault(int(row), []).append(str(term))
        return found
    finally:
        conn.close()


FTS5_CHARS = Fts5Chars()


def plain_terms(terms: Sequence[str]) -> bool:
    """Whether a query's terms are ones the mirror can rank (see the module's docstring)."""
    return all(FTS5_CHARS.whole(t) and not _NAMESPACE_TOKEN.fullmatch(t) for t in terms)


class FtsMirror:
    """One namespace's FTS5 rows: memory_id -> (rowid, type, term counts, row length); for queries, the rows
    as arrays (lengths, rowids, term postings) built on the first query after a change of more than a few
    rows, the few rows written since scored one by one (like ``search/keyword_cache.py``)."""

    def __init__(self, generation: int, rows: Iterable[tuple[int, str, str, str]]) -> None:
        """``rows``: (FTS rowid, memory_id, type, tokens joined by spaces) of every document."""
        self.generation = generation
        self.docs: dict[str, tuple[int, str, Counter[str], int]] = {}
        self.df: Counter[str] = Counter()  # term -> documents holding it (FTS5's ``doc`` of the namespace's rows)
        self.unplain: set[str] = set()  # documents with a token FTS5 does not keep whole: while any, FTS5 ranks
        self._built: _Arrays | None = None
        self._fresh: set[str] = set()  # memory_ids put since the arrays were built (scored one by one)
        self._gone: set[int] = set()  # built rows removed or replaced since
        rows = list(rows)
        FTS5_CHARS.learn("".join(tokens for _, _, _, tokens in rows if not tokens.isascii()))
        for rowid, memory_id, type_, tokens in rows:
            self.put(rowid, memory_id, type_, tokens)

    @property
    def usable(self) -> bool:
        return not self.unplain

    def put(self, rowid: int, memory_id: str, type_: str, tokens: str) -> None:
        self.remove(memory_id)
        split = tokens.split()
        counts = Counter(split)
        if not all(map(FTS5_CHARS.whole, counts)):
            self.unplain.add(memory_id)
        self.docs[memory_id] = (rowid, type_, counts, len(split) + 1)  # + the namespace token
        self.df.update(counts.keys())
        self._fresh.add(memory_id)

    def remove(self, memory_id: str) -> None:
        doc = self.docs.pop(memory_id, None)
        if doc is None:
            return
        self.df.subtract(doc[2].keys())
        self.unplain.discard(memory_id)
        self._fresh.discard(memory_id)
        if self._built is not None and memory_id in self._built.rows:
            self._gone.add(self._built.rows[memory_id])

    def _arrays(self) -> _Arrays:
        if self._built is None or len(self._fresh) + len(self._gone) > max(64, len(self._built.ids) // 8):
            self._built = _Arrays(self.docs)
            self._fresh.clear()
            self._gone.clear()
        return self._built

    def candidates(
        self,
        terms: Sequence[str],
        depth: int,
        types: Sequence[str],
        n_rows: int,
        total_tokens: int,
        df: Mapping[str, int],
    ) -> Cut | None:
        """FTS5's best ``depth`` matches as (memory_id, -bm25(), rowid), best first (ties by rowid; with
        ``types``, only those types, ties by memory_id, as the SQL does), from the index-wide ``n_rows``,
        ``total_tokens`` (every column) and ``df`` (rows holding each term); None when the cut is a
        near-tie between rows with different inputs (FTS5 then ranks)."""
        arrays = self._arrays()
        avgdl = float(total_tokens) / float(n_rows)
        idfs = []
        for term in terms:
            hits = df.get(term, 0)
            idf = math.log((n_rows - hits + 0.5) / (hits + 0.5))
            idfs.append((term, idf if idf > 0.0 else 1e-6))
        k1, b = FTS5_K1, FTS5_B
        # fts5Bm25Function: score += aIDF[i] * ((aFreq[i] * (k1 + 1.0)) / (aFreq[i] + k1 * (1 - b + b * D /
        # avgdl))) for each phrase in order (the namespace phrase, weighted 0, adds 0.0 first; a phrase
        # absent from the row adds 0.0). Element-wise numpy operations round each step as C does.
        scores = np.zeros(len(arrays.ids), dtype=np.float64)
        freqs = np.zeros((len(idfs), len(arrays.ids)), dtype=np.float64)  # each row's inputs, for the cut
        for i, (term, idf) in enumerate(idfs):
            rows, tf = arrays.postings(term)
            if len(rows):
                scores[rows] += idf * ((tf * (k1 + 1.0)) / (tf + k1 * (1 - b + b * arrays.lengths[rows] / avgdl)))
                freqs[i, rows] = tf
        if self._gone:
            scores[list(self._gone)] = 0.0
        hit = np.flatnonzero(scores > 0.0)
        if not types and not self._fresh:
            return self._cut(arrays, scores, freqs, hit, depth, [idf for _, idf in idfs])
        ids = [arrays.ids[i] for i in hit.tolist()]
        values = scores[hit].tolist()
        for memory_id in self._fresh:
            rowid, _, counts, length = self.docs[memory_id]
            score = 0.0
            for term, idf in idfs:
                f = float(counts.get(term, 0))
                score += idf * ((f * (k1 + 1.0)) / (f + k1 * (1 - b + b * length / avgdl)))
            if score > 0.0:
                ids.append(memory_id)
                values.append(score)
        wanted = set(types)
        ranked: list[tuple[float, int | str, str]] = []
        for memory_id, score in zip(ids, values, strict=True):
            rowid, type_, _, _ = self.docs[memory_id]
            if not wanted or type_ in wanted:
                ranked.append((score, memory_id if wanted else rowid, memory_id))
        ranked.sort(key=lambda r: (-r[0], r[1]))
        if len(ranked) > depth and not self._clear_cut(ranked, depth, idfs):
            return None
        return Cut([(memory_id, score, self.docs[memory_id][0]) for score, _, memory_id in ranked[:depth]])

    def _cut(
        self, arrays: _Arrays, scores: np.ndarray, freqs: np.ndarray, hit: np.ndarray, depth: int, idfs: Sequence[float]
    ) -> Cut | None:
        """``candidates`` without a type filter or rows written since the build, in numpy."""
        order = hit[np.lexsort((arrays.rowids[hit], -scores[hit]))]
        if len(order) > depth:
            last, first_out = float(scores[order[depth - 1]]), float(scores[order[depth]])
            if last - first_out <= abs(last) * TIE_EPSILON:
                low, high = first_out - abs(first_out) * TIE_EPSILON, last + abs(last) * TIE_EPSILON
                band = hit[(scores[hit] >= low) & (scores[hit] <= high)]
                inputs = np.vstack([arrays.lengths[band], freqs[:, band]])
                if not (inputs == inputs[:, :1]).all() and len(_sums(np.unique(inputs, axis=1).T.tolist(), idfs)) > 1:
                    return None
            order = order[:depth]
        rows = [
            (arrays.ids[i], score, rowid)
            for i, score, rowid in zip(
                order.tolist(), scores[order].tolist(), arrays.rowids[order].tolist(), strict=True
            )
        ]
        return Cut(rows, arrays.lengths[order], freqs[:, order])

    def _clear_cut(
        self, ranked: Sequence[tuple[float, object, str]], depth: int, idfs: Sequence[tuple[str, float]]
    ) -> bool:
        """Whether the rows near the cut (within ``TIE_EPSILON`` of the last kept or the first dropped) all
        make FTS5 add the same numbers in the same order (``_sums``): then SQLite orders them as here
        whatever its arithmetic."""
        last, first_out = ranked[depth - 1][0], ranked[depth][0]
        if last - first_out > abs(last) * TIE_EPSILON:
            return True  # a clear gap: any arithmetic orders them alike
        low, high = first_out - abs(first_out) * TIE_EPSILON, last + abs(last) * TIE_EPSILON
        inputs = set()
        for score, _, memory_id in ranked:
            if low <= score <= high:
                _, _, counts, length = self.docs[memory_id]
                inputs.add((float(length), *(float(counts.get(t, 0)) for t, _ in idfs)))
        return len(_sums([list(row) for row in inputs], [idf for _, idf in idfs])) <= 1


_Sum = tuple[float, tuple[tuple[float, float], ...]]  # a row's length and its present terms' (idf, count), in order


def _sums(inputs: Sequence[Sequence[float]], idfs: Sequence[float]) -> set[_Sum]:
    """The distinct sums FTS5 computes for rows of these inputs (row length, then each query term's count in
    the query's order): ``fts5Bm25Function`` adds one product per phrase, and a phrase absent from the row
    adds exactly 0.0, so two rows of one length whose present terms have the same (idf, count) in the same
    order get the same double in any arithmetic, whichever terms they are (rare terms of one document
    count share their idf)."""
    return {(row[0], tuple((idf, f) for idf, f in zip(idfs, row[1:], strict=True) if f)) for row in inputs}


def mirrored_frequencies(
    mirrors: Iterable[FtsMirror], version: tuple[int, int], n_rows: int, terms: Sequence[str]
) -> dict[str, int] | None:
    """The whole index's document frequency of each plain term (``plain_terms``; ``search_vocab``'s ``doc``)
    counted from the namespaces' mirrors, or None where the mirrors do not hold every row of the index at
    ``version`` (the index's (sum of generations, namespaces), read in the caller's snapshot; ``n_rows``
    FTS5's own row count in it).

    Every namespace of the index has a row in search_namespaces (never removed, generation >= 1) and no
    mirror is ahead of its namespace: as many mirrors as namespaces and the same sum of generations means
    each namespace is mirrored at its generation in the snapshot. Each mirror holds only tokens FTS5 keeps
    whole (``usable``) and a plain term never equals a namespace token, so a term's rows are the mirrors'
    rows holding it; the row count is checked against FTS5's as well."""
    held = [m for m in mirrors if m.generation > 0]
    total, count = version
    if (
        len(held) != count
        or sum(m.generation for m in held) != total
        or not all(m.usable for m in held)
        or sum(len(m.docs) for m in held) != n_rows
    ):
        return None
    return {term: sum(m.df[term] for m in held) for term in terms}


class _Arrays:
    """The mirror's rows at one moment: row -> memory_id, row lengths, and per-term postings (built once per
    term asked for)."""

    def __init__(self, docs: Mapping[str, tuple[int, str, Counter[str], int]]) -> None:
        self.ids = list(docs)
        self.rows = {memory_id: i for i, memory_id in enumerate(self.ids)}
        self.lengths = np.fromiter((docs[m][3] for m in self.ids), dtype=np.float64, count=len(self.ids))
        self.rowids = np.fromiter((docs[m][0] for m in self.ids), dtype=np.int64, count=len(self.ids))
        lists: dict[str, tuple[list[int], list[int]]] = {}
        for i, memory_id in enumerate(self.ids):
            for term, count in docs[memory_id][2].items():
                entry = lists.get(term)
                if entry is None:
                    lists[term] = ([i], [count])
                else:
                    entry[0].append(i)
                    entry[1].append(count)
        self._lists = lists
        self._arrays: dict[str, tuple[np.ndarray, np.ndarray]] = {}

    def postings(self, term: str) -> tuple[np.ndarray, np.ndarray]:
        """The rows holding ``term`` and its count in each (as float64, FTS5's aFreq)."""
        found = self._arrays.get(term)
        if found is None:
            rows, counts = self._lists.get(term, ([], []))
            found = (np.asarray(rows, dtype=np.int64), np.asarray(counts, dtype=np.float64))
            self._arrays[term] = found
        return found
