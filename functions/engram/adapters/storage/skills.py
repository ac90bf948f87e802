"""``SkillStore`` adapters: in memory (tests) and DynamoDB (items in the store's table); the SQLite one is
``sqlite/skills.py`` (tables of the local store). Each passes ``tests/contract/test_skill_store.py``.

DynamoDB items (``ns`` = namespace, versions zero-padded so sort-key order is version order):

=================  =====================================
skill head         ``NS#ns`` / ``SKILL#<name>``
skill version      ``NS#ns`` / ``SKILLV#<name>#<version:06d>``
skill vector       ``NS#ns`` / ``SKILLVEC#<name>``
=================  =====================================

Vectors are float32 bytes (``vector``), with the version and model that made them. Every item is
read with strongly consistent GetItem / base-table queries; ``add_version`` is one transaction
(version put only if absent + head put).
"""

from __future__ import annotations

import threading
from array import array
from collections.abc import Sequence
from typing import Any

from engram.adapters.aws_clients import new_client
from engram.adapters.storage.dynamodb.base import NAMESPACES_PK, namespace_item
from engram.adapters.storage.dynamodb.table import Cancelled, DynamoTable
from engram.domain.errors import Conflict, UpstreamUnavailable
from engram.domain.skills import Skill, SkillVector, SkillVersion


def pack_vector(vector: tuple[float, ...]) -> bytes:
    return array("f", vector).tobytes()


def unpack_vector(data: bytes) -> tuple[float, ...]:
    return tuple(array("f", data))


class InMemorySkillStore:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._heads: dict[tuple[str, str], Skill] = {}
        self._versions: dict[tuple[str, str, int], SkillVersion] = {}
        self._vectors: dict[tuple[str, str], SkillVector] = {}

    def find_skill(self, namespace: str, name: str) -> Skill | None:
        return self._heads.get((namespace, name))

    def list_skills(self, namespace: str) -> list[Skill]:
        return sorted((s for (ns, _), s in self._heads.items() if ns == namespace), key=lambda s: s.name)

    def add_version(self, skill: Skill, version: SkillVersion) -> None:
        key = (version.namespace, version.name, version.version)
        with self._lock:
            if key in self._versions:
                raise Conflict(f"skill {version.name!r} version {version.version} exists")
            self._versions[key] = version
            self._heads[(skill.namespace, skill.name)] = skill

    def put_skill(self, skill: Skill) -> None:
        self._heads[(skill.namespace, skill.name)] = skill

    def get_version(self, namespace: str, name: str, version: int) -> SkillVersion | None:
        return self._versions.get((namespace, name, version))

    def get_versions(self, namespace: str, wanted: Sequence[tuple[str, int]]) -> dict[tuple[str, int], SkillVersion]:
        found = ((key, self._versions.get((namespace, *key))) for key in wanted)
        return {key: row for key, row in found if row is not None}

    def list_versions(self, namespace: str, name: str) -> list[SkillVersion]:
        found = [v for (ns, n, _), v in self._versions.items() if ns == namespace and n == name]
        return sorted(found, key=lambda v: v.version)

    def purge(self, namespace: str, name: str) -> None:
        with self._lock:
            self._heads.pop((namespace, name), None)
            self._vectors.pop((namespace, name), None)
            for key in [k for k in self._versions if k[:2] == (namespace, name)]:
                del self._versions[key]

    def list_namespaces(self) -> list[str]:
        return sorted({ns for ns, _ in self._heads})

    def put_vector(self, namespace: str, vector: SkillVector) -> None:
        self._vectors[(namespace, vector.name)] = vector

    def list_vectors(self, namespace: str) -> dict[str, SkillVector]:
        return {name: v for (ns, name), v in self._vectors.items() if ns == namespace}


