"""Local data is owner-only: the data dir 0700, every file Engram writes 0600 (adapters/files.py)."""

from __future__ import annotations

import io
import json
import logging
import os
import stat
import threading
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pytest
from engram.adapters.search.ann import AnnGraph
from engram.bootstrap import build_container, ensure_local_owner_key, load_keys_file
from engram.domain.models import IndexedDoc, Memory
from engram.settings import Settings

T0 = datetime(2025, 3, 1, tzinfo=UTC)


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.fixture(autouse=True)
def permissive_umask() -> Iterator[None]:
    """The common default umask, under which plain file creation gives 0644 and 0755."""
    old = os.umask(0o022)
    yield
    os.umask(old)


def test_store_index_and_keys_in_a_new_data_dir_are_owner_only(tmp_path: Path) -> None:
    # Given a fresh data dir, an owner key created by `engram serve`, the SQLite store and index
    data = tmp_path / "new" / "data"
    settings, secret = ensure_local_owner_key(
        Settings(data_dir=data, store="sqlite", search="local", embedder="none", scheduler_enabled=False)
    )
    assert secret is not None
    container = build_container(settings)
    try:
        # When rows are written (WAL mode: the -wal and -shm files appear)
        container.store.insert_memory(
            Memory(id="m1", namespace="alice", content="likes tea", created_at=T0, updated_at=T0)
        )
        doc = IndexedDoc(memory_id="m1", namespace="alice", text="likes tea", type="fact", created_at=T0)
        container.index.upsert(doc)
        files = sorted(p for p in data.iterdir())
        # Then the directories are 0700 and every file is 0600
        assert {p.name for p in files} >= {"engram.sqlite3", "engram.sqlite3-wal", "engram.sqlite3-shm", "keys.json"}
        assert {p.name: oct(mode(p)) for p in files} == {p.name: oct(0o600) for p in files}
        assert (mode(data), mode(data.parent)) == (0o700, 0o700)
    finally:
        container.close()


def test_files_left_readable_by_an_earlier_version_are_tightened(tmp_path: Path) -> None:
    # Given a database and WAL that an earlier run left world-readable
    for name in ("engram.sqlite3", "engram.sqlite3-wal"):
        (tmp_path / name).touch(mode=0o644)
    os.chmod(tmp_path / "engram.sqlite3", 0o644)
    settings = Settings(data_dir=tmp_path, store="sqlite", search="local", embedder="none", scheduler_enabled=False)
    # When Engram opens them
    container = build_container(settings)
    try:
        container.store.list_namespaces()
        # Then they are owner-only
        assert mode(tmp_path / "engram.sqlite3") == 0o600
        assert mode(tmp_path / "engram.sqlite3-wal") == 0o600
    finally:
        container.close()


def test_an_existing_data_dir_open_to_others_is_tightened_with_a_log_line(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # Given a data dir an earlier version (or a mkdir) left 0755
    data = tmp_path / "data"
    data.mkdir()
    os.chmod(data, 0o755)
    settings = Settings(data_dir=data, store="sqlite", search="local", embedder="none", scheduler_enabled=False)
    # When Engram starts on it
    with caplog.at_level(logging.WARNING, logger="engram"):
        container = build_container(settings)
    container.close()
    # Then it is owner-only, and the log says so
    assert mode(data) == 0o700
    assert any("made owner-only" in r.getMessage() and str(data) in r.getMessage() for r in caplog.records)


@pytest.mark.skipif(not AnnGraph.available(), reason="usearch is not installed")
def test_the_saved_ann_graph_is_owner_only(tmp_path: Path) -> None:
    graph = AnnGraph(8)
    graph.add_many(["a", "b"], np.eye(2, 8, dtype=np.float32))
    path = tmp_path / "graphs" / "g.npz"
    graph.save(path)
    assert (mode(path), mode(path.parent)) == (0o600, 0o700)


def test_a_keys_file_readable_by_others_is_reported(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    # Given a keys file with the usual 0644
    path = tmp_path / "keys.json"
    path.write_text(json.dumps([{"name": "me", "key": "ek_secret_never_logged", "namespace": "n", "scopes": ["*"]}]))
    os.chmod(path, 0o644)
    # When it is loaded, Then a warning says so (without the secret), and a 0600 file gets none
    with caplog.at_level(logging.WARNING, logger="engram.bootstrap"):
        load_keys_file(path)
        os.chmod(path, 0o600)
        load_keys_file(path)
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "readable by other users" in warnings[0] and "chmod 600" in warnings[0]
    assert "ek_secret_never_logged" not in caplog.text


@pytest.mark.parametrize("kind", ["blobs", "snapshots"])
def test_two_writers_of_one_key_never_collide_and_the_file_is_never_readable_by_others(
    tmp_path: Path, kind: str
) -> None:
    # Given the local blob store, written whole (skill files) or streamed (replica snapshots), and a
    # umask that would make a freshly created file readable by everyone
    from engram.adapters.storage.blobs import LocalBlobStore

    store = LocalBlobStore(tmp_path / kind)
    errors: list[BaseException] = []
    modes: set[int] = set()
    done = threading.Event()

    def write(n: int) -> None:
        try:
            for i in range(150):
                data = f"{n}-{i}".encode() * 100
                if kind == "snapshots":  # snapshots stream (SnapshotStore.put_stream)
                    store.put_stream("skills/a/file.bin", io.BytesIO(data))
                else:
                    store.put("skills/a/file.bin", data)
        except BaseException as exc:
            errors.append(exc)

    def watch() -> None:  # what any reader of the directory sees meanwhile
        while not done.is_set():
            for path in (tmp_path / kind).rglob("*"):
                try:
                    if path.is_file():
                        modes.add(stat.S_IMODE(path.stat().st_mode))
                except FileNotFoundError:
                    pass

    old = os.umask(0o022)
    try:
        watcher = threading.Thread(target=watch)
        writers = [threading.Thread(target=write, args=(n,)) for n in range(2)]
        watcher.start()
        for thread in writers:
            thread.start()
        for thread in writers:
            thread.join(60)
        done.set()
        watcher.join(10)
    finally:
        os.umask(old)
    # When two writers put the same key at once / Then neither failed, the last whole value is kept,
    # no file was ever readable by others, and no temporary file is left behind
    assert errors == []
    if kind == "snapshots":
        sink = io.BytesIO()
        value: bytes | None = sink.getvalue() if store.get_into("skills/a/file.bin", sink) else None
    else:
        value = store.get("skills/a/file.bin")
    assert value is not None and value.decode().split("-")[1].startswith("149")
    assert modes and all(mode & 0o077 == 0 for mode in modes)
    assert [p.name for p in (tmp_path / kind).rglob("*") if p.is_file()] == ["file.bin"]


def test_skill_files_and_their_directories_are_owner_only(tmp_path: Path) -> None:
    from engram.adapters.storage.blobs import LocalBlobStore

    # Given a loose umask (permissive_umask), When a skill file is stored under <data>/skills
    LocalBlobStore(tmp_path / "skills").put("skills/ns/tidy/SKILL.md", b"# tidy")
    # Then every directory created on the way is 0700 and the file 0600
    assert mode(tmp_path / "skills") == 0o700
    assert mode(tmp_path / "skills" / "skills") == 0o700
    assert mode(tmp_path / "skills" / "skills" / "ns" / "tidy") == 0o700
    assert mode(tmp_path / "skills" / "skills" / "ns" / "tidy" / "SKILL.md") == 0o600
