"""The user's audio on its way to the engine: the agent's voice taken out, and speech over a sounding reply heard as
it arrives.

Sans-I/O. A reply is held at the first voiced tick over it (`media/turn_taking.py`), but a tick is whole only
80 ms after it began: a voice that starts early in a tick waited for the rest of it. While a reply sounds, the
tick in progress is listened to as its audio arrives (20 ms packets): cleaned of the echo frame by frame (the
canceller takes a tick in parts), and a voice detector of its own hears it window by window (Silero's 32 ms).
A voice holds the reply at once (`Floor.hold_early`); the tick's own judgement, once it is whole, keeps the hold
or lets it go. The parts already cleaned make up the tick the engine gets: nothing is cleaned twice.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import replace
from typing import Protocol

import numpy as np

from media.aligner import AlignedChunk
from media.echo_cancel import FRAME, EchoCanceller
from media.endpoint import rms_dbfs
from media.turn_taking import Floor

# Silero's score for a window that holds the reply at once, surer than a voiced tick's 0.5: a hold the tick then
# lets go was 20-80 ms of silence in the reply (synthetic rooms, benchmarks/hold_onset.py: 18 such in 40 replies
# at 0.5, 10-20 at 0.7 from run to run, each as soon; 0.85 lost most of the gain)
WATCH_SCORE = 0.7
# A part that came this quiet is not heard: no voice over a reply is, and a client that sends silence while it
# listens sends nothing else. Silero on every part, and the canceller called four times a tick, cost a server 7
# points of a core at 3 replaying sessions (omni-agent bench --replay). What the canceller leaves is heard
# however quiet: AEC3's suppressor takes much of a voice's onset over the echo for echo, and gating it there
# lost the whole gain (benchmarks/hold_onset.py: a median 0 ms sooner)
QUIET_DBFS = -50.0


class Detector(Protocol):
    def __call__(self, audio: np.ndarray) -> bool: ...

    def reset(self) -> None: ...


class Listening:
    def __init__(
        self, echo: EchoCanceller | None, floor: Floor | None, clock: Callable[[], float] = time.perf_counter
    ) -> None:
        self.echo = echo  # None: nothing to cancel (or the client cancels it itself)
        self.seconds = 0.0  # spent hearing the parts (the detector; the canceller counts its own)
        self._clock = clock
        self.floor = floor
        self.detector: Detector | None = None  # set once made (off the event loop): until then, ticks only
        self._tick = -1  # the tick whose parts were listened to
        self._parts: list[np.ndarray] = []  # ... its audio so far, as cleaned
        self._heard: list[np.ndarray | None] = []  # ... and as the linear filter left it (`EchoCanceller.heard`)
        self._taken = 0  # ... samples of it
        self._watching = False  # the detector has been hearing this reply's ticks in parts

    def arrived(self, tick: int, so_far: np.ndarray, sounding: bool) -> None:
        """The tick in progress and its audio so far; `sounding`: the agent's reply is playing."""
        floor = self.floor
        if self.detector is None or floor is None or not floor.barge_in or not sounding or floor.held:
            self._watching = False
            return
        if tick != self._tick:
            self._tick, self._parts, self._heard, self._taken = tick, [], [], 0
        whole = so_far.size // FRAME * FRAME
        if self.echo is not None:  # no further than what was played has reached the canceller
            whole = min(whole, self._taken + self.echo.reference_frames * FRAME)
        if whole <= self._taken:
            return
        part = so_far[self._taken : whole]
        if rms_dbfs(part) < QUIET_DBFS:  # nothing to hear (a client that sends silence): left for the tick
            self._watching = False
            return
        self._taken = whole
        if self.echo is not None:
            part = self.echo.clean(part, tick_end=False)
            self._parts.append(part)
            self._heard.append(self.echo.heard)
        if not self._watching:
            self._watching = True
            self.detector.reset()  # what it heard before this reply says nothing about a voice over it
        t0 = self._clock()
        voiced = self.detector(part)
        self.seconds += self._clock() - t0
        if voiced and not (self.echo is not None and self.echo.echo_only):
            floor.hold_early(tick)

    def tick(self, chunk: AlignedChunk, talking: bool) -> AlignedChunk:
        """A whole tick: the agent's voice out of it (its parts already cleaned, the rest now), marked, and as the
        linear filter left it where AEC3 cancelled any of it (`AlignedChunk.heard`)."""
        mine = chunk.tick == self._tick
        parts, heard, taken = (self._parts, self._heard, self._taken) if mine else ([], [], 0)
        self._tick, self._parts, self._heard, self._taken = -1, [], [], 0
        if self.echo is None:
            return chunk
        parts = [*parts, self.echo.clean(chunk.audio[taken:], talking)]
        heard = [*heard, self.echo.heard]
        audio = np.concatenate(parts) if len(parts) > 1 else parts[0]
        linear = None
        if any(h is not None for h in heard):
            linear = np.concatenate([a if h is None else h for a, h in zip(parts, heard, strict=True)])
        return replace(chunk, audio=audio, echo=self.echo.echo_only, voice=self.echo.voice_over_echo, heard=linear)
