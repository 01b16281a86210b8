"""When output frames are due, from a clock passed in (sans-I/O): the one pacer of the server's speech."""

from __future__ import annotations


class SpeechPacer:
    """When frames are due, from the clock (sans-I/O).

    The schedule starts at the first `due` call. A frame goes on the call
    nearest its due time (up to half a frame early): a caller whose first call
    was a little late must not skip a frame when the next ones are on time (a
    skipped frame stays in the framer's backlog: 20 ms more delay for the rest
    of the session). If the caller was late by more than `max_lag` (a stalled
    loop), one frame goes rather than a burst of the backlog, and the schedule
    moves on by whole frames: it keeps its phase to the caller's ticks (the pts
    still runs on without a jump).
    """

    def __init__(self, frame_s: float, max_lag: float = 0.1) -> None:
        self.frame_s = frame_s
        self.early = frame_s / 2
        self.max_lag = max_lag
        self._next: float | None = None
        self.late_resets = 0

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

    def next_due(self, now: float) -> float:
        """When the next frame is due (now, before the first `due` call)."""
        return now if self._next is None else self._next
