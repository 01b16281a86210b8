"""When frames are due, from a clock passed in (sans-I/O): the one pacer of everything sent on a clock.

The server's speech, the `/v1/realtime` deltas, the test client's microphone
and camera, the load generator's clients and its loop timer all pace here.
They differ only in what a late caller does, which is the pacer's two
settings, not a loop of their own.
"""

from __future__ import annotations

import math


class Pacer:
    """Frame k is due at start + k * frame_s; the start is `start`, or the first call's `now`.

    A frame goes on the call nearest its due time, up to `early` before it.
    A caller late by up to `max_lag` sends every frame it owes; later than
    that (a stalled loop), one frame goes rather than a burst of the backlog,
    and the schedule moves on by whole frames: it keeps its phase to the
    caller's ticks. The defaults are a live source's clock (a microphone, a
    camera, a timer): each frame at its time, and what was captured during a
    stall all sent at once, as a browser's capture does. `speech` is the
    server's rule for what it says.
    """

    def __init__(
        self, frame_s: float, early: float = 0.0, max_lag: float = math.inf, start: float | None = None
    ) -> None:
        self.frame_s = frame_s
        self.early = early
        self.max_lag = max_lag
        self._next = start
        self._owed = 0  # frames `due` gave that `take` has not handed out yet
        self.late_resets = 0

    @classmethod
    def speech(cls, frame_s: float, max_lag: float = 0.1) -> Pacer:
        """The server's speech: a caller whose first call was a little late must not skip a frame when the
        next ones are on time (a skipped frame stays in the framer's backlog: 20 ms more delay for the rest
        of the session), hence half a frame early; a stall is not made up in a burst (the pts still runs on
        without a jump)."""
        return cls(frame_s, early=frame_s / 2, max_lag=max_lag)

    def due(self, now: float) -> int:
        """Frames to send now; the caller sends them."""
        if self._next is None:
            self._next = now
        late = now - self._next
        if late < -self.early:
            return 0
        n = int((late + self.early) / self.frame_s) + 1
        self._next += n * self.frame_s
        if late > self.max_lag:
            self.late_resets += 1
            return 1
        return n

    def take(self, now: float) -> bool:
        """Whether one frame goes now, for a caller that sends one at a time (what `due` owes goes on the
        next calls)."""
        if not self._owed:
            self._owed = self.due(now)
        if self._owed:
            self._owed -= 1
            return True
        return False

    def next_due(self, now: float) -> float:
        """When the next frame is due (now, before the first call or while frames are owed)."""
        return now if self._next is None or self._owed else self._next
