"""Edge adapters from PyAV frames (what aiortc delivers) to the aligner's inputs."""

from __future__ import annotations

from fractions import Fraction

import av
import numpy as np

from media.aligner import AudioInput, VideoInput


def _fraction(tb: object) -> Fraction | None:
    """PyAV < 19 gives a Fraction, 19 its own rational type: take either."""
    if tb is None or isinstance(tb, Fraction):
        return tb
    return Fraction(tb.numerator, tb.denominator)  # type: ignore[attr-defined]


def audio_input(frame: av.AudioFrame) -> AudioInput:
    return AudioInput(
        samples=frame.to_ndarray(),
        sample_rate=frame.sample_rate,
        pts=frame.pts,
        time_base=_fraction(frame.time_base) or Fraction(1, frame.sample_rate),
        format=frame.format.name,
        channels=len(frame.layout.channels),
    )


def video_input(frame: av.VideoFrame) -> VideoInput:
    return VideoInput(image=frame, pts=frame.pts or 0, time_base=_fraction(frame.time_base) or Fraction(1, 90_000))


def to_rgb(image: av.VideoFrame | np.ndarray) -> np.ndarray:
    """Convert only the frames the aligner picks, at full size: swscale's unscaled
    yuv420p -> rgb24 path takes 0.13 ms for 640x480, scaling on the way 0.3-0.5 ms;
    models resize to their own grid anyway."""
    if isinstance(image, np.ndarray):
        return image
    return image.to_ndarray(format="rgb24")
