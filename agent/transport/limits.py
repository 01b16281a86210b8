"""Per-session rate limiting. Sans-I/O: time is passed in."""

from __future__ import annotations


class TokenBucket:
    """`rate` messages a second on average, bursts up to `burst`."""

    def __init__(self, rate: float, burst: float) -> None:
        self.rate, self.burst = rate, burst
        self._tokens = burst
        self._last: float | None = None

    def allow(self, now: float) -> bool:
        if self._last is not None:
            self._tokens = min(self.burst, self._tokens + (now - self._last) * self.rate)
        self._last = now
        if self._tokens >= 1:
            self._tokens -= 1
            return True
        return False
