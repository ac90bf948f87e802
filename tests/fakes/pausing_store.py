"""A store whose memory-row writes, made on one chosen thread, wait at a gate: the moment between what
that writer read and what it writes, held open while other writers run (docs/ARCHITECTURE.md, "Write
rules"; tests/integration/test_write_races.py and test_memory_state_machine.py)."""

from __future__ import annotations

import threading
from typing import Any

from engram.domain.ports import MemoryStore

WAIT_S = 60.0


class PausingStore:
    WRITES = frozenset({"update_memory", "update_memories", "supersede", "record_injected", "record_seen"})

    def __init__(self, inner: MemoryStore) -> None:
        self._inner = inner
        self.thread: threading.Thread | None = None  # whose writes wait
        self.reached = threading.Event()  # set when that thread arrived at a write
        self.release = threading.Event()  # set to let it (and any later write of it) through

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._inner, name)
        if name not in self.WRITES:
            return attr

        def gated(*args: Any, **kwargs: Any) -> Any:
            if threading.current_thread() is self.thread:
                self.reached.set()
                assert self.release.wait(WAIT_S), "the paused writer was never released"
            return attr(*args, **kwargs)

        return gated
