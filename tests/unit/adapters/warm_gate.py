"""A gate that holds ``SqliteSearchIndex``'s background load mid-way (tests of ``warm_in_background``)."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from engram.adapters.search import sqlite_caches as sqlite_module
from engram.adapters.search.keyword_cache import KeywordCache


class Gate:
    """Holds the background load inside ``KeywordCache`` (the postings built off the lock) until opened."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.entered, self.open = threading.Event(), threading.Event()
        gate = self

        class Held(KeywordCache):
            def __init__(self, *args: Any, **kwargs: Any) -> None:
                if threading.current_thread().name == "engram-index-warm":
                    gate.entered.set()
                    assert gate.open.wait(10)
                super().__init__(*args, **kwargs)

        monkeypatch.setattr(sqlite_module, "KeywordCache", Held)
