"""The embedded ``SearchIndex``: SQLite FTS5 for keywords, float32 BLOBs + numpy for vectors.

It lives in the same SQLite file as the store (which owns the other tables) and only touches tables
prefixed ``search_`` (listed with the schema in ``search/sqlite_caches.py``), over its own connection.

Keyword search runs in FTS5 (``bm25()`` over every match, ranked and cut in SQLite) for small namespaces,
the cut computed from a mirror of the namespace's rows in memory where that is FTS5's to the bit
(``search/fts_mirror.py``; patched by this process's writes, reloaded when the generation moved);
a namespace of at least ``KEYWORD_THRESHOLD`` documents is ranked from its postings held in memory
(``search/keyword_cache.py``: loaded once, patched by this process's writes, reloaded when another process
moved the generation), since ``bm25()`` per matching row grows with the namespace.

kNN runs over a per-namespace matrix cached in memory (patched by this process's writes, reloaded when
another moved the generation), with an HNSW graph on top for big namespaces (``search/vector_cache.py``,
``search/ann.py``), built or loaded in the background (never on a query's time) and saved on ``close``.

The connection, the tables and the loading of the vector and keyword caches and the FTS5 mirrors (on a query,
or off the query path by ``warm_in_background``) are ``SqliteIndexCaches``' (``search/sqlite_caches.py``);
this module writes (every write transaction patches the caches, or records a load's, under the reads' lock
and connection) and searches: one statement on a read connection, without the lock, where the caches hold
all a query needs (``search/sqlite_reads.py``), else a read transaction under the lock.
"""

from __future__ import annotations

import logging
import sqlite3
from collections.abc import Sequence
from typing import NamedTuple, TypeVar

import numpy as np

from engram.adapters.search.fts import RESCORE_DEPTH, RescoreCache, fts_rank_sql, index_version, nskey, rescore_bm25
from engram.adapters.search.fts_mirror import Cut, FtsMirror
from engram.adapters.search.inmemory import neighbour_density, query_terms, unit_vector
from engram.adapters.search.keyword_cache import KeywordCache
from engram.adapters.search.sqlite_reads import SqliteIndexReads, hits
from engram.adapters.search.vector_cache import VectorCache
from engram.adapters.search.warmup import WrittenDoc
from engram.adapters.storage.sqlite.readers import ReadConnections
from engram.domain.errors import InvalidInput
from engram.domain.models import IndexedDoc, IndexInfo, SearchHit
from engram.domain.text import tokenize

log = logging.getLogger(__name__)


class PreparedDoc(NamedTuple):
    """A document for ``SqliteSearchIndex.write_prepared``: ``vector`` unit length (float32) or None."""

    namespace: str
    memory_id: str
    type: str
    text: str
    vector: np.ndarray | None


