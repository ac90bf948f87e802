"""FTS5 details of ``SqliteSearchIndex`` (``search/sqlite.py``): the namespace token, the MATCH query,
and the BM25 re-scoring of the top matches from FTS5's own statistics.

The re-scoring reads each query term's document frequency and each candidate's tokens back from FTS5;
``RescoreCache`` keeps both in memory while the index's write version (``index_version``: the sum of the
namespaces' generations, which every write of any process bumps) stands, so a turn re-scores from memory
what an earlier turn read. The scores are the same to the bit: the same integers, summed in the same
order (the terms in FTS5's own term order, which ``search_vocab`` returns)."""

from __future__ import annotations

import hashlib
import sqlite3
from collections import Counter
from collections.abc import Sequence

from engram.adapters.search.inmemory import BM25_B, bm25_idf, bm25_norm, bm25_term

__all__ = [
    "BM25_B",
    "RESCORE_DEPTH",
    "RescoreCache",
    "document_frequencies",
    "fts_averages",
    "fts_query",
    "fts_rank_sql",
    "index_version",
    "nskey",
    "rescore_bm25",
    "varints",
]

# Keyword ranking: SQLite's bm25() has k1 = 1.2, b = 0.75 built in. Its top RESCORE_DEPTH matches are
# re-scored with b = BM25_B (less penalty for long memories), which won on held-out LoCoMo data
# (bench/README.md). BM25_B = 0.75 turns the re-scoring off.
RESCORE_DEPTH = 100
# The tokenizer of search_fts's columns (search/sqlite_caches.py's schema; search/fts_mirror.py probes it).
FTS5_TOKENIZER = "unicode61 remove_diacritics 0"


def varints(blob: bytes) -> list[int]:
    """SQLite varints (big-endian 7-bit groups; a 9th byte carries 8 bits), as in FTS5's records."""
    out: list[int] = []
    i = 0
    while i < len(blob):
        value = 0
        for n in range(9):
            byte = blob[i]
            i += 1
            if n == 8:
                value = (value << 8) | byte
                break
            value = (value << 7) | (byte & 0x7F)
            if not byte & 0x80:
                break
        out.append(value)
    return out


def nskey(namespace: str) -> str:
    # An FTS token standing for the namespace: plain ASCII letters/digits, whatever the namespace is.
    return "ns" + hashlib.sha1(namespace.encode("utf-8")).hexdigest()[:20]


def fts_query(namespace: str, terms: Sequence[str]) -> str:
    ors = " OR ".join('"' + t.replace('"', '""') + '"' for t in terms)
    return f'nskey : "{nskey(namespace)}" AND tokens : ({ors})'


def fts_rank_sql(namespace: str, terms: Sequence[str], depth: int, types: Sequence[str]) -> tuple[str, list[object]]:
    """The statement ranking the namespace's matches in FTS5 by ``bm25()`` (its best ``depth``; with ``types``,
    only those) as (memory_id, -bm25(), FTS rowid), and its parameters."""
    match = fts_query(namespace, terms)
    if types:
        sql = (
            "SELECT d.memory_id, -bm25(search_fts, 0.0, 1.0) AS score, d.id FROM search_fts "
            "JOIN search_docs d ON d.id = search_fts.rowid WHERE search_fts MATCH ? "
            f"AND d.type IN ({','.join('?' * len(types))}) "
            "AND d.namespace = ? ORDER BY score DESC, d.memory_id LIMIT ?"
        )
        return sql, [match, *types, namespace, depth]
    # Rank inside FTS5 first and join only the top rows (the join per match cost ~20 % at 100k matches).
    sql = (
        "SELECT d.memory_id, s.score, d.id FROM (SELECT rowid AS rid, -bm25(search_fts, 0.0, 1.0) AS score "
        "FROM search_fts WHERE search_fts MATCH ? ORDER BY score DESC, rowid LIMIT ?) s "
        "JOIN search_docs d ON d.id = s.rid WHERE d.namespace = ? ORDER BY s.score DESC, d.memory_id"
    )
    return sql, [match, depth, namespace]


