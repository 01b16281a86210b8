"""The agent's own voice taken out of what the microphone heard, on the server, with the exact reference.

Sans-I/O: `played(samples)` with every 20 ms frame as it leaves (the framer's
output, so what a barge-in flushed never counts), `clean(audio)` on each
80 ms tick of microphone audio before anything listens to it. A client with
no canceller of its own (the page with its processing off, a Realtime
client, a phone on speaker, a car's loudspeakers) hears the agent back; VAD
would take that for the user talking over the reply.

The canceller is WebRTC's AudioProcessingModule (AEC3 and the high-pass
filter; its noise suppressor separately, where the input is noisy), from
the `livekit` wheel, which ships it prebuilt and runs it without any LiveKit
server (`WebRtcApm`: the one place that knows the binding).

Timing. AEC3 pairs render (what was played) and capture (what was heard) by
count, 10 ms frames in turn, and finds the echo's delay itself within about
400 ms. The reference comes at the pace it is played and the microphone in
80 ms ticks, so a tick takes exactly as many reference frames as it has
capture frames, from a queue that absorbs the jitter between them (short of
frames: silence, counted; more than `max_queue_ms` left over: the oldest go,
counted). A longer echo path (a phone network, a car's Bluetooth) is found
by a coarse estimator (the two sides' frame energies cross-correlated every
half second while the agent speaks); when two estimates agree and AEC3 has not
been cancelling well, the reference is held back by all but `aec_delay_ms`
of it, so AEC3 sees a delay it can search.

No echo at all (headphones, a client that plays nothing aloud) is found by
the same estimator: the microphone's energy follows the reference at no
delay. AEC3 does not learn that soon (its suppressor takes the user's voice
over the reply for an echo it has not found, and silences it), so from then
on the microphone bypasses it: only the noise suppressor and high-pass
filter run, until an echo shows up.

Speech over a held reply. AEC3's suppressor takes a voice that starts in the echo's tail for echo: a short
utterance right after the reply is held loses its first few hundred milliseconds, and the recogniser hears
whatever fits what is left ("Got it." as "Partly firm."). So wherever AEC3 cancels, speex's linear filter alone
(`media/linear_echo.py`, 20 ms frames) runs beside it on the same reference, and each tick also carries what it
left (`heard`): less echo taken out (9 dB against 24), the voice whole; only once it has adapted (it takes
seconds of the agent's speech). Speech over a reply is recognised from it (`media/turn_taking.py`); everything
else (VAD, the echo marks, every other turn) hears AEC3's output.

Cost. The canceller runs only while something played in the last `tail_s`
(and an echo may be there), and not once the microphone has been silent for
`tail_s` while it played (a client that sends silence while it listens); the
noise suppressor only while the input's noise floor is at `noisy_dbfs` or
above (a car). Otherwise a tick passes unchanged and nothing runs. AEC3
delays what it processes by 8 ms, the noise suppressor by 6.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from media.clock import INPUT_RATE, OUTPUT_RATE
from media.double_talk import DoubleTalk, DoubleTalkConfig
from media.linear_echo import LinearEcho, SpeexUnavailable
from media.pcm import StreamResampler

FRAME = INPUT_RATE // 100  # 10 ms: the frame WebRTC's audio processing works on
FRAME_MS = 10
MIN_OVERLAP = 250  # frames the two envelopes share at the longest delay: fewer, and chance peaks pass 0.3


class AudioProcessor(Protocol):
    """One 10 ms int16 frame at a time: `reverse` what was played, `capture` what was heard (in place)."""

    def reverse(self, frame: np.ndarray) -> None: ...

    def capture(self, frame: np.ndarray) -> None: ...


def load_audio_processing() -> None:
    """Load the `livekit` wheel's native library now (0.2 s), not on the event loop at a session's first reply."""
    from livekit import rtc

    rtc.AudioProcessingModule(echo_cancellation=True)


class WebRtcApm:
    """WebRTC's AudioProcessingModule through the `livekit` wheel's FFI, at 16 kHz mono.

    Two frames are allocated once and reused: the binding processes the buffer it is handed in place."""

    def __init__(self, echo_cancellation: bool, noise_suppression: bool, high_pass_filter: bool = True) -> None:
        from livekit import rtc  # its native library loads on first use, not when media/ is imported

        self._apm = rtc.AudioProcessingModule(
            echo_cancellation=echo_cancellation, noise_suppression=noise_suppression, high_pass_filter=high_pass_filter
        )
        self._rev = rtc.AudioFrame(bytearray(2 * FRAME), INPUT_RATE, 1, FRAME)
        self._cap = rtc.AudioFrame(bytearray(2 * FRAME), INPUT_RATE, 1, FRAME)
        self._rev_pcm = np.asarray(self._rev.data)
        self._cap_pcm = np.asarray(self._cap.data)

    def reverse(self, frame: np.ndarray) -> None:
        self._rev_pcm[:] = frame
        self._apm.process_reverse_stream(self._rev)

    def capture(self, frame: np.ndarray) -> None:
        self._cap_pcm[:] = frame
        self._apm.process_stream(self._cap)
        frame[:] = self._cap_pcm


@dataclass
class EchoConfig:
    # WebRTC's noise suppressor runs only where the input is noisy: on clean speech it cost Moonshine words
    # (espeak-ng voices: 11 % word errors raw, 16 % suppressed)
    noise_suppression: bool = True
    noisy_dbfs: float = -45.0  # a noise floor this loud or louder is suppressed
    tail_s: float = 1.5  # the echo of the last sound played may come back this long after it
    quiet_dbfs: float = -55.0  # what was played this quiet is silence: no echo of it to cancel
    silent_dbfs: float = -60.0  # microphone audio this quiet (a client sending silence) has no echo in it
    max_queue_ms: int = 40  # reference left over after a tick's share; more is dropped (clock drift, a stall)
    aec_delay_ms: int = 200  # a coarse delay beyond max_aec_delay_ms is held back to this much
    max_aec_delay_ms: int = 400  # AEC3 finds delays up to about this itself
    max_delay_ms: int = 1500  # the longest echo path the coarse estimator looks for
    reverb_ms: int = 300  # how long a room rings after the echo's delay: while the reply is held, cancelled still
    # A tick the canceller took this much out of was the agent's voice, not the user's (`echo_only`): AEC3's
    # suppressor leaks now and then (1-2 s into a reply, and after a pause), and Silero takes what it let
    # through for speech over the reply. A voice over the echo loses less (synthetic rooms: 26 % of its ticks).
    gate_db: float = 12.0
    good_reduction_db: float = 15.0  # echo reduced this much lately: the reference's timing is left alone
    # A voice over the echo found at its onset (media/double_talk.py), sooner than VAD hears it in AEC3's output:
    # the tick is marked (`voice_over_echo`), and speech over a reply holds it a tick or two earlier. None: off
    double_talk: DoubleTalkConfig | None = None
    # Speex's linear filter beside AEC3 (see the module's docstring): what speech over a held reply is heard from
    linear_heard: bool = True
    linear_frame_ms: int = 20  # 10 ms costs twice the CPU (1 % of a core against 0.56 %) for the same filter
    linear_taps: int = 8192  # 512 ms of echo path: a room's delay and its reverberation
    # ... used only once it cancels this much of the echo while the agent speaks (its energy over the last second
    # or so): speex adapts slowly (synthetic rooms: 2-4 dB after two seconds of speech, 8-12 after four), and
    # in a session's first replies what it leaves is mostly echo, which AEC3 does take out
    linear_min_db: float = 6.0
    # The envelopes' correlation at the best delay that says an echo is there; below no_echo_score three times
    # running (half a second apart), before any echo was found, there is none. Measured on synthetic rooms
    # (speech, reverb): no echo peaks at 0.09-0.32 by chance, an echo at -30 dB scores 0.45-0.68, at -6 dB
    # 0.55-0.72; over WebRTC an echo scores lower (the reference's timing jitters), so "none" is said warily.
    echo_score: float = 0.35
    no_echo_score: float = 0.25


@dataclass(slots=True)
class EchoStats:
    frames: int = 0  # 10 ms capture frames that went through the canceller or the noise suppressor
    skipped_frames: int = 0  # passed unchanged: nothing played lately (or no echo) and not noisy
    echo_frames: int = 0  # processed while the agent's voice could be coming back
    echo_in_energy: float = 0.0  # their energy before (sum of squares) ...
    echo_out_energy: float = 0.0  # ... and after: the echo reduction is the ratio
    reference_padded: int = 0  # 10 ms frames of reference missing when a tick needed them (silence used)
    reference_dropped: int = 0  # ... and left over beyond the queue's bound, dropped
    delay_estimates: int = 0  # coarse delay estimates made
    bypassed_frames: int = 0  # the reference played, but not cancelled: no echo found
    suppressed_frames: int = 0  # through the noise suppressor: the input was noisy
    passed_frames: int = 0  # through AEC3 but passed as heard: the echo of what last played had died away
    unvoiced_ticks: int = 0  # ticks that were the agent's voice coming back and what was left of it: no speech
    voiced_ticks: int = 0  # ticks with a voice over the echo, found at its onset (`voice_over_echo`)
    linear_frames: int = 0  # 10 ms frames through speex's linear filter too (`heard`)
    linear_failures: int = 0  # the linear filter could not be made (libspeexdsp missing): AEC3's output alone
    seconds: float = 0.0  # spent cancelling: WebRTC's processing (it runs on the caller's thread), the onset cue
    holdback_changes: int = 0  # times the reference's hold-back moved


class EchoCanceller:
    def __init__(
        self,
        config: EchoConfig | None = None,
        processors: Callable[[str], AudioProcessor] | None = None,
        played_rate: int = OUTPUT_RATE,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        """`processors(kind)` makes the canceller ("echo") and the noise suppressor ("noise")."""
        self.config = cfg = config or EchoConfig()
        self.stats = EchoStats()
        self._clock = clock
        self._make = processors or (lambda kind: WebRtcApm(kind == "echo", kind == "noise"))
        self._processor: AudioProcessor | None = None
        self._plain: AudioProcessor | None = None
        self._resampler = StreamResampler(played_rate, INPUT_RATE, quality="MQ")
        self._queue: deque[np.ndarray] = deque()  # whole 10 ms reference frames, int16, oldest first
        self._partial = np.zeros(0, np.float32)  # the reference's samples short of a whole frame
        self._held: deque[np.ndarray] = deque()  # frames held back for a long echo path
        self.holdback_frames = 0
        self._since_sound = 1 << 30  # capture frames since a reference frame carried sound
        self._tail_frames = int(cfg.tail_s * 1000) // FRAME_MS
        self._quiet = 10 ** (cfg.quiet_dbfs / 10) * (1 << 30)  # mean square of int16 samples
        self._silent = 10 ** (cfg.silent_dbfs / 10) * (1 << 30)
        self._gate = 10 ** (cfg.gate_db / 10)
        self._mic_silent = 0  # capture frames in a row the microphone was silent while the agent spoke
        self._max_queue = cfg.max_queue_ms // FRAME_MS
        span = 4 * cfg.max_delay_ms // FRAME_MS  # energies kept: the longest delay looked for, four times over
        self._far_energy = np.zeros(span, np.float32)  # per capture frame: the reference's frame at that moment
        self._near_energy = np.zeros(span, np.float32)  # ... and the microphone's, before cancelling
        self._energy_at = 0  # capture frames recorded (their index in both rings, modulo span)
        self._next_estimate = cfg.max_delay_ms // FRAME_MS + MIN_OVERLAP
        self.delay_ms: int | None = None  # the coarse estimate of the whole echo path, once there is one
        self.echo_present: bool | None = None  # whether there is an echo path at all; None: not known yet
        self._no_echo_seen = 0  # estimates in a row that found none
        self._recent = (0.0, 0.0)  # energy in and out while the reference played, since the last estimate
        self._silence = np.zeros(FRAME, np.int16)
        self.noise_floor_dbfs: float | None = None  # the input's steady level: the quietest it has been lately
        self.echo_only = False  # the last tick was the agent's voice coming back, not the user's: not speech
        self._double_talk = DoubleTalk(cfg.double_talk, cfg.max_delay_ms) if cfg.double_talk else None
        self.voice_over_echo = False  # the last tick had a voice over the echo: speech, whatever VAD makes of it
        self._tick = (0.0, 0.0, 0, False)  # the tick's parts so far, cancelled: energy in and out, frames, a voice
        self._linear: LinearEcho | None = None
        self._linear_plain: AudioProcessor | None = None  # the noise suppressor for the linear filter's output
        self._linear_pairs = max(1, cfg.linear_frame_ms // FRAME_MS)  # 10 ms frames per speex frame
        self._linear_pending = (np.zeros(0, np.int16), np.zeros(0, np.int16))  # mic, reference: short of a frame
        self._linear_fifo = np.zeros(0, np.int16)  # its output not yet handed out, int16
        self._linear_running = False  # the last frames went through it: its output stream is continuous
        self._linear_energy = (0.0, 0.0)  # the echo in and what it left, while the agent spoke, leaking (~1 s)
        # The last call's audio as the linear filter left it (the same length as what `clean` returned), where
        # AEC3 cancelled; None where it did not (what passed as heard, or was only noise-suppressed, is as good)
        self.heard: np.ndarray | None = None

    @property
    def reduction_db(self) -> float | None:
        """Echo reduction while the agent's voice could be coming back: energy in over energy out."""
        s = self.stats
        if not s.echo_frames or s.echo_in_energy <= 0:
            return None
        return 10 * float(np.log10(s.echo_in_energy / max(s.echo_out_energy, 1e-3)))

    def played(self, samples: np.ndarray) -> None:
        """Audio as it left for the client (int16, or float in [-1, 1], at `played_rate`), silence too."""
        x = samples.astype(np.float32) / 32768 if samples.dtype == np.int16 else samples.astype(np.float32)
        data = self._resampler.process(x)
        if self._partial.size:
            data = np.concatenate((self._partial, data))
        whole = data.size // FRAME * FRAME
        pcm = (np.clip(data[:whole], -1.0, 32767 / 32768) * 32768).astype(np.int16)
        self._queue.extend(pcm.reshape(-1, FRAME))
        self._partial = data[whole:]
        bound = self._max_queue + 2 * 80 // FRAME_MS + 100  # a tick's share, the slack, and a stalled second
        while len(self._queue) > bound:
            self._queue.popleft()
            self.stats.reference_dropped += 1

    @property
    def reference_frames(self) -> int:
        """10 ms frames of what was played queued for the microphone's next frames: a part of a tick cleaned
        before the rest has come should not need more (none would be silence in their place)."""
        return len(self._queue)

    def clean(self, audio: np.ndarray, talking: bool = False, tick_end: bool = True) -> np.ndarray:
        """One tick of microphone audio (float32 at 16 kHz, a whole number of 10 ms frames), echo removed; or a
        part of one as it arrives (`tick_end` False until its last part), so that it can be listened to before
        the tick is whole. `echo_only` and `voice_over_echo` then say what the tick's parts so far were.

        Once the echo of what last played has died away (a reply paused for the user, or ended) the tick passes
        as heard, though AEC3 still gets every frame (it stays in step with the reference): its suppressor takes
        much of a voice that follows the echo for echo (Moonshine heard "What time is it?" as "What I visit?",
        and "Turn on the seat heating" 800 ms after a reply as "Hernandez eat heating"). `talking`: the user is
        talking over a paused reply; those ticks do not count in the echo reduction."""
        cfg = self.config
        n = audio.size // FRAME
        self.heard = None
        if n == 0:  # the tick's parts were all cleaned as they came
            self._tick_flags(tick_end)
            return audio
        reference = np.stack([self._next_reference() for _ in range(n)])
        left = len(self._queue) - self._max_queue if tick_end else 0  # a part leaves the rest of its tick's share
        for _ in range(max(0, left)):
            self._queue.popleft()
            self.stats.reference_dropped += 1
        pcm = (np.clip(audio[: n * FRAME], -1.0, 32767 / 32768) * 32768).astype(np.int16).reshape(n, FRAME)
        near, far = pcm.astype(np.float32), reference.astype(np.float32)
        energy_in, energy_far = np.einsum("ij,ij->i", near, near), np.einsum("ij,ij->i", far, far)
        self._record(energy_far, energy_in)
        loud = np.flatnonzero(energy_far > self._quiet * FRAME)
        self._since_sound = n - 1 - int(loud[-1]) if loud.size else self._since_sound + n
        active = self._since_sound < self._tail_frames or bool(loud.size)
        # A microphone silent while the agent spoke, for as long as an echo could take to come back, has no echo
        # path (a client that sends silence while it listens): nothing to cancel until the agent has been quiet
        # for as long, even once the user talks. Not sooner: AEC3 must have seen what played before its echo
        # arrives. Silence before the agent spoke says nothing (a quiet room's microphone can be this quiet).
        heard = float(energy_in.sum())  # the tick's sum of squares, int16 scale
        silent = heard <= self._silent * n * FRAME
        if not active:
            self._mic_silent = 0
        elif self._mic_silent < self._tail_frames:  # once there, it stays until the agent has been quiet
            self._mic_silent = self._mic_silent + n if silent else 0
        cancel = active and self.echo_present is not False and self._mic_silent < self._tail_frames
        echo_tail_ms = (self.delay_ms if self.delay_ms is not None else cfg.max_aec_delay_ms) + cfg.reverb_ms
        passes = cancel and self._since_sound * FRAME_MS >= echo_tail_ms
        if passes:
            self.stats.passed_frames += n
        self._track_noise(energy_in)
        floor = self.noise_floor_dbfs
        suppress = cfg.noise_suppression and floor is not None and floor >= cfg.noisy_dbfs
        if active and self.echo_present is False:
            self.stats.bypassed_frames += n
        if self._double_talk is not None and (not cancel or passes):
            self._double_talk.skip(n)
        if not cancel:
            self._linear_running = False
        if not cancel and not suppress:
            self.stats.skipped_frames += n
            self._tick_flags(tick_end)
            return audio
        self.stats.frames += n
        t0 = self._clock()
        if cancel:
            self._processor = self._processor or self._make("echo")
            delayed = [self._delayed(reference[i]) for i in range(n)]
            linear = self._linear_filter(pcm, delayed) if cfg.linear_heard else None  # before AEC3 changes pcm
            if linear is not None and not talking and loud.size:
                self._track_linear(heard, linear)
            fed = pcm.copy() if passes else pcm  # AEC3 works in place: what passes is what was heard
            for i in range(n):
                self._processor.reverse(delayed[i])
                self._processor.capture(fed[i])
            reduction = self.linear_reduction_db
            if linear is not None and not passes and reduction is not None and reduction >= cfg.linear_min_db:
                if suppress:
                    self._linear_plain = self._linear_plain or self._make("noise")
                    for frame in linear:
                        self._linear_plain.capture(frame)
                out_linear = linear.reshape(-1).astype(np.float32) / 32768
                whole = n * FRAME == audio.size
                self.heard = out_linear if whole else np.concatenate((out_linear, audio[n * FRAME :]))
        if suppress:
            self.stats.suppressed_frames += n
            self._plain = self._plain or self._make("noise")
            for frame in pcm:
                self._plain.capture(frame)
        if passes and not suppress:
            self.stats.seconds += self._clock() - t0
            self._tick_flags(tick_end)
            return audio
        out = pcm.astype(np.float32)  # what is left, int16 scale: measured here, returned below
        if cancel and not passes:
            e_in, e_out = heard / (1 << 30), float(np.einsum("ij,ij->", out, out)) / (1 << 30)
            tick_in, tick_out, frames, voice = self._tick
            voice = voice or (self._double_talk is not None and self._double_talk.tick(far, near, out, self.delay_ms))
            self._tick = (tick_in + e_in, tick_out + e_out, frames + n, voice)
            if not talking:
                self.stats.echo_frames += n
                self.stats.echo_in_energy += e_in
                self.stats.echo_out_energy += e_out
                self._recent = (self._recent[0] + e_in, self._recent[1] + e_out)
        self.stats.seconds += self._clock() - t0
        self._tick_flags(tick_end)
        cleaned = out.reshape(-1) / 32768
        return cleaned if n * FRAME == audio.size else np.concatenate((cleaned, audio[n * FRAME :]))

    @property
    def linear_reduction_db(self) -> float | None:
        """How much of the echo the linear filter has taken out lately, while the agent spoke."""
        e_in, e_out = self._linear_energy
        return None if e_in <= 0 else 10 * float(np.log10(e_in / max(e_out, 1e-3)))

    def _track_linear(self, heard: float, linear: np.ndarray) -> None:
        """`heard`: the microphone's sum of squares over the frames `linear` is what the filter left of."""
        left = linear.astype(np.float32)
        leak = 0.99 ** linear.shape[0]  # per 10 ms frame: a second or so
        e_in, e_out = self._linear_energy
        e_left = float(np.einsum("ij,ij->", left, left))
        self._linear_energy = (e_in * leak + heard / (1 << 30), e_out * leak + e_left / (1 << 30))

    def _linear_filter(self, mic: np.ndarray, reference: list[np.ndarray]) -> np.ndarray | None:
        """`mic` (n 10 ms int16 frames) less speex's linear estimate of the echo of `reference`, the frames AEC3
        got. Speex takes `linear_pairs` frames at a time, so its output runs a frame behind where a call leaves
        one over: the first call after it (re)starts hands out a frame of silence first, and every call then has
        as many frames out as in."""
        if self._linear is None:
            if self.stats.linear_failures:
                return None
            try:
                self._linear = LinearEcho(FRAME * self._linear_pairs, self.config.linear_taps, INPUT_RATE)
            except SpeexUnavailable:
                self.stats.linear_failures += 1
                return None
        if not self._linear_running:  # its output starts afresh: a frame of silence for the one it runs behind
            self._linear_running = True
            self._linear_fifo = np.zeros(FRAME * (self._linear_pairs - 1), np.int16)
            self._linear_pending = (np.zeros(0, np.int16), np.zeros(0, np.int16))
        near = np.concatenate((self._linear_pending[0], mic.reshape(-1)))
        far = np.concatenate((self._linear_pending[1], *reference))
        step = FRAME * self._linear_pairs
        whole = near.size // step * step
        outs = [self._linear.process(near[s : s + step], far[s : s + step]) for s in range(0, whole, step)]
        self._linear_pending = (near[whole:], far[whole:])
        out = np.concatenate((self._linear_fifo, *outs))
        size = mic.size
        self._linear_fifo = out[size:]
        self.stats.linear_frames += mic.shape[0]
        return out[:size].reshape(mic.shape)

    def _tick_flags(self, tick_end: bool) -> None:
        """Whether the tick so far was mostly the agent's voice (`echo_only`), or had a voice over it; at its end,
        counted, and the next tick starts afresh."""
        e_in, e_out, frames, voice = self._tick
        self.echo_only = frames > 0 and e_out * self._gate <= e_in and e_in > self._quiet * frames * FRAME / (1 << 30)
        self.voice_over_echo = voice
        if tick_end:
            self.stats.unvoiced_ticks += self.echo_only
            self.stats.voiced_ticks += self.voice_over_echo
            self._tick = (0.0, 0.0, 0, False)

    def _track_noise(self, energy: np.ndarray) -> None:
        """The noise floor: the first tick's level, then down at once and up slowly (0.5 dB a tick), so it stays
        under speech (which pauses) and follows a car's road noise as it grows."""
        level = 10 * float(np.log10(float(energy.mean()) / FRAME / (1 << 30) + 1e-12))
        floor = self.noise_floor_dbfs
        rise = 0.5 * energy.size * FRAME_MS / 80
        self.noise_floor_dbfs = level if floor is None or level < floor else floor + min(rise, level - floor)

    # ---- the reference's timing ----

    def _next_reference(self) -> np.ndarray:
        if self._queue:
            return self._queue.popleft()
        self.stats.reference_padded += 1
        return self._silence

    def _delayed(self, frame: np.ndarray) -> np.ndarray:
        """The reference as AEC3 gets it: `holdback_frames` later than it was played."""
        if not self.holdback_frames:
            return frame
        self._held.append(frame)
        return self._held.popleft() if len(self._held) > self.holdback_frames else self._silence

    def _record(self, far: np.ndarray, near: np.ndarray) -> None:
        at = (self._energy_at + np.arange(far.size)) % self._far_energy.size
        self._far_energy[at] = far
        self._near_energy[at] = near
        self._energy_at += far.size
        if self._energy_at >= self._next_estimate:
            self._next_estimate = self._energy_at + 500 // FRAME_MS
            self._estimate()

    def _estimate(self) -> None:
        """The echo path's delay from the last seconds' energies, when the agent spoke enough of them."""
        cfg = self.config
        span = self._far_energy.size
        count = min(self._energy_at, span)
        order = (np.arange(self._energy_at - count, self._energy_at)) % span
        far = np.log10(self._far_energy[order] + 1.0)
        near = np.log10(self._near_energy[order] + 1.0)
        sounding = self._far_energy[order] > self._quiet * FRAME
        lags = cfg.max_delay_ms // FRAME_MS
        if count < lags + MIN_OVERLAP or sounding.mean() < 0.25:
            return
        # Syllables, not turns: each envelope less its 500 ms moving average. A conversation's alternation (the
        # agent speaks, then the user) correlates the raw envelopes at the gap between turns, with no echo at all.
        far, near = _syllables(far), _syllables(near)
        scores = np.zeros(lags + 1, np.float32)
        for lag in range(lags + 1):
            a, b = far[: count - lag], near[lag:]
            norm = float(np.sqrt(np.dot(a, a) * np.dot(b, b)))
            scores[lag] = float(np.dot(a, b)) / norm if norm > 0 else 0.0
        best = int(np.argmax(scores))
        if scores[best] < cfg.echo_score:
            self._no_echo_seen = self._no_echo_seen + 1 if scores[best] < cfg.no_echo_score else 0
            if self._no_echo_seen >= 3 and self.echo_present is None:
                self.echo_present = False  # an echo once found stays: a window of the user talking scores low too
            return
        self._no_echo_seen = 0
        self.echo_present = True
        self.stats.delay_estimates += 1
        previous, self.delay_ms = self.delay_ms, best * FRAME_MS
        recent_in, recent_out = self._recent
        self._recent = (0.0, 0.0)
        if previous is None or abs(previous - self.delay_ms) > 30:
            return  # the same delay twice running before anything moves
        if recent_in <= 0 or 10 * np.log10(recent_in / max(recent_out, 1e-9)) >= cfg.good_reduction_db:
            return  # AEC3 cancels well as it is: moving its reference would only make it start over
        hold = 0
        if self.delay_ms > cfg.max_aec_delay_ms:
            hold = (self.delay_ms - cfg.aec_delay_ms) // FRAME_MS
        if abs(hold - self.holdback_frames) * FRAME_MS > 60 or (hold == 0) != (self.holdback_frames == 0):
            self.holdback_frames = hold
            self._held.clear()
            self.stats.holdback_changes += 1


def _syllables(envelope: np.ndarray, span: int = 50) -> np.ndarray:
    """A log-energy envelope (10 ms frames) less its moving average over `span` frames (over fewer at the ends:
    zeros beyond them would make both envelopes' ends stand out together, a correlation at no delay)."""
    kernel = np.ones(span, np.float32)
    return envelope - np.convolve(envelope, kernel, "same") / np.convolve(np.ones_like(envelope), kernel, "same")
