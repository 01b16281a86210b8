"""speex's linear echo filter through ctypes (media/linear_echo.py): it cancels an echo it was never told the
path of, and leaves a voice over that echo whole (no suppressor)."""

from __future__ import annotations

import numpy as np
import pytest

from media.linear_echo import LinearEcho

RATE, FRAME = 16_000, 160


def _signals(seconds: float = 8.0):
    rng = np.random.default_rng(3)
    n = int(seconds * RATE)
    # the far end: noise shaped like speech's loudness (syllables), as the agent's voice would be
    envelope = np.repeat(rng.uniform(0.2, 1.0, n // 1600 + 1), 1600)[:n]
    far = (rng.standard_normal(n) * 0.1 * envelope).astype(np.float32)
    start = int(6.0 * RATE)  # the voice's onset; the reply is held 160 ms later, as a session holds it
    far[start + int(0.16 * RATE) :] = 0
    ir = np.zeros(int(0.25 * RATE), np.float32)  # 120 ms of delay, then a decaying room
    tail = np.arange(ir.size - 1920)
    ir[1920:] = rng.standard_normal(tail.size) * np.exp(-tail / 800) * 0.1
    ir[1920] = 0.5
    echo = np.convolve(far, ir)[:n].astype(np.float32)
    voice = np.zeros(n, np.float32)
    t = np.arange(n - start) / RATE
    # a 700 Hz voice: speex's DC notch turns the phase of low tones a little, which a correlation would count
    voice[start:] = 0.2 * np.sin(2 * np.pi * 700 * t) * np.sin(2 * np.pi * 3 * t) ** 2
    return far, echo, voice, start


def _run(canceller: LinearEcho, mic: np.ndarray, far: np.ndarray) -> np.ndarray:
    frames = range(0, mic.size, FRAME)
    return np.concatenate([canceller.process(mic[s : s + FRAME], far[s : s + FRAME]) for s in frames])


def test_it_cancels_the_echo_and_leaves_the_voice_over_it():
    far, echo, voice, start = _signals()
    out = _run(LinearEcho(FRAME, taps=4096), echo + voice, far)
    settled = slice(3 * RATE, start)  # after three seconds of adapting, before the voice
    reduction = 10 * np.log10(np.mean(echo[settled] ** 2) / np.mean(out[settled] ** 2))
    print(f"echo reduction {reduction:.1f} dB")
    assert reduction > 10
    during = slice(start, None)  # the voice from its onset: over the echo's tail too
    kept = np.corrcoef(out[during], voice[during])[0, 1]
    assert kept > 0.95, kept  # the voice comes through as it was said: no suppressor takes it for echo
    ratio = 10 * np.log10(np.mean(out[during] ** 2) / np.mean(voice[during] ** 2))
    assert abs(ratio) < 1.5, ratio


def test_int16_frames_and_a_clear_error_for_wrong_ones():
    canceller = LinearEcho(FRAME)
    out = canceller.process(np.full(FRAME, 1000, np.int16), np.zeros(FRAME, np.int16))
    assert out.dtype == np.int16 and out.shape == (FRAME,)
    with pytest.raises(ValueError, match="frames of 160 samples"):
        canceller.process(np.zeros(100, np.float32), np.zeros(100, np.float32))
    canceller.close()
    canceller.close()  # twice is harmless
