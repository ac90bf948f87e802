"""``SkillStore`` contract: every adapter (in memory, SQLite, DynamoDB under moto) behaves the same."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from engram.adapters.storage.skills import InMemorySkillStore
from engram.adapters.storage.sqlite.skills import SqliteSkillStore
from engram.domain.errors import Conflict
from engram.domain.ports import SkillStore
from engram.domain.skills import Skill, SkillFile, SkillVector, SkillVersion

from tests.fakes.clock import ManualClock

T0 = datetime(2026, 1, 1, tzinfo=UTC)


@contextmanager
def _memory(tmp_path: Path) -> Iterator[SkillStore]:
    yield InMemorySkillStore()


@contextmanager
def _sqlite(tmp_path: Path) -> Iterator[SkillStore]:
    store = SqliteSkillStore(tmp_path / "engram.sqlite3", clock=ManualClock())
    try:
        yield store
    finally:
        store.close()


@contextmanager
def _dynamodb(tmp_path: Path) -> Iterator[SkillStore]:
    pytest.importorskip("moto")
    import boto3
    from engram.adapters.storage.dynamodb import create_table
    from engram.adapters.storage.skills import DynamoSkillStore
    from moto import mock_aws

    with mock_aws():
        client = boto3.client("dynamodb", region_name="us-east-1")
        create_table(client, "engram-skills-test")
        yield DynamoSkillStore("engram-skills-test", client)


FACTORIES: dict[str, Callable[[Path], AbstractContextManager[SkillStore]]] = {
    "memory": _memory,
    "sqlite": _sqlite,
    "dynamodb": _dynamodb,
}


@pytest.fixture(params=list(FACTORIES))
def skills(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[SkillStore]:
    with FACTORIES[request.param](tmp_path) as store:
        yield store


def _pair(name: str, version: int, namespace: str = "alice", **extra: Any) -> tuple[Skill, SkillVersion]:
    files = (SkillFile(path="scripts/run.sh", sha256="ab" * 32, size=10),)
    row = SkillVersion(
        namespace=namespace,
        name=name,
        version=version,
        content=f"# {name} v{version}",
        digest=f"d{version}",
        files=files,
        created_at=T0,
        **extra,
    )
    head = Skill(namespace=namespace, name=name, version=version, created_at=T0, updated_at=T0)
    return head, row


def test_versions_are_added_with_their_head_and_read_back(skills: SkillStore) -> None:
    assert isinstance(skills, SkillStore)
    for number in (1, 2, 3):
        skills.add_version(*_pair("pdf-tools", number))
    skills.add_version(*_pair("alpha", 1))
    head = skills.find_skill("alice", "pdf-tools")
    assert head is not None and head.version == 3
    assert [v.version for v in skills.list_versions("alice", "pdf-tools")] == [1, 2, 3]
    second = skills.get_version("alice", "pdf-tools", 2)
    assert second is not None and second.content == "# pdf-tools v2" and second.files[0].path == "scripts/run.sh"
    assert skills.get_version("alice", "pdf-tools", 9) is None
    assert [s.name for s in skills.list_skills("alice")] == ["alpha", "pdf-tools"]


def test_an_existing_version_is_never_replaced(skills: SkillStore) -> None:
    skills.add_version(*_pair("pdf-tools", 1))
    head, row = _pair("pdf-tools", 1)
    with pytest.raises(Conflict):
        skills.add_version(head.model_copy(update={"description": "racing"}), row.model_copy(update={"content": "x"}))
    kept = skills.get_version("alice", "pdf-tools", 1)
    assert kept is not None and kept.content == "# pdf-tools v1"
    found = skills.find_skill("alice", "pdf-tools")
    assert found is not None and found.description == ""  # neither row of the failed add was written


def test_namespaces_never_leak_and_purge_removes_everything(skills: SkillStore) -> None:
    skills.add_version(*_pair("pdf-tools", 1))
    skills.add_version(*_pair("pdf-tools", 2))
    skills.add_version(*_pair("pdf-tools", 1, namespace="bob"))
    assert skills.find_skill("carol", "pdf-tools") is None and skills.list_skills("carol") == []
    assert [v.version for v in skills.list_versions("bob", "pdf-tools")] == [1]
    head = skills.find_skill("alice", "pdf-tools")
    assert head is not None
    skills.put_skill(head.model_copy(update={"agents": ("claude-code",), "deleted_at": T0}))
    found = skills.find_skill("alice", "pdf-tools")
    assert found is not None and found.agents == ("claude-code",) and found.deleted_at == T0
    skills.purge("alice", "pdf-tools")
    assert skills.find_skill("alice", "pdf-tools") is None and skills.list_versions("alice", "pdf-tools") == []
    assert skills.find_skill("bob", "pdf-tools") is not None


def test_namespaces_with_skills_are_listed(skills: SkillStore) -> None:
    # Given skills in two namespaces / Then both are listed (the cleanup job visits them)
    skills.add_version(*_pair("pdf-tools", 1))
    skills.add_version(*_pair("deploy", 1, namespace="bob"))
    assert {"alice", "bob"} <= set(skills.list_namespaces())
    assert skills.list_namespaces() == sorted(skills.list_namespaces())


def test_vectors_are_kept_per_skill_replaced_and_purged_with_it(skills: SkillStore) -> None:
    # Given two skills of alice and one of bob, each with a vector
    for ns, name in (("alice", "pdf-tools"), ("alice", "deploy"), ("bob", "pdf-tools")):
        skills.add_version(*_pair(name, 1, namespace=ns))
        skills.put_vector(ns, SkillVector(name=name, version=1, model_id="m1", vector=(0.6, 0.8, 0.0)))
    # When alice's pdf-tools gets a new version's vector
    skills.put_vector("alice", SkillVector(name="pdf-tools", version=2, model_id="m2", vector=(0.0, -1.0, 0.5)))
    # Then one read returns the namespace's vectors (float32: equal to 6 digits), the newest one replacing
    found = skills.list_vectors("alice")
    assert sorted(found) == ["deploy", "pdf-tools"]
    pdf = found["pdf-tools"]
    assert (pdf.version, pdf.model_id) == (2, "m2") and pdf.vector == pytest.approx((0.0, -1.0, 0.5), abs=1e-6)
    assert found["deploy"].vector == pytest.approx((0.6, 0.8, 0.0), abs=1e-6)
    # And a purge removes the skill's vector, never another namespace's
    skills.purge("alice", "pdf-tools")
    assert sorted(skills.list_vectors("alice")) == ["deploy"] and sorted(skills.list_vectors("bob")) == ["pdf-tools"]
    assert skills.list_vectors("carol") == {}


@contextmanager
def _local_blobs(tmp_path: Path) -> Iterator[Any]:
    from engram.adapters.storage.blobs import LocalBlobStore

    yield LocalBlobStore(tmp_path / "skills")


@contextmanager
def _memory_blobs(tmp_path: Path) -> Iterator[Any]:
    from engram.adapters.storage.blobs import InMemoryBlobStore

    yield InMemoryBlobStore()


@contextmanager
def _s3_blobs(tmp_path: Path) -> Iterator[Any]:
    pytest.importorskip("moto")
    import boto3
    from engram.adapters.storage.blobs import S3BlobStore
    from moto import mock_aws

    with mock_aws():
        client = boto3.client("s3", region_name="us-east-1")
        client.create_bucket(Bucket="engram-skill-files")
        yield S3BlobStore("engram-skill-files", client)


@pytest.mark.parametrize("factory", [_memory_blobs, _local_blobs, _s3_blobs], ids=["memory", "local", "s3"])
def test_blob_store_keeps_bytes_by_key(factory: Callable[[Path], AbstractContextManager[Any]], tmp_path: Path) -> None:
    from engram.domain.ports import BlobStore

    with factory(tmp_path) as blobs:
        assert isinstance(blobs, BlobStore)
        blobs.put("skills/ns1/abc", bytes(range(256)))
        blobs.put("skills/ns2/abc", b"other")
        assert blobs.get("skills/ns1/abc") == bytes(range(256)) and blobs.get("skills/ns2/abc") == b"other"
        assert blobs.get("skills/ns1/unknown") is None
        # And a deleted key is gone, the others stay; deleting an unknown key is no error
        blobs.delete("skills/ns1/abc")
        blobs.delete("skills/ns1/unknown")
        assert blobs.get("skills/ns1/abc") is None and blobs.get("skills/ns2/abc") == b"other"
        # And the keys under a prefix are listed in key order with when each was last written (UTC)
        from datetime import UTC, datetime, timedelta

        blobs.put("skills/ns2/abd", b"more")
        blobs.put("skillsx/ns9/zzz", b"not under the prefix")
        listed = blobs.list_keys("skills/")
        assert [key for key, _ in listed] == ["skills/ns2/abc", "skills/ns2/abd"]
        # (a file's time is the file system's clock, which a faked process clock does not move: either is now)
        probe = tmp_path / "clock-probe"
        probe.write_bytes(b"")
        file_now = datetime.fromtimestamp(probe.stat().st_mtime, UTC)
        nows = (datetime.now(UTC), file_now)
        assert all(
            written.tzinfo is not None and min(abs(now - written) for now in nows) < timedelta(minutes=5)
            for _, written in listed
        )
        assert blobs.list_keys("skills/ns1/") == [] and blobs.list_keys("nothing/") == []


def test_many_versions_are_read_at_once(skills: SkillStore) -> None:
    # Given two skills with versions, one in another namespace
    for name, version in (("alpha", 1), ("alpha", 2), ("pdf-tools", 1)):
        head, row = _pair(name, version)
        skills.add_version(head, row)
    skills.add_version(*_pair("alpha", 3, namespace="bob"))
    # When versions are read together, some of them missing or asked twice
    found = skills.get_versions("alice", [("alpha", 2), ("pdf-tools", 1), ("alpha", 3), ("nope", 1), ("alpha", 2)])
    # Then exactly the existing ones of that namespace come back, by (name, version)
    assert set(found) == {("alpha", 2), ("pdf-tools", 1)}
    assert found[("alpha", 2)].version == 2 and found[("pdf-tools", 1)].name == "pdf-tools"
    assert skills.get_versions("alice", []) == {}
