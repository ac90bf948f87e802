"""FTS5 details of ``SqliteSearchIndex`` (``search/sqlite.py``): the namespace token, the MATCH query,
and the BM25 re-scoring of the top matches from FTS5's own statistics."""

from __future__ import annotations

import hashlib
import sqlite3
from collections.abc import Sequence

from engram.adapters.search.inmemory import BM25_B, bm25_idf, bm25_norm, bm25_term

__all__ = ["BM25_B", "RESCORE_DEPTH", "fts_query", "nskey", "rescore_bm25", "varints"]

# Keyword ranking: SQLite's bm25() has k1 = 1.2, b = 0.75 built in. Its top RESCORE_DEPTH matches are
# re-scored with b = BM25_B (less penalty for long memories), which won on held-out LoCoMo data
# (bench/README.md). BM25_B = 0.75 turns the re-scoring off.
RESCORE_DEPTH = 100


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


def rescore_bm25(
    conn: sqlite3.Connection, terms: Sequence[str], rows: Sequence[tuple[str, float, int]], b: float
) -> list[tuple[str, float]]:
    """BM25 with ``b`` over the candidates, from FTS5's own statistics (all namespaces, as
    ``bm25()`` uses them): row count and token totals from its averages record, df from ``search_vocab``."""
    averages = conn.execute("SELECT block FROM search_fts_data WHERE id = 1").fetchone()
    n_rows, _, total_tokens = varints(bytes(averages[0]))[:3]
    avgdl = total_tokens / n_rows
    marks = ",".join("?" * len(terms))
    df = dict(conn.execute(f"SELECT term, doc FROM search_vocab WHERE term IN ({marks})", list(terms)).fetchall())
    idf = {t: bm25_idf(n_rows, n) for t, n in df.items() if n}
    ids = [r[2] for r in rows]
    texts = dict(conn.execute(f"SELECT rowid, tokens FROM search_fts WHERE rowid IN ({','.join('?' * len(ids))})", ids))
    weights = list(idf.items())
    scored: list[tuple[str, float]] = []
    for memory_id, _, rowid in rows:
        tokens = str(texts.get(rowid, "")).split()
        norm = bm25_norm(len(tokens), avgdl, b)
        score = 0.0
        for term, weight in weights:
            c = tokens.count(term)  # a few query terms: list.count beats building a Counter
            if c:
                score += bm25_term(weight, c, norm)
        scored.append((memory_id, score))
    scored.sort(key=lambda pair: (-pair[1], pair[0]))
    return [pair for pair in scored if pair[1] > 0]
