"""The `qwen3-omni` engine: Qwen3-Omni's Thinker, Talker and Code2Wav behind the engine contract.

One model per process, one worker thread that owns it and runs the scheduler;
the sessions on the event loop only queue commands and receive results through
`call_soon_threadsafe`, so the loop never waits on the GPU. Turn-taking uses the
same Silero endpointing as the cascade engine. The turn's audio and its
freshest camera frames go to the Thinker as one input, and that already at the
user's first 160 ms pause: the reply is prefilled and its first frames made,
held, and let out the moment the pause becomes the end of the turn (undone if
the user goes on). Encoding the audio block by block while the user speaks
would not be exact: Whisper's log-mel is floored at 8 (log10 units) below the maximum of
the whole utterance, so no block's features are final before the turn ends
(and the encoder's blocks are 8 s, longer than most turns).
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import queue
import threading
import time
from collections import deque
from collections.abc import AsyncIterator, Callable
from typing import Any

import numpy as np

from agent.config import END_SILENCE_MS
from agent.engines.base import EngineEvent, Error, SpeechFrame, TextDelta, ToolCall, TranscriptDelta, TurnEnd
from agent.engines.outbox import Outbox
from agent.engines.qwen3_omni.context import ContextWindow
from agent.engines.qwen3_omni.loading import LoadedModel, load
from agent.engines.qwen3_omni.profiles import (
    ProfileSetup,
    parse_tool_calls,
    setup,
    starts_tool_call,
    tool_response_text,
)
from agent.engines.qwen3_omni.prompt import Prompter
from agent.engines.qwen3_omni.scheduler import Job, Out, Scheduler, SchedulerStats
from agent.engines.qwen3_omni.stream import Conversation, OmniStreamer, Reply, TurnInput
from agent.profiles import Profile
from media.aligner import AlignedChunk
from media.endpoint import EndpointConfig, EndpointEvent
from media.turn_taking import InterruptionConfig, TurnTaking
from media.vad import SileroDetector

log = logging.getLogger(__name__)

MAX_TURN_MS = 30_000  # a turn without a pause ends here
MAX_TOOL_ROUNDS = 3  # tool calls answering tool results, before the turn ends without more


class QwenOmniEngine:
    name = "qwen3-omni"
    live_output = False

    def __init__(
        self,
        model: str | None = None,
        loaded: LoadedModel | None = None,
        device: str | None = None,
        batch_limit: int = 8,
        speaker: str = "ethan",
        end_silence_ms: int = END_SILENCE_MS,
        max_context: int = 8192,
        max_reply_tokens: int = 256,
        max_reply_s: float = 30.0,
        lookahead: int = 4,
        speculate: bool = True,
        warmup: bool = True,
        repetition_penalty: float = 1.05,
        detector: Callable[[], Any] | None = None,
        cuda_graphs: bool | None = None,
    ) -> None:
        if loaded is None:
            if not model:
                from agent.engines.qwen3_omni.loading import ModelLoadError

                raise ModelLoadError("the qwen3-omni engine needs a model: pass --model /path/to/Qwen3-Omni")
            loaded = load(model, device)
        self.loaded = loaded
        self.streamer = OmniStreamer(
            loaded.model,
            speaker=speaker,
            repetition_penalty=repetition_penalty,
            max_context=max_context,
            max_frames=int(max_reply_s / 0.08),
            slots=batch_limit,
            graphs=cuda_graphs,  # None: on CUDA
        )
        self.scheduler = Scheduler(self.streamer, batch_limit=batch_limit, lookahead=lookahead)
        cfg = loaded.model.config.thinker_config
        self.prompter = Prompter(
            loaded.tokenizer,
            loaded.feature_extractor,
            loaded.image_processor,
            loaded.device,
            n_window=cfg.audio_config.n_window,
            merge_size=cfg.vision_config.spatial_merge_size,
        )
        self.end_silence_ms = end_silence_ms
        self.speculate = speculate
        self.max_context = max_context
        self.max_reply_tokens = max_reply_tokens
        self.max_frames = int(max_reply_s / 0.08)
        self.detector = detector
        if warmup:
            self._warm_up()
        self._commands: queue.SimpleQueue[Callable[[], None]] = queue.SimpleQueue()
        self._wake = threading.Event()
        self._sessions: dict[int, QwenOmniSession] = {}
        self._ids = itertools.count(1)
        self._stop = False
        self._thread = threading.Thread(target=self._run, name="qwen3-omni", daemon=True)
        self._thread.start()

    def _warm_up(self) -> None:
        """One short turn through every stage (audio, image, text, both phases of the Code2Wav stream) before the first
        user: kernels and allocator are set up here, not inside someone's first reply."""
        t0 = time.perf_counter()
        image = np.full((64, 64, 3), 128, np.uint8)
        turn = self.prompter.turn(audio=np.zeros(16_000, np.float32), images=[image], text="Hello.", system="Hi.")
        self.scheduler.submit("warm-up", Reply(Conversation(), True, 8, 4), turn)
        while self.scheduler.has_work():
            for out in self.scheduler.step():
                if out.kind == "error":
                    raise out.value
        self.scheduler.stats = SchedulerStats()
        graphs = self.streamer.graphs
        note = "" if graphs is None else f"; CUDA graphs captured: {graphs.stats.captured}" if graphs.capture else ""
        log.info("qwen3-omni warmed up in %.1f s%s", time.perf_counter() - t0, note)

    @property
    def in_flight(self) -> int:
        """Work items in the latest batched step (the server's omni_engine_batch_size)."""
        return self.scheduler.stats.last_batch

    async def open_session(self, profile: Profile, options: dict[str, Any] | None = None) -> QwenOmniSession:
        if self.detector is not None:
            detector = self.detector()
        else:
            detector = await asyncio.get_running_loop().run_in_executor(None, SileroDetector)
        opts = options or {}
        end_silence = int(opts.get("end_silence_ms", self.end_silence_ms))  # the config's, else the engine's
        session = QwenOmniSession(
            self, next(self._ids), setup(profile, opts), detector, end_silence, opts.get("interruptions")
        )
        self._sessions[session.key] = session
        return session

    async def close(self) -> None:
        self._stop = True
        self._wake.set()
        await asyncio.get_running_loop().run_in_executor(None, self._thread.join, 5.0)

    # ---- the worker thread ----

    def command(self, fn: Callable[[], None]) -> None:
        self._commands.put(fn)
        self._wake.set()

    def _run(self) -> None:
        while not self._stop:
            while True:
                try:
                    self._commands.get_nowait()()
                except queue.Empty:
                    break
            if not self.scheduler.runnable():  # idle, or only held turns waiting to be released
                self._wake.wait(0.5)
                self._wake.clear()
                continue
            try:
                outs = self.scheduler.step()
            except Exception as exc:  # a model failure ends the turns in flight, not the engine
                log.exception("qwen3-omni step failed")
                outs = [Out(key, "error", exc, job.reply) for key, job in self.scheduler.active.items()]
                for key in list(self.scheduler.active):
                    self.scheduler.cancel(key)
            for out in outs:
                session = self._sessions.get(out.key)
                if session is not None:
                    session.loop.call_soon_threadsafe(session.on_out, out)

    def forget(self, key: int) -> None:
        self._sessions.pop(key, None)
        self.command(lambda: self.scheduler.cancel(key))


