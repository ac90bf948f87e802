"""Where the ``replica`` search backend keeps its snapshots on AWS: an S3 bucket (locally, a directory of
the data dir through ``blobs.LocalBlobStore``, the store of skill files too).

Both stream (``SnapshotStore`` in adapters/search/document_log.py): a snapshot is copied in 1 MB chunks,
and S3 uploads it in 16 MB parts, so its size costs disk, never memory.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from engram.adapters.aws_clients import new_client
from engram.adapters.aws_errors import translate
from engram.adapters.storage.blobs import CHUNK
from engram.domain.deployment import SNAPSHOT_PREFIX

if TYPE_CHECKING:  # the document log needs numpy, which only the replica's functions have
    from engram.adapters.search.document_log import ByteSink, ByteSource

MB = 1024 * 1024


class S3SnapshotStore:
    """Blobs as objects of one bucket (encrypted, private; old versions expire by the bucket's lifecycle)."""

    def __init__(
        self,
        bucket: str,
        client: Any | None = None,
        *,
        region_name: str | None = None,
        prefix: str = SNAPSHOT_PREFIX,
    ) -> None:
        if client is None:
            client = new_client("s3", region_name)
        self._client = client
        self._bucket = bucket
        self._prefix = prefix

    def get_into(self, key: str, sink: ByteSink) -> bool:
        try:
            response = self._client.get_object(Bucket=self._bucket, Key=self._prefix + key)
            for chunk in response["Body"].iter_chunks(CHUNK):
                sink.write(chunk)
        except Exception as exc:
            code = getattr(exc, "response", {}).get("Error", {}).get("Code")
            if code in ("NoSuchKey", "404"):
                return False
            raise translate(exc, "S3 get_object") from exc
        return True

    def put_stream(self, key: str, stream: ByteSource) -> None:
        # Multipart from 64 MB in 16 MB parts, two at a time: at most ~32 MB of the snapshot in memory.
        from boto3.s3.transfer import TransferConfig

        config = TransferConfig(multipart_threshold=64 * MB, multipart_chunksize=16 * MB, max_concurrency=2)
        try:
            self._client.upload_fileobj(stream, self._bucket, self._prefix + key, Config=config)
        except Exception as exc:
            raise translate(exc, "S3 upload") from exc
