"""The one media clock: 80 ms ticks counted from the session's start.

Every stream position (an audio sample index at some rate, a pts in some time
base, an output frame index) is converted through exact rational arithmetic so
that no rounding error accumulates over a long session.
"""

from __future__ import annotations

from collections.abc import Callable
from fractions import Fraction

TICK = Fraction(80, 1000)  # seconds
TICK_MS = 80
INPUT_RATE = 16_000
INPUT_SAMPLES_PER_TICK = 1280
OUTPUT_RATE = 24_000
OUTPUT_SAMPLES_PER_FRAME = 1920

Clock = Callable[[], float]
"""Returns seconds as a float; monotonic. Injected so the core is testable."""


class VirtualClock:
    """A clock that only moves when told to; for deterministic tests."""

    def __init__(self, start: float = 0.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


def samples_per_tick(rate: int) -> Fraction:
    """Samples in one tick at `rate`; a fraction for rates like 44.1 kHz."""
    return TICK * rate


def sample_to_tick(index: int, rate: int) -> int:
    """The tick holding sample `index` (floor)."""
    return int(Fraction(index) / samples_per_tick(rate) // 1)


def tick_to_sample(tick: int, rate: int) -> int:
    """The first sample index that falls in `tick` at `rate` (ceiling)."""
    return -int(-(tick * samples_per_tick(rate)) // 1)


def pts_to_seconds(pts: int, time_base: Fraction) -> Fraction:
    return pts * Fraction(time_base)


def pts_to_sample(pts: int, time_base: Fraction, rate: int) -> int:
    """The sample index at `rate` that a pts in `time_base` stands for (rounded)."""
    if time_base.numerator == 1 and time_base.denominator == rate:
        return pts  # the usual case, without Fraction arithmetic on the hot path
    return round(pts * Fraction(time_base) * rate)


def sample_to_pts(index: int, rate: int, time_base: Fraction) -> int:
    return round(Fraction(index, rate) / Fraction(time_base))


def pts_to_tick(pts: int, time_base: Fraction) -> int:
    return int(pts * Fraction(time_base) / TICK // 1)


def tick_to_pts(tick: int, time_base: Fraction) -> int:
    return round(tick * TICK / Fraction(time_base))


def tick_to_seconds(tick: int) -> Fraction:
    return tick * TICK
