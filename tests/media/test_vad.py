"""The shared voice detector on speech from espeak-ng, on noise and on silence."""

import numpy as np

from benchmarks.harness import spoken
from media.vad import SileroDetector


def test_vad_hears_speech_not_silence_or_noise(tmp_path):
    speech = spoken("The weather is lovely today.", tmp_path, rate=16_000)
    det = SileroDetector()
    ticks = [speech[i : i + 1280] for i in range(0, speech.size - 1280, 1280)]
    voiced = [det(t) for t in ticks]
    assert sum(voiced) >= len(ticks) // 2
    det = SileroDetector()
    noise = np.random.default_rng(0).standard_normal(16_000 * 2).astype(np.float32) * 0.05
    assert not any(det(noise[i : i + 1280]) for i in range(0, noise.size, 1280))
    assert not any(det(np.zeros(1280, np.float32)) for _ in range(10))
