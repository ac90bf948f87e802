"""Changing the search backend of a deployment (docs/aws.md, "Changing the search backend"): the new
backend starts empty, and a reindex from the store — the source of truth — fills it.

Real: the SQLite store, the local index (the stand-in for the backend a deployment leaves: the replica
reads only its own document log), the replica backend, the reindex use case. No embedder: keyword
search shows what each index holds without loading a model.
"""

from __future__ import annotations

from pathlib import Path

from engram.bootstrap import build_container
from engram.services.library.memories import MemoryWrite
from engram.settings import Settings

from tests.conftest import write_keys

FACTS = ("Alice plays the cello", "Alice's dog is called Pepper", "Alice works as a nurse")


def _container(data_dir: Path, search: str):  # type: ignore[no-untyped-def]
    settings = Settings(
        data_dir=data_dir,
        keys_file=write_keys(data_dir / "keys.json"),
        search=search,
        embedder="none",
    )
    return build_container(settings)


def _found(container, query: str) -> list[str]:  # type: ignore[no-untyped-def]
    return [h.memory_id for h in container.index.keyword_search("alice", query, k=10)]


def test_moving_to_the_replica_and_back_is_a_reindex_from_the_store(tmp_path: Path) -> None:
    # Given memories written while the deployment searched another backend
    before = _container(tmp_path, "local")
    ids = [before.memories.write("alice", MemoryWrite(content=text)).memory.id for text in FACTS]
    assert _found(before, "cello")
    before.close()

    # When the backend changes to the replica / Then its index starts empty (nothing is lost: the store has all)
    after = _container(tmp_path, "replica")
    assert _found(after, "cello") == []
    assert [after.store.get_memory("alice", i).content for i in ids] == list(FACTS)
    # When the reindex runs / Then every active memory is searchable on the new backend
    assert after.reindex.rebuild("alice", every_namespace=True) == len(FACTS)
    assert _found(after, "cello") == [ids[0]]
    assert _found(after, "Pepper") == [ids[1]]
    # And a memory written after the switch is indexed as usual
    new = after.memories.write("alice", MemoryWrite(content="Alice grows tomatoes")).memory.id
    assert _found(after, "tomatoes") == [new]
    after.close()

    # When the deployment moves back and reindexes / Then the old backend holds the new memory too
    back = _container(tmp_path, "local")
    assert back.reindex.rebuild("alice", every_namespace=True) == len(FACTS) + 1
    assert _found(back, "tomatoes") == [new]
    back.close()
