"""What one item costs to embed is bounded, and a namespace's big writes cannot hold up another's recall:
the token cap (GatedEmbedder + the model's tokenizer or an estimate) and the local embedder's lanes
(queries ahead of documents). Timing lives in bench/embed_lanes.py; here, the rules."""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from typing import Any

import pytest
from engram.adapters.embed.local import LocalEmbedder
from engram.adapters.search.inmemory import InMemorySearchIndex
from engram.domain.text import clip_to_tokens, estimate_tokens
from engram.services.index.gated_embedder import GatedEmbedder

CJK = "用户的老婆叫周婷在上海一所公立高中教英语" * 500  # 10,000 CJK characters


class RecordingEmbedder:
    """Remembers what reached the model; no tokenizer of its own (so the estimate is used)."""

    model_id = "recording"
    dimension = 2

    def __init__(self) -> None:
        self.documents: list[str] = []
        self.queries: list[str] = []

    def embed_documents(self, texts: Sequence[str]) -> list[list[float]]:
        self.documents += texts
        return [[1.0, 0.0] for _ in texts]

    def embed_query(self, text: str) -> list[float]:
        self.queries.append(text)
        return [1.0, 0.0]


def test_estimate_counts_cjk_per_character_and_other_text_per_three() -> None:
    assert estimate_tokens("") == 0
    assert estimate_tokens("记住我的生日") == 6
    assert estimate_tokens("abcdefghi") == 3
    assert estimate_tokens("ab") == 1
    assert estimate_tokens("我爱 tea") == 2 + 2


def test_clip_keeps_the_head_or_the_tail_within_the_limit() -> None:
    text = "".join(chr(0x4E00 + i) for i in range(2000))
    head = clip_to_tokens(text, 100, estimate_tokens)
    tail = clip_to_tokens(text, 100, estimate_tokens, keep="tail")
    assert text.startswith(head) and text.endswith(tail)
    assert 90 <= estimate_tokens(head) <= 100 and 90 <= estimate_tokens(tail) <= 100
    assert clip_to_tokens("short", 100, estimate_tokens) == "short"
    assert clip_to_tokens(text, 0, estimate_tokens) == text  # 0: no cap


def test_every_text_reaching_a_remote_model_is_capped() -> None:
    # Given a model without a tokenizer behind the gate, capped at 512 tokens
    inner = RecordingEmbedder()
    gate = GatedEmbedder(inner, InMemorySearchIndex(), max_tokens=512)
    # When a 10,000-character CJK memory and query are embedded
    gate.embed_documents([CJK, "short one"])
    gate.embed_query("x" * 5000 + "最后的问题是什么")
    # Then the memory's start and the query's end went in, each within the cap
    long_doc, short_doc = inner.documents
    assert CJK.startswith(long_doc) and estimate_tokens(long_doc) <= 512 and len(long_doc) > 450
    assert short_doc == "short one"
    assert inner.queries[0].endswith("最后的问题是什么") and estimate_tokens(inner.queries[0]) <= 512


def test_the_local_model_is_capped_by_its_own_tokenizer() -> None:
    # Given the real local e5 behind the gate (cap 512: one window of the model)
    local = LocalEmbedder(instances=1)
    gate = GatedEmbedder(local, InMemorySearchIndex(), max_tokens=512)
    head = clip_to_tokens(CJK, 512, local.count_tokens)
    # Then what is embedded for 10,000 characters is exactly the head that fits, by the model's tokens
    assert 460 <= local.count_tokens(head) <= 512 and len(head) < len(CJK) // 5
    assert gate.embed_documents([CJK]) == local.embed_documents([head])


class _BlockingModel:
    """A stand-in model copy: ``passage`` blocks until released, ``query`` answers at once."""

    def __init__(self, log: list[str], release: threading.Event) -> None:
        self.log = log
        self.release = release

    def passage(self, texts: list[str]) -> list[Any]:
        self.log.append(f"doc-start {texts[0]}")
        self.release.wait(5)
        self.log.append(f"doc-end {texts[0]}")
        return [_Row() for _ in texts]

    def query(self, text: str) -> _Row:
        self.log.append(f"query {text}")
        return _Row()

    def token_count(self, text: str, is_query: bool = False) -> int:
        return len(text)


class _Row:
    def tolist(self) -> list[float]:
        return [0.0]


def _embedder(instances: int, log: list[str], release: threading.Event, **kw: Any) -> LocalEmbedder:
    embedder = LocalEmbedder(instances=instances, **kw)
    embedder._load = lambda: _BlockingModel(log, release)  # type: ignore[method-assign]
    return embedder


def _wait_for(predicate: Any) -> None:
    deadline = time.monotonic() + 5
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.005)


def test_with_two_copies_documents_leave_one_for_queries() -> None:
    # Given two model copies and two long document writes in flight
    log: list[str] = []
    release = threading.Event()
    embedder = _embedder(2, log, release)
    writers = [threading.Thread(target=embedder.embed_documents, args=([f"d{i}"],)) for i in range(2)]
    for w in writers:
        w.start()
    _wait_for(lambda: "doc-start d0" in log or "doc-start d1" in log)
    # When a query comes while documents still wait
    embedder.embed_query("q")
    # Then it was answered at once, on the copy documents may not take, while one document runs
    assert log[-1] == "query q" and sum(e.startswith("doc-start") for e in log) == 1
    release.set()
    for w in writers:
        w.join(5)
    assert sum(e.startswith("doc-end") for e in log) == 2


def test_with_one_copy_a_waiting_query_goes_before_waiting_documents() -> None:
    # Given one model copy busy with a document and another document waiting for it
    log: list[str] = []
    release = threading.Event()
    embedder = _embedder(1, log, release)
    first = threading.Thread(target=embedder.embed_documents, args=(["d0"],))
    first.start()
    _wait_for(lambda: "doc-start d0" in log)
    second = threading.Thread(target=embedder.embed_documents, args=(["d1"],))
    second.start()
    query = threading.Thread(target=embedder.embed_query, args=("q",))
    time.sleep(0.05)
    query.start()
    _wait_for(lambda: embedder._queries_waiting == 1)
    # When the running document finishes
    release.set()
    for t in (first, second, query):
        t.join(5)
    # Then the query ran before the document that had waited longer
    assert log.index("query q") < log.index("doc-start d1")


def test_documents_are_embedded_a_window_at_a_time() -> None:
    # Given many short and a few long texts; Then each borrow of a model holds about one window
    log: list[str] = []
    release = threading.Event()
    release.set()
    embedder = _embedder(1, log, release)
    texts = [f"t{i} " + "x" * 300 for i in range(10)]
    embedder.embed_documents(texts)
    batches = [e for e in log if e.startswith("doc-start")]
    assert 3 <= len(batches) <= 10  # not one borrow of all ten


def test_without_priority_every_call_waits_in_one_line() -> None:
    # The configuration the benchmark compares against: documents may take every copy
    log: list[str] = []
    release = threading.Event()
    embedder = _embedder(2, log, release, query_priority=False)
    writers = [threading.Thread(target=embedder.embed_documents, args=([f"d{i}"],)) for i in range(2)]
    for w in writers:
        w.start()
    _wait_for(lambda: sum(e.startswith("doc-start") for e in log) == 2)
    release.set()
    for w in writers:
        w.join(5)


@pytest.mark.parametrize("limit", [1, 7, 64])
def test_clip_never_exceeds_the_limit(limit: int) -> None:
    text = "混合 text 和中文 " * 200
    assert estimate_tokens(clip_to_tokens(text, limit, estimate_tokens)) <= limit