class SqliteSearchIndex(SqliteIndexReads):
    """``SearchIndex`` in a SQLite file (shared with the store; tables ``search_*``); its connection and the
    loading of its caches: ``SqliteIndexCaches`` (search/sqlite_caches.py); the reads before the lock:
    ``SqliteIndexReads`` (search/sqlite_reads.py)."""

    # -- plumbing -------------------------------------------------------------------------
    def close(self) -> None:
        with self._lock:
            for cache in self._caches.values():
                cache.save_ann()
            if self._conn is not None:
                self._conn.close()
                self._conn = None
            self._readers.close()  # each one lent now closes when its read returns it
            self._readers = ReadConnections(self._open_reader)  # an index may be opened again
            self._caches.clear()
            self._keywords.clear()
            self._keyword_small.clear()
            self._warming.clear()
            self._rescore = RescoreCache()
            self._mirrors.clear()
            self._opened += 1

    def _bump(self, conn: sqlite3.Connection, namespace: str) -> int:
        row = conn.execute(
            "INSERT INTO search_namespaces (namespace, generation) VALUES (?, 1) "
            "ON CONFLICT (namespace) DO UPDATE SET generation = generation + 1 RETURNING generation",
            (namespace,),
        ).fetchone()
        return int(row[0])

    def _remove_doc(self, conn: sqlite3.Connection, namespace: str, memory_id: str) -> None:
        row = conn.execute(
            "SELECT id FROM search_docs WHERE namespace = ? AND memory_id = ?", (namespace, memory_id)
        ).fetchone()
        if row is not None:
            conn.execute("DELETE FROM search_fts WHERE rowid = ?", (row[0],))
            conn.execute("DELETE FROM search_docs WHERE id = ?", (row[0],))
        conn.execute("DELETE FROM search_vectors WHERE namespace = ? AND memory_id = ?", (namespace, memory_id))

    def _patch_cache(self, namespace: str, old_generation: int, new_generation: int) -> VectorCache | None:
        """The cache to patch for a write that moved ``old -> new``, or None (dropped: reload later)."""
        return _patched(self._caches, namespace, old_generation, new_generation)

    def _patch_keywords(self, namespace: str, old_generation: int, new_generation: int) -> KeywordCache | None:
        """The keyword postings to patch for a write that moved ``old -> new``, or None (dropped: reload later)."""
        cache = self._keywords.get(namespace)
        if cache is None:
            return None
        if cache.generation != old_generation or cache.stale:
            del self._keywords[namespace]
            return None
        cache.generation = new_generation
        return cache

    def _patch_mirror(self, namespace: str, old_generation: int, new_generation: int) -> FtsMirror | None:
        """The FTS5 mirror to patch for a write that moved ``old -> new``, or None (dropped: reload later)."""
        return _patched(self._mirrors, namespace, old_generation, new_generation)

    def _patch_mirrors(self, generations: dict[str, int], written: Sequence[tuple[PreparedDoc, str, int]]) -> None:
        """The FTS5 mirrors brought up to date with a write's documents (doc, tokens, rowid)."""
        mirrors = {ns: self._patch_mirror(ns, gen - 1, gen) for ns, gen in generations.items()}
        for doc, tokens, rowid in written:
            mirror = mirrors[doc.namespace]
            if mirror is not None:
                mirror.put(rowid, doc.memory_id, doc.type, tokens)

    # -- the port -------------------------------------------------------------------------
    def upsert(self, doc: IndexedDoc) -> str:
        self.upsert_many([doc])
        return doc.memory_id

    def upsert_many(self, docs: Sequence[IndexedDoc]) -> None:
        """``upsert`` each document in one transaction."""
        self.write_prepared(
            [
                PreparedDoc(
                    d.namespace, d.memory_id, d.type, d.text, unit_vector(d.vector) if d.vector is not None else None
                )
                for d in docs
            ]
        )

    def write_prepared(self, docs: Sequence[PreparedDoc]) -> None:  # noqa: C901 - one transaction, kept in one place
        """``upsert`` documents whose vectors are unit float32 arrays already, in one transaction (a replica
        hydrating thousands at once skips building an ``IndexedDoc`` of 384 floats per document)."""
        prepared = [(doc, " ".join(tokenize(doc.text)), doc.vector) for doc in docs]
        if not prepared:
            return
        with self._lock:
            conn = self._db()
            conn.execute("BEGIN IMMEDIATE")
            try:
                # The dimension matters only to a vector; a namespace with no documents yet has nothing to replace.
                _, dimension = self._meta(conn) if any(v is not None for _, _, v in prepared) else (None, None)
                empty = {
                    ns
                    for ns in {d.namespace for d in docs}
                    if conn.execute("SELECT 1 FROM search_docs WHERE namespace = ? LIMIT 1", (ns,)).fetchone() is None
                }
                written: set[tuple[str, str]] = set()
                rowids: list[int] = []
                for doc, tokens, vector in prepared:
                    if vector is not None:
                        if dimension is None:
                            dimension = int(vector.shape[0])
                            conn.execute(
                                "INSERT OR REPLACE INTO search_meta (key, value) VALUES ('dimension', ?)",
                                (str(dimension),),
                            )
                        elif vector.shape[0] != dimension:
                            raise InvalidInput(
                                f"vector has {vector.shape[0]} dimensions; the index holds {dimension}",
                                code="dimension_mismatch",
                            )
                    key = (doc.namespace, doc.memory_id)
                    if doc.namespace not in empty or key in written:
                        self._remove_doc(conn, doc.namespace, doc.memory_id)
                    written.add(key)
                    cur = conn.execute(
                        "INSERT INTO search_docs (namespace, memory_id, type) VALUES (?, ?, ?)",
                        (doc.namespace, doc.memory_id, doc.type),
                    )
                    conn.execute(
                        "INSERT INTO search_fts (rowid, nskey, tokens) VALUES (?, ?, ?)",
                        (cur.lastrowid, nskey(doc.namespace), tokens),
                    )
                    rowids.append(int(cur.lastrowid or 0))
                    if vector is not None:
                        conn.execute(
                            "INSERT INTO search_vectors (namespace, memory_id, type, vec) VALUES (?, ?, ?, ?)",
                            (doc.namespace, doc.memory_id, doc.type, vector.astype("<f4").tobytes()),
                        )
                generations = {ns: self._bump(conn, ns) for ns in dict.fromkeys(d.namespace for d in docs)}
                conn.execute("COMMIT")
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            for ns, gen in generations.items():
                if ns in self._warming:
                    self._warming[ns].record(
                        gen - 1,
                        gen,
                        [WrittenDoc(d.memory_id, d.type, t, v) for d, t, v in prepared if d.namespace == ns],
                    )
            caches = {ns: self._patch_cache(ns, gen - 1, gen) for ns, gen in generations.items()}
            keywords = {ns: self._patch_keywords(ns, gen - 1, gen) for ns, gen in generations.items()}
            self._patch_mirrors(generations, [(d, t, r) for (d, t, _), r in zip(prepared, rowids, strict=True)])
            for doc, tokens, _ in prepared:
                postings = keywords[doc.namespace]
                if postings is not None:
                    postings.put(doc.memory_id, doc.type, tokens)
            for doc, _, vector in prepared:
                cache = caches[doc.namespace]
                if cache is None:
                    continue
                if vector is not None and cache.dimension == vector.shape[0]:
                    cache.put(doc.memory_id, doc.type, vector)
                elif vector is not None:
                    self._caches.pop(doc.namespace, None)
                    caches[doc.namespace] = None
                else:
                    cache.remove(doc.memory_id)

    def delete(self, namespace: str, memory_id: str, ref: str | None = None) -> None:
        with self._lock:
            conn = self._db()
            conn.execute("BEGIN IMMEDIATE")
            try:
                self._remove_doc(conn, namespace, memory_id)
                generation = self._bump(conn, namespace)
                conn.execute("COMMIT")
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            if namespace in self._warming:
                self._warming[namespace].record(generation - 1, generation, [WrittenDoc(memory_id, "", None, None)])
            cache = self._patch_cache(namespace, generation - 1, generation)
            if cache is not None:
                cache.remove(memory_id)
            postings = self._patch_keywords(namespace, generation - 1, generation)
            if postings is not None:
                postings.remove(memory_id)
            mirror = self._patch_mirror(namespace, generation - 1, generation)
            if mirror is not None:
                mirror.remove(memory_id)

    def keyword_search(self, namespace: str, query: str, *, k: int = 50, types: Sequence[str] = ()) -> list[SearchHit]:
        terms = query_terms(query)
        if not terms or k <= 0:
            return []
        return self._fts_search(namespace, terms, k, types, postings=self._postings_rank)

    def fts_keyword_search(
        self, namespace: str, query: str, *, k: int = 50, types: Sequence[str] = ()
    ) -> list[SearchHit]:
        """``keyword_search`` ranked in FTS5 whatever the namespace's size (small namespaces' path; the
        latency bench compares the two on one index)."""
        terms = query_terms(query)
        if not terms or k <= 0:
            return []
        return self._fts_search(namespace, terms, k, types)

    def _fts_search(
        self, namespace: str, terms: list[str], k: int, types: Sequence[str], *, postings: bool = False
    ) -> list[SearchHit]:
        """Ranked in FTS5, or its cut from the namespace's mirror; with ``postings``, a namespace big enough
        for in-memory postings (``search/keyword_cache.py``) is ranked from them."""
        rescore = abs(self._bm25_b - 0.75) > 1e-9
        wanted = sorted(set(types))
        depth = max(k, RESCORE_DEPTH) if rescore else k
        sql, params = fts_rank_sql(namespace, terms, depth, wanted)
        # From the caches alone where they hold it: the version's one statement is all it reads, before the lock.
        known = self._version(namespace) if rescore else None
        with self._lock:
            conn = self._db()
            if known is not None:
                found = self._from_memory(namespace, terms, k, wanted, depth, *known, postings)
                if found is not None:
                    return found
            # One snapshot: the version and generation, the matches, the statistics and the caches agree.
            conn.execute("BEGIN")
            try:
                cache: RescoreCache | None = None
                cut: Cut | None = None
                if rescore or postings:
                    # One statement for the index's version and the namespace's generation.
                    version, generation = index_version(conn, namespace)
                    keywords = self._keyword_cache_at(conn, namespace, generation) if postings else None
                    if keywords is not None:
                        return hits(keywords.search(terms, k, types, self._bm25_b), k)
                    cache = self._rescore.at(version) if rescore else None
                    # The cut in memory where it is FTS5's to the bit (search/fts_mirror.py), else in FTS5.
                    if cache is not None:
                        cut = self._mirrored(conn, namespace, generation, terms, depth, wanted, cache)
                rows = cut.rows if cut is not None else conn.execute(sql, params).fetchall()
                scored: list[tuple[str, float]] | None = None
                if cache is not None and rows:
                    try:
                        scored = self._rescored(conn, terms, cut, cache) or rescore_bm25(
                            conn, terms, rows, self._bm25_b, cache
                        )
                    except (sqlite3.Error, ValueError, IndexError, ZeroDivisionError) as exc:
                        log.warning("BM25 re-scoring failed, using SQLite's bm25(): %s", exc)
            finally:
                conn.execute("COMMIT")
        if scored is None:
            scored = [(mid, float(score)) for mid, score, _ in rows]
        return hits(scored, k)

    def vector_search(
        self, namespace: str, vector: Sequence[float], *, k: int = 50, types: Sequence[str] = ()
    ) -> list[SearchHit]:
        query = unit_vector(vector)
        if k <= 0:
            return []
        self._await_vectors(namespace)
        dimension, generation = self._vector_version(namespace)  # before the lock (search/sqlite_reads.py)
        if dimension is not None and query.shape[0] != dimension:
            raise InvalidInput(
                f"query vector has {query.shape[0]} dimensions; the index holds {dimension}",
                code="dimension_mismatch",
            )
        if dimension is None:
            return []
        with self._lock:
            cache = self._caches.get(namespace)
            if cache is None or cache.generation != generation or cache.dimension != dimension:
                cache = self._load_cache(self._db(), namespace, dimension)
            return cache.search(query, k, types)

    def neighbour_density(self, namespace: str, memory_ids: Sequence[str], *, k: int = 10) -> dict[str, float]:
        self._await_vectors(namespace)
        with self._lock:
            conn = self._db()
            _, dimension = self._meta(conn)
            if dimension is None:
                return {}
            cache = self._load_cache(conn, namespace, dimension)
            ids = [mid for mid in dict.fromkeys(memory_ids) if mid in cache.rows]
            matrix = cache.matrix[[cache.rows[mid] for mid in ids]] if ids else None
        return neighbour_density(ids, matrix, k) if matrix is not None else {}

    def info(self, namespace: str | None = None) -> IndexInfo:
        where, args = ("", ()) if namespace is None else (" WHERE namespace = ?", (namespace,))
        with self._lock:
            conn = self._db()
            model_id, dimension = self._meta(conn)
            docs = conn.execute(f"SELECT COUNT(*) FROM search_docs{where}", args).fetchone()[0]
            vectors = conn.execute(f"SELECT COUNT(*) FROM search_vectors{where}", args).fetchone()[0]
        return IndexInfo(model_id=model_id, dimension=dimension, documents=int(docs), vectors=int(vectors))

    def reset(self, model_id: str, dimension: int) -> None:
        if dimension <= 0:
            raise InvalidInput("dimension must be positive")
        with self._lock:
            conn = self._db()
            conn.execute("BEGIN IMMEDIATE")
            try:
                conn.execute("DELETE FROM search_vectors")
                conn.execute("INSERT OR REPLACE INTO search_meta (key, value) VALUES ('model_id', ?)", (model_id,))
                conn.execute(
                    "INSERT OR REPLACE INTO search_meta (key, value) VALUES ('dimension', ?)", (str(dimension),)
                )
                conn.execute("UPDATE search_namespaces SET generation = generation + 1")
                conn.execute("COMMIT")
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            self._caches.clear()

    def ping(self) -> None:
        with self._lock:
            self._db().execute("SELECT 1 FROM search_meta LIMIT 1").fetchall()


_Cached = TypeVar("_Cached", VectorCache, FtsMirror)


def _patched(caches: dict[str, _Cached], namespace: str, old_generation: int, new_generation: int) -> _Cached | None:
    """The namespace's cache moved to ``new_generation`` if it was at ``old_generation`` (this process's
    write), else dropped (None: another writer came between, it reloads on the next query)."""
    cache = caches.get(namespace)
    if cache is None:
        return None
    if cache.generation != old_generation:
        del caches[namespace]
        return None
    cache.generation = new_generation
    return cache
