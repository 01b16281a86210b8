"""Energy-based end-of-speech detection on the tick clock.

Sans-I/O: one call per 80 ms tick. A turn starts after `start_ticks` voiced
ticks in a row and ends after `end_silence_ms` without a voiced tick. The
threshold follows the noise floor (a slow-rising minimum tracker) so steady
background noise does not hold a turn open forever.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

import numpy as np

from media.clock import TICK_MS


class EndpointEvent(Enum):
    START = "start"
    END = "end"


@dataclass
class EndpointConfig:
    threshold_dbfs: float = -42.0  # never call quieter than this speech
    snr_db: float = 12.0  # ... nor anything less than this above the noise floor
    start_ticks: int = 2
    end_silence_ms: int = 480
    max_turn_ms: int = 30_000


def rms_dbfs(audio: np.ndarray) -> float:
    if audio.size == 0:
        return -120.0
    power = float(np.dot(audio, audio)) / audio.size
    return 10.0 * np.log10(power + 1e-12)


class EnergyEndpointer:
    def __init__(self, config: EndpointConfig | None = None) -> None:
        self.config = config or EndpointConfig()
        self.in_speech = False
        self.start_tick: int | None = None
        self.last_voiced_tick: int | None = None
        self._run = 0
        self._noise: float | None = None

    def update(self, tick: int, audio: np.ndarray) -> EndpointEvent | None:
        cfg = self.config
        level = rms_dbfs(audio)
        # The floor starts at the first tick, falls at once and rises slowly
        # (about 2 %/tick), so it stays under speech but catches steady noise.
        noise = level if self._noise is None or level < self._noise else self._noise
        voiced = level > max(cfg.threshold_dbfs, noise + cfg.snr_db)
        self._noise = noise + 0.02 * (level - noise)
        if not self.in_speech:
            self._run = self._run + 1 if voiced else 0
            if self._run >= cfg.start_ticks:
                self.in_speech = True
                self.start_tick = tick - cfg.start_ticks + 1
                self.last_voiced_tick = tick
                return EndpointEvent.START
            return None
        if voiced:
            self.last_voiced_tick = tick
        assert self.last_voiced_tick is not None and self.start_tick is not None
        silent_ms = (tick - self.last_voiced_tick) * TICK_MS
        if silent_ms >= cfg.end_silence_ms or (tick - self.start_tick + 1) * TICK_MS >= cfg.max_turn_ms:
            self.in_speech = False
            self._run = 0
            return EndpointEvent.END
        return None
