"""``BlobStore`` adapters for skill resource files: in memory (tests), a directory of the data dir
(local), the stack's S3 bucket (AWS). Each passes the blob half of ``tests/contract/test_skill_store.py``.

The local one is also the replica's local ``SnapshotStore`` (streamed, ``snapshots.py`` has the S3
one): one way to keep files by key in the data dir.
"""

from __future__ import annotations

import shutil
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from engram.adapters.aws_clients import new_client
from engram.adapters.aws_errors import translate
from engram.adapters.clock import SystemClock
from engram.adapters.files import write_private
from engram.domain.ports import Clock

if TYPE_CHECKING:  # the document log needs numpy, which only the replica's functions have
    from engram.adapters.search.document_log import ByteSink, ByteSource

CHUNK = 1024 * 1024  # bytes a stream is copied in


class InMemoryBlobStore:
    def __init__(self, clock: Clock | None = None) -> None:
        self._clock = clock or SystemClock()  # when each key was written (list_keys)
        self._blobs: dict[str, bytes] = {}
        self._written: dict[str, datetime] = {}

    def put(self, key: str, data: bytes) -> None:
        self._blobs[key] = bytes(data)
        self._written[key] = self._clock.now()

    def get(self, key: str) -> bytes | None:
        return self._blobs.get(key)

    def delete(self, key: str) -> None:
        self._blobs.pop(key, None)
        self._written.pop(key, None)

    def list_keys(self, prefix: str) -> list[tuple[str, datetime]]:
        return sorted((k, self._written[k]) for k in self._blobs if k.startswith(prefix))


class LocalBlobStore:
    """Files under a directory of the data dir; keys are safe relative paths. Each write is atomic and
    owner-only from the first byte (``files.write_private``): two writers of one key never collide."""

    def __init__(self, root: str | Path) -> None:
        self._root = Path(root)

    def _path(self, key: str) -> Path:
        path = (self._root / key).resolve()
        if self._root.resolve() not in path.parents:
            raise ValueError(f"blob key {key!r} leaves the blob directory")
        return path

    def put(self, key: str, data: bytes) -> None:
        write_private(self._path(key), data)

    def get(self, key: str) -> bytes | None:
        path = self._path(key)
        return path.read_bytes() if path.is_file() else None

    def put_stream(self, key: str, stream: ByteSource) -> None:
        """``put`` from a stream, copied in 1 MB chunks (``SnapshotStore``: a snapshot never sits in memory)."""
        write_private(self._path(key), lambda out: shutil.copyfileobj(stream, out, CHUNK))

    def get_into(self, key: str, sink: ByteSink) -> bool:
        """``get`` into a stream, in chunks; False (writing nothing) when there is no such key."""
        try:
            with self._path(key).open("rb") as source:
                shutil.copyfileobj(source, sink, CHUNK)
        except FileNotFoundError:
            return False
        return True

    def delete(self, key: str) -> None:
        self._path(key).unlink(missing_ok=True)

    def list_keys(self, prefix: str) -> list[tuple[str, datetime]]:
        root = self._root.resolve()
        if not root.is_dir():
            return []
        found = []
        for path in root.rglob("*"):
            key = path.relative_to(root).as_posix()
            if path.is_file() and key.startswith(prefix):
                found.append((key, datetime.fromtimestamp(path.stat().st_mtime, UTC)))
        return sorted(found)


class S3BlobStore:
    """Objects in the skills bucket of the stack (``ENGRAM_SKILLS_BUCKET``)."""

    def __init__(self, bucket: str, client: Any | None = None, *, region_name: str | None = None) -> None:
        self._client = client
        self._region = region_name
        self._bucket = bucket

    @property
    def _s3(self) -> Any:
        if self._client is None:  # built on first use, like DynamoSkillStore's client
            self._client = new_client("s3", self._region)
        return self._client

    def put(self, key: str, data: bytes) -> None:
        try:
            self._s3.put_object(Bucket=self._bucket, Key=key, Body=data)
        except Exception as exc:
            raise translate(exc, "S3 put_object") from exc

    def get(self, key: str) -> bytes | None:
        try:
            response = self._s3.get_object(Bucket=self._bucket, Key=key)
        except Exception as exc:
            if getattr(exc, "response", {}).get("Error", {}).get("Code") in ("NoSuchKey", "404"):
                return None
            raise translate(exc, "S3 get_object") from exc
        return bytes(response["Body"].read())

    def delete(self, key: str) -> None:
        try:
            self._s3.delete_object(Bucket=self._bucket, Key=key)  # an absent key is no error in S3
        except Exception as exc:
            raise translate(exc, "S3 delete_object") from exc

    def list_keys(self, prefix: str) -> list[tuple[str, datetime]]:
        found: list[tuple[str, datetime]] = []
        kwargs: dict[str, Any] = {"Bucket": self._bucket, "Prefix": prefix}
        try:
            while True:  # ListObjectsV2 answers up to 1,000 keys a page, in key order
                page = self._s3.list_objects_v2(**kwargs)
                found += [(item["Key"], item["LastModified"]) for item in page.get("Contents", [])]
                if not page.get("IsTruncated"):
                    return found
                kwargs["ContinuationToken"] = page["NextContinuationToken"]
        except Exception as exc:
            raise translate(exc, "S3 list_objects_v2") from exc
