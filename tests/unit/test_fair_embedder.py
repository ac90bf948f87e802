"""FairEmbedder: queries first, namespaces in turn, documents a batch at a time (services/index/fair_embedder.py)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from functools import partial

import pytest
from engram.services.index.fair_embedder import FairEmbedder, embedding_for
from engram.services.index.gated_embedder import ClippedEmbedder


class HeldEmbedder:
    """Each call notes what it embeds, then waits until the test lets one call finish."""

    model_id = "held"
    dimension = 2

    def __init__(self) -> None:
        self.started: list[str] = []
        self._release = threading.Semaphore(0)
        self._lock = threading.Lock()

    def embed_query(self, text: str) -> list[float]:
        self._note(f"q:{text}")
        return [1.0, 0.0]

    def embed_documents(self, texts: Sequence[str]) -> list[list[float]]:
        self._note("d:" + ",".join(texts))
        return [[0.0, 1.0] for _ in texts]

    def _note(self, what: str) -> None:
        with self._lock:
            self.started.append(what)
        assert self._release.acquire(timeout=10), "the test never released this call"

    def release(self, n: int = 1) -> None:
        for _ in range(n):
            self._release.release()


def _in(namespace: str, fn: Callable[[], object]) -> threading.Thread:
    def run() -> None:
        with embedding_for(namespace):
            fn()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def _until(cond: Callable[[], bool]) -> None:
    deadline = time.monotonic() + 10
    while not cond():
        assert time.monotonic() < deadline, "timed out waiting"
        time.sleep(0.005)


def test_a_query_of_one_namespace_does_not_wait_behind_another_namespaces_queries() -> None:
    # Given one slot, busy with namespace A's query, and three more of A's queries waiting
    inner = HeldEmbedder()
    fair = FairEmbedder(inner, slots=1)
    threads = [_in("a", partial(fair.embed_query, f"a{i}")) for i in range(1)]
    _until(lambda: inner.started == ["q:a0"])
    threads += [_in("a", partial(fair.embed_query, f"a{i}")) for i in range(1, 4)]
    _until(lambda: fair.waiting()["query"] == 3)
    # When namespace B asks for one query
    threads.append(_in("b", lambda: fair.embed_query("b0")))
    _until(lambda: fair.waiting()["query"] == 4)
    inner.release(5)
    for t in threads:
        t.join(10)
    # Then B's query runs next, before A's waiting ones
    assert inner.started[:2] == ["q:a0", "q:b0"]
    assert sorted(inner.started[2:]) == ["q:a1", "q:a2", "q:a3"]


def test_a_namespace_with_a_query_running_leaves_the_last_slot_to_another_namespace() -> None:
    # Given two slots and namespace A sending three queries at once
    inner = HeldEmbedder()
    fair = FairEmbedder(inner, slots=2)
    threads = [_in("a", partial(fair.embed_query, f"a{i}")) for i in range(3)]
    _until(lambda: len(inner.started) == 1 and fair.waiting()["query"] == 2)
    # Then A runs on one slot only; when B asks, B's query starts at once on the other
    time.sleep(0.05)
    assert len(inner.started) == 1
    threads.append(_in("b", lambda: fair.embed_query("b0")))
    _until(lambda: len(inner.started) == 2)
    assert inner.started[1] == "q:b0"
    inner.release(4)
    for t in threads:
        t.join(10)
    assert sorted(inner.started) == ["q:a0", "q:a1", "q:a2", "q:b0"]


def test_queries_go_before_documents_and_documents_leave_a_slot_for_queries() -> None:
    # Given two slots and namespace A's bulk write of six documents, two per batch
    inner = HeldEmbedder()
    fair = FairEmbedder(inner, slots=2, document_items=2)
    bulk = _in("a", lambda: fair.embed_documents([f"m{i}" for i in range(6)]))
    _until(lambda: inner.started == ["d:m0,m1"])
    # Then the bulk holds one slot only (the other is kept for queries)
    time.sleep(0.05)
    assert inner.started == ["d:m0,m1"]
    # When B's query comes, it takes the free slot at once
    query = _in("b", lambda: fair.embed_query("b0"))
    _until(lambda: inner.started == ["d:m0,m1", "q:b0"])
    inner.release(4)
    bulk.join(10)
    query.join(10)
    # And the bulk went on a batch at a time
    assert inner.started == ["d:m0,m1", "q:b0", "d:m2,m3", "d:m4,m5"]


def test_documents_of_two_namespaces_take_turns() -> None:
    inner = HeldEmbedder()
    fair = FairEmbedder(inner, slots=1, document_items=1)
    first = _in("a", lambda: fair.embed_documents(["a0", "a1", "a2"]))
    _until(lambda: inner.started == ["d:a0"])
    second = _in("b", lambda: fair.embed_documents(["b0", "b1"]))
    _until(lambda: fair.waiting()["document"] == 1)
    inner.release(5)
    first.join(10)
    second.join(10)
    assert inner.started == ["d:a0", "d:b0", "d:a1", "d:b1", "d:a2"]


def test_results_keep_their_order_and_the_inner_extras_pass_through() -> None:
    class Counting(HeldEmbedder):
        def count_tokens(self, text: str) -> int:
            return len(text.split())

    inner = Counting()
    inner.release(100)
    fair = FairEmbedder(inner, slots=3, document_items=2)
    assert fair.embed_documents(["x", "y", "z"]) == [[0.0, 1.0]] * 3
    assert fair.embed_query("q") == [1.0, 0.0]
    assert fair.count_tokens("a b c") == 3  # ClippedEmbedder counts with the model's tokenizer through it
    assert (fair.model_id, fair.dimension) == ("held", 2)
    assert fair.waiting() == {"query": 0, "document": 0}


def test_a_failing_call_gives_its_slot_back() -> None:
    class Failing(HeldEmbedder):
        def embed_query(self, text: str) -> list[float]:
            raise RuntimeError("model gone")

    fair = FairEmbedder(Failing(), slots=1)
    with pytest.raises(RuntimeError):
        fair.embed_query("x")
    inner = fair._inner
    assert isinstance(inner, Failing)
    inner.release(1)
    assert fair.embed_documents(["ok"]) == [[0.0, 1.0]]  # the slot is free again


def test_a_query_is_embedded_from_its_last_query_max_tokens() -> None:
    seen: list[str] = []

    class Recording(HeldEmbedder):
        def embed_query(self, text: str) -> list[float]:
            seen.append(text)
            return [1.0, 0.0]

        def embed_documents(self, texts: Sequence[str]) -> list[list[float]]:
            seen.extend(texts)
            return [[0.0, 1.0] for _ in texts]

        def count_tokens(self, text: str) -> int:
            return len(text.split())

    clipped = ClippedEmbedder(Recording(), max_tokens=8, query_max_tokens=3)
    words = " ".join(f"w{i}" for i in range(20))
    clipped.embed_query(words)
    clipped.embed_documents([words])
    assert seen[0].endswith("w18 w19") and len(seen[0].split()) <= 3  # a query keeps its end (cut at a character)
    assert seen[1].split()[0] == "w0" and len(seen[1].split()) <= 8  # a document its start
