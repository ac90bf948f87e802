"""domain/once.py: a value built by its first use, once, whichever thread asks first."""

from __future__ import annotations

import threading

import pytest
from engram.domain.once import Once


def test_racing_first_uses_build_once_and_all_get_that_value() -> None:
    # Given a slow build and eight threads released at the same moment
    builds: list[int] = []
    inside = threading.Event()
    release = threading.Event()

    def build() -> object:
        builds.append(1)
        inside.set()
        release.wait(5)  # the others arrive while the first build runs
        return object()

    once: Once[object] = Once(build)
    got: list[object] = []
    start = threading.Barrier(8)

    def first_use() -> None:
        start.wait(5)
        got.append(once.get())

    threads = [threading.Thread(target=first_use) for _ in range(8)]
    for thread in threads:
        thread.start()
    assert inside.wait(5)
    release.set()
    for thread in threads:
        thread.join(5)
    # Then one build ran and every caller holds its value
    assert len(builds) == 1 and len(got) == 8 and all(value is got[0] for value in got)
    assert once.built is got[0] and once.get() is got[0]


def test_a_failed_build_reaches_its_caller_and_the_next_use_builds_again() -> None:
    attempts: list[int] = []

    def build() -> str:
        attempts.append(1)
        if len(attempts) == 1:
            raise ConnectionError("no credentials yet")
        return "credentials"

    once = Once(build)
    with pytest.raises(ConnectionError, match="no credentials yet"):
        once.get()
    assert once.built is None
    assert once.get() == "credentials" and once.get() == "credentials" and len(attempts) == 2


def test_built_never_builds() -> None:
    made: list[int] = []

    def build() -> str:
        made.append(1)
        return "x"

    once = Once(build)
    assert once.built is None and made == []


def test_of_holds_a_given_value_without_building() -> None:
    given = object()
    once = Once.of(given)
    assert once.built is given and once.get() is given


def test_seal_returns_what_was_built_and_stops_later_builds() -> None:
    # Given one Once used and one never used
    used = Once(lambda: ["client"])
    value = used.get()
    unused = Once(lambda: ["client"])
    # When both are sealed
    assert used.seal("closed") is value
    assert unused.seal("the index is closed") is None
    # Then the used one keeps answering with its value (its owner closed it), the unused one refuses to build
    assert used.get() is value
    with pytest.raises(RuntimeError, match="the index is closed"):
        unused.get()
