"""The cascade engine: VAD endpointing, Moonshine, a dialog policy or a chat model, hibari TTS.

Offline on the CPU, unless replies come from a chat model (`llm.py`).
Latency comes from overlapping the stages with the user's own pause: when
Silero VAD first sees a pause (160 ms), the audio so far is recognised,
answered and the first sentence synthesised while the end-of-turn silence
runs out; if the user goes on, that work is thrown away (a chat model's
request closed). At the same pause smart-turn judges whether the turn sounds
finished: if so it ends after a short silence (200 ms), if not it waits the
full one (`smart_turn.py`). At the end of the turn the first speech frame is
then usually ready at once. Each reply is spoken by a voice of its language
(hibari for English, espeak-ng for others, captions only where there is
none). Heavy work never runs on the event loop.
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

from agent.config import LlmConfig
from agent.engines.base import EngineEvent, Error, SpeechFrame, TextDelta, ToolCall, TranscriptDelta, TurnEnd
from agent.engines.cascade.llm import APOLOGY, ChatModel, LlmDialog, LlmError, ToolRun
from agent.engines.cascade.models import SileroDetector, SpeechModels, load_models
from agent.engines.cascade.smart_turn import SmartTurnConfig, load_smart_turn
from agent.engines.outbox import Outbox
from agent.profiles import Profile
from agent.profiles.dialog import DefaultAssistant, DialogContext, DialogPolicy, Reply, Seen
from agent.profiles.policies import make_policy
from agent.profiles.prompts import language
from agent.profiles.translate import close_all, voice
from media.aligner import AlignedChunk
from media.clock import INPUT_SAMPLES_PER_TICK, OUTPUT_SAMPLES_PER_FRAME, TICK_MS
from media.endpoint import EndpointConfig, EndpointEvent
from media.turn_taking import TurnTaking

log = logging.getLogger(__name__)

PARTIAL_EVERY_TICKS = 12  # about one partial transcript a second, when the CPU is idle
# smart-turn's verdicts on pauses, counted: `late` came after the user went on or the turn ended
VERDICTS = ("complete", "incomplete", "late", "failed")


def _now() -> dt.datetime:
    return dt.datetime.now().astimezone()


Part = tuple[str, Any]  # ("text", str) | ("speech", np.ndarray) | ("tool", call)


async def _nothing() -> AsyncIterator[Part]:
    return
    yield


@dataclass
class Prepared:
    """A reply made ahead: the user's words, the answer's start and its speech, and the rest as it comes."""

    text: str
    reply: Reply  # its text: the whole reply (keyword policies) or its first sentence (a chat model's)
    first: np.ndarray
    rest: AsyncIterator[Part] = field(default_factory=_nothing)
    complete: bool = True  # reply.text is the whole reply
    timings: dict[str, float] = field(default_factory=dict)
    notice: str | None = None  # e.g. no voice for the reply's language: captions only
    error: str | None = None  # the chat model failed: said once, with a short spoken apology
    source: Any = None  # the chat model's stream: closed with the reply, whether or not it was spoken

    async def close(self) -> None:
        for gen in (self.rest, self.source):
            if gen is not None and hasattr(gen, "aclose"):
                await gen.aclose()


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
        llm: LlmConfig | None = None,
        recognizer: str = "moonshine",
        smart_turn: Any = True,
    ) -> None:
        self.smart_turn = SmartTurnConfig.from_option(smart_turn)
        self.chat = ChatModel(llm) if llm is not None and llm.url else None
        self.models = models or load_models(recognizer=recognizer)
        self.turn_model = load_smart_turn() if self.smart_turn.enabled else None
        self.end_silence_ms = end_silence_ms
        self.pause_ms = pause_ms
        self.partials = partials
        self.now = now
        self.executor = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="cascade")
        self.in_flight = 0  # recognitions running: partials wait while any final one runs

    async def run(self, fn: Callable[..., Any], *args: Any) -> Any:
        return await asyncio.get_running_loop().run_in_executor(self.executor, fn, *args)

    async def open_session(self, profile: Profile, options: dict[str, Any] | None = None) -> CascadeSession:
        opts = options or {}
        llm = None
        if self.chat is not None and profile.interpreting:
            if opts.get("source_lang", "en") != "en":  # the chat model translates; the recogniser hears English
                raise ValueError("the offline recognisers (Moonshine base-en, Whisper tiny.en) understand English only")
            policy = DefaultAssistant()  # unused: the chat model answers
        else:
            policy = await self.run(make_policy, profile.name, options)  # may start an apertium process
        if self.chat is not None:
            llm = LlmDialog(self.chat, profile, opts, getattr(policy, "car", None))
        detector = await self.run(SileroDetector)
        end_silence = int(opts.get("end_silence_ms", profile.end_silence_ms or self.end_silence_ms))
        session = CascadeSession(self, profile, policy, detector, end_silence, llm)
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
        if self.chat is not None:
            await self.chat.close()


class CascadeSession:
    def __init__(
        self,
        engine: CascadeEngine,
        profile: Profile,
        policy: DialogPolicy,
        detector: SileroDetector,
        end_silence_ms: int,
        llm: LlmDialog | None = None,
    ) -> None:
        self.engine = engine
        self.llm = llm
        self.models = engine.models
        self.profile = profile
        self.policy = policy
        self.outbox = Outbox()
        quick_end = engine.smart_turn.end_silence_ms if engine.turn_model is not None else None
        self.turns = TurnTaking(
            EndpointConfig(pause_ms=engine.pause_ms, end_silence_ms=end_silence_ms, quick_end_ms=quick_end),
            detector,
            barge_in=profile.barge_in,
            keep_frames=6,
        )
        self.history: list[tuple[str, str]] = []
        self._speculation: asyncio.Task[Prepared] | None = None
        self._reply: asyncio.Task[None] | None = None
        self._partial: asyncio.Task[None] | None = None
        self._verdict: asyncio.Task[None] | None = None  # smart-turn judging the last pause
        self._last_partial_tick = 0
        self._turn = 0  # bumps at each user turn start: stale partials are dropped
        self._speculated = False  # the last turn's answer was made during the pause
        self._segment = 0
        self.text_only = False
        self.verdicts = dict.fromkeys(VERDICTS, 0)

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
            audio = _nonempty(self.turns.audio())
            self._speculation = self._spawn(self._prepare_from_audio(audio))
            if self.engine.turn_model is not None:
                self._verdict = self._spawn(self._judge(audio, self.turns.endpointer.pauses))
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
        self._reply = self._spawn(self._deliver(self._spawn(self._prepare(text)), after=self._reply))

    def interrupt(self) -> None:
        was_active = self._replying()
        if self._reply is not None:
            self._reply.cancel()  # a reply being said closes its stream as it stops
        self._drop_speculation()
        self._reply = None
        self.outbox.cancel_reply()
        if was_active:
            self.outbox.put(TurnEnd(interrupted=True))

    def events(self) -> AsyncIterator[EngineEvent]:
        return self.outbox.__aiter__()

    def counters(self) -> dict[str, float]:
        """smart-turn's verdicts (none when it is off)."""
        if self.engine.turn_model is None:
            return {}
        return {f"end_of_turn_{k}": v for k, v in self.verdicts.items()}

    async def close(self) -> None:
        self._drop_speculation()
        for task in (self._reply, self._partial, self._verdict):
            if task is not None:
                task.cancel()
        self.outbox.close()

    # ---- turn handling ----

    def _replying(self) -> bool:
        return (self._reply is not None and not self._reply.done()) or self.outbox.has_reply()

    def _drop_speculation(self) -> None:
        """Undo the reply made at the pause: stop making it, or close what it holds open (a chat model's stream)."""
        task, self._speculation = self._speculation, None
        if task is not None:
            self._discard(task)

    def _discard(self, task: asyncio.Task[Prepared]) -> None:
        task.cancel()
        if task.done() and not task.cancelled() and task.exception() is None:
            self._spawn(task.result().close())

    def _end_of_turn(self) -> None:
        self._speculated = self._speculation is not None
        turn = self.turns.end()
        prepared = self._speculation or self._spawn(self._prepare_from_audio(_nonempty(turn.audio)))
        self._speculation = None
        self._reply = self._spawn(self._deliver(prepared, turn.speech_end_tick, turn.end_tick, self._reply))

    async def _judge(self, audio: np.ndarray, pause: int) -> None:
        """smart-turn's verdict on a pause; a turn judged complete ends after the short silence (maybe now)."""
        model = self.engine.turn_model
        assert model is not None
        try:
            p = await self.engine.run(model.probability, audio)
        except Exception:
            log.exception("smart-turn failed: the turn waits the full silence")
            self.verdicts["failed"] += 1
            return
        complete = p >= self.engine.smart_turn.threshold
        if not self.turns.endpointer.judging(pause):
            self.verdicts["late"] += 1
            return
        self.verdicts["complete" if complete else "incomplete"] += 1
        if self.turns.judge(pause, complete).event is EndpointEvent.END:
            self._end_of_turn()

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
        heard = time.perf_counter()
        prepared = await self._prepare(text)
        prepared.timings["recognition_ms"] = (heard - t0) * 1000
        prepared.timings["prepare_ms"] = (time.perf_counter() - t0) * 1000  # all of it: recognition to first speech
        return prepared

    def _speaker(self, lang: str, speak: bool = True) -> tuple[Any, str | None]:
        """Who speaks a reply in `lang` (worker thread: finding a voice may run espeak-ng), and why nobody does."""
        if self.text_only or not speak:
            return None, None
        voice = self.engine.voice(lang)
        if voice is None:
            return None, f"no {language(lang)} voice here: captions only"
        return voice, None

    async def _prepare(self, text: str) -> Prepared:
        if self.llm is not None:
            return await self._prepare_llm(text, self.llm)
        frames = self.turns.images()[-3:]

        def seen() -> Seen:
            return Seen(self.models.faces.count_in(frames) if frames else None)

        def work() -> Prepared:
            t0 = time.perf_counter()
            reply = self.policy.reply(text, DialogContext(self.engine.now(), seen, list(self.history)))
            t1 = time.perf_counter()
            voice, notice = self._speaker(reply.lang, reply.speak)
            speech = voice.stream(reply.text) if voice is not None and reply.text else iter(())
            first = next(speech, np.zeros(0, np.float32))
            t2 = time.perf_counter()
            timings = {"reply_ms": (t1 - t0) * 1000, "synthesis_ms": (t2 - t1) * 1000}
            return Prepared(text, reply, first, self._rest_of(speech), timings=timings, notice=notice)

        return await self.engine.run(work)

    async def _rest_of(self, speech: Iterator[np.ndarray]) -> AsyncIterator[Part]:
        while (pcm := await self.engine.run(next, speech, None)) is not None:
            yield "speech", pcm

    async def _prepare_llm(self, text: str, llm: LlmDialog) -> Prepared:
        """Ask the chat model; wait for its first sentence (after any tool calls) and speak it; the rest follows
        in `Prepared.rest`. A failure is said in one short spoken apology."""
        frames = self.turns.images()[-3:]
        faces = await self.engine.run(self.models.faces.count_in, frames) if frames else None
        t0 = time.perf_counter()
        parts = llm.reply(llm.messages(text, self.history, self.engine.now(), faces))
        calls: list[dict[str, Any]] = []
        first, error, lang = "", None, llm.lang
        try:
            async for part in parts:
                if isinstance(part, ToolRun):
                    calls.append(part.call)
                    continue
                first = part.text
                break
        except LlmError as exc:
            log.warning("cascade: %s", exc)
            first, error, lang = APOLOGY, str(exc), "en"
        except BaseException:
            await parts.aclose()
            raise
        t1 = time.perf_counter()

        def speak_first() -> tuple[Any, str | None, np.ndarray]:
            voice, notice = self._speaker(lang)
            return voice, notice, _speak(voice, first)

        try:
            voice, notice, pcm = await self.engine.run(speak_first)
        except BaseException:
            await parts.aclose()
            raise
        t2 = time.perf_counter()
        timings = {"reply_ms": (t1 - t0) * 1000, "synthesis_ms": (t2 - t1) * 1000}
        t = llm.timings
        for name, ms in (("llm_first_token_ms", t.first_token_ms), ("llm_first_sentence_ms", t.first_sentence_ms)):
            if ms is not None:
                timings[name] = ms
        intent = "translate" if self.profile.interpreting else "chat"
        reply = Reply(first, intent, tool_calls=calls, lang=lang)
        if error is not None:
            return Prepared(text, reply, pcm, timings=timings, error=error)
        rest = self._llm_rest(parts, voice)
        return Prepared(text, reply, pcm, rest, False, timings, notice, source=parts)

    async def _llm_rest(self, parts: AsyncIterator[Any], voice: Any) -> AsyncIterator[Part]:
        async with contextlib.aclosing(parts):  # type: ignore[type-var]
            async for part in parts:
                if isinstance(part, ToolRun):
                    yield "tool", part.call
                    continue
                yield "text", part.text
                if voice is not None:
                    yield "speech", await self.engine.run(_speak, voice, part.text)

    async def _deliver(
        self,
        prepared: asyncio.Task[Prepared],
        speech_end_tick: int | None = None,
        end_tick: int | None = None,
        after: asyncio.Task[None] | None = None,
    ) -> None:
        """Say the reply once it is ready and the one before it (`after`, still speaking where the profile does
        not let the user cut it: an interpreter's segments) has been said."""
        if after is not None and not after.done():
            try:
                await asyncio.wait({after})
            except asyncio.CancelledError:
                after.cancel()  # an interrupt stops the whole queue of replies
                self._discard(prepared)
                raise
        try:
            p = await prepared
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # a model failing mid-turn: tell the page, keep the session
            log.exception("cascade turn failed")
            self.outbox.put(Error("turn_failed", f"{type(exc).__name__}: {exc}"))
            self.outbox.put(TurnEnd())
            return
        try:
            await self._say(p, speech_end_tick, end_tick)
        finally:
            await p.close()

    async def _say(self, p: Prepared, speech_end_tick: int | None, end_tick: int | None) -> None:
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
        if p.error is not None:
            out.put(Error("llm_failed", p.error))
        for call in p.reply.tool_calls:
            out.put(ToolCall(call["name"], call["arguments"], call["result"]))
        said = p.reply.text
        if said:
            out.put(TextDelta(said))
        if p.complete:
            out.put(TranscriptDelta("assistant", said, True, extra=reply_extra))
        index = self._frames(p.first, 0)
        try:
            async for kind, value in p.rest:
                if kind == "speech":
                    index = self._frames(value, index)
                elif kind == "tool":
                    out.put(ToolCall(value["name"], value["arguments"], value["result"]))
                else:
                    piece = f" {value}" if said else value
                    said += piece
                    out.put(TextDelta(piece))
        except LlmError as exc:  # mid-reply: what was said stands
            out.put(Error("llm_failed", str(exc)))
        if not p.complete:
            out.put(TranscriptDelta("assistant", said, True, extra=reply_extra))
        self.history = (self.history + [(p.text, said)])[-20:]
        out.put(TurnEnd(stages={**p.timings, "speculative": float(speech_end_tick is not None and self._speculated)}))

    def _frames(self, pcm: np.ndarray, index: int) -> int:
        for start in range(0, pcm.size, OUTPUT_SAMPLES_PER_FRAME):
            self.outbox.put(SpeechFrame(pcm[start : start + OUTPUT_SAMPLES_PER_FRAME], index))
            index += 1
        return index

    def _spawn(self, coro: Any) -> asyncio.Task[Any]:
        task = asyncio.get_running_loop().create_task(coro)
        task.add_done_callback(_quiet)
        return task


def _speak(voice: Any, text: str) -> np.ndarray:
    """All of `text` spoken by `voice` (None: silence, for captions only)."""
    if voice is None or not text:
        return np.zeros(0, np.float32)
    parts = list(voice.stream(text))
    return np.concatenate(parts) if parts else np.zeros(0, np.float32)


def _nonempty(audio: np.ndarray) -> np.ndarray:
    return audio if audio.size else np.zeros(INPUT_SAMPLES_PER_TICK, np.float32)


def _quiet(task: asyncio.Task[Any]) -> None:
    with contextlib.suppress(asyncio.CancelledError):
        exc = task.exception()
        if exc is not None:
            log.error("cascade task failed: %r", exc)