class DynamoSkillStore:
    """``SkillStore`` in the DynamoDB table of the store (the layout in the module docstring)."""

    def __init__(self, table_name: str, client: Any | None = None, *, region_name: str | None = None) -> None:
        self._client = client
        self._region = region_name
        self._table = table_name
        self._db: DynamoTable | None = None

    def _toolkit(self) -> DynamoTable:
        """The store's table toolkit, built on first use: a cold start that touches no skill pays nothing."""
        if self._db is None:
            if self._client is None:
                self._client = new_client("dynamodb", self._region)
            self._db = DynamoTable(self._client, self._table)
        return self._db

    def _call(self, operation: str, **kwargs: Any) -> dict[str, Any]:
        """One call through the store's table toolkit (errors translated by ``adapters/aws_errors.py``)."""
        try:
            return self._toolkit().call(operation, **kwargs)
        except Cancelled as exc:
            if "ConditionalCheckFailed" in exc.reasons:
                raise Conflict("this skill version exists") from exc
            raise UpstreamUnavailable(f"DynamoDB {operation}: transaction cancelled ({exc})") from exc

    @staticmethod
    def _item(namespace: str, sk: str, row: Skill | SkillVersion) -> dict[str, Any]:
        return {
            "PK": {"S": f"NS#{namespace}"},
            "SK": {"S": sk},
            "entity": {"S": "skill" if isinstance(row, Skill) else "skill_version"},
            "namespace": {"S": namespace},
            "name": {"S": row.name},
            "row": {"S": row.model_dump_json()},
        }

    def _items(self, pk: str, prefix: str = "", projection: tuple[str, ...] = ()) -> list[dict[str, Any]]:
        """Every item of partition ``pk`` whose sort key starts with ``prefix`` (the table toolkit's paged,
        strongly consistent query), as Python values."""
        return list(self._toolkit().query(pk=pk, sk_prefix=prefix or None, projection=projection))

    def _query(self, namespace: str, prefix: str) -> list[str]:
        return [str(item["row"]) for item in self._items(f"NS#{namespace}", prefix)]

    def _get(self, namespace: str, sk: str) -> str | None:
        key = {"PK": {"S": f"NS#{namespace}"}, "SK": {"S": sk}}
        item = self._call("get_item", TableName=self._table, Key=key, ConsistentRead=True).get("Item")
        return item["row"]["S"] if item else None

    def find_skill(self, namespace: str, name: str) -> Skill | None:
        row = self._get(namespace, f"SKILL#{name}")
        return Skill.model_validate_json(row) if row else None

    def list_skills(self, namespace: str) -> list[Skill]:
        return [Skill.model_validate_json(r) for r in self._query(namespace, "SKILL#")]

    def add_version(self, skill: Skill, version: SkillVersion) -> None:
        sk = f"SKILLV#{version.name}#{version.version:06d}"
        self._call(
            "transact_write_items",
            TransactItems=[
                {
                    "Put": {
                        "TableName": self._table,
                        "Item": self._item(version.namespace, sk, version),
                        "ConditionExpression": "attribute_not_exists(PK)",
                    }
                },
                {"Put": {"TableName": self._table, "Item": self._item(skill.namespace, f"SKILL#{skill.name}", skill)}},
                # The table's namespace registry, which the cleanup job walks (a skills-only namespace too).
                {"Put": {"TableName": self._table, "Item": self._toolkit().ser(namespace_item(skill.namespace))}},
            ],
        )

    def put_skill(self, skill: Skill) -> None:
        self._call("put_item", TableName=self._table, Item=self._item(skill.namespace, f"SKILL#{skill.name}", skill))

    def get_version(self, namespace: str, name: str, version: int) -> SkillVersion | None:
        row = self._get(namespace, f"SKILLV#{name}#{version:06d}")
        return SkillVersion.model_validate_json(row) if row else None

    def get_versions(self, namespace: str, wanted: Sequence[tuple[str, int]]) -> dict[tuple[str, int], SkillVersion]:
        """One BatchGetItem per 100 versions (the table toolkit's ``batch_get``), not a GetItem each."""
        keys = [(f"NS#{namespace}", f"SKILLV#{name}#{version:06d}") for name, version in dict.fromkeys(wanted)]
        rows = (SkillVersion.model_validate_json(item["row"]) for item in self._toolkit().batch_get(keys))
        return {(row.name, row.version): row for row in rows}

    def list_versions(self, namespace: str, name: str) -> list[SkillVersion]:
        return [SkillVersion.model_validate_json(r) for r in self._query(namespace, f"SKILLV#{name}#")]

    def purge(self, namespace: str, name: str) -> None:
        keys = [f"SKILLV#{name}#{v.version:06d}" for v in self.list_versions(namespace, name)]
        keys += [f"SKILLVEC#{name}", f"SKILL#{name}"]
        for sk in keys:
            self._call("delete_item", TableName=self._table, Key={"PK": {"S": f"NS#{namespace}"}, "SK": {"S": sk}})

    def list_namespaces(self) -> list[str]:
        return sorted(str(item["SK"]) for item in self._items(NAMESPACES_PK, projection=("SK",)))

    def put_vector(self, namespace: str, vector: SkillVector) -> None:
        item = {
            "PK": {"S": f"NS#{namespace}"},
            "SK": {"S": f"SKILLVEC#{vector.name}"},
            "entity": {"S": "skill_vector"},
            "name": {"S": vector.name},
            "version": {"N": str(vector.version)},
            "model_id": {"S": vector.model_id},
            "vector": {"B": pack_vector(vector.vector)},
        }
        self._call("put_item", TableName=self._table, Item=item)

    def list_vectors(self, namespace: str) -> dict[str, SkillVector]:
        return {
            str(item["name"]): SkillVector(
                name=str(item["name"]),
                version=int(item["version"]),
                model_id=str(item["model_id"]),
                vector=unpack_vector(bytes(item["vector"])),
            )
            for item in self._items(f"NS#{namespace}", "SKILLVEC#")
        }