class RescoreCache:
    """Document frequencies (term -> rows holding it, 0 if none), candidates' tokens (FTS rowid -> term
    counts and length) and FTS5's averages record read from FTS5 at one ``index_version``; emptied when the
    version moves (any write, by any process, to any namespace: the frequencies are the whole index's, as
    ``bm25()``'s are, and every write that changes the averages bumps a generation)."""

    def __init__(self) -> None:
        self.version: tuple[int, int] | None = None
        self.df: dict[str, int] = {}
        self.docs: dict[int, tuple[Counter[str], int]] = {}
        self.averages: tuple[int, tuple[int, int]] | None = None

    def at(self, version: tuple[int, int]) -> RescoreCache:
        """This cache, emptied first if it was filled at another version."""
        if version != self.version:
            self.version = version
            self.df = {}
            self.docs = {}
            self.averages = None
        return self


def index_version(conn: sqlite3.Connection, namespace: str = "") -> tuple[tuple[int, int], int]:
    """The index's write version: every write bumps its namespace's generation (rows are never removed
    and generations only grow), so the sum moves on every write; read inside the query's transaction.
    With it, in the same statement, ``namespace``'s generation (0 if it was never written)."""
    total, count, generation = conn.execute(
        "SELECT COALESCE(SUM(generation), 0), COUNT(*), COALESCE(MAX(CASE WHEN namespace = ? THEN generation END), 0) "
        "FROM search_namespaces",
        (namespace,),
    ).fetchone()
    return (int(total), int(count)), int(generation)


def fts_averages(conn: sqlite3.Connection, cache: RescoreCache | None = None) -> tuple[int, tuple[int, int]]:
    """FTS5's row count and each column's token total (namespace token, tokens), from its averages record
    (read once per version of ``cache``)."""
    if cache is not None and cache.averages is not None:
        return cache.averages
    averages = conn.execute("SELECT block FROM search_fts_data WHERE id = 1").fetchone()
    n_rows, namespace_tokens, tokens = varints(bytes(averages[0]))[:3]
    if cache is not None:
        cache.averages = (n_rows, (namespace_tokens, tokens))
    return n_rows, (namespace_tokens, tokens)


def document_frequencies(conn: sqlite3.Connection, terms: Sequence[str], cache: RescoreCache) -> dict[str, int]:
    """The rows holding each term (0 if none; ``search_vocab``), read once per version of ``cache``."""
    missing = [t for t in dict.fromkeys(terms) if t not in cache.df]
    if missing:
        marks = ",".join("?" * len(missing))
        found = dict(conn.execute(f"SELECT term, doc FROM search_vocab WHERE term IN ({marks})", missing).fetchall())
        for term in missing:
            cache.df[term] = int(found.get(term, 0))
    return cache.df


def rescore_bm25(
    conn: sqlite3.Connection,
    terms: Sequence[str],
    rows: Sequence[tuple[str, float, int]],
    b: float,
    cache: RescoreCache | None = None,
) -> list[tuple[str, float]]:
    """BM25 with ``b`` over the candidates, from FTS5's own statistics (all namespaces, as
    ``bm25()`` uses them): row count and token totals from its averages record, df from ``search_vocab``.
    With ``cache`` (filled at the version of the caller's read transaction), what it holds is not read."""
    if cache is None:
        cache = RescoreCache()
    n_rows, (_, total_tokens) = fts_averages(conn, cache)
    avgdl = total_tokens / n_rows
    unique = sorted(set(terms))  # FTS5's term order (UTF-8 bytes sort as code points): search_vocab's
    df = document_frequencies(conn, unique, cache)
    weights = [(t, bm25_idf(n_rows, df[t])) for t in unique if df[t]]
    wanted = [r[2] for r in rows if r[2] not in cache.docs]
    if wanted:
        for rowid, text in conn.execute(
            f"SELECT rowid, tokens FROM search_fts WHERE rowid IN ({','.join('?' * len(wanted))})", wanted
        ):
            tokens = str(text).split()
            cache.docs[rowid] = (Counter(tokens), len(tokens))
    empty: tuple[Counter[str], int] = (Counter(), 0)
    scored: list[tuple[str, float]] = []
    for memory_id, _, rowid in rows:
        counts, length = cache.docs.get(rowid, empty)
        norm = bm25_norm(length, avgdl, b)
        score = 0.0
        for term, weight in weights:
            c = counts.get(term)
            if c:
                score += bm25_term(weight, c, norm)
        scored.append((memory_id, score))
    scored.sort(key=lambda pair: (-pair[1], pair[0]))
    return [pair for pair in scored if pair[1] > 0]
