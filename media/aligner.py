"""FrameAligner: puts any audio and video onto the 80 ms tick clock.

Sans-I/O: frames go in with their own timestamps, `AlignedChunk`s come out,
one per tick, each holding exactly 1280 samples of 16 kHz mono float32 audio
and the video frame due at that tick for the model's frame rate. Audio drives
the clock (a tick is emitted as soon as its last sample is known), so the
aligner never adds more than the resampler's 10 ms of audio delay. Every
decision that is not a plain pass-through (a sample dropped or filled, a
video frame dropped, repeated or blended) is counted in `stats`.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, Literal

import numpy as np

from media.clock import INPUT_RATE, INPUT_SAMPLES_PER_TICK, TICK, pts_to_sample
from media.pcm import StreamResampler, to_mono_float32


class MediaError(ValueError):
    """A frame that cannot be used at all (garbage, absurd size or rate)."""


@dataclass(frozen=True, slots=True)
class AudioInput:
    """One audio frame as a transport delivers it (PyAV array conventions)."""

    samples: np.ndarray
    sample_rate: int
    pts: int | None
    time_base: Fraction
    format: str = "flt"
    channels: int = 1


@dataclass(frozen=True, slots=True)
class VideoInput:
    """One video frame; `image` is whatever `to_image` turns into HxWx3 uint8."""

    image: Any
    pts: int
    time_base: Fraction


@dataclass(frozen=True, slots=True)
class VideoSample:
    image: np.ndarray
    instant: float  # media seconds of the sampling instant
    source: float  # media seconds of the frame used (the earlier one for a blend)
    kind: Literal["exact", "repeat", "blend"]


@dataclass(frozen=True, slots=True)
class AlignedChunk:
    tick: int
    audio: np.ndarray  # 1280 float32 samples, 16 kHz mono
    video: VideoSample | None = None
    echo: bool = False  # the audio is the agent's own voice coming back, as the echo canceller left it: no one spoke
    voice: bool = False  # the echo canceller heard a voice over the agent's: someone spoke, whatever VAD makes of it
    # The same tick as speex's linear echo filter left it, where AEC3 cancelled (media/echo_cancel.py): the voice
    # whole in the echo's tail; what speech over a held reply is recognised from (media/turn_taking.py)
    heard: np.ndarray | None = None


@dataclass(slots=True)
class AlignerStats:
    ticks: int = 0
    audio_frames: int = 0
    audio_samples_in: int = 0  # at the input rate, like the three below
    audio_samples_dropped: int = 0  # duplicates and data that came too late
    audio_samples_filled: int = 0  # silence for gaps (packet loss)
    audio_reordered: int = 0  # frames that waited for a missing predecessor
    audio_resets: int = 0  # pts jumps/resets and rate changes: re-anchored
    audio_garbage_samples: int = 0  # NaN/inf replaced by silence
    audio_padded: int = 0  # 16 kHz samples of silence padding the last tick on flush
    video_frames: int = 0
    video_sampled: int = 0  # instants that got a picture: exact + repeated + blended
    video_exact: int = 0
    video_dropped: int = 0  # frames never used by any instant
    video_duplicates: int = 0
    video_late: int = 0
    video_repeated: int = 0
    video_blended: int = 0
    video_missing: int = 0
    video_resyncs: int = 0


@dataclass(slots=True, eq=False)
class _Frame:
    t: float
    image: Any
    used: bool = False


@dataclass
class AlignerConfig:
    video_fps: float = 2.0
    reorder_ms: float = 40.0  # how long a frame after a gap waits for the missing one
    max_gap_ms: float = 1000.0  # a larger pts jump re-anchors instead of filling silence
    video_tolerance_s: float = 0.1  # a frame this close to the instant is used as is
    video_blend_span_s: float = 1.0  # neighbours farther apart are not blended
    video_stale_s: float = 2.0  # older than this, a frame is not repeated: no video
    max_av_skew_s: float = 1.0  # video further from audio than this re-anchors
    max_video_frames: int = 16
    max_pending_audio: int = 16
    max_frame_s: float = 1.0
    min_rate: int = 8000
    max_rate: int = 192_000
    max_video_pixels: int = 1920 * 1088

    def __post_init__(self) -> None:
        if not 0 < self.video_fps <= 1 / float(TICK):
            raise ValueError(f"video_fps must be in (0, 12.5], got {self.video_fps}")


def _to_rgb_array(image: Any) -> np.ndarray:
    return np.asarray(image)


class FrameAligner:
    def __init__(
        self,
        config: AlignerConfig | None = None,
        to_image: Callable[[Any], np.ndarray] = _to_rgb_array,
    ) -> None:
        self.config = config or AlignerConfig()
        self.stats = AlignerStats()
        self._to_image = to_image
        # audio, in input-rate samples of the current anchored stream
        self._rate: int | None = None
        self._resampler: StreamResampler | None = None
        self._anchored = False
        self._shift = 0  # added to an incoming sample index to place it
        self._next = 0  # next expected position
        self._pending: list[tuple[int, np.ndarray]] = []  # sorted by position
        # output, in 16 kHz samples since the session started
        self._out: list[np.ndarray] = []
        self._out_len = 0
        self._emitted = 0  # samples handed out in chunks
        self._tick = 0
        # video
        self._v_offset: float | None = None
        self._frames: list[_Frame] = []  # sorted by t, all after the last instant
        self._last: _Frame | None = None  # newest frame at or before the last instant
        self._last_image: np.ndarray | None = None
        self._last_image_of: _Frame | None = None
        self._instant = 0  # index of the next sampling instant

    # ---- audio -----------------------------------------------------------

    @property
    def audio_time(self) -> float:
        """Media seconds of audio known so far (the session timeline's head)."""
        return (self._emitted + self._out_len) / INPUT_RATE

    def in_progress(self) -> tuple[int, np.ndarray]:
        """The tick in progress and its audio so far (16 kHz): placed for good, so it can be listened to before
        the tick is whole."""
        if len(self._out) > 1:
            self._out = [np.concatenate(self._out)]
        return self._tick, self._out[0] if self._out else np.zeros(0, np.float32)

    def push_audio(self, frame: AudioInput) -> list[AlignedChunk]:
        cfg = self.config
        rate = int(frame.sample_rate)
        if not cfg.min_rate <= rate <= cfg.max_rate:
            raise MediaError(f"audio sample rate {rate} Hz is outside {cfg.min_rate}-{cfg.max_rate}")
        try:
            mono = to_mono_float32(frame.samples, frame.format, frame.channels)
        except ValueError as exc:
            raise MediaError(str(exc)) from exc
        n = mono.size
        if n > cfg.max_frame_s * rate:
            raise MediaError(f"audio frame of {n} samples ({n / rate:.2f} s) is too long")
        self.stats.audio_frames += 1
        if n == 0:
            return []
        if not np.isfinite(mono).all():
            bad = ~np.isfinite(mono)
            self.stats.audio_garbage_samples += int(bad.sum())
            mono = np.where(bad, np.float32(0), mono)
        self.stats.audio_samples_in += n
        chunks: list[AlignedChunk] = []
        if rate != self._rate:
            self._change_rate(rate, chunks)
        idx = self._next - self._shift if frame.pts is None else pts_to_sample(frame.pts, frame.time_base, rate)
        if not self._anchored:
            self._anchored = True
            self._shift = self._next - idx
        pos = idx + self._shift
        max_gap = cfg.max_gap_ms / 1000 * rate
        horizon = self._pending[-1][0] + self._pending[-1][1].size if self._pending else self._next
        if pos > horizon + max_gap or pos + n < self._next - max_gap:
            # A pts jump or reset: keep what was pending, then continue seamlessly.
            self._drain_pending(chunks, force=True)
            self.stats.audio_resets += 1
            self._shift += self._next - pos
            pos = self._next
        self._place(pos, mono, chunks)
        return chunks

    def _change_rate(self, rate: int, chunks: list[AlignedChunk]) -> None:
        if self._resampler is not None:
            self._drain_pending(chunks, force=True)
            tail = self._resampler.process(np.zeros(0, np.float32), last=True)
            self._emit(tail, chunks)
            self.stats.audio_resets += 1
        self._anchored = False
        self._rate = rate
        self._resampler = StreamResampler(rate, INPUT_RATE)
        self._next = 0

    def _place(self, pos: int, mono: np.ndarray, chunks: list[AlignedChunk]) -> None:
        if pos + mono.size <= self._next:
            self.stats.audio_samples_dropped += mono.size
            return
        if pos < self._next:
            cut = self._next - pos
            self.stats.audio_samples_dropped += cut
            mono, pos = mono[cut:], self._next
        if pos == self._next:
            self._commit(mono, chunks)
            self._drain_pending(chunks)
            return
        # A gap: hold this frame briefly in case the missing one is only late.
        i = bisect.bisect_left([p for p, _ in self._pending], pos)
        if i < len(self._pending) and self._pending[i][0] == pos:
            self.stats.audio_samples_dropped += mono.size
            return
        self._pending.insert(i, (pos, mono))
        self.stats.audio_reordered += 1
        end = max(p + m.size for p, m in self._pending)
        window = self.config.reorder_ms / 1000 * (self._rate or INPUT_RATE)
        if end - self._next > window or len(self._pending) > self.config.max_pending_audio:
            self._drain_pending(chunks, force=True, first_only=True)

    def _drain_pending(self, chunks: list[AlignedChunk], force: bool = False, first_only: bool = False) -> None:
        while self._pending:
            pos, mono = self._pending[0]
            if pos > self._next:
                if not force:
                    return
                gap = pos - self._next
                self.stats.audio_samples_filled += gap
                self._commit(np.zeros(gap, np.float32), chunks)
                if first_only:
                    force = False
            self._pending.pop(0)
            self._place_committed(pos, mono, chunks)

    def _place_committed(self, pos: int, mono: np.ndarray, chunks: list[AlignedChunk]) -> None:
        if pos + mono.size <= self._next:
            self.stats.audio_samples_dropped += mono.size
            return
        if pos < self._next:
            cut = self._next - pos
            self.stats.audio_samples_dropped += cut
            mono = mono[cut:]
        self._commit(mono, chunks)

    def _commit(self, mono: np.ndarray, chunks: list[AlignedChunk]) -> None:
        self._next += mono.size
        assert self._resampler is not None
        self._emit(self._resampler.process(mono), chunks)

    def _emit(self, samples: np.ndarray, chunks: list[AlignedChunk]) -> None:
        if samples.size:
            self._out.append(samples)
            self._out_len += samples.size
        while self._out_len >= INPUT_SAMPLES_PER_TICK:
            buf = np.concatenate(self._out) if len(self._out) > 1 else self._out[0]
            audio = np.array(buf[:INPUT_SAMPLES_PER_TICK], dtype=np.float32)
            rest = buf[INPUT_SAMPLES_PER_TICK:]
            self._out = [rest] if rest.size else []
            self._out_len = rest.size
            chunks.append(self._make_chunk(audio))

    def flush(self) -> list[AlignedChunk]:
        """End of stream: commit what is pending and pad the last tick with silence."""
        chunks: list[AlignedChunk] = []
        self._drain_pending(chunks, force=True)
        if self._resampler is not None:
            self._emit(self._resampler.process(np.zeros(0, np.float32), last=True), chunks)
            self._resampler = StreamResampler(self._rate or INPUT_RATE, INPUT_RATE)
        if self._out_len:
            pad = INPUT_SAMPLES_PER_TICK - self._out_len
            self.stats.audio_padded += pad
            self._emit(np.zeros(pad, np.float32), chunks)
        return chunks

    # ---- video -----------------------------------------------------------

    def push_video(self, frame: VideoInput) -> None:
        cfg = self.config
        self.stats.video_frames += 1
        raw = frame.pts * frame.time_base.numerator / frame.time_base.denominator
        now = self.audio_time
        if self._v_offset is None or abs(raw + self._v_offset - now) > cfg.max_av_skew_s:
            if self._v_offset is not None:
                self.stats.video_resyncs += 1
            self._v_offset = now - raw
        t = raw + self._v_offset
        last_instant = (self._instant - 1) / cfg.video_fps if self._instant else -1.0
        if self._last is not None and t <= last_instant:
            if abs(t - self._last.t) < 1e-9:
                self.stats.video_duplicates += 1
            else:
                self.stats.video_late += 1
            return
        i = bisect.bisect_left([f.t for f in self._frames], t)
        if i < len(self._frames) and abs(self._frames[i].t - t) < 1e-9:
            self.stats.video_duplicates += 1
            return
        self._frames.insert(i, _Frame(t, frame.image))
        if len(self._frames) > cfg.max_video_frames:
            self._frames.pop(0)
            self.stats.video_dropped += 1

    def _video_for_tick(self, tick: int) -> VideoSample | None:
        fps = self.config.video_fps
        end = float((tick + 1) * TICK)
        if self._instant / fps >= end - 1e-12:
            return None
        # At most one instant falls in a tick (fps <= 12.5); skip any left behind.
        while (self._instant + 1) / fps < end - 1e-12:
            self._instant += 1
        instant = self._instant / fps
        self._instant += 1
        sample = self._choose(instant)
        # Retire frames at or before the instant; the newest stays as `_last`.
        cut = bisect.bisect_right([f.t for f in self._frames], instant)
        if cut:
            retired = ([self._last] if self._last else []) + self._frames[:cut]
            del self._frames[:cut]
            self.stats.video_dropped += sum(1 for f in retired[:-1] if not f.used)
            self._last = retired[-1]
        s = self.stats
        if sample is None:
            s.video_missing += 1
        else:
            s.video_sampled += 1
            if sample.kind == "exact":
                s.video_exact += 1
            elif sample.kind == "repeat":
                s.video_repeated += 1
            else:
                s.video_blended += 1
        return sample

    def _choose(self, instant: float) -> VideoSample | None:
        cfg = self.config
        after = next((f for f in self._frames if f.t > instant), None)
        before_list = [f for f in self._frames if f.t <= instant]
        before = before_list[-1] if before_list else self._last
        candidates = [f for f in (before, after) if f is not None]
        if not candidates:
            return None
        nearest = min(candidates, key=lambda f: (abs(f.t - instant), f.t))
        if abs(nearest.t - instant) <= cfg.video_tolerance_s:
            nearest.used = True
            return VideoSample(self._image(nearest), instant, nearest.t, "exact")
        if before is not None and after is not None and after.t - before.t <= cfg.video_blend_span_s:
            a, b = self._image(before), self._convert(after.image)
            if a.shape == b.shape:
                w = np.float32((instant - before.t) / (after.t - before.t))
                mixed = a * (1 - w) + b.astype(np.float32) * w
                before.used = after.used = True
                return VideoSample(mixed.round().astype(np.uint8), instant, before.t, "blend")
        if before is not None and instant - before.t <= cfg.video_stale_s:
            before.used = True
            return VideoSample(self._image(before), instant, before.t, "repeat")
        return None

    def _image(self, frame: _Frame) -> np.ndarray:
        if self._last_image_of is not frame:
            self._last_image = self._convert(frame.image)
            self._last_image_of = frame
        assert self._last_image is not None
        return self._last_image

    def _convert(self, image: Any) -> np.ndarray:
        arr = self._to_image(image)
        if arr.ndim != 3 or arr.shape[2] != 3 or arr.dtype != np.uint8:
            raise MediaError(f"video frame of shape {arr.shape} and type {arr.dtype}")
        if arr.shape[0] * arr.shape[1] > self.config.max_video_pixels:
            raise MediaError(f"video frame of {arr.shape[1]}x{arr.shape[0]} is too large")
        return arr

    # ---- ticks -----------------------------------------------------------

    def _make_chunk(self, audio: np.ndarray) -> AlignedChunk:
        tick = self._tick
        self._tick += 1
        self._emitted += INPUT_SAMPLES_PER_TICK
        self.stats.ticks += 1
        return AlignedChunk(tick, audio, self._video_for_tick(tick))
