"""The user's side of a conversation, tick by tick: what every engine's `feed()` starts with.

Sans-I/O. Each 80 ms chunk: the camera frame, if one came, joins the recent
frames; the audio is endpointed (START / PAUSE / RESUME / END, see
`endpoint.py`) and recorded into the turn's utterance, with its pre-roll.
A START while the agent is replying is a barge-in when the profile allows
it. What an engine does at each event (speculate at a pause, answer at the
end) stays the engine's own.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from media.aligner import AlignedChunk
from media.endpoint import EndpointConfig, Endpointer, EndpointEvent, RecentFrames, Utterance, VoiceDetector


@dataclass(frozen=True, slots=True)
class TurnStep:
    event: EndpointEvent | None
    barge_in: bool = False  # the user started talking over the reply: stop it


@dataclass(frozen=True, slots=True)
class EndedTurn:
    audio: np.ndarray  # 16 kHz mono float32, cut as at the pause (see `Utterance`)
    speech_end_tick: int | None  # the last voiced tick
    end_tick: int  # the tick at which the end was detected


class TurnTaking:
    def __init__(
        self,
        config: EndpointConfig | None = None,
        detector: VoiceDetector | None = None,
        barge_in: bool = True,
        keep_frames: int = 8,
    ) -> None:
        self.endpointer = Endpointer(config, detector)
        self.utterance = Utterance()
        self.frames = RecentFrames(keep=keep_frames)
        self.barge_in = barge_in
        self.tick = 0

    @property
    def in_speech(self) -> bool:
        return self.endpointer.in_speech

    def feed(self, chunk: AlignedChunk, replying: Callable[[], bool] = lambda: False) -> TurnStep:
        """One tick. `replying` is asked only at a START: is the agent's reply still going?"""
        self.tick = chunk.tick
        if chunk.video is not None:
            self.frames.add(chunk.tick, chunk.video.image)
        ep = self.endpointer
        event = ep.update(chunk.tick, chunk.audio)
        self.utterance.add(chunk.audio, event, ep.in_speech)
        return TurnStep(event, event is EndpointEvent.START and self.barge_in and replying())

    def judge(self, pause: int, silence_ms: int) -> TurnStep:
        """A verdict on pause number `pause`: the silence that ends the turn; an END here ends it between ticks."""
        return TurnStep(self.endpointer.judge(pause, silence_ms))

    def audio(self) -> np.ndarray:
        """The turn so far, less the silence after its last voiced tick (the same cut at a pause and at the end)."""
        return self.utterance.audio(self.tick, self.endpointer.last_voiced_tick)

    def images(self) -> list[np.ndarray]:
        """The camera's frames of the last few seconds, oldest first; none when it is off."""
        return self.frames.fresh(self.tick)

    def end(self) -> EndedTurn:
        """Take the ended turn's audio; the next turn records afresh."""
        turn = EndedTurn(self.audio(), self.endpointer.last_voiced_tick, self.tick)
        self.utterance.clear()
        return turn
