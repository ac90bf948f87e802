"""The SQLite search index's reads that need no lock for their statements (the base of ``SqliteSearchIndex``
in search/sqlite.py, on ``SqliteIndexCaches``' connection and caches).

A query first reads what its caches must match (the index's version and the namespace's generation, or
the vectors' dimension and generation) in one statement on a read connection of its own
(adapters/storage/sqlite/readers.py: WAL readers need no lock), and takes the index's lock only to answer
from the caches, pure Python and numpy. Before, that statement ran under the lock too, and at 8
concurrent chat turns each statement handed the GIL back while the others queued for the lock
(bench/README.md, "The local default's recall turn, session 11"). A cache is used only at exactly the
version read: a write committed before the query began is in the statement's snapshot, so a cache that
has not taken it differs and the query reads in a transaction under the lock as before; one committed
since may be in the caches already (this process's writes patch them under the lock), then they differ
too and the same holds. An in-memory database (``:memory:``) is one connection's alone: there the
statement runs on it, under the lock.
"""

from __future__ import annotations

import functools
import sqlite3
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager

from pydantic import TypeAdapter

from engram.adapters.search.fts import RescoreCache, fts_averages, index_version
from engram.adapters.search.fts_mirror import Cut, mirrored_frequencies, plain_terms, rescore_cut
from engram.adapters.search.sqlite_caches import SqliteIndexCaches
from engram.domain.models import SearchHit

_VECTOR_VERSION = (
    "SELECT (SELECT value FROM search_meta WHERE key = 'dimension'),"
    " (SELECT generation FROM search_namespaces WHERE namespace = ?)"
)


class SqliteIndexReads(SqliteIndexCaches):
    """What a query reads before it takes the lock, and its answer from the caches alone (module docstring)."""

    def _unlocked(self) -> AbstractContextManager[sqlite3.Connection]:
        """A read connection, without the index's lock (``:memory:``: the connection, under it)."""
        return self._readers if self._path != ":memory:" else self._locked_db()

    @contextmanager
    def _locked_db(self) -> Iterator[sqlite3.Connection]:
        with self._lock:
            yield self._db()

    def _version(self, namespace: str) -> tuple[tuple[int, int], int]:
        """``index_version`` read without the lock: what ``_from_memory`` answers at."""
        with self._unlocked() as conn:
            return index_version(conn, namespace)

    def _vector_version(self, namespace: str) -> tuple[int | None, int]:
        """The vectors' dimension (None: no vector yet) and the namespace's generation, without the lock."""
        with self._unlocked() as conn:
            dimension, generation = conn.execute(_VECTOR_VERSION, (namespace,)).fetchone()
        return (int(dimension) if dimension else None), int(generation or 0)

    def _from_memory(
        self,
        namespace: str,
        terms: Sequence[str],
        k: int,
        types: Sequence[str],
        depth: int,
        version: tuple[int, int],
        generation: int,
        postings: bool,
    ) -> list[SearchHit] | None:
        """``_fts_search``'s answer from the caches at ``version`` and ``generation`` (``_version``; the
        caller holds the lock) when they hold everything it needs: the postings, or the mirror, the averages
        and every term's frequency (``mirrored_frequencies``); else None (then read in one transaction)."""
        if postings:
            keywords = self._keywords.get(namespace)
            if keywords is not None and keywords.generation == generation and not keywords.stale:
                return hits(keywords.search(terms, k, types, self._bm25_b), k)
            if self._keyword_small.get(namespace) != generation and namespace not in self._warming:
                return None  # its size at this generation is not known: counted in the transaction
        cache, mirror = self._rescore, self._mirrors.get(namespace)
        if cache.version != version or cache.averages is None or mirror is None or mirror.generation != generation:
            return None
        if not mirror.usable or not plain_terms(terms):
            return None
        n_rows, (namespace_tokens, tokens) = cache.averages
        missing = [t for t in dict.fromkeys(terms) if t not in cache.df]
        found = mirrored_frequencies(self._mirrors.values(), version, n_rows, missing) if missing else {}
        if found is None:
            return None
        cache.df.update(found)
        try:
            cut = mirror.candidates(terms, depth, types, n_rows, namespace_tokens + tokens, cache.df)
            scored = rescore_cut(cut, terms, self._bm25_b, n_rows, tokens, cache.df) if cut is not None else None
        except (ValueError, IndexError, TypeError, ZeroDivisionError):
            return None  # the transaction's path logs it and ranks in FTS5
        if cut is None or scored is None or (not scored and cut.rows):
            return None
        return hits(scored, k)

    def _rescored(
        self, conn: sqlite3.Connection, terms: Sequence[str], cut: Cut | None, cache: RescoreCache
    ) -> list[tuple[str, float]] | None:
        """The re-scoring of a cut from the mirror's arrays (search/fts_mirror.py ``rescore_cut``), else None."""
        if cut is None or cut.freqs is None:
            return None
        n_rows, (_, tokens) = fts_averages(conn, cache)
        return rescore_cut(cut, terms, self._bm25_b, n_rows, tokens, self._frequencies(conn, terms, cache))


def hits(scored: Sequence[tuple[str, float]], k: int) -> list[SearchHit]:
    """The best ``k`` as the port's hits, validated as one list (fewer instructions than a ``SearchHit`` each).
    bm25() is never exactly 0 for a match, but the port's "positive" promise is kept explicit."""
    return _hit_list().validate_python([{"memory_id": m, "score": max(s, 1e-9)} for m, s in scored[:k]])


@functools.cache
def _hit_list() -> TypeAdapter[list[SearchHit]]:
    return TypeAdapter(list[SearchHit])  # built by the first search, not at import
