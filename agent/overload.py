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
from dataclasses import dataclass

import numpy as np

LEVELS = ("normal", "shed_video", "text_only", "refuse")


@dataclass
class OverloadConfig:
    first_audio_p95_ms: float = 1500.0
    loop_lag_p95_ms: float = 100.0
    escalate_s: float = 2.0  # pressure this long moves one level up
    recover_s: float = 10.0  # calm this long moves one level down
    window_s: float = 30.0  # samples older than this no longer count (a text-only server has no speech to time)
    lag_window: int = 50  # recent loop-lag samples considered (one every 100 ms)
    # pressure needed to be at each level, and below which it recovers
    enter: tuple[float, float, float] = (1.0, 1.5, 2.0)
    calm: float = 0.7


class OverloadPolicy:
    def __init__(self, config: OverloadConfig | None = None) -> None:
        self.config = config or OverloadConfig()
        self.level = 0
        self.transitions = 0
        self._first_audio: deque[tuple[float, float]] = deque(maxlen=256)  # (time, ms)
        self._lag: deque[float] = deque(maxlen=self.config.lag_window)
        self._since: float | None = None  # when the current trend began
        self._trend = 0  # +1 escalating, -1 recovering

    @property
    def name(self) -> str:
        return LEVELS[self.level]

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

    def update(self, now: float) -> int | None:
        """Re-evaluate; returns the new level when it changed."""
        cfg = self.config
        while self._first_audio and self._first_audio[0][0] < now - cfg.window_s:
            self._first_audio.popleft()
        p = self.pressure()
        want_up = self.level < len(cfg.enter) and p >= cfg.enter[self.level]
        want_down = self.level > 0 and p < cfg.enter[self.level - 1] * cfg.calm
        trend = 1 if want_up else -1 if want_down else 0
        if trend != self._trend:
            self._trend, self._since = trend, now
            return None
        if trend == 0 or self._since is None:
            return None
        if now - self._since >= (cfg.escalate_s if trend > 0 else cfg.recover_s):
            self.level += trend
            self.transitions += 1
            self._since = now
            return self.level
        return None
