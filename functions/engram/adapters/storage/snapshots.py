"""Where the ``replica`` search backend keeps its snapshots: a directory locally, an S3 bucket on AWS."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from engram.adapters.aws_errors import translate
from engram.adapters.files import write_private


class DirSnapshotStore:
    """Blobs as owner-only files under ``directory`` (written to a temporary name, then renamed)."""

    def __init__(self, directory: str | Path) -> None:
        self._dir = Path(directory)

    def _path(self, key: str) -> Path:
        if ".." in key.split("/") or key.startswith("/"):
            raise ValueError(f"bad snapshot key {key!r}")
        return self._dir / key

    def get(self, key: str) -> bytes | None:
        try:
            return self._path(key).read_bytes()
        except FileNotFoundError:
            return None

    def put(self, key: str, data: bytes) -> None:
        write_private(self._path(key), data)


class S3SnapshotStore:
    """Blobs as objects of one bucket (encrypted, private; old versions expire by the bucket's lifecycle)."""

    def __init__(
        self, bucket: str, client: Any | None = None, *, region_name: str | None = None, prefix: str = "search/"
    ) -> None:
        if client is None:
            import boto3

            client = boto3.client("s3", region_name=region_name or None)
        self._client = client
        self._bucket = bucket
        self._prefix = prefix

    def get(self, key: str) -> bytes | None:
        try:
            response = self._client.get_object(Bucket=self._bucket, Key=self._prefix + key)
            return bytes(response["Body"].read())
        except Exception as exc:
            code = getattr(exc, "response", {}).get("Error", {}).get("Code")
            if code in ("NoSuchKey", "404"):
                return None
            raise translate(exc, "S3 get_object") from exc

    def put(self, key: str, data: bytes) -> None:
        try:
            self._client.put_object(Bucket=self._bucket, Key=self._prefix + key, Body=data)
        except Exception as exc:
            raise translate(exc, "S3 put_object") from exc
