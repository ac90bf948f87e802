"""``RateLimiter`` in process memory: the local server's counters (one process, lost on restart)."""

from __future__ import annotations

import threading
from collections import OrderedDict

from engram.domain.ports import Clock


class InProcessRateLimiter:
    def __init__(self, *, clock: Clock, max_keys: int = 100_000) -> None:
        self._clock = clock  # windows follow the container's clock (docs/ARCHITECTURE.md, "One clock")
        self._max_keys = max_keys
        self._lock = threading.Lock()
        self._windows: OrderedDict[str, tuple[int, int]] = OrderedDict()  # key -> (window start, count)

    def hit(self, key: str, limit: int, window_seconds: int) -> float | None:
        now = self._clock.now().timestamp()
        start = int(now // window_seconds) * window_seconds
        with self._lock:
            window, count = self._windows.pop(key, (start, 0))
            if window != start:
                count = 0
            self._windows[key] = (start, count)  # most recently used last
            while len(self._windows) > self._max_keys:
                self._windows.popitem(last=False)
            if count >= limit:
                return max(start + window_seconds - now, 0.001)
            self._windows[key] = (start, count + 1)
            return None

    def reset(self, key: str, window_seconds: int) -> None:
        with self._lock:
            self._windows.pop(key, None)
