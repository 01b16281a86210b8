"""Turn detection on the tick clock: when the user starts, pauses and stops.

Sans-I/O: one call per 80 ms tick. A *detector* says whether a tick is voiced
(an energy threshold here; Silero VAD in the cascade engine), and one state
machine turns that into events: START after `start_ticks` voiced ticks in a
row; PAUSE once `pause_ms` have passed without voice (a likely end: engines
start recognising there); RESUME if the user goes on after a PAUSE; END after
`end_silence_ms` without voice, or when a turn reaches `max_turn_ms`.

A pause may also be *judged*: whoever hears what was said so far (a model of
how finished it sounds, the words themselves) sets the silence that ends the
turn from this pause on (`judge(pause, silence_ms)`): shorter than
`end_silence_ms` for a turn that is plainly finished, longer for one that
plainly is not ("set the temperature to ..."). Unjudged, a pause waits
`end_silence_ms`. A verdict holds for its pause only: the user going on
clears it.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from enum import Enum
from typing import Protocol

import numpy as np

from media.clock import INPUT_SAMPLES_PER_TICK, TICK_MS


class EndpointEvent(Enum):
    START = "start"
    PAUSE = "pause"
    RESUME = "resume"
    END = "end"


@dataclass
class EndpointConfig:
    start_ticks: int = 2
    pause_ms: int = 160
    end_silence_ms: int = 480
    max_turn_ms: int = 30_000


class VoiceDetector(Protocol):
    def __call__(self, audio: np.ndarray) -> bool: ...


def rms_dbfs(audio: np.ndarray) -> float:
    if audio.size == 0:
        return -120.0
    power = float(np.dot(audio, audio)) / audio.size
    return 10.0 * np.log10(power + 1e-12)


class EnergyDetector:
    """Voiced when loud enough and well above a tracked noise floor.

    The floor starts at the first tick (no higher than a quiet room), falls at
    once and rises slowly (about 2 % a tick), so it stays under speech but
    catches steady noise.
    """

    def __init__(self, threshold_dbfs: float = -42.0, snr_db: float = 12.0) -> None:
        self.threshold_dbfs = threshold_dbfs
        self.snr_db = snr_db
        self._noise: float | None = None

    def reset(self) -> None:
        """Listen afresh: the noise floor is found again."""
        self._noise = None

    def __call__(self, audio: np.ndarray) -> bool:
        level = rms_dbfs(audio)
        if self._noise is None:  # a user who talks at once must not become the floor
            self._noise = min(level, self.threshold_dbfs - self.snr_db)
        noise = min(level, self._noise)
        voiced = level > max(self.threshold_dbfs, noise + self.snr_db)
        self._noise = noise + 0.02 * (level - noise)
        return voiced


class Endpointer:
    def __init__(self, config: EndpointConfig | None = None, detector: VoiceDetector | None = None) -> None:
        self.config = config or EndpointConfig()
        self.detector = detector or EnergyDetector()
        self.in_speech = False
        self.paused = False
        self.start_tick: int | None = None
        self.last_voiced_tick: int | None = None
        self.end_after_ms = self.config.end_silence_ms  # the silence that ends the turn: this pause's verdict
        self.pauses = 0  # PAUSE events so far: which pause a late verdict was about
        self._silent_ms = 0
        self._run = 0

    def update(self, tick: int, audio: np.ndarray, echo: bool = False, voice: bool = False) -> EndpointEvent | None:
        """`echo`: the tick is the agent's voice coming back (`AlignedChunk.echo`): the detector hears it (its state
        goes on) but it is not speech. `voice`: the echo canceller found a voice over the agent's
        (`AlignedChunk.voice`), sooner than the detector hears it in what the canceller left: speech."""
        cfg = self.config
        voiced = (self.detector(audio) and not echo) or voice
        if not self.in_speech:
            self._run = self._run + 1 if voiced else 0
            if self._run >= cfg.start_ticks:
                self.in_speech = True
                self.paused = False
                self.end_after_ms = cfg.end_silence_ms
                self.start_tick = tick - cfg.start_ticks + 1
                self.last_voiced_tick = tick
                return EndpointEvent.START
            return None
        assert self.last_voiced_tick is not None and self.start_tick is not None
        if voiced:
            self.last_voiced_tick = tick
            self._silent_ms = 0
            if self.paused:
                self.paused = False
                self.end_after_ms = cfg.end_silence_ms
                return EndpointEvent.RESUME
        silent_ms = self._silent_ms = (tick - self.last_voiced_tick) * TICK_MS
        too_long = (tick - self.start_tick + 1) * TICK_MS >= cfg.max_turn_ms
        if silent_ms >= self.end_after_ms or too_long:
            return self._end()
        if not self.paused and silent_ms >= cfg.pause_ms:
            self.paused = True
            self.pauses += 1
            return EndpointEvent.PAUSE
        return None

    def judge(self, pause: int, silence_ms: int) -> EndpointEvent | None:
        """A verdict on pause number `pause` (`pauses` when it began), given between ticks: the turn ends once
        it has been silent for `silence_ms`. END when that is now (silent long enough already); None otherwise.
        A verdict that came too late (the user went on, or the turn already ended) is dropped."""
        if not self.judging(pause):
            return None
        self.end_after_ms = silence_ms
        return self._end() if self._silent_ms >= silence_ms else None

    @property
    def voiced_run(self) -> int:
        """Voiced ticks in a row outside a turn: how close a START is."""
        return 0 if self.in_speech else self._run

    @property
    def silent_ms(self) -> int:
        """How long the turn has been silent (0 on a voiced tick, and outside a turn)."""
        return self._silent_ms if self.in_speech else 0

    def judging(self, pause: int) -> bool:
        """Pause number `pause` is still going on: a verdict on it counts."""
        return self.in_speech and self.paused and pause == self.pauses

    def abandon(self) -> None:
        """Forget the turn in progress (it was not one: a backchannel over the reply); listen afresh."""
        if self.in_speech:
            self._end()
        self._run = 0
        self._silent_ms = 0

    def _end(self) -> EndpointEvent:
        self.in_speech = False
        self.paused = False
        self.end_after_ms = self.config.end_silence_ms
        self._run = 0
        return EndpointEvent.END


class Utterance:
    """The audio of the user's turn as the endpointer saw it: a few ticks from before speech was confirmed
    (word onsets), every tick while in speech, and, cut out for the models, all of it less the silence after
    the last voiced tick beyond a short tail. The same cut at a pause and at the end of the turn, so work
    started at the pause is work on the turn itself. Each tick is kept as the engine got it and, where the echo
    canceller gave one, as its linear filter left it (`AlignedChunk.heard`): what speech over a reply is heard
    from."""

    def __init__(self, pre_roll_ticks: int = 3, tail_ticks: int = 3) -> None:
        self.tail_ticks = tail_ticks
        self._ticks: list[tuple[np.ndarray, np.ndarray | None]] = []
        self._pre: deque[tuple[np.ndarray, np.ndarray | None]] = deque(maxlen=pre_roll_ticks)

    def __len__(self) -> int:
        return len(self._ticks)

    def spoken(self, heard: bool = False) -> list[np.ndarray]:
        """Every tick kept, pre-roll included; `heard`: as the linear filter left it, where it did."""
        return [h if heard and h is not None else a for a, h in self._ticks]

    def add(
        self, audio: np.ndarray, event: EndpointEvent | None, in_speech: bool, heard: np.ndarray | None = None
    ) -> None:
        tick = (audio, heard)
        if event is EndpointEvent.START:
            self._ticks = [*self._pre, tick]
        elif in_speech or event is EndpointEvent.END:
            self._ticks.append(tick)
        self._pre.append(tick)

    def audio(self, tick: int, last_voiced_tick: int | None, heard: bool = False) -> np.ndarray:
        """The cut; `heard`: each tick as the linear filter left it, where it did."""
        keep = len(self._ticks)
        if last_voiced_tick is not None:
            keep = max(1, keep - max(0, tick - last_voiced_tick - self.tail_ticks))
        if not self._ticks:
            return np.zeros(0, np.float32)
        return np.concatenate(self.spoken(heard)[:keep])

    def clear(self) -> None:
        self._ticks = []

    def prepend(self, audio: np.ndarray, gap_ticks: int = 2) -> None:
        """Start this utterance with `audio` (an earlier turn it goes on with), `gap_ticks` of silence between."""
        self._ticks[:0] = [(audio, None), (np.zeros(gap_ticks * INPUT_SAMPLES_PER_TICK, np.float32), None)]


CAMERA_OFF_TICKS = 40  # no camera frame for this long (3.2 s): the camera is off


class RecentFrames:
    """What the camera showed lately, for engines that look at it when a turn ends: the last few sampled
    frames with their ticks. Nothing newer than `fresh_ticks` (3.2 s) means the camera is off."""

    def __init__(self, keep: int = 8, fresh_ticks: int = CAMERA_OFF_TICKS) -> None:
        self.fresh_ticks = fresh_ticks
        self._frames: deque[tuple[int, np.ndarray]] = deque(maxlen=keep)

    def add(self, tick: int, image: np.ndarray) -> None:
        self._frames.append((tick, image))

    def fresh(self, now_tick: int) -> list[np.ndarray]:
        """Frames of the last `fresh_ticks`, oldest first."""
        return [img for tick, img in self._frames if now_tick - tick <= self.fresh_ticks]