class QwenOmniSession:
    def __init__(
        self,
        engine: QwenOmniEngine,
        key: int,
        profile: ProfileSetup,
        detector: Any,
        end_silence_ms: int,
        interruptions: InterruptionConfig | None = None,
    ) -> None:
        self.engine = engine
        self.key = key
        self.profile = profile
        self.loop = asyncio.get_running_loop()
        self.outbox = Outbox()
        self.turns = TurnTaking(
            EndpointConfig(end_silence_ms=end_silence_ms, max_turn_ms=MAX_TURN_MS),
            detector,
            profile.barge_in,
            interruptions=interruptions,
        )
        self.floor = self.turns.floor
        self.context = ContextWindow(engine.prompter, profile.system, engine.max_context, engine.max_reply_tokens)
        self.text_only = False
        self._reply: Reply | None = None
        self._text: list[int] = []
        self._said = ""
        self._frame_index = 0
        self._muted = False  # a tool call is not spoken
        self._tool_rounds = 0
        self._segment = 0
        self._queued: deque[tuple[Callable[[], TurnInput], int | None]] = deque()
        self._reply_segment = 0
        self._spec: tuple[Reply, np.ndarray, list[np.ndarray]] | None = None  # a reply made ahead at a pause

    # ---- input ----

    def feed(self, chunk: AlignedChunk) -> None:
        step = self.turns.feed(chunk, self._replying)
        if step.barge_in:
            self.interrupt()
        if step.event is EndpointEvent.PAUSE:
            self._speculate()
        elif step.event is EndpointEvent.RESUME:
            self._drop_speculation()
        elif step.event is EndpointEvent.END:
            self._end_of_turn()

    def send_text(self, text: str) -> None:
        if self._replying() and self.profile.barge_in:
            self.interrupt()
        self.outbox.put(TranscriptDelta("user", text, True))
        self._tool_rounds = 0
        self._submit(lambda: self.engine.prompter.turn(text=text))

    def interrupt(self) -> None:
        was = self._replying()
        self._drop_speculation()
        if self._reply is not None:
            reply = self._reply
            reply.cancelled = True  # the worker sees it at its next step
            self.engine.command(lambda: self.engine.scheduler.cancel_reply(self.key, reply))
        self._reply = None
        self._queued.clear()
        self.outbox.cancel_reply()
        if was:
            self.outbox.put(TurnEnd(interrupted=True))

    def events(self) -> AsyncIterator[EngineEvent]:
        return self.outbox.__aiter__()

    def counters(self) -> dict[str, float]:
        return self.outbox.counters()

    async def close(self) -> None:
        self.engine.forget(self.key)
        self.outbox.close()

    # ---- turns ----

    def _replying(self) -> bool:
        return self._reply is not None or self.outbox.has_reply()

    def _images(self) -> list[np.ndarray]:
        """The oldest and the newest frame of the last 3.2 s: what changed while the user spoke."""
        fresh = self.turns.images()
        return fresh[:1] + fresh[-1:] if len(fresh) > 1 else fresh

    def _speculate(self) -> None:
        """At the first pause, start the reply held: prefill, first token, first frames. If the user goes on it
        is undone; if the pause becomes the end of the turn it is let out at once."""
        eng = self.engine
        if not eng.speculate or self._reply is not None:
            return
        audio, images = self.turns.audio(), self._images()
        reply = self._new_reply()
        self._spec = (reply, audio, images)
        build = self._builder(lambda: eng.prompter.turn(audio=audio, images=images), reply, speculative=True)
        eng.command(lambda: eng.scheduler.submit(self.key, reply, build, held=True))

    def _drop_speculation(self) -> None:
        if self._spec is not None:
            reply = self._spec[0]
            self._spec = None
            self.engine.command(lambda: self.engine.scheduler.cancel_reply(self.key, reply))

    def _end_of_turn(self) -> None:
        spec, self._spec = self._spec, None
        ended = self.turns.end()
        speech_end_tick, end_tick = ended.speech_end_tick, ended.end_tick
        if spec is not None:
            _, audio, images = spec  # the held turn was made from exactly this audio
        else:
            audio, images = ended.audio, self._images()
        self._segment += 1
        self._tool_rounds = 0
        seconds = audio.size / 16_000
        extra: dict[str, Any] = {"seconds": round(seconds, 2)}
        if self.profile.interpreting:
            extra.update(segment=self._segment, lang=self.profile.extra["source_lang"])
        self.outbox.put(TranscriptDelta("user", f"[{seconds:.1f} s of speech]", True, speech_end_tick, end_tick, extra))
        eng = self.engine

        def build() -> TurnInput:
            return eng.prompter.turn(audio=audio, images=images)

        if spec is not None and self._reply is None:
            reply = spec[0]
            self._start_reply(reply, self._segment)
            fallback = self._builder(build, reply)
            eng.command(lambda: eng.scheduler.release(self.key, reply, fallback))
            return
        self._submit(build, self._segment)

    def _new_reply(self) -> Reply:
        eng = self.engine
        return Reply(
            self.context.conv, speak=not self.text_only, max_text_tokens=eng.max_reply_tokens, max_frames=eng.max_frames
        )

    def _start_reply(self, reply: Reply, segment: int | None) -> None:
        self._reply, self._text, self._said, self._frame_index, self._muted = reply, [], "", 0, False
        self._reply_segment = segment if segment is not None else self._segment

    def _submit(self, build: Callable[[], TurnInput], segment: int | None = None) -> None:
        if self._reply is not None and not self.profile.barge_in:
            self._queued.append((build, segment))  # interpreting: segments wait their turn, none is cut off
            return
        reply = self._new_reply()
        self._start_reply(reply, segment)
        turn = self._builder(build, reply)
        self.engine.command(lambda: self.engine.scheduler.submit(self.key, reply, turn))

    def _builder(
        self, build: Callable[[], TurnInput], reply: Reply, speculative: bool = False
    ) -> Callable[[], TurnInput]:
        """The turn as the Thinker reads it, made in the worker (which alone touches the conversation)."""
        return lambda: self.context.read(build(), reply.tokens, speculative)

    # ---- results from the worker ----

    def on_out(self, out: Out) -> None:
        reply = self._reply
        if reply is None or out.reply is not reply or reply.cancelled:
            return  # what a cancelled turn made before the worker saw the cancel
        if out.kind == "token":
            self._on_token(out.value)
        elif out.kind == "frame":
            if not self._muted:
                self.outbox.put(SpeechFrame(np.asarray(out.value, np.float32), self._frame_index))
                self._frame_index += 1
        elif out.kind == "done":
            self._on_done(out.value)
        elif out.kind == "error":
            log.error("qwen3-omni turn failed: %r", out.value)
            self._reply = None
            self.outbox.put(Error("turn_failed", f"{type(out.value).__name__}: {out.value}"))
            self.outbox.put(TurnEnd())

    def _decode(self) -> str:
        tok = self.engine.loaded.tokenizer
        ids = [t for t in self._text if t != self.engine.streamer.eos]
        return tok.decode(ids, skip_special_tokens=True)

    def _on_token(self, token: int) -> None:
        self._text.append(token)
        text = self._decode()
        if self.profile.car is not None and not self._muted and starts_tool_call(text):
            self._muted = True
            self.engine.command(lambda key=self.key: self.engine.scheduler.mute(key))
        if self._muted or text.endswith("\ufffd"):
            return  # a tool call is not shown as speech; a half UTF-8 character waits for the rest
        if len(text) > len(self._said):
            self.outbox.put(TextDelta(text[len(self._said) :]))
            self._said = text

    def _on_done(self, job: Job) -> None:
        self._reply = None
        text = self._decode()
        stages = dict(job.timings)
        if self._muted:
            calls = parse_tool_calls(text)
            results = self.profile.run_calls(calls)
            for r in results:
                self.outbox.put(ToolCall(r["name"], r["arguments"], r["result"]))
            self._tool_rounds += 1
            if results and self._tool_rounds <= MAX_TOOL_ROUNDS:
                response = tool_response_text(results)
                self._submit(lambda: self.engine.prompter.turn(text=response))
                return
        extra: dict[str, Any] = {}
        if self.profile.interpreting:
            extra = {"segment": self._reply_segment, "lang": self.profile.extra["target_lang"]}
        self.outbox.put(TranscriptDelta("assistant", text.strip(), True, extra=extra))
        self.outbox.put(TurnEnd(stages=stages))
        if self._queued:
            self._submit(*self._queued.popleft())
