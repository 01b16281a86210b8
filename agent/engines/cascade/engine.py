"""The cascade engine: VAD endpointing, Whisper, a dialog policy, hibari TTS.

All offline, on the CPU. Latency comes from overlapping the stages with the
user's own pause: when Silero VAD first sees a pause (160 ms), the audio so
far is recognised, answered and the first sentence synthesised in a worker
thread while the end-of-turn silence runs out; if the user goes on, that
work is thrown away. At the end of the turn the first speech frame is then
usually ready at once. Heavy work never runs on the event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import logging
import time
from collections.abc import AsyncIterator, Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from agent.engines.base import EngineEvent, Error, SpeechFrame, TextDelta, ToolCall, TranscriptDelta, TurnEnd
from agent.engines.cascade.models import SileroDetector, SpeechModels, load_models
from agent.engines.outbox import Outbox
from agent.profiles import Profile
from agent.profiles.dialog import DialogContext, DialogPolicy, Reply, Seen
from agent.profiles.policies import make_policy
from agent.profiles.translate import close_all, voice
from media.aligner import AlignedChunk
from media.clock import INPUT_SAMPLES_PER_TICK, OUTPUT_SAMPLES_PER_FRAME, TICK_MS
from media.endpoint import EndpointConfig, EndpointEvent
from media.turn_taking import TurnTaking

log = logging.getLogger(__name__)

PARTIAL_EVERY_TICKS = 12  # about one partial transcript a second, when the CPU is idle


def _now() -> dt.datetime:
    return dt.datetime.now().astimezone()


@dataclass
class Prepared:
    """A reply made ahead: the user's words, the answer, its speech so far."""

    text: str
    reply: Reply
    first: np.ndarray
    rest: Iterator[np.ndarray]
    timings: dict[str, float] = field(default_factory=dict)
    notice: str | None = None  # e.g. no voice for the reply's language: captions only


class CascadeEngine:
    name = "cascade"
    live_output = False

    def __init__(
        self,
        end_silence_ms: int = 400,
        pause_ms: int = 160,
        partials: bool = True,
        workers: int = 2,
        now: Callable[[], dt.datetime] = _now,
        models: SpeechModels | None = None,
    ) -> None:
        self.models = models or load_models()
        self.end_silence_ms = end_silence_ms
        self.pause_ms = pause_ms
        self.partials = partials
        self.now = now
        self.executor = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="cascade")
        self.in_flight = 0  # recognitions running: partials wait while any final one runs

    async def run(self, fn: Callable[..., Any], *args: Any) -> Any:
        return await asyncio.get_running_loop().run_in_executor(self.executor, fn, *args)

    async def open_session(self, profile: Profile, options: dict[str, Any] | None = None) -> CascadeSession:
        policy = await self.run(make_policy, profile.name, options)  # may start an apertium process
        detector = await self.run(SileroDetector)
        end_silence = int((options or {}).get("end_silence_ms", profile.end_silence_ms or self.end_silence_ms))
        session = CascadeSession(self, profile, policy, detector, end_silence)
        for call in getattr(policy, "initial_tool_calls", list)():
            session.outbox.put(ToolCall(call["name"], call["arguments"], call["result"]))
        return session

    def voice(self, lang: str) -> Any:
        """Who speaks `lang`: hibari for English, espeak-ng for others, None: captions only."""
        if lang == "en":
            return self.models.synthesizer
        return voice(lang)

    async def close(self) -> None:
        self.executor.shutdown(wait=False, cancel_futures=True)
        close_all()


