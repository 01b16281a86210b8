"""The cascade engine: VAD endpointing, Moonshine, a dialog policy or a chat model, hibari TTS.

Offline on the CPU, unless replies come from a chat model (`llm.py`).
Latency comes from doing the work before the turn has ended:
- while the user speaks, the transcript is kept current (a pass every
  ~0.5 s, each checking the one before: `moonshine.py`), on idle time;
- at the first silent 80 ms tick a last pass hears the turn so far (only its
  new words cost decoding); at the first pause (160 ms) the answer and its
  first sentence's speech are made from it while the silence runs on; if the
  user goes on, that work is thrown away (a chat model's request closed);
- at the same pause the end of the turn is judged from sound and words
  (`end_of_turn.py`): a finished request ends it after a short silence
  (200 ms), an unfinished one ("... to") is held, the rest waits the full
  silence;
- what the camera shows is counted in the background when the user starts
  to speak (`vision.FaceWatch`), so a camera question reads a ready answer.
At the end of the turn the first speech frame is then usually ready at once.
The pass at the pause never waits behind the background passes or the
verdict: each kind of work has its own threads. Each reply is spoken by a
voice of its language (hibari for English, espeak-ng for others, captions
only where there is none). Heavy work never runs on the event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import logging
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator
from concurrent.futures import Executor, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from agent.config import END_SILENCE_MS, LlmConfig, UnderstandingConfig
from agent.engines.base import EngineEvent, Error, SpeechFrame, TextDelta, ToolCall, TranscriptDelta, TurnEnd
from agent.engines.cascade.end_of_turn import REASONS, WordsConfig, decide
from agent.engines.cascade.llm import APOLOGY, ChatModel, LlmDialog, LlmError, ToolRun
from agent.engines.cascade.models import SpeechModels, WhisperRecognizer, load_models, second_opinion_recognizer
from agent.engines.cascade.phrase_bias import PhraseBias
from agent.engines.cascade.second_opinion import SecondOpinion
from agent.engines.cascade.second_reading import SecondReading
from agent.engines.cascade.smart_turn import SmartTurnConfig, load_smart_turn
from agent.engines.cascade.vision import FaceWatch
from agent.engines.outbox import Outbox
from agent.profiles import Profile
from agent.profiles.dialog import DefaultAssistant, DialogContext, DialogPolicy, Reply, Seen
from agent.profiles.interruption_words import barge_in_probability
from agent.profiles.policies import load_intent_models, make_policy
from agent.profiles.prompts import language
from agent.profiles.translate import voice
from agent.profiles.turn_words import Words, WordsVerdict, judge_words
from media.aligner import AlignedChunk
from media.clock import INPUT_SAMPLES_PER_TICK, OUTPUT_SAMPLES_PER_FRAME, TICK_MS
from media.endpoint import EndpointConfig, EndpointEvent
from media.priority import lower_thread
from media.turn_taking import InterruptionConfig, TurnTaking
from media.vad import SileroDetector

log = logging.getLogger(__name__)

PASS_EVERY_TICKS = 6  # the transcript kept current: a pass every 480 ms of speech, on idle time ...
PASS_DUTY = 0.3  # ... or less often: a session's passes take at most this share of a core


def pass_every_ticks(last_pass_s: float) -> float:
    """Ticks from one pass to the next, given how long the last took: a long turn's passes, or a busy
    server's, come less often."""
    return max(PASS_EVERY_TICKS, last_pass_s / PASS_DUTY * 1000 / TICK_MS)


def _now() -> dt.datetime:
    return dt.datetime.now().astimezone()


Part = tuple[str, Any]  # ("text", str) | ("speech", np.ndarray) | ("tool", call)


async def _nothing() -> AsyncIterator[Part]:
    return
    yield


@dataclass(frozen=True)
class Hearing:
    """The last pass over a turn: its text, and when it started and was done (perf_counter)."""

    text: str
    started: float
    done: float


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
    heard_at: float | None = None  # when the recognition it answers was ready (perf_counter)

    async def close(self) -> None:
        for gen in (self.rest, self.source):
            if gen is not None and hasattr(gen, "aclose"):
                await gen.aclose()


