"""A voice over the agent's echo, found at its onset: what lets speech over a reply hold it in time.

Sans-I/O, one call per 80 ms tick of eight 10 ms frames, made by the echo
canceller while it cancels. VAD on what AEC3 leaves of a voice over the echo
says speech late: AEC3's suppressor takes a voice's first 100-200 ms over the
echo for echo, and Silero wants more than it lets through. Two cheaper cues
see the onset sooner, and each alone is fooled by what the other is not:

- the canceller's output rose far above its own floor and is not far below
  its input (a voice AEC3 cannot explain); alone it also fires where AEC3
  leaks the echo (its first second, after a pause in the reply);
- the microphone's spectrum is above what the echo could be in enough bands:
  each band's energy against the reference's at the echo path's delay (a
  little jitter each side, the room's ringing as a slow decay), scaled by the
  band's echo gain, tracked as a high percentile of what came back. A leak
  is the reference coming back, so this does not fire on it; alone it fires
  on the user's louder words and the echo's odd band.

A frame with both is a voice over the echo (`DoubleTalk.tick`). On synthetic
rooms (sox's reverb, 80-300 ms, -3 to -15 dB, no codec), VAD or the cue took
a barge-in for speech a median 86-124 ms after its onset (tick ends), VAD
alone 120-207 ms, with no more ticks of the echo alone taken for speech. Over
WebRTC (Opus both ways) the gain was 0-17 ms and one-tick holds of replies
no one spoke over five times as many: off unless `media.echo_onset` (the
figures in docs/benchmarks.md).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

FRAME = 160  # 10 ms at 16 kHz
WINDOW = 2 * FRAME  # each frame's spectrum over it and the frame before (Hann)


@dataclass
class DoubleTalkConfig:
    rise_db: float = 25.0  # the canceller's output this far above its floor ...
    ratio_db: float = -15.0  # ... and no further below its input than this: a voice it cannot explain ...
    run_frames: int = 2  # ... for this many frames in a row
    bands: int = 10  # log-spaced, 250 Hz - 4 kHz
    margin_db: float = 3.0  # a band this far above what the echo could be ...
    band_fraction: float = 0.1  # ... in this share of the bands
    band_floor_db: float = 12.0  # and this far above the band's noise floor
    jitter_ms: int = 50  # the echo looked for this far either side of the path's delay ...
    ringing_ms: int = 50  # ... and this much later (the room's first reflections)
    decay_db_per_frame: float = 0.5  # the room's ringing after that, at most this fast
    gain_percentile: float = 0.9  # a band's echo gain: this percentile of what came back over what played
    unknown_delay_ms: int = 400  # no estimate of the path yet: the echo looked for anywhere up to this


class DoubleTalk:
    def __init__(self, config: DoubleTalkConfig | None = None, max_delay_ms: int = 1500) -> None:
        self.config = cfg = config or DoubleTalkConfig()
        edges = np.geomspace(250, 4000, cfg.bands + 1) / (16_000 / WINDOW)
        self._edges = np.round(edges).astype(int)
        self._window = np.hanning(WINDOW + 1)[:-1].astype(np.float32)
        lags = (max_delay_ms + cfg.jitter_ms + cfg.ringing_ms) // 10 + 1
        self._far = np.full((lags + 8, cfg.bands), -3.0, np.float32)  # log10 band energies, newest last
        self._before = np.zeros((2, FRAME), np.float32)  # the last frame seen of each side: far, near
        self._skipped = 0  # frames not looked at since the last tick (nothing played)
        self._ringing = np.full(cfg.bands, -3.0, np.float32)  # the echo's envelope: the reference, ringing down
        self._gain = np.zeros(cfg.bands, np.float32)  # log10 echo gain per band; 0 dB until learnt
        self._noise: np.ndarray | None = None  # log10 band noise floor of the microphone
        self._out_floor: float | None = None  # dB: the canceller's output floor
        self._run = 0  # frames in a row the output cue held
        self._margin = cfg.margin_db / 10

    def skip(self, frames: int) -> None:
        """Frames that were not looked at (nothing played): counted now, the history moved on at the next tick
        (a session that listens costs nothing here)."""
        self._skipped += frames

    def tick(self, far: np.ndarray, near: np.ndarray, out: np.ndarray, delay_ms: int | None) -> bool:
        """One tick's frames as (n, 160) arrays at int16 scale: what played (the reference at the moment of
        capture), what the microphone heard, and what the canceller left of it. True: a voice over the echo."""
        far, near = np.asarray(far, np.float32), np.asarray(near, np.float32)
        n = far.shape[0]
        if self._skipped:  # the reference's history goes on, silent, over the frames not looked at
            self._push(np.full((min(self._skipped, self._far.shape[0]), self.config.bands), -3.0, np.float32))
            self._before[:] = 0.0
            self._run = self._skipped = 0
        near_energy = np.einsum("ij,ij->i", near, near) / FRAME + 1.0
        out_energy = np.einsum("ij,ij->i", out, out) / FRAME + 1.0
        cue_out = self._output_rose(10 * np.log10(out_energy), 10 * np.log10(out_energy / near_energy))
        near_bands = self._bands(near, 1)
        self._push(self._bands(far, 0))
        cue_bands = self._above_echo(near_bands, n, delay_ms)
        return bool(np.any(cue_out & cue_bands))

    def _push(self, rows: np.ndarray) -> None:
        """The reference's newest band energies onto the end of its history, in place."""
        k = rows.shape[0]
        self._far[:-k] = self._far[k:]
        self._far[-k:] = rows

    def _output_rose(self, out_db: np.ndarray, ratio_db: np.ndarray) -> np.ndarray:
        cfg = self.config
        floor = self._out_floor if self._out_floor is not None else float(out_db[0])
        hit = np.zeros(out_db.size, bool)
        for i, (level, ratio) in enumerate(zip(out_db.tolist(), ratio_db.tolist(), strict=True)):
            self._run = self._run + 1 if level > floor + cfg.rise_db and ratio > cfg.ratio_db else 0
            hit[i] = self._run >= cfg.run_frames
            floor = min(level, floor + 0.05)  # down at once, up 5 dB a second: under speech, over a noisy room
        self._out_floor = floor
        return hit

    def _bands(self, frames: np.ndarray, side: int) -> np.ndarray:
        """log10 energy in each band of each frame's spectrum (over it and the frame before); `side` 0 is the
        reference, 1 the microphone."""
        joined = np.concatenate((self._before[side][None, :], frames))
        self._before[side] = frames[-1]
        windows = np.concatenate((joined[:-1], joined[1:]), axis=1) * self._window
        power = np.abs(np.fft.rfft(windows, axis=1)) ** 2
        cum = np.cumsum(power, axis=1)
        e = self._edges
        return np.log10(np.maximum(cum[:, e[1:] - 1] - cum[:, e[:-1] - 1], 1e-3)).astype(np.float32)

    def _above_echo(self, near: np.ndarray, n: int, delay_ms: int | None) -> np.ndarray:
        cfg = self.config
        if delay_ms is None:
            lo, hi = 0, cfg.unknown_delay_ms // 10
        else:
            lo, hi = max(0, (delay_ms - cfg.jitter_ms) // 10), (delay_ms + cfg.jitter_ms + cfg.ringing_ms) // 10
        size = self._far.shape[0]
        hi = min(hi, size - n)
        q, step = cfg.gain_percentile, 0.05  # the gain's percentile tracker: up 0.5 dB, down 0.5 (1 - q) / q dB
        if self._noise is None:
            self._noise = near[0].copy()
        # for each of the tick's frames, the loudest the reference was at the lags its echo may come back at
        lagged = np.lib.stride_tricks.sliding_window_view(self._far[size - n - hi : size - lo], hi - lo + 1, axis=0)
        direct = lagged.max(axis=2)
        down, floor = cfg.decay_db_per_frame / 10, cfg.band_floor_db / 10
        hit = np.zeros(n, bool)
        for i in range(n):
            self._ringing = echo = np.maximum(direct[i], self._ringing - down)
            self._noise = np.minimum(near[i], self._noise + 0.005)
            ratio = near[i] - echo
            playing = echo > 5.2  # the reference audible in the band (int16 scale: 1000 a sample, squared, summed)
            self._gain += np.where(playing, np.where(ratio > self._gain, step, -step * (1 - q) / q), 0)
            above = (ratio - self._gain > self._margin) & (near[i] > self._noise + floor)
            hit[i] = np.count_nonzero(above) >= cfg.band_fraction * above.size
        return hit