class CascadeSession:
    def __init__(
        self,
        engine: CascadeEngine,
        profile: Profile,
        policy: DialogPolicy,
        detector: SileroDetector,
        end_silence_ms: int,
    ) -> None:
        self.engine = engine
        self.models = engine.models
        self.profile = profile
        self.policy = policy
        self.outbox = Outbox()
        self.turns = TurnTaking(
            EndpointConfig(pause_ms=engine.pause_ms, end_silence_ms=end_silence_ms),
            detector,
            barge_in=profile.barge_in,
            keep_frames=6,
        )
        self.history: list[tuple[str, str]] = []
        self._speculation: asyncio.Task[Prepared] | None = None
        self._reply: asyncio.Task[None] | None = None
        self._partial: asyncio.Task[None] | None = None
        self._last_partial_tick = 0
        self._turn = 0  # bumps at each user turn start: stale partials are dropped
        self._speculated = False  # the last turn's answer was made during the pause
        self._segment = 0
        self.text_only = False

    # ---- input ----

    def feed(self, chunk: AlignedChunk) -> None:
        step = self.turns.feed(chunk, self._replying)
        if step.barge_in:
            self.interrupt()
        event = step.event
        if event is EndpointEvent.START:
            self._turn += 1
            self._last_partial_tick = chunk.tick
        elif event is EndpointEvent.PAUSE:
            self._speculation = self._spawn(self._prepare_from_audio(_nonempty(self.turns.audio())))
        elif event is EndpointEvent.RESUME:
            self._drop_speculation()
        elif event is EndpointEvent.END:
            self._end_of_turn()
        elif self.turns.in_speech and self.engine.partials:
            self._maybe_partial(chunk.tick)

    def send_text(self, text: str) -> None:
        if self._replying() and self.profile.barge_in:
            self.interrupt()
        self._turn += 1
        self._reply = self._spawn(self._deliver(self._spawn(self._prepare(text))))

    def interrupt(self) -> None:
        was_active = self._replying()
        for task in (self._reply, self._speculation):
            if task is not None:
                task.cancel()
        self._reply = self._speculation = None
        self.outbox.cancel_reply()
        if was_active:
            self.outbox.put(TurnEnd(interrupted=True))

    def events(self) -> AsyncIterator[EngineEvent]:
        return self.outbox.__aiter__()

    async def close(self) -> None:
        for task in (self._reply, self._speculation, self._partial):
            if task is not None:
                task.cancel()
        self.outbox.close()

    # ---- turn handling ----

    def _replying(self) -> bool:
        return (self._reply is not None and not self._reply.done()) or self.outbox.has_reply()

    def _drop_speculation(self) -> None:
        if self._speculation is not None:
            self._speculation.cancel()
            self._speculation = None

    def _end_of_turn(self) -> None:
        self._speculated = self._speculation is not None
        turn = self.turns.end()
        prepared = self._speculation or self._spawn(self._prepare_from_audio(_nonempty(turn.audio)))
        self._speculation = None
        self._reply = self._spawn(self._deliver(prepared, turn.speech_end_tick, turn.end_tick))

    def _maybe_partial(self, tick: int) -> None:
        if tick - self._last_partial_tick < PARTIAL_EVERY_TICKS or self.engine.in_flight:
            return
        if self._partial is not None and not self._partial.done():
            return
        self._last_partial_tick = tick
        self._partial = self._spawn(self._partial_transcript(np.concatenate(self.turns.utterance.chunks), self._turn))

    async def _partial_transcript(self, audio: np.ndarray, turn: int) -> None:
        text = await self.engine.run(self.models.recognizer.transcribe, audio)
        if text and turn == self._turn and self.turns.in_speech:
            self.outbox.put(TranscriptDelta("user", text, False))

    async def _prepare_from_audio(self, audio: np.ndarray) -> Prepared:
        self.engine.in_flight += 1
        t0 = time.perf_counter()
        try:
            text = await self.engine.run(self.models.recognizer.transcribe, audio)
        finally:
            self.engine.in_flight -= 1
        prepared = await self._prepare(text)
        prepared.timings["recognition_ms"] = (
            (time.perf_counter() - t0) * 1000 - prepared.timings["reply_ms"] - (prepared.timings["synthesis_ms"])
        )
        return prepared

    async def _prepare(self, text: str) -> Prepared:
        frames = self.turns.images()[-3:]

        def seen() -> Seen:
            return Seen(self.models.faces.count_in(frames) if frames else None)

        def work() -> Prepared:
            t0 = time.perf_counter()
            reply = self.policy.reply(text, DialogContext(self.engine.now(), seen, list(self.history)))
            t1 = time.perf_counter()
            speech = self.models.synthesizer.stream(reply.text)
            first = next(speech, np.zeros(0, np.float32))
            t2 = time.perf_counter()
            return Prepared(
                text, reply, first, speech, {"reply_ms": (t1 - t0) * 1000, "synthesis_ms": (t2 - t1) * 1000}
            )

        return await self.engine.run(work)

    async def _deliver(
        self, prepared: asyncio.Task[Prepared], speech_end_tick: int | None = None, end_tick: int | None = None
    ) -> None:
        try:
            p = await prepared
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # a model failing mid-turn: tell the page, keep the session
            log.exception("cascade turn failed")
            self.outbox.put(Error("turn_failed", f"{type(exc).__name__}: {exc}"))
            self.outbox.put(TurnEnd())
            return
        out = self.outbox
        self._segment += 1
        user_extra: dict[str, Any] = {}
        reply_extra: dict[str, Any] = {"lang": p.reply.lang}
        if self.profile.interpreting:
            user_extra = {"segment": self._segment, "lang": "en"}
            if speech_end_tick is not None and end_tick is not None:
                user_extra["end_ms"] = (speech_end_tick + 1) * TICK_MS
            reply_extra["segment"] = self._segment
        if p.notice:
            reply_extra["notice"] = p.notice
        out.put(TranscriptDelta("user", p.text, True, speech_end_tick, end_tick, user_extra))
        for call in p.reply.tool_calls:
            out.put(ToolCall(call["name"], call["arguments"], call["result"]))
        out.put(TextDelta(p.reply.text))
        out.put(TranscriptDelta("assistant", p.reply.text, True, extra=reply_extra))
        index = 0
        pcm: np.ndarray | None = p.first
        while pcm is not None:
            for start in range(0, pcm.size, OUTPUT_SAMPLES_PER_FRAME):
                out.put(SpeechFrame(pcm[start : start + OUTPUT_SAMPLES_PER_FRAME], index))
                index += 1
            pcm = await self.engine.run(next, p.rest, None)
        self.history = (self.history + [(p.text, p.reply.text)])[-20:]
        out.put(TurnEnd(stages={**p.timings, "speculative": float(speech_end_tick is not None and self._speculated)}))

    def _spawn(self, coro: Any) -> asyncio.Task[Any]:
        task = asyncio.get_running_loop().create_task(coro)
        task.add_done_callback(_quiet)
        return task


def _nonempty(audio: np.ndarray) -> np.ndarray:
    return audio if audio.size else np.zeros(INPUT_SAMPLES_PER_TICK, np.float32)


def _quiet(task: asyncio.Task[Any]) -> None:
    with contextlib.suppress(asyncio.CancelledError):
        exc = task.exception()
        if exc is not None:
            log.error("cascade task failed: %r", exc)
