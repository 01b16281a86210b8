"""The echo engine: measures the transport and pipeline without a model.

`stream`: every 80 ms chunk goes straight back as the next speech frame.
`turn`: when an utterance ends (energy endpointing) it is spoken back, with
transcript events; speaking over it, or `interrupt`, stops it at once.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import numpy as np

from agent.config import END_SILENCE_MS
from agent.engines.base import EngineEvent, SpeechFrame, TextDelta, TranscriptDelta, TurnEnd
from agent.engines.outbox import Outbox
from agent.profiles import Profile
from media.aligner import AlignedChunk
from media.clock import INPUT_RATE, OUTPUT_RATE, OUTPUT_SAMPLES_PER_FRAME
from media.endpoint import EndpointConfig, EndpointEvent
from media.pcm import StreamResampler
from media.turn_taking import InterruptionConfig, TurnTaking

MODES = ("stream", "turn")


class EchoEngine:
    name = "echo"

    def __init__(self, mode: str = "stream", end_silence_ms: int = END_SILENCE_MS, max_turn_ms: int = 15_000) -> None:
        if mode not in MODES:
            raise ValueError(f"echo mode must be one of {MODES}, got {mode!r}")
        self.mode = mode
        self.live_output = mode == "stream"
        self.end_silence_ms = end_silence_ms
        self.max_turn_ms = max_turn_ms

    async def open_session(self, profile: Profile, options: dict | None = None) -> EchoSession:
        return EchoSession(self, profile, (options or {}).get("interruptions"))

    async def close(self) -> None:
        return None


class EchoSession:
    repeats_input = True  # what it says is the user's own audio: cancelled as an echo, the user would be too

    def __init__(self, engine: EchoEngine, profile: Profile, interruptions: InterruptionConfig | None = None) -> None:
        self.mode = engine.mode
        self.outbox = Outbox()
        # "QQ" (cubic, no look-ahead) keeps the live echo's own delay near zero.
        self._up = StreamResampler(INPUT_RATE, OUTPUT_RATE, quality="QQ")
        self.turns = TurnTaking(
            EndpointConfig(end_silence_ms=engine.end_silence_ms, max_turn_ms=engine.max_turn_ms),
            barge_in=profile.barge_in and self.mode != "stream",  # a live echo has no turns to take: never held
            interruptions=interruptions,
        )
        self.floor = self.turns.floor
        self._frame_index = 0
        self._replying = False
        self.text_only = False

    def feed(self, chunk: AlignedChunk) -> None:
        if self.mode == "stream":
            self._stream(chunk.audio)
        else:
            self._turn(chunk)

    def _stream(self, audio: np.ndarray) -> None:
        # Whatever the resampler gives is sent at once (1917 samples the first
        # time, 1920 after): re-cutting to exactly 1920 would hold back a whole
        # frame for want of 3 samples.
        pcm = self._up.process(audio)
        if pcm.size:
            self.outbox.put(SpeechFrame(pcm, self._frame_index))
            self._frame_index += 1

    def _turn(self, chunk: AlignedChunk) -> None:
        step = self.turns.feed(chunk, lambda: self._replying and self.outbox.has_reply())
        if step.barge_in:
            self.interrupt()
        if step.event is EndpointEvent.END:
            turn = self.turns.end()
            self._reply(turn.audio, turn.speech_end_tick, turn.end_tick)

    def _reply(self, utterance: np.ndarray, speech_end_tick: int | None, end_tick: int) -> None:
        seconds = utterance.size / INPUT_RATE
        self.outbox.put(TranscriptDelta("user", f"({seconds:.1f} s of speech)", True, speech_end_tick, end_tick))
        text = f"You said {seconds:.1f} seconds of something; here it is."
        self.outbox.put(TextDelta(text))
        self.outbox.put(TranscriptDelta("assistant", text, True))
        up = StreamResampler(INPUT_RATE, OUTPUT_RATE, quality="HQ")
        pcm = np.concatenate((up.process(utterance), up.process(np.zeros(0, np.float32), last=True)))
        if self.text_only:
            pcm = pcm[:0]
        for index, start in enumerate(range(0, pcm.size, OUTPUT_SAMPLES_PER_FRAME)):
            self.outbox.put(SpeechFrame(pcm[start : start + OUTPUT_SAMPLES_PER_FRAME], index))
        self.outbox.put(TurnEnd())
        self._replying = True

    def send_text(self, text: str) -> None:
        # Echo has no voice for text: it answers in text only.
        self.outbox.put(TranscriptDelta("user", text, True))
        self.outbox.put(TextDelta(text))
        self.outbox.put(TranscriptDelta("assistant", text, True))
        self.outbox.put(TurnEnd())

    def interrupt(self) -> None:
        if self.outbox.cancel_reply():
            self.outbox.put(TurnEnd(interrupted=True))
        self._replying = False

    def events(self) -> AsyncIterator[EngineEvent]:
        return self.outbox.__aiter__()

    def counters(self) -> dict[str, float]:
        return self.outbox.counters()

    async def close(self) -> None:
        self.outbox.close()
