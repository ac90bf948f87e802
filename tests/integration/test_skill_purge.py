"""The cleanup job purges skills deleted more than 30 days ago, with the resource files no other skill
uses: locally (SQLite rows, files in the data dir) and on AWS (DynamoDB rows, S3 objects, under moto)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from engram.adapters.search.inmemory import InMemorySearchIndex
from engram.adapters.storage.blobs import LocalBlobStore
from engram.adapters.storage.sqlite.skills import SqliteSkillStore
from engram.services.jobs.cleanup import CleanupService, RetentionPolicy
from engram.services.library.skills import SkillService, blob_key

from tests.configs import config
from tests.fakes.clock import ManualClock

SHARED = b"#!/bin/sh\necho shared\n"  # a file two skills carry: stored once, kept while one uses it
OWN = b"only the old skill has this"


@contextmanager
def _local(tmp_path: Path) -> Iterator[tuple[Any, Any, Any]]:
    from engram.adapters.storage.sqlite import SqliteMemoryStore

    skills, store = (
        SqliteSkillStore(tmp_path / "engram.sqlite3", clock=ManualClock()),
        SqliteMemoryStore(tmp_path / "engram.sqlite3", clock=ManualClock()),
    )
    try:
        yield store, skills, LocalBlobStore(tmp_path / "skills")
    finally:
        skills.close()
        store.close()


@contextmanager
def _aws(tmp_path: Path) -> Iterator[tuple[Any, Any, Any]]:
    pytest.importorskip("moto")
    import boto3
    from engram.adapters.storage.blobs import S3BlobStore
    from engram.adapters.storage.dynamodb import DynamoMemoryStore, create_table
    from engram.adapters.storage.skills import DynamoSkillStore
    from moto import mock_aws

    with mock_aws():
        dynamodb = boto3.client("dynamodb", region_name="us-east-1")
        create_table(dynamodb, "engram")
        s3 = boto3.client("s3", region_name="us-east-1")
        s3.create_bucket(Bucket="engram-skill-files")
        yield (
            DynamoMemoryStore("engram", dynamodb, clock=ManualClock()),
            DynamoSkillStore("engram", dynamodb),
            S3BlobStore("engram-skill-files", s3),
        )


BACKENDS: dict[str, Callable[[Path], AbstractContextManager[tuple[Any, Any, Any]]]] = {"local": _local, "aws": _aws}


@pytest.mark.parametrize("backend", list(BACKENDS))
def test_cleanup_purges_skills_deleted_30_days_ago_and_their_unshared_files(backend: str, tmp_path: Path) -> None:
    with BACKENDS[backend](tmp_path) as (store, skill_store, blobs):
        clock = ManualClock()
        skills = SkillService(skill_store, blobs, clock)
        cleanup = CleanupService(store, InMemorySearchIndex(), clock, config(RetentionPolicy), skills=skills)
        # Given a namespace that only has skills (no memory, no message): an old skill with a file of its
        # own and one it shares with a live skill, in two versions, deleted today
        skills.import_("agent", "# Old\nv1", name="old", files={"run.sh": SHARED, "own.txt": OWN})
        skills.import_("agent", "# Old\nv2", name="old")
        skills.import_("agent", "# Live\nkept", name="live", files={"run.sh": SHARED})
        skills.delete("agent", "old")
        shared_key = blob_key("agent", skills.get_file("agent", "live", "run.sh")[0].sha256)
        own = next(f for f in skills.versions("agent", "old")[0].files if f.path == "own.txt")
        own_key = blob_key("agent", own.sha256)
        assert blobs.get(own_key) == OWN

        # When cleanup runs 29 days later / Then the deleted skill is still restorable, every file kept
        clock.advance(days=29)
        report = cleanup.run().to_dict()
        assert (report["skills_purged"], report["skill_files_purged"]) == (0, 0)
        assert [v.version for v in skill_store.list_versions("agent", "old")] == [1, 2]

        # When it runs past the 30 days
        clock.advance(days=2)
        report = cleanup.run().to_dict()
        # Then the skill's rows (every version) and its own file are gone; the shared file stays
        assert (report["skills_purged"], report["skill_files_purged"]) == (1, 1)
        assert "agent" in [ns["namespace"] for ns in report["namespaces"]]
        assert skill_store.find_skill("agent", "old") is None and skill_store.list_versions("agent", "old") == []
        assert blobs.get(own_key) is None and blobs.get(shared_key) == SHARED
        assert skills.get_file("agent", "live", "run.sh")[1] == SHARED
        if backend == "local":
            on_disk = [p.name for p in (tmp_path / "skills").rglob("*") if p.is_file()]
            assert on_disk == [shared_key.rsplit("/")[-1]]
        # And a second run finds nothing more
        assert cleanup.run().to_dict()["skills_purged"] == 0


class _NoDeleteRight:
    """The skill files bucket as the HTTP functions see it on AWS: read and put, but a delete is refused
    (infra/skill_files.py grants s3:DeleteObject to the cleanup function only)."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner
        self.put, self.get, self.list_keys = inner.put, inner.get, inner.list_keys

    def delete(self, key: str) -> None:
        raise AssertionError(f"the request path deleted the skill file {key} (only cleanup may)")


@pytest.mark.parametrize("backend", list(BACKENDS))
def test_only_the_cleanup_job_deletes_skill_files(backend: str, tmp_path: Path) -> None:
    from datetime import UTC, datetime

    from engram.domain.errors import NotFound

    with BACKENDS[backend](tmp_path) as (store, skill_store, blobs):
        # Given a skill with a file of its own and one it shares, deleted 32 days ago
        clock = ManualClock(datetime.now(UTC) - timedelta(days=32))
        requests = SkillService(skill_store, _NoDeleteRight(blobs), clock)  # what the API and MCP functions run
        nightly = SkillService(skill_store, blobs, clock)  # what the cleanup function runs
        cleanup = CleanupService(store, InMemorySearchIndex(), clock, config(RetentionPolicy), skills=nightly)
        requests.import_("agent", "# Old\nv1", name="old", files={"run.sh": SHARED, "own.txt": OWN})
        requests.import_("agent", "# Live\nkept", name="live", files={"run.sh": SHARED})
        requests.delete("agent", "old")
        own_key = next(
            blob_key("agent", f.sha256)
            for f in skill_store.list_versions("agent", "old")[0].files
            if f.path == "own.txt"
        )
        clock.set(datetime.now(UTC))
        # When a request meets it past its restore window / Then its rows go, and no file is deleted
        with pytest.raises(NotFound):
            requests.get("agent", "old")
        assert skill_store.find_skill("agent", "old") is None and blobs.get(own_key) == OWN
        # And importing the name again starts over at version 1 (still without deleting anything)
        assert requests.import_("agent", "# Old again", name="old").version.version == 1
        # When the nightly cleanup runs the same day / Then a file younger than the grace stays (an import
        # uploads its files before the version row that names them)
        assert cleanup.run().skill_files_collected == 0 and blobs.get(own_key) == OWN
        # When it runs two days later / Then the file no version names is deleted; the shared one stays
        clock.advance(days=2)
        report = cleanup.run().to_dict()
        assert report["skill_files_collected"] == 1 and report["errors"] == 0
        assert blobs.get(own_key) is None and blobs.get(blob_key("agent", _sha(SHARED))) == SHARED
        assert requests.get_file("agent", "live", "run.sh")[1] == SHARED
        # And a per-namespace run (after chats) collects nothing: that is the nightly run's
        assert cleanup.run("agent").skill_files_collected == 0


def _sha(data: bytes) -> str:
    import hashlib

    return hashlib.sha256(data).hexdigest()