class CascadeEngine:
    name = "cascade"
    live_output = False

    def __init__(
        self,
        end_silence_ms: int = END_SILENCE_MS,
        pause_ms: int = 160,
        partials: bool = True,
        workers: int = 2,
        now: Callable[[], dt.datetime] = _now,
        models: SpeechModels | None = None,
        llm: LlmConfig | None = None,
        recognizer: str = "moonshine",
        smart_turn: Any = True,
        turn_words: Any = True,
        faces_every_s: float = 10.0,
    ) -> None:
        self.smart_turn = SmartTurnConfig.from_option(smart_turn)
        self.words = WordsConfig.from_option(turn_words)
        self.chat = ChatModel(llm) if llm is not None and llm.url else None
        self.models = models or load_models(recognizer=recognizer)
        load_intent_models()
        self.turn_model = load_smart_turn() if self.smart_turn.enabled else None
        self.end_silence_ms = end_silence_ms
        self.pause_ms = pause_ms
        self.partials = partials
        self.now = now
        # what a reply waits for: the pass at the pause, the answer, its speech
        self.executor = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="cascade")
        self.judging = ThreadPoolExecutor(max_workers=1, thread_name_prefix="cascade-judge")  # smart-turn
        # the passes that keep transcripts current: on the cores' idle time
        self.background = ThreadPoolExecutor(
            max_workers=1, thread_name_prefix="cascade-bg", initializer=lambda: lower_thread(threading.get_native_id())
        )
        self.faces = FaceWatch(self.models.faces, every_s=faces_every_s)
        self._biases: dict[tuple[str, float], PhraseBias | None] = {}
        self._biases_lock = threading.Lock()

    async def run(self, fn: Callable[..., Any], *args: Any, on: Executor | None = None) -> Any:
        return await asyncio.get_running_loop().run_in_executor(on or self.executor, fn, *args)

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
        end_silence = int(opts.get("end_silence_ms", self.end_silence_ms))  # the config's, else the engine's
        second = None
        reading = opts.get("second_reading", UnderstandingConfig().reading())  # (bonus, within), or None: off
        if llm is None and reading and hasattr(policy, "vocabulary"):
            bias = await self.run(self._bias, profile.name, policy.vocabulary, reading[0])
            second = SecondReading(bias, reading[1]) if bias is not None else None
        opinion = None
        asking = opts.get("second_opinion", UnderstandingConfig().opinion())  # (within, below), or None: off
        heard_by_whisper = isinstance(self.models.recognizer, WhisperRecognizer)  # its opinion would be the same
        if llm is None and asking and hasattr(policy, "acts_on") and not heard_by_whisper:
            opinion = SecondOpinion(await self.run(second_opinion_recognizer), *asking)
        session = CascadeSession(
            self, profile, policy, detector, end_silence, llm, opts.get("interruptions"), second, opinion
        )
        for call in getattr(policy, "initial_tool_calls", list)():
            session.outbox.put(ToolCall(call["name"], call["arguments"], call["result"]))
        return session

    def _bias(self, profile: str, phrases: tuple[str, ...], bonus: float) -> PhraseBias | None:
        """A profile's leaning for second readings, spelt once per engine (worker thread)."""
        with self._biases_lock:
            if (profile, bonus) not in self._biases:
                self._biases[profile, bonus] = self.models.recognizer.phrase_bias(phrases, bonus)
            return self._biases[profile, bonus]

    def voice(self, lang: str) -> Any:
        """Who speaks `lang`: hibari for English, espeak-ng for others, None: captions only."""
        if lang == "en":
            return self.models.synthesizer
        return voice(lang)

    async def close(self) -> None:
        for pool in (self.executor, self.judging, self.background):
            pool.shutdown(wait=False, cancel_futures=True)
        self.faces.close()
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
        interruptions: InterruptionConfig | None = None,
        second_reading: SecondReading | None = None,
        second_opinion: SecondOpinion | None = None,
    ) -> None:
        self.engine = engine
        self.second_reading = second_reading  # a request it would not act on, read again (second_reading.py)
        self.second_opinion = second_opinion  # ... and still not, heard by another recogniser (second_opinion.py)
        self.llm = llm
        self.models = engine.models
        self.profile = profile
        self.policy = policy
        self.outbox = Outbox()
        self.end_silence_ms = end_silence_ms
        self.turns = TurnTaking(
            EndpointConfig(pause_ms=engine.pause_ms, end_silence_ms=end_silence_ms),
            detector,
            barge_in=profile.barge_in,
            keep_frames=0,  # the camera's frames are FaceWatch's (`self.camera`)
            interruptions=interruptions,
            hears_words=True,  # speech over a reply is recognised (`_hear_held`)
        )
        self.floor = self.turns.floor
        self.camera = engine.faces.watch()
        self.history: list[tuple[str, str]] = []
        self._speculation: asyncio.Task[Prepared] | None = None
        self._reply: asyncio.Task[None] | None = None
        self._pass: asyncio.Task[None] | None = None  # a background pass keeping the transcript current
        self._hearing: tuple[int | None, asyncio.Task[Hearing]] | None = None  # the pass at a lull, by its voiced end
        self._verdict: asyncio.Task[None] | None = None  # the end of the turn judged at the last pause
        self._last_pass_tick = 0
        self._pass_s = 0.0  # how long the last background pass took
        self._draft: tuple[int, ...] = ()  # the turn's tokens as the latest pass heard them
        self._draft_samples = 0  # how much of the turn that pass heard
        self._pause_reason: str | None = None  # the verdict on the current pause
        self._turn = 0  # bumps at each user turn start: stale partials are dropped
        self._speculated = False  # the last turn's answer was made during the pause
        self._saying: dict[str, float | str] = {}  # the figures of the reply being said, for its TurnEnd
        self._segment = 0
        self._held_pass: asyncio.Task[None] | None = None  # hearing speech over the reply
        self._held_pass_tick = 0
        self.text_only = False
        self.verdicts = dict.fromkeys(REASONS, 0)
        self.second_readings = 0  # taken for the first
        self.second_opinions = 0  # taken for Moonshine's readings

    # ---- input ----

    def feed(self, chunk: AlignedChunk) -> None:
        step = self.turns.feed(chunk, self._replying)
        if chunk.video is not None:
            self.camera.offer(chunk.tick, chunk.video.image)
        if self.turns.held:
            self._hear_held(chunk.tick, step.hold)
        if step.barge_in:
            self.interrupt()
        event = step.event
        if event is EndpointEvent.START:
            self.camera.look()  # a question about the camera is about what it shows now
            self._turn += 1
            self._last_pass_tick = chunk.tick
            self._draft, self._draft_samples = (), 0
            self._pause_reason = None
            self._hearing = None
        elif event is EndpointEvent.PAUSE:
            audio = _nonempty(self.turns.audio())
            heard = self._heard_so_far(audio)
            self._speculation = self._spawn(self._prepare_heard(heard))
            if self.engine.turn_model is not None or self.engine.words.enabled:
                self._verdict = self._spawn(self._judge(audio, heard, self.turns.endpointer.pauses))
        elif event is EndpointEvent.RESUME:
            self._drop_speculation()
            self._pause_reason = None
        elif event is EndpointEvent.END:
            self._end_of_turn()
        elif self.turns.endpointer.silent_ms == TICK_MS:  # a lull: maybe the end, so hear it all now
            self._heard_so_far(_nonempty(self.turns.audio()))
            self._last_pass_tick = chunk.tick
        elif self.turns.in_speech and self.engine.partials:
            self._maybe_pass(chunk.tick)

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
        self.outbox.cancel_reply()  # its TurnEnd too: this one carries its figures instead
        if was_active:
            self.outbox.put(TurnEnd(interrupted=True, stages=self._saying))

    def events(self) -> AsyncIterator[EngineEvent]:
        return self.outbox.__aiter__()

    def counters(self) -> dict[str, float]:
        """The end-of-turn verdicts, by reason (`end_of_turn.REASONS`), the second readings taken, and the
        outbox's drops."""
        verdicts = {f"end_of_turn_{k}": v for k, v in self.verdicts.items()}
        read_again = {"second_readings": self.second_readings, "second_opinions": self.second_opinions}
        return verdicts | read_again | self.outbox.counters()

    async def close(self) -> None:
        self._drop_speculation()
        for task in (self._reply, self._pass, self._verdict):
            if task is not None:
                task.cancel()
        self.camera.close()
        self.outbox.close()
        close_policy = getattr(self.policy, "close", None)  # an interpreter's translator
        if close_policy is not None:
            close_policy()

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
        ended_at = time.perf_counter()
        self._speculated = self._speculation is not None
        reason = self._pause_reason or "silence"
        turn = self.turns.end()
        prepared = self._speculation
        if prepared is None:
            prepared = self._spawn(self._prepare_heard(self._heard_so_far(_nonempty(turn.audio))))
        self._speculation = None
        self._pause_reason = None
        after = self._reply
        self._reply = self._spawn(self._deliver(prepared, turn.speech_end_tick, turn.end_tick, after, ended_at, reason))

    async def _judge(self, audio: np.ndarray, heard: asyncio.Task[Hearing], pause: int) -> None:
        """The verdict on a pause from sound and words (`end_of_turn.decide`); it may end the turn now."""
        engine = self.engine
        sound = None
        if engine.turn_model is not None:  # asked at once, beside the recognition
            sound = asyncio.ensure_future(engine.run(engine.turn_model.probability, audio, on=engine.judging))
            sound.add_done_callback(_quiet)  # not awaited when the words decide
        words: WordsVerdict | None = None
        if engine.words.enabled:
            try:
                text = (await asyncio.shield(heard)).text
                words = judge_words(text, getattr(self.policy, "understands", None))
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("cascade: the words' verdict failed; the sound decides")
                self.verdicts["failed"] += 1
        p = None
        if sound is not None and (words is None or words.kind is Words.UNSURE):
            try:
                p = await sound
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("smart-turn failed: the words decide, or the full silence")
                self.verdicts["failed"] += 1
        st = engine.smart_turn
        verdict = decide(words, p, st.threshold, st.end_silence_ms, self.end_silence_ms, engine.words.hold_ms)
        if not self.turns.endpointer.judging(pause):
            self.verdicts["late"] += 1
            return
        self.verdicts[verdict.reason] += 1
        self._pause_reason = verdict.reason
        if self.turns.judge(pause, verdict.silence_ms).event is EndpointEvent.END:
            self._end_of_turn()

    def _hear_held(self, tick: int, first: bool) -> None:
        """Speech over the reply: what it says decides whether the reply goes on (`TurnTaking.heard`). Heard at
        once, every 240 ms while it goes on, and once it has stopped; one pass at a time, ahead of background."""
        if self._held_pass is not None and not self._held_pass.done():
            return
        ep = self.turns.endpointer
        if first or ep.silent_ms == TICK_MS or (tick - self._held_pass_tick) >= 3:
            self._held_pass_tick = tick
            upto = ep.last_voiced_tick if ep.last_voiced_tick is not None else tick
            self._held_pass = self._spawn(self._hear_held_words(_nonempty(self.turns.audio()), upto))

    async def _hear_held_words(self, audio: np.ndarray, upto: int) -> None:
        recognizer, judging = self.models.recognizer, self.turns.judging
        heard = await self.engine.run(recognizer.hear, audio, (), True)
        gaps = meant = None
        if judging.words_model and self.turns.unsure(heard.text):  # more than backchannels: do they mean it?
            meant = await self.engine.run(barge_in_probability, heard.text)
        if self.turns.unsure(heard.text, meant):  # ... and how sure of them is the recogniser?
            gaps = await self.engine.run(recognizer.weigh, heard, self.turns.sayings, judging.sayings_within)
        self.turns.heard(heard.text, upto, gaps, meant, heard.sureness)

    def _maybe_pass(self, tick: int) -> None:
        busy = self._pass is not None and not self._pass.done()
        if busy or tick - self._last_pass_tick < pass_every_ticks(self._pass_s):
            return
        self._last_pass_tick = tick
        self._pass = self._spawn(self._keep_current(self.turns.audio(), self._turn))

    async def _keep_current(self, audio: np.ndarray, turn: int) -> None:
        """A pass over the turn so far, on idle time: its tokens the next pass's draft, its text a partial."""
        t0 = time.perf_counter()
        heard = await self.engine.run(self.models.recognizer.hear, audio, self._draft, on=self.engine.background)
        self._pass_s = time.perf_counter() - t0  # waiting for the idle thread included: a busy server passes less
        self._take(heard.tokens, audio.size, turn)
        if heard.text and turn == self._turn and self.turns.in_speech:
            self.outbox.put(TranscriptDelta("user", heard.text, False))

    def _take(self, tokens: tuple[int, ...], samples: int, turn: int) -> None:
        """A pass's tokens as the draft, unless a pass over more of the turn has already given one."""
        if turn == self._turn and samples >= self._draft_samples:
            self._draft, self._draft_samples = tokens, samples

    def _heard_so_far(self, audio: np.ndarray) -> asyncio.Task[Hearing]:
        """The pass over the turn up to its last voiced tick: the one started at the lull, or a new one."""
        voiced_end = self.turns.endpointer.last_voiced_tick
        if self._hearing is None or self._hearing[0] != voiced_end:
            self._hearing = (voiced_end, self._spawn(self._hear(audio, self._turn)))
        return self._hearing[1]

    async def _hear(self, audio: np.ndarray, turn: int) -> Hearing:
        """The pass a reply waits for: never behind the background passes or a verdict."""
        t0 = time.perf_counter()
        recognizer, second, opinion = self.models.recognizer, self.second_reading, self.second_opinion
        asked = second is not None or opinion is not None
        acts_on = getattr(self.policy, "acts_on", None) if asked else None  # optional, as `understands`
        heard = await self.engine.run(recognizer.hear, audio, self._draft, acts_on is not None)
        self._take(heard.tokens, audio.size, turn)  # the first reading: the background passes' draft
        taken = False
        if second is not None and acts_on is not None:
            heard, taken = await self.engine.run(second.read, recognizer, heard, acts_on)
            self.second_readings += taken
        if opinion is not None and acts_on is not None and not taken:
            heard, taken = await self.engine.run(opinion.read, recognizer, heard, audio, acts_on)
            self.second_opinions += taken
        return Hearing(heard.text, t0, time.perf_counter())

    async def _prepare_heard(self, heard: asyncio.Task[Hearing]) -> Prepared:
        h = await asyncio.shield(heard)  # the verdict reads it too, and a dropped reply must not cancel it
        prepared = await self._prepare(h.text, heard=True)
        prepared.timings["recognition_ms"] = (h.done - h.started) * 1000
        prepared.timings["prepare_ms"] = (time.perf_counter() - h.started) * 1000  # recognition to first speech
        prepared.heard_at = h.done
        return prepared

    def _speaker(self, lang: str, speak: bool = True) -> tuple[Any, str | None]:
        """Who speaks a reply in `lang` (worker thread: finding a voice may run espeak-ng), and why nobody does."""
        if self.text_only or not speak:
            return None, None
        voice = self.engine.voice(lang)
        if voice is None:
            return None, f"no {language(lang)} voice here: captions only"
        return voice, None

    async def _prepare(self, text: str, heard: bool = False) -> Prepared:
        if self.llm is not None:
            return await self._prepare_llm(text, self.llm)
        tick = self.turns.tick

        def seen() -> Seen:
            return Seen(self.camera.faces(tick))

        def work() -> Prepared:
            t0 = time.perf_counter()
            reply = self.policy.reply(text, DialogContext(self.engine.now(), seen, list(self.history), heard))
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
        faces = await self.engine.run(self.camera.faces, self.turns.tick)
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
        ended_at: float | None = None,
        reason: str | None = None,
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
        if ended_at is not None and p.heard_at is not None:  # how long the reply waited for its words
            p.timings["recognition_left_ms"] = max(0.0, p.heard_at - ended_at) * 1000
        try:
            await self._say(p, speech_end_tick, end_tick, reason)
        finally:
            await p.close()

    async def _say(self, p: Prepared, speech_end_tick: int | None, end_tick: int | None, reason: str | None) -> None:
        out = self.outbox
        self._segment += 1
        stages: dict[str, float | str] = {**p.timings, "speculative": float(end_tick is not None and self._speculated)}
        if reason is not None:
            stages["end_reason"] = reason
        self._saying = stages
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
        out.put(TurnEnd(stages=stages))

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
