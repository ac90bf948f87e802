"""A value built by its first use, once, whichever thread asks first.

Engram defers what a cold start may never need (the chat gateway on the MCP function, the job services
on the HTTP functions, boto3 clients few requests use, the OpenSearch HTTP client and its signer's
credentials, the panel's session key): docs/aws.md, "Cold starts". Each of those is a ``Once``:

- the first ``get`` runs the build under a lock; every later ``get`` reads the value without it;
- a build that raises passes its exception to the caller and builds nothing: the next ``get`` tries
  again (credentials that appear later, a store that comes back);
- ``built`` answers without building (closing must not build what it closes);
- ``seal`` stops further builds (a closed client is not built anew by a late request).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Generic, TypeVar, cast

T = TypeVar("T")

_UNSET: object = object()


class Once(Generic[T]):
    """``build()``'s value, built by the first ``get`` (thread-safe; a failed build is retried)."""

    __slots__ = ("_build", "_lock", "_sealed", "_value")

    def __init__(self, build: Callable[[], T]) -> None:
        self._build = build
        self._value: object = _UNSET
        self._lock = threading.Lock()
        self._sealed: str | None = None

    @classmethod
    def of(cls, value: T) -> Once[T]:
        """A ``Once`` already holding ``value`` (one given from outside: a test's client)."""
        once = cls(lambda: value)
        once._value = value
        return once

    def get(self) -> T:
        value = self._value  # one read: the value, or the marker that there is none yet
        if value is _UNSET:
            with self._lock:
                value = self._value
                if value is _UNSET:
                    if self._sealed is not None:
                        raise RuntimeError(self._sealed)
                    value = self._value = self._build()
        return cast(T, value)

    @property
    def built(self) -> T | None:
        """The value if a ``get`` has built it, else None (never builds)."""
        value = self._value
        return None if value is _UNSET else cast(T, value)

    def seal(self, reason: str) -> T | None:
        """No build after this (a later ``get`` with nothing built raises RuntimeError(reason)); the value
        built so far, if any, for the caller to close. A build running now finishes first."""
        with self._lock:
            self._sealed = reason
            value = self._value
        return None if value is _UNSET else cast(T, value)
