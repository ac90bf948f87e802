"""Reads racing a writer: ``reads_during`` runs a check over and over on several threads while ``write``
runs on another, and gathers what the checks found wrong (tests of the SQLite store's and index's reads on
their own connections)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor


def reads_during(write: Callable[[], None], check: Callable[[], str | None], *, readers: int = 3) -> list[str]:
    """``check`` (None when what it read is right, else what was wrong) repeated on ``readers`` threads
    from before ``write`` starts until it returns; every complaint. Each thread checks at least once."""
    done = threading.Event()
    wrong: list[str] = []

    def read() -> int:
        checks = 0
        while not done.is_set() or not checks:
            complaint = check()
            if complaint is not None:
                wrong.append(complaint)
            checks += 1
        return checks

    def write_then_stop() -> None:
        try:
            write()
        finally:
            done.set()

    with ThreadPoolExecutor(readers + 1) as pool:
        reading = [pool.submit(read) for _ in range(readers)]
        pool.submit(write_then_stop).result(timeout=120)
        for future in reading:
            future.result(timeout=30)
    return wrong
