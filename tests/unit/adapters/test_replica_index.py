"""The ``replica`` search backend across processes: two replicas of one document log (SQLite and
DynamoDB under moto) see each other's writes, deletes and resets; a cold one starts from a snapshot."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import ExitStack
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from engram.adapters.search.document_log import LogRow, SearchLog, pack_vector, unit_vectors, unpack_vector
from engram.adapters.search.inmemory import InMemorySearchIndex
from engram.adapters.search.replica import ReplicaSearchIndex
from engram.adapters.search.replica_log import SqliteSearchLog
from engram.adapters.search.sqlite import PreparedDoc, SqliteSearchIndex
from engram.adapters.storage.blobs import LocalBlobStore
from engram.domain.models import IndexedDoc

from tests.unit.adapters.warm_gate import Gate

T0 = datetime(2025, 1, 1, tzinfo=UTC)


class SpyLog:
    """A ``SearchLog`` that counts full reads and delta reads."""

    def __init__(self, inner: SearchLog) -> None:
        self.inner = inner
        self.full_reads = 0
        self.delta_reads = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def all_rows(self, namespace: str) -> Any:
        self.full_reads += 1
        return self.inner.all_rows(namespace)

    def changed_since(self, namespace: str, seq: int) -> list[LogRow]:
        self.delta_reads += 1
        return self.inner.changed_since(namespace, seq)


@pytest.fixture(params=["sqlite", "dynamodb"])
def shared_log(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[SearchLog]:
    with ExitStack() as stack:
        if request.param == "sqlite":
            log = SqliteSearchLog(tmp_path / "engram.db")
            stack.callback(log.close)
            yield log
        else:
            pytest.importorskip("moto")
            from tests.fakes.moto_aws import dynamo_search_log

            yield stack.enter_context(dynamo_search_log())


def doc(mid: str, text: str, vector: tuple[float, ...] | None = None, ns: str = "a") -> IndexedDoc:
    return IndexedDoc(memory_id=mid, namespace=ns, text=text, type="fact", vector=vector, created_at=T0)


def ids(hits: Any) -> list[str]:
    return [h.memory_id for h in hits]


def replica(log: SearchLog, tmp_path: Path, name: str, **kwargs: Any) -> ReplicaSearchIndex:
    return ReplicaSearchIndex(log, tmp_path / name, sync_seconds=0, **kwargs)


def test_vectors_are_kept_compactly_and_round_trip() -> None:
    # Given a 384-dimensional vector
    vector = tuple(float(i % 7) - 3.0 for i in range(384))
    # When it is packed for the log
    blob = pack_vector(vector)
    # Then it takes 2 bytes a dimension and comes back as the same direction
    assert len(blob) == 768
    back = unpack_vector(blob)
    norm = sum(v * v for v in vector) ** 0.5
    assert sum(a * b / norm for a, b in zip(back, vector, strict=True)) == pytest.approx(1.0, abs=1e-3)


def test_a_batch_of_log_vectors_decodes_like_one_at_a_time() -> None:
    # Given packed vectors of two lengths (a model change mid-log) and an all-zero one
    rng = np.random.default_rng(3)
    raw = [rng.standard_normal(384), rng.standard_normal(8), np.zeros(384), rng.standard_normal(384)]
    blobs = [pack_vector(v.tolist()) for v in raw]
    # When they are decoded together
    decoded = unit_vectors(blobs)
    # Then each is its own blob as a unit float32 vector, in place (the zero one stays zero)
    for blob, got in zip(blobs, decoded, strict=True):
        one = np.frombuffer(blob, dtype="<f2").astype(np.float32)
        norm = float(np.linalg.norm(one))
        want = one / norm if norm > 0 else one
        assert got.dtype == np.float32 and got.shape == want.shape
        np.testing.assert_allclose(got, want, atol=1e-6)
    assert unit_vectors([]) == []


def test_a_batch_write_replaces_earlier_versions_and_keeps_the_last_repeat(tmp_path: Path) -> None:
    # Given an index with one document, and its vectors loaded
    index = SqliteSearchIndex(tmp_path / "index.sqlite3", ann_persist=False)
    unit = np.eye(4, dtype=np.float32)
    index.write_prepared([PreparedDoc("a", "m1", "fact", "alpine lake", unit[0])])
    assert ids(index.vector_search("a", unit[0].tolist(), k=5)) == ["m1"]
    # When one batch rewrites it twice and adds another document
    index.write_prepared(
        [
            PreparedDoc("a", "m1", "fact", "harbour crane", unit[1]),
            PreparedDoc("a", "m2", "fact", "desert road", unit[2]),
            PreparedDoc("a", "m1", "fact", "forest cabin", unit[3]),
        ]
    )
    # Then only the last version of each is searchable, by keyword and by vector, and counted once
    assert ids(index.keyword_search("a", "cabin")) == ["m1"]
    assert ids(index.keyword_search("a", "alpine")) == [] and ids(index.keyword_search("a", "harbour")) == []
    assert ids(index.keyword_search("a", "desert")) == ["m2"]
    assert ids(index.vector_search("a", unit[3].tolist(), k=1)) == ["m1"]
    assert index.info("a").documents == 2 and index.info("a").vectors == 2
    index.close()


def test_a_write_on_one_replica_is_found_on_the_other(shared_log: SearchLog, tmp_path: Path) -> None:
    # Given two processes' replicas of one log, both warm
    a, b = replica(shared_log, tmp_path, "a"), replica(shared_log, tmp_path, "b")
    assert b.keyword_search("a", "anything") == []
    # When A stores a memory
    a.upsert(doc("m1", "my sister lives in Porto", (1.0, 0.0, 0.0)))
    # Then B finds it by keyword and by vector on its next search
    assert ids(b.keyword_search("a", "porto")) == ["m1"]
    assert ids(b.vector_search("a", (1.0, 0.0, 0.0))) == ["m1"]
    # And a supersede (new version upserted, old one deleted) leaves only the new version on both
    b.upsert(doc("m2", "my sister lives in Lisbon", (0.0, 1.0, 0.0)))
    b.delete("a", "m1")
    for side in (a, b):
        assert ids(side.keyword_search("a", "sister lives")) == ["m2"]
        assert ids(side.vector_search("a", (1.0, 0.0, 0.0))) == ["m2"]
    a.close()
    b.close()


def test_a_replica_within_its_sync_interval_does_not_read_the_log(shared_log: SearchLog, tmp_path: Path) -> None:
    # Given a replica that synced just now, with a long interval
    spy = SpyLog(shared_log)
    a = ReplicaSearchIndex(spy, tmp_path / "a", sync_seconds=60)
    a.keyword_search("a", "x")
    reads = spy.delta_reads
    # When it searches again at once
    a.keyword_search("a", "x")
    # Then it answered from its copy without a query
    assert spy.delta_reads == reads
    a.close()


def test_a_reset_elsewhere_rebuilds_the_replica(shared_log: SearchLog, tmp_path: Path) -> None:
    # Given a memory with a vector seen by both replicas
    a, b = replica(shared_log, tmp_path, "a"), replica(shared_log, tmp_path, "b")
    a.upsert(doc("m1", "green tea", (1.0, 0.0, 0.0)))
    assert ids(b.vector_search("a", (1.0, 0.0, 0.0))) == ["m1"]
    # When A resets the index for a 2-dimensional model and re-adds the memory
    a.reset("model-2", 2)
    a.upsert(doc("m1", "green tea", (0.0, 1.0)))
    # Then B follows: the new model, the new vector, the keywords kept
    assert ids(b.vector_search("a", (0.0, 1.0))) == ["m1"]
    info = b.info("a")
    assert (info.model_id, info.dimension, info.documents, info.vectors) == ("model-2", 2, 1, 1)
    a.close()
    b.close()


def test_a_cold_replica_starts_from_the_snapshot_and_applies_later_changes(
    shared_log: SearchLog, tmp_path: Path
) -> None:
    # Given a replica that wrote 30 memories and a snapshot, then one more memory and a delete
    snapshots = LocalBlobStore(tmp_path / "snapshots")
    a = replica(shared_log, tmp_path, "a", snapshots=snapshots)
    for n in range(30):
        a.upsert(doc(f"m{n:02d}", f"memory number {n} about kites", (1.0, float(n), 0.0)))
    assert a.snapshot("a") is True
    assert a.snapshot("a") is False  # nothing changed since
    a.upsert(doc("late", "a late memory about kites", (0.0, 0.0, 1.0)))
    a.delete("a", "m00")
    # When a fresh process starts
    spy = SpyLog(shared_log)
    cold = ReplicaSearchIndex(spy, tmp_path / "cold", snapshots=snapshots, sync_seconds=0)
    found = ids(cold.keyword_search("a", "kites", k=100))
    # Then it loaded the snapshot and read only the changes since (never the whole namespace)
    assert spy.full_reads == 0
    assert sorted(found) == sorted([f"m{n:02d}" for n in range(1, 30)] + ["late"])
    assert ids(cold.vector_search("a", (0.0, 0.0, 1.0), k=1)) == ["late"]
    a.close()
    cold.close()


def test_without_a_snapshot_a_cold_replica_reads_the_whole_namespace(shared_log: SearchLog, tmp_path: Path) -> None:
    # Given memories in two namespaces written by one process
    a = replica(shared_log, tmp_path, "a")
    a.upsert(doc("m1", "blue bicycle", (1.0, 0.0, 0.0)))
    a.upsert(doc("m2", "red bicycle", (0.0, 1.0, 0.0), ns="b"))
    a.delete("a", "gone")
    # When another process starts
    cold = replica(shared_log, tmp_path, "cold")
    # Then it sees each namespace's memories and nothing of the other
    assert ids(cold.keyword_search("a", "bicycle")) == ["m1"]
    assert ids(cold.keyword_search("b", "bicycle")) == ["m2"]
    assert (cold.info().documents, cold.info().vectors) == (2, 2)
    a.close()
    cold.close()


def test_each_process_keeps_a_private_directory_removed_on_close(shared_log: SearchLog, tmp_path: Path) -> None:
    a, b = replica(shared_log, tmp_path, "same"), replica(shared_log, tmp_path, "same")
    a.upsert(doc("m1", "x y z"))
    b.keyword_search("a", "x")
    dirs = sorted(p for p in (tmp_path / "same").iterdir())
    assert len(dirs) == 2
    assert all(oct(p.stat().st_mode & 0o777) == "0o700" for p in dirs)
    a.close()
    b.close()
    assert list((tmp_path / "same").iterdir()) == []


# -- sizes: streamed snapshots, the ceiling warning, late log entries ---------------------------------------


class _Chunks:
    """A ``SnapshotStore`` that records the largest single read/write, to show snapshots stream."""

    def __init__(self, inner: LocalBlobStore) -> None:
        self.inner = inner
        self.largest = 0

    def put_stream(self, key: str, stream: Any) -> None:
        spy = self

        class Reader:
            def read(self, size: int = -1, /) -> bytes:
                data = stream.read(size)
                spy.largest = max(spy.largest, len(data))
                return bytes(data)

        self.inner.put_stream(key, Reader())

    def get_into(self, key: str, sink: Any) -> bool:
        return self.inner.get_into(key, sink)


def test_snapshots_stream_in_chunks_and_restore_byte_for_byte(tmp_path: Path) -> None:
    # Given a replica with a thousand long documents (a multi-MB SQLite file; the SQLite log: it is about the
    # snapshot, not the log)
    shared_log = SqliteSearchLog(tmp_path / "engram.db")
    store = _Chunks(LocalBlobStore(tmp_path / "snapshots"))
    writer = ReplicaSearchIndex(shared_log, tmp_path / "writer", snapshots=store, sync_seconds=60)
    words = " ".join(f"w{j}" for j in range(400))
    for i in range(1000):
        writer.upsert(doc(f"m{i}", f"memory number {i} about cellos and gardens {words}"))
    # When it writes its snapshot / Then the file went out in chunks (never the whole blob at once)
    assert writer.snapshot("a")
    size = next((tmp_path / "snapshots").rglob("index.snapshot")).stat().st_size
    assert size > 1_000_000 and store.largest <= 1024 * 1024 < size
    # And a cold replica restores it without reading the log's rows again
    spy = SpyLog(shared_log)
    cold = replica(spy, tmp_path, "cold", snapshots=store)
    assert ids(cold.keyword_search("a", "999", k=1)) == ["m999"] and cold.info("a").documents == 1000
    assert spy.full_reads == 0
    writer.close()
    cold.close()
    shared_log.close()


def test_a_corrupt_snapshot_is_ignored_and_the_log_rebuilds(shared_log: SearchLog, tmp_path: Path) -> None:
    store = LocalBlobStore(tmp_path / "snapshots")
    writer = replica(shared_log, tmp_path, "writer", snapshots=store)
    writer.upsert(doc("m1", "cello lessons"))
    assert writer.snapshot("a")
    path = next((tmp_path / "snapshots").rglob("index.snapshot"))
    path.write_bytes(b"not a snapshot at all\n" + path.read_bytes())
    spy = SpyLog(shared_log)
    cold = replica(spy, tmp_path, "cold", snapshots=store)
    assert ids(cold.keyword_search("a", "cello")) == ["m1"] and spy.full_reads == 1
    writer.close()
    cold.close()


def test_nearing_the_ceiling_warns_and_never_refuses_a_write(
    shared_log: SearchLog, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    from engram.adapters.search.replica import CEILING_MESSAGE

    # Given a replica sized for 10 memories
    index = replica(shared_log, tmp_path, "small", snapshots=LocalBlobStore(tmp_path / "s"), ceiling=10)
    # When it holds 12 (more than the ceiling)
    for i in range(12):
        index.upsert(doc(f"m{i}", f"fact {i}"))
    # Then every write was kept, and its snapshot logs the warning the stack's alarm counts
    assert index.info("a").documents == 12
    with caplog.at_level("WARNING"):
        assert index.snapshot("a")
    warning = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert warning and warning[0].startswith(CEILING_MESSAGE) and "120%" in warning[0]
    index.close()


def test_a_late_log_entry_is_applied_before_the_snapshot(shared_log: SearchLog, tmp_path: Path) -> None:
    from engram.adapters.search.document_log import OVERLAP_MS

    # Given a replica that synced past a row whose log entry lands later than the sync overlap
    index = replica(shared_log, tmp_path, "r", snapshots=LocalBlobStore(tmp_path / "s"))
    index.upsert(doc("m1", "first fact"))
    cursor = index._spaces["a"].cursor
    late_seq = cursor - OVERLAP_MS - 60_000  # stamped a minute before the overlap reaches
    shared_log.put(LogRow(namespace="a", memory_id="late", seq=late_seq, type="fact", text="a tardy cello fact"))
    index.upsert(doc("m2", "second fact"))
    index.sync("a")
    # When searched, the ordinary sync cannot see it (it reads only OVERLAP_MS back)
    assert ids(index.keyword_search("a", "tardy")) == []
    # When the job writes the snapshot / Then the wider pre-snapshot sync applies it, and the snapshot has it
    assert index.snapshot("a")
    assert ids(index.keyword_search("a", "tardy")) == ["late"]
    index.close()


def test_reconcile_rebuilds_a_replica_whose_count_differs_from_the_log(shared_log: SearchLog, tmp_path: Path) -> None:
    from engram.adapters.search.document_log import LATE_OVERLAP_MS

    # Given a replica with a snapshot, and two log entries that landed later than even the wide catch-up
    # reaches (a retry after a long outage): a new memory, and the tombstone of one the replica holds
    snapshots = LocalBlobStore(tmp_path / "s")
    index = replica(shared_log, tmp_path, "r", snapshots=snapshots)
    for n, word in enumerate(("violin", "piano", "drum")):
        index.upsert(doc(f"m{n}", f"a {word} fact"))
    cursor = index._spaces["a"].cursor
    late = cursor - LATE_OVERLAP_MS - 3_600_000
    shared_log.put(LogRow(namespace="a", memory_id="lost", seq=late, type="fact", text="a lost oboe fact"))
    shared_log.put(LogRow(namespace="a", memory_id="m0", seq=late + 1, deleted=True))
    shared_log.put(LogRow(namespace="a", memory_id="extra", seq=late + 2, type="fact", text="a lost tuba fact"))
    assert shared_log.count("a") == 4  # m1, m2, lost, extra
    # When it syncs and writes its snapshot / Then neither reaches the replica (3 held, the log has 4)
    index.snapshot("a")
    assert ids(index.keyword_search("a", "lost")) == [] and index.info("a").documents == 3
    # When the nightly cleanup reconciles it / Then the replica is rebuilt from the log and holds what it has
    spy = SpyLog(shared_log)
    index._log = spy
    assert index.reconcile_all() == ["a"]
    assert spy.full_reads == 1
    assert sorted(ids(index.keyword_search("a", "lost"))) == ["extra", "lost"]
    assert ids(index.keyword_search("a", "violin")) == [] and index.info("a").documents == 4
    # And its snapshot was written with the rebuild: a cold replica starts from it
    assert index.snapshot("a") is False
    cold = replica(shared_log, tmp_path, "cold", snapshots=snapshots)
    assert sorted(ids(cold.keyword_search("a", "lost"))) == ["extra", "lost"]
    # And when the counts agree, nothing is rebuilt (no full read of the log)
    assert index.reconcile("a") is False and spy.full_reads == 1
    cold.close()
    index.close()


def test_a_full_hydrate_reads_and_applies_the_log_page_by_page(
    shared_log: SearchLog, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from engram.adapters.search import replica as replica_module
    from engram.adapters.search import replica_log

    # Given small pages and batches (2000 each in use: a hydrate never holds the whole namespace's rows)
    monkeypatch.setattr(replica_log, "ALL_ROWS_PAGE", 3)
    monkeypatch.setattr(replica_module, "HYDRATE_BATCH", 2)
    writer = replica(shared_log, tmp_path, "w")
    for n in range(11):
        writer.upsert(doc(f"m{n:02d}", f"note {n} about the harbour"))
    writer.delete("a", "m05")
    # When a cold replica without a snapshot hydrates / Then every live row arrives once, in id order pages
    rows = list(shared_log.all_rows("a"))
    assert [r.memory_id for r in rows] == sorted({r.memory_id for r in rows}) and len(rows) == 10
    cold = replica(shared_log, tmp_path, "cold")
    assert cold.info("a").documents == 10 and len(ids(cold.keyword_search("a", "harbour", k=50))) == 10
    # And its cursor is the newest entry's (the tombstone, read by the sync before the search)
    assert cold._spaces["a"].cursor == max(r.seq for r in shared_log.changed_since("a", 0))
    writer.close()
    cold.close()


def _big_namespace(
    shared_log: SearchLog, tmp_path: Path, start: str
) -> tuple[ReplicaSearchIndex, InMemorySearchIndex, LocalBlobStore | None]:
    """40 documents of namespace ``a`` written through a replica (and snapshotted when ``start`` says so),
    and the same in an in-memory reference."""
    snapshots = LocalBlobStore(tmp_path / "snapshots") if start == "snapshot" else None
    writer, reference = replica(shared_log, tmp_path, "w", snapshots=snapshots), InMemorySearchIndex()
    for n in range(40):
        written = doc(f"m{n:02d}", f"note {n} about the harbour" + " crane" * (n % 3), (1.0, float(n), 0.0))
        writer.upsert(written)
        reference.upsert(written)
    if snapshots is not None:
        assert writer.snapshot("a") is True
    return writer, reference, snapshots


@pytest.mark.parametrize("start", ["log", "snapshot"])
def test_a_big_namespace_postings_load_off_the_first_search(
    shared_log: SearchLog, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, start: str
) -> None:
    # Given a namespace over a replica's keyword-postings threshold (20 here), in the log (and in a snapshot)
    writer, reference, snapshots = _big_namespace(shared_log, tmp_path, start)
    # When a cold replica hydrates on its first search, the postings' build held mid-way
    gate = Gate(monkeypatch)
    cold = replica(shared_log, tmp_path, "cold", snapshots=snapshots, keyword_threshold=20)
    first = ids(cold.keyword_search("a", "harbour crane", k=50))
    # Then that search did not build them (FTS5 ranked it) and the build runs on a helper thread
    assert gate.entered.wait(10)
    index = cold._spaces["a"].index
    assert "a" not in index._keywords and len(first) == 40
    gate.open.set()
    for _ in range(200):
        if "a" in index._keywords:
            break
        time.sleep(0.05)
    # And once built, the postings rank as the in-memory reference; the vectors are at hand too
    assert "a" in index._keywords and "a" in index._caches
    for query in ["harbour crane", "crane", "note 7"]:
        assert cold.keyword_search("a", query, k=10) == reference.keyword_search("a", query, k=10)
    assert ids(cold.vector_search("a", (0.0, 1.0, 0.0), k=1)) == ["m39"]
    writer.close()
    cold.close()


@pytest.mark.parametrize("start", ["log", "snapshot"])
def test_without_helper_threads_a_hydrate_starts_no_thread_and_the_first_search_loads_the_postings(
    shared_log: SearchLog, tmp_path: Path, start: str
) -> None:
    # Given a namespace over the keyword-postings threshold, in the log (and in a snapshot)
    writer, reference, snapshots = _big_namespace(shared_log, tmp_path, start)
    # When a replica without helper threads (Lambda: no thread may outlive a response) hydrates on a search
    cold = replica(shared_log, tmp_path, "cold", snapshots=snapshots, keyword_threshold=20, helper_threads=False)
    before = {thread.ident for thread in threading.enumerate()}
    first = cold.keyword_search("a", "harbour crane", k=10)
    # Then no thread was started, and that search built the postings itself and ranked with them
    assert not [t.name for t in threading.enumerate() if t.ident not in before]
    assert "a" in cold._spaces["a"].index._keywords
    assert first == reference.keyword_search("a", "harbour crane", k=10)
    assert ids(cold.vector_search("a", (0.0, 1.0, 0.0), k=1)) == ["m39"]
    writer.close()
    cold.close()


def test_the_replica_built_on_lambda_starts_no_helper_thread(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from engram.adapters.aws_clients import AwsClients
    from engram.bootstrap.adapters import build_replica
    from engram.settings import Settings

    settings = Settings(
        store="sqlite", search="replica", embedder="none", data_dir=tmp_path, replica_dir=tmp_path / "r"
    )
    monkeypatch.delenv("AWS_LAMBDA_FUNCTION_NAME", raising=False)
    assert build_replica(settings, AwsClients(None))._helper_threads is True
    monkeypatch.setenv("AWS_LAMBDA_FUNCTION_NAME", "engram-api")
    assert build_replica(settings, AwsClients(None))._helper_threads is False
