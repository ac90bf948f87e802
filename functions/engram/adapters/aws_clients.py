"""The boto3 clients of one container: one per AWS service (and client options), shared by the adapters.

A container's store, skills library, rate limiter and replica log share one DynamoDB client; the skills
files and the replica's snapshots one S3 client. ``AwsClients.client`` builds a client now (what most
requests use: DynamoDB, the embedder's and the reranker's Bedrock clients); ``AwsClients.lazy`` on its
first use (what few requests use: SQS for the jobs, the jobs' own Bedrock model), in whichever thread
first uses it. bench/README.md, "Cold start per HTTP function", says what is built where.

Scoped to a container, never process-wide: a client is bound to the endpoint and credentials of the
moment it is built (a test's moto server), so it must not outlive the container that asked for it.
Every client comes from boto3's default session, and so from one botocore loader, which decodes each
service's model once per process (its ``load_service_model`` is cached per loader instance).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from engram.domain.once import Once


@dataclass(frozen=True)
class ClientOptions:
    """A client's timeouts and retries (botocore's ``Config``); the defaults are the SDK's."""

    connect_timeout: float | None = None
    read_timeout: float | None = None
    max_attempts: int | None = None
    retry_mode: str | None = None

    def config(self) -> Any:
        """The botocore ``Config`` of these options, or None for the SDK's defaults."""
        if self == ClientOptions():
            return None
        from botocore.config import Config

        kwargs: dict[str, Any] = {}
        if self.connect_timeout is not None:
            kwargs["connect_timeout"] = self.connect_timeout
        if self.read_timeout is not None:
            kwargs["read_timeout"] = self.read_timeout
        if self.max_attempts is not None or self.retry_mode is not None:
            retries: dict[str, Any] = {}
            if self.max_attempts is not None:
                retries["max_attempts"] = self.max_attempts
            if self.retry_mode is not None:
                retries["mode"] = self.retry_mode
            kwargs["retries"] = retries
        return Config(**kwargs)


DEFAULT = ClientOptions()
# boto3's default session is not safe to build clients from in two threads at once (a lazy client may
# be built in any worker thread): every build in this process takes this lock.
_BUILD_LOCK = threading.Lock()


def new_client(service: str, region: str | None = None, options: ClientOptions = DEFAULT) -> Any:
    """A boto3 client of its own (an adapter built without a container's clients)."""
    import boto3

    config = options.config()
    with _BUILD_LOCK:
        if config is None:
            return boto3.client(service, region_name=region or None)
        return boto3.client(service, region_name=region or None, config=config)


class AwsClients:
    """The clients of one container, one per (service, region, options); ``region`` is the default."""

    def __init__(self, region: str | None = None) -> None:
        self._region = region or None
        self._built: dict[tuple[str, str | None, ClientOptions], Any] = {}
        self._lock = threading.Lock()

    def client(self, service: str, options: ClientOptions = DEFAULT, *, region: str | None = None) -> Any:
        """The container's client for ``service``, built now if it is not yet."""
        key = (service, region or self._region, options)
        with self._lock:
            found = self._built.get(key)
            if found is None:
                found = self._built[key] = new_client(service, key[1], options)
            return found

    def lazy(self, service: str, options: ClientOptions = DEFAULT, *, region: str | None = None) -> LazyClient:
        """The same client, built on its first use (an attribute read), for what few requests call."""
        return LazyClient(lambda: self.client(service, options, region=region))

    def built(self) -> list[str]:
        """The services whose clients are built so far (what ``tests`` and the bench check)."""
        with self._lock:
            return sorted(key[0] for key in self._built)


class LazyClient:
    """A boto3 client built on its first attribute read (thread-safe), then used as the client itself."""

    def __init__(self, build: Callable[[], Any]) -> None:
        self._client: Once[Any] = Once(build)

    def __getattr__(self, name: str) -> Any:
        # Only attributes a LazyClient does not have itself land here: the client's.
        return getattr(self._client.get(), name)
