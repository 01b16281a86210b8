"""OutputFramer: 80 ms speech frames in, 20 ms packets out, on a steady pts.

Sans-I/O; the speech sender's pacer pulls one 20 ms frame per 20 ms. Each Opus
packet carries 20 ms (WebRTC's usual packet, and the least delay), so 80 ms
frames must be cut into 20 ms ones. The pts is a running sample count that
never jumps: when there is nothing to say the framer returns silence. The
backlog is capped (the oldest samples go, counted) so late frames after an
underrun never add delay for good, and `flush` empties it at once for
barge-in. `listener` hears every frame handed out, silence too: what was
actually sent (the echo canceller's reference).

Live output (the echo stream) keeps latency low without cutting sounds: past
`trim_above_ms` the backlog sheds silence at its head (what a jitter would
have added, trimmed in the next pause, as adaptive jitter buffers do); only
past `max_backlog_ms` does anything audible go.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from media.clock import OUTPUT_RATE
from media.pcm import StreamResampler, float_to_s16

if TYPE_CHECKING:
    from media.turn_taking import Floor


@dataclass(slots=True)
class FramerStats:
    frames: int = 0  # 20 ms frames handed out
    speech_frames: int = 0  # ... that carried any speech
    underruns: int = 0  # frames that ran short while speech was flowing
    dropped_samples: int = 0  # cut by the backlog cap
    trimmed_samples: int = 0  # silence shed to keep a live backlog short
    flushed_samples: int = 0  # cut by barge-in
    held_frames: int = 0  # silence while the reply was held (speech over it being judged)


@dataclass(frozen=True, slots=True)
class OutFrame:
    samples: np.ndarray  # int16 mono
    pts: int  # in samples at `rate`
    rate: int


class OutputFramer:
    def __init__(
        self,
        rate: int = OUTPUT_RATE,
        in_rate: int = OUTPUT_RATE,
        frame_ms: int = 20,
        max_backlog_ms: int = 400,
        trim_above_ms: int | None = None,
    ) -> None:
        if rate * frame_ms % 1000:
            raise ValueError(f"{frame_ms} ms is not a whole number of samples at {rate} Hz")
        self.rate = rate
        self.frame_samples = rate * frame_ms // 1000
        self.max_backlog = rate * max_backlog_ms // 1000
        self.trim_above = None if trim_above_ms is None else rate * trim_above_ms // 1000
        self.stats = FramerStats()
        self._resampler = StreamResampler(in_rate, rate, quality="HQ")
        self._buf = np.zeros(0, np.float32)
        self._pts = 0
        self._flowing = False  # speech is being played and no end was marked
        self._silence = np.zeros(self.frame_samples, np.int16)
        self.listener: Callable[[np.ndarray], None] | None = None
        self.floor: Floor | None = None  # while it is held (speech over the reply being judged), silence

    @property
    def backlog_ms(self) -> float:
        return self._buf.size * 1000 / self.rate

    @property
    def pts(self) -> int:
        return self._pts

    def push(self, pcm: np.ndarray) -> None:
        """Queue speech (float32 at `in_rate`)."""
        data = self._resampler.process(np.asarray(pcm, np.float32))
        if not data.size:
            return
        self._buf = np.concatenate((self._buf, data)) if self._buf.size else data
        excess = self._buf.size - self.max_backlog
        if excess > 0:
            self._buf = self._buf[excess:]
            self.stats.dropped_samples += excess
        self._trim()
        self._flowing = True

    SILENT = 10 ** (-50 / 20)  # -50 dBFS: below any voice, above codec noise on silence

    def _trim(self) -> None:
        """Shed the silence at the head of the backlog, up to what it holds beyond `trim_above`."""
        if self.trim_above is None or self._buf.size <= self.trim_above:
            return
        excess = self._buf.size - self.trim_above
        loud = np.flatnonzero(np.abs(self._buf[:excess]) >= self.SILENT)
        quiet = int(loud[0]) if loud.size else excess
        if quiet:
            self._buf = self._buf[quiet:]
            self.stats.trimmed_samples += quiet

    def end_of_speech(self) -> None:
        """The speaker finished: what follows the backlog is silence, not an underrun."""
        self._flowing = False

    def flush(self) -> int:
        n = self._buf.size
        self._buf = np.zeros(0, np.float32)
        self.stats.flushed_samples += n
        self._flowing = False
        return n

    def pull(self) -> OutFrame:
        out = self._pull()
        if self.listener is not None:
            self.listener(out.samples)
        return out

    def _pull(self) -> OutFrame:
        self._trim()  # a pause that reached the head since the push
        n = self.frame_samples
        self.stats.frames += 1
        pts = self._pts
        self._pts += n
        if self.floor is not None and self.floor.cut:
            self.flush()  # a barge-in: the reply goes now, not when the engine's cancel reaches the session
            self.floor.cut = self.floor.held = False
        if self.floor is not None and self.floor.held:
            self.stats.held_frames += 1
            return OutFrame(self._silence, pts, self.rate)
        have = self._buf.size
        if have == 0:
            if self._flowing:
                self.stats.underruns += 1
            return OutFrame(self._silence, pts, self.rate)
        self.stats.speech_frames += 1
        if have < n:
            if self._flowing:
                self.stats.underruns += 1
            out = np.zeros(n, np.int16)
            out[:have] = float_to_s16(self._buf)
            self._buf = np.zeros(0, np.float32)
            return OutFrame(out, pts, self.rate)
        out = float_to_s16(self._buf[:n])
        self._buf = self._buf[n:]
        return OutFrame(out, pts, self.rate)
