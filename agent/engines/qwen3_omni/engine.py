"""The `qwen3-omni` engine: Qwen3-Omni's Thinker, Talker and Code2Wav behind the engine contract.

One model per process, one worker thread that owns it and runs the scheduler;
the sessions on the event loop only queue commands and receive results through
`call_soon_threadsafe`, so the loop never waits on the GPU. Turn-taking uses the
same Silero endpointing as the cascade engine; the audio of the turn and its
freshest camera frames go to the Thinker whole at the end of the turn (the
audio encoder attends within 8 s blocks, so encoding earlier would only pay
off for turns longer than one block).
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

from agent.engines.base import EngineEvent, Error, SpeechFrame, TextDelta, ToolCall, TranscriptDelta, TurnEnd
from agent.engines.outbox import Outbox
from agent.engines.qwen3_omni.loading import LoadedModel, load
from agent.engines.qwen3_omni.profiles import (
    ProfileSetup,
    parse_tool_calls,
    setup,
    starts_tool_call,
    tool_response_text,
)
from agent.engines.qwen3_omni.prompt import Prompter, join
from agent.engines.qwen3_omni.scheduler import Job, Out, Scheduler
from agent.engines.qwen3_omni.stream import Conversation, OmniStreamer, Reply, TurnInput
from media.aligner import AlignedChunk
from media.endpoint import EndpointConfig, Endpointer, EndpointEvent

log = logging.getLogger(__name__)

PRE_ROLL_TICKS = 3
CAMERA_FRESH_TICKS = 40  # frames older than 3.2 s are not shown to the model
MAX_TURN_TICKS = 375  # 30 s of audio per turn; beyond it the turn ends (counted)
IMAGES_PER_TURN = 2
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
        end_silence_ms: int = 480,
        max_context: int = 8192,
        max_reply_tokens: int = 256,
        max_reply_s: float = 30.0,
        lookahead: int = 4,
        repetition_penalty: float = 1.05,
        detector: Callable[[], Any] | None = None,
    ) -> None:
        if loaded is None:
            if not model:
                from agent.engines.qwen3_omni.loading import ModelLoadError

                raise ModelLoadError("the qwen3-omni engine needs a model: pass --model /path/to/Qwen3-Omni")
            loaded = load(model, device)
        self.loaded = loaded
        self.streamer = OmniStreamer(loaded.model, speaker=speaker, repetition_penalty=repetition_penalty)
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
        self.max_context = max_context
        self.max_reply_tokens = max_reply_tokens
        self.max_frames = int(max_reply_s / 0.08)
        self.detector = detector
        self._commands: queue.SimpleQueue[Callable[[], None]] = queue.SimpleQueue()
        self._wake = threading.Event()
        self._sessions: dict[int, QwenOmniSession] = {}
        self._ids = itertools.count(1)
        self._stop = False
        self._thread = threading.Thread(target=self._run, name="qwen3-omni", daemon=True)
        self._thread.start()

    @property
    def in_flight(self) -> int:
        """Work items in the latest batched step (the server's omni_engine_batch_size)."""
        return self.scheduler.stats.last_batch

    async def open_session(self, profile: str, options: dict[str, Any] | None = None) -> QwenOmniSession:
        if self.detector is not None:
            detector = self.detector()
        else:
            from agent.engines.cascade.models import SileroDetector

            detector = await asyncio.get_running_loop().run_in_executor(None, SileroDetector)
        opts = options or {}
        end_silence = int(opts.get("end_silence_ms", 400 if profile == "translate" else self.end_silence_ms))
        session = QwenOmniSession(self, next(self._ids), setup(profile, opts), detector, end_silence)
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
            if not self.scheduler.has_work():
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
        self, engine: QwenOmniEngine, key: int, profile: ProfileSetup, detector: Any, end_silence_ms: int
    ) -> None:
        self.engine = engine
        self.key = key
        self.profile = profile
        self.loop = asyncio.get_running_loop()
        self.outbox = Outbox()
        self.endpointer = Endpointer(EndpointConfig(end_silence_ms=end_silence_ms), detector)
        self.conv = Conversation()
        self.history: list[tuple[TurnInput, list[int]]] = []  # what the cache holds, turn by turn
        self.text_only = False
        self.turns_cut = 0
        self._pre: deque[np.ndarray] = deque(maxlen=PRE_ROLL_TICKS)
        self._audio: list[np.ndarray] = []
        self._video: deque[tuple[int, np.ndarray]] = deque(maxlen=8)
        self._tick = 0
        self._reply: Reply | None = None
        self._turn_started: float | None = None
        self._text: list[int] = []
        self._said = ""
        self._frame_index = 0
        self._muted = False  # a tool call is not spoken
        self._tool_rounds = 0
        self._segment = 0
        self._queued: deque[tuple[Callable[[], TurnInput], int | None]] = deque()
        self._reply_segment = 0
        self._pending_turn: TurnInput | None = None

    # ---- input ----

    def feed(self, chunk: AlignedChunk) -> None:
        self._tick = chunk.tick
        if chunk.video is not None:
            self._video.append((chunk.tick, chunk.video.image))
        ep = self.endpointer
        event = ep.update(chunk.tick, chunk.audio)
        if event is EndpointEvent.START:
            if self._replying() and self.profile.barge_in:
                self.interrupt()
            self._audio = [*self._pre, chunk.audio]
        elif ep.in_speech or event is EndpointEvent.END:
            self._audio.append(chunk.audio)
        self._pre.append(chunk.audio)
        if event is EndpointEvent.END or (ep.in_speech and len(self._audio) >= MAX_TURN_TICKS):
            self._end_of_turn(ep.last_voiced_tick, chunk.tick)

    def send_text(self, text: str) -> None:
        if self._replying() and self.profile.barge_in:
            self.interrupt()
        self.outbox.put(TranscriptDelta("user", text, True))
        self._tool_rounds = 0
        self._submit(lambda: self.engine.prompter.turn(text=text))

    def interrupt(self) -> None:
        was = self._replying()
        if self._reply is not None:
            self._reply.cancelled = True  # the worker sees it at its next step
            self.engine.command(lambda key=self.key: self.engine.scheduler.cancel(key))
            self._finish_history()
        self._reply = None
        self.outbox.cancel_reply()
        if was:
            self.outbox.put(TurnEnd(interrupted=True))

    def events(self) -> AsyncIterator[EngineEvent]:
        return self.outbox.__aiter__()

    async def close(self) -> None:
        self.engine.forget(self.key)
        self.outbox.close()

    # ---- turns ----

    def _replying(self) -> bool:
        return self._reply is not None or self.outbox.has_reply()

    def _end_of_turn(self, speech_end_tick: int | None, end_tick: int) -> None:
        audio = np.concatenate(self._audio) if self._audio else np.zeros(0, np.float32)
        self._audio = []
        fresh = [img for t, img in self._video if end_tick - t <= CAMERA_FRESH_TICKS]
        images = fresh[-1:] if len(fresh) < 2 else [fresh[0], fresh[-1]][-IMAGES_PER_TURN:]
        self._segment += 1
        self._tool_rounds = 0
        seconds = audio.size / 16_000
        extra: dict[str, Any] = {"seconds": round(seconds, 2)}
        if self.profile.name == "translate":
            extra.update(segment=self._segment, lang=self.profile.extra["source_lang"])
        self.outbox.put(TranscriptDelta("user", f"[{seconds:.1f} s of speech]", True, speech_end_tick, end_tick, extra))
        self._submit(lambda: self.engine.prompter.turn(audio=audio, images=images), self._segment)

    def _submit(self, build: Callable[[], TurnInput], segment: int | None = None) -> None:
        eng = self.engine
        if self._reply is not None and not self.profile.barge_in:
            self._queued.append((build, segment))  # interpreting: segments wait their turn, none is cut off
            return
        self._reply_segment = segment if segment is not None else self._segment
        reply = Reply(
            self.conv, speak=not self.text_only, max_text_tokens=eng.max_reply_tokens, max_frames=eng.max_frames
        )
        self._reply, self._text, self._said, self._frame_index, self._muted = reply, [], "", 0, False
        self._turn_started = time.perf_counter()

        def turn() -> TurnInput:  # runs in the worker, which alone touches the conversation
            new = build()
            self._pending_turn = new
            if self.conv.length == 0:
                return join(eng.prompter.system(self.profile.system), [new])
            if self.conv.length + len(new.ids) + eng.max_reply_tokens + 8 > eng.max_context:
                return self._rebuild(new)
            return join(eng.prompter.text_ids("<|im_end|>\n"), [new])  # closes the previous reply

        eng.command(lambda: eng.scheduler.submit(self.key, reply, turn))

    def _rebuild(self, new: TurnInput) -> TurnInput:
        """Cut the oldest turns until the conversation fits, then re-read it from the system prompt (worker thread)."""
        eng, p = self.engine, self.engine.prompter
        kept = list(self.history)

        def size() -> int:
            return sum(len(t.ids) + len(r) + 2 for t, r in kept) + len(new.ids) + 256

        while kept and size() + eng.max_reply_tokens > eng.max_context:
            kept.pop(0)
            self.turns_cut += 1
        self.history = kept
        self.conv.cache, self.conv.length, self.conv.next_pos, self.conv.role = None, 0, 0, None
        self.conv.user_ids.clear(), self.conv.user_embeds.clear()
        self.conv.image_grids.clear(), self.conv.audio_lengths.clear()
        parts: list[TurnInput | list[int]] = []
        for t, r in kept:
            parts += [t, r + p.text_ids("<|im_end|>\n")]
        return join(p.system(self.profile.system), [*parts, new])

    def _finish_history(self) -> None:
        turn = self._pending_turn
        if turn is not None and self._reply is not None:
            fed = [t for t in self._reply.tokens[:-1]]  # the last token was sampled, never read back
            self.history.append((turn, fed))
            self._pending_turn = None

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
        self._finish_history()
        self._reply = None
        text = self._decode()
        stages = {f"{k[:-2]}_ms": v * 1000 for k, v in job.timings.items()}
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
        if self.profile.name == "translate":
            extra = {"segment": self._reply_segment, "lang": self.profile.extra["target_lang"]}
        self.outbox.put(TranscriptDelta("assistant", text.strip(), True, extra=extra))
        self.outbox.put(TurnEnd(stages=stages))
        if self._queued:
            self._submit(*self._queued.popleft())
