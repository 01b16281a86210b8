"""The overload policy: shed video, then speech, then sessions; and recover.

Sans-I/O with an injected clock. It watches two signals over a recent window:
the p95 of time to first speech frame (per turn) and of event-loop lag. Their
ratio to the configured thresholds is the pressure. Sustained pressure steps
the level up one at a time; sustained calm steps it down (hysteresis, so the
level does not flap):

  0 normal -> 1 shed video -> 2 text-only replies for new turns -> 3 refuse new sessions
"""

from __future__ import annotations

from collections import deque
from enum import IntEnum

import numpy as np

from agent.config import OverloadConfig

LAG_WINDOW = 50  # recent loop-lag samples considered (one every 100 ms)
ENTER = (1.0, 1.5, 2.0)  # pressure needed to be at levels 1, 2, 3
CALM = 0.7  # a level is left below this share of the pressure that entered it


class Level(IntEnum):
    NORMAL = 0
    SHED_VIDEO = 1
    TEXT_ONLY = 2
    REFUSE = 3


class OverloadPolicy:
    def __init__(self, config: OverloadConfig | None = None) -> None:
        self.config = config or OverloadConfig()
        self.level = Level.NORMAL
        self.transitions = 0
        self._first_audio: deque[tuple[float, float]] = deque(maxlen=256)  # (time, ms)
        self._lag: deque[float] = deque(maxlen=LAG_WINDOW)
        self._since: float | None = None  # when the current trend began
        self._trend = 0  # +1 escalating, -1 recovering

    @property
    def name(self) -> str:
        return Level(self.level).name.lower()

    def observe_first_audio(self, ms: float, now: float) -> None:
        self._first_audio.append((now, ms))

    def observe_loop_lag(self, ms: float) -> None:
        self._lag.append(ms)

    def pressure(self) -> float:
        cfg = self.config
        p = 0.0
        if self._first_audio:
            p = max(p, float(np.percentile([ms for _, ms in self._first_audio], 95)) / cfg.first_audio_p95_ms)
        if self._lag:
            p = max(p, float(np.percentile(self._lag, 95)) / cfg.loop_lag_p95_ms)
        return p

    def update(self, now: float) -> Level | None:
        """Re-evaluate; returns the new level when it changed."""
        cfg = self.config
        while self._first_audio and self._first_audio[0][0] < now - cfg.window_s:
            self._first_audio.popleft()
        p = self.pressure()
        want_up = self.level < len(ENTER) and p >= ENTER[self.level]
        want_down = self.level > 0 and p < ENTER[self.level - 1] * CALM
        trend = 1 if want_up else -1 if want_down else 0
        if trend != self._trend:
            self._trend, self._since = trend, now
            return None
        if trend == 0 or self._since is None:
            return None
        if now - self._since >= (cfg.escalate_s if trend > 0 else cfg.recover_s):
            self.level = Level(self.level + trend)
            self.transitions += 1
            self._since = now
            return self.level
        return None
