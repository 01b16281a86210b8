"""The `realtime` engine: a client of a Realtime server (OpenAI's, vLLM-Omni's, NVIDIA Dynamo's, our own).

Scaling past one GPU means pointing this engine at a serving cluster. The
servers differ (agent/wire/realtime.py, `Dialect`): where the server has its
own turn detection, the session's audio streams to it and its VAD ends turns;
where it has none, our own end of turn drives it (Silero VAD, as the other
engines): the turn's audio is sent from its start, committed at its end (for
vLLM-Omni's older flow the generation starts at the first pause). Reply text
and audio come from whichever events the dialect uses, the audio resampled
from the rate each event names; `interrupt` cancels and truncates the reply
to what was played where the server can, and drops the rest of it where it
cannot. In the car the vehicle tools go in `session.update`, and the
server's function calls run through the same validated `Car`. A dropped
connection is retried with backoff; protocol trouble from the far side
becomes `Error` events, never a crash; event types we do not know are
counted and logged, not shown.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
from collections.abc import AsyncIterator, Callable
from typing import Any
from urllib.parse import urlencode

import numpy as np
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidHandshake, InvalidURI

from agent.config import END_SILENCE_MS
from agent.engines.base import EngineEvent, Error, SpeechFrame, TextDelta, ToolCall, TranscriptDelta, TurnEnd
from agent.engines.outbox import Outbox
from agent.profiles import Profile
from agent.profiles.car import TOOLS, Car
from agent.profiles.prompts import CAR_PROMPT, DEFAULT_PROMPT, translate_prompt
from agent.wire import realtime as rt
from media.aligner import AlignedChunk
from media.clock import INPUT_RATE, OUTPUT_RATE, OUTPUT_SAMPLES_PER_FRAME
from media.endpoint import EndpointConfig, EndpointEvent
from media.pcm import StreamResampler
from media.turn_taking import TurnTaking
from media.vad import SileroDetector

log = logging.getLogger(__name__)
RATE = rt.RATE


class RealtimeEngine:
    name = "realtime"
    live_output = False

    def __init__(
        self,
        url: str = "",
        model: str = "",
        voice: str = "",
        api_key: str = "",
        retries: int = 3,
        timeout: float = 5.0,
        input_rate: int | None = None,
        dialect: str = "",
        end_silence_ms: int = END_SILENCE_MS,
        detector: Callable[[], Any] | None = None,
    ) -> None:
        self.dialect = rt.dialect(dialect or os.environ.get("OMNI_REALTIME_DIALECT", "") or "openai")
        self.end_silence_ms = end_silence_ms
        self.detector = detector
        self.url = url or os.environ.get("OMNI_REALTIME_URL", "")
        if not self.url:
            raise ValueError("the realtime engine needs a server: engine.options.url or OMNI_REALTIME_URL")
        self.model = model or os.environ.get("OMNI_REALTIME_MODEL", "")
        self.voice = voice or os.environ.get("OMNI_REALTIME_VOICE", "")
        self.api_key = api_key or os.environ.get("OMNI_REALTIME_KEY", "")
        self.retries, self.timeout = retries, timeout
        # The dialect's rate; where the server offers 16 kHz (our own /v1/realtime does) that spares a
        # resampling on each side and the far side's resampler lag, a whole 80 ms tick. None: by the dialect.
        self.input_rate = input_rate

    def endpoint(self) -> str:
        return self.url + (("&" if "?" in self.url else "?") + urlencode({"model": self.model}) if self.model else "")

    async def open_session(self, profile: Profile, options: dict[str, Any] | None = None) -> RealtimeClientSession:
        opts = options or {}
        detector = None
        if not self.dialect.server_turns:  # our own end of turn drives the server
            if self.detector is not None:
                detector = self.detector()
            else:
                detector = await asyncio.get_running_loop().run_in_executor(None, SileroDetector)
        end_silence = int(opts.get("end_silence_ms", self.end_silence_ms))  # the config's, else the engine's
        session = RealtimeClientSession(self, profile, opts, detector, end_silence)
        await session.connect()
        return session

    async def close(self) -> None:
        return None


class RealtimeClientSession:
    def __init__(
        self, engine: RealtimeEngine, profile: Profile, options: dict[str, Any], detector: Any, end_silence_ms: int
    ) -> None:
        self.engine = engine
        self.dialect = d = engine.dialect
        self.profile = profile
        self.outbox = Outbox()
        self.played_ms: Callable[[], float] = lambda: 0.0
        self.text_only = False
        self.car = Car() if profile.vehicle else None
        if profile.interpreting:
            self.instructions = translate_prompt(options.get("source_lang", "en"), options.get("target_lang", "es"))
        else:
            self.instructions = CAR_PROMPT if self.car is not None else DEFAULT_PROMPT
        self.turns = (
            None
            if d.server_turns
            else TurnTaking(
                EndpointConfig(end_silence_ms=end_silence_ms),
                detector,
                profile.barge_in,
                interruptions=options.get("interruptions"),
            )
        )
        self.floor = self.turns.floor if self.turns is not None else None
        self._ws: ClientConnection | None = None
        self._rate = engine.input_rate or d.input_rate
        self._up = StreamResampler(INPUT_RATE, self._rate, quality="LQ")
        self._send: asyncio.Queue[str] = asyncio.Queue(256)  # ~5 s of 20 ms appends
        self._tasks: list[asyncio.Task[Any]] = []
        self._closing = False
        self._generating = False  # vllm-omni-turn: a generation was started (commit final=false) this turn
        self.dropped_appends = 0
        self.unknown_events: dict[str, int] = {}  # counted and logged once, never shown to the user
        self._new_response()
        self._dropping: set[str] = set()  # responses cut by the user where the server cannot cancel
        self._tool_reply = False  # a response to our function-call output is on its way

    def _new_response(self) -> None:
        self._in_response = False
        self._response_id: str | None = None
        self._item_id: str | None = None
        self._transcript = ""
        self._pcm = np.zeros(0, np.float32)
        self._frame = 0
        self._down: tuple[int, StreamResampler] | None = None
        self._received_ms = 0.0  # reply audio received (what was played of it: `played_ms`)
        self._drop_current = False

    # ---- connection ----

    async def connect(self) -> None:
        e = self.engine
        headers = {"Authorization": f"Bearer {e.api_key}"} if e.api_key else {}
        delay, last = 0.5, ""
        for attempt in range(e.retries + 1):
            try:
                self._ws = await asyncio.wait_for(
                    connect(e.endpoint(), additional_headers=headers, max_size=1 << 24), e.timeout
                )
                first = json.loads(await asyncio.wait_for(self._ws.recv(), e.timeout))
                if first.get("type") == "error":
                    raise ValueError(f"the realtime server refused: {rt.error_of(first)[1]}")
                if e.input_rate is None and INPUT_RATE in rt.offered_rates(first.get("session")):
                    self._rate, self._up = INPUT_RATE, StreamResampler(INPUT_RATE, INPUT_RATE)
                break
            except (OSError, TimeoutError, InvalidHandshake, ConnectionClosed) as exc:
                last = f"{type(exc).__name__}: {exc}"
                if attempt < e.retries:
                    await asyncio.sleep(delay)
                    delay *= 2
            except InvalidURI as exc:
                raise ValueError(f"not a WebSocket URL: {e.url} ({exc})") from None
        else:
            raise ValueError(f"the realtime server at {e.url} cannot be reached ({last})")
        with contextlib.suppress(ConnectionClosed):  # the reader notices and reconnects
            await self._ws.send(json.dumps(self._session_update()))
        loop = asyncio.get_running_loop()
        self._tasks = [loop.create_task(self._writer()), loop.create_task(self._reader())]

    def _session_update(self) -> dict[str, Any]:
        d, e = self.dialect, self.engine
        if d.full_session:
            session = rt.session_object(
                self._rate, model=e.model, voice=e.voice, instructions=self.instructions, server_vad=d.server_turns
            )
            if self.car is not None:
                session["tools"] = rt.flat_tools(TOOLS)
            return rt.session_update(session)
        if d.commit_final:  # vLLM-Omni's older flow reads the model only, at the top level
            return {"type": "session.update", "model": e.model}
        return rt.session_update({"type": "realtime", "model": e.model, "output_modalities": ["audio"]})

    async def _writer(self) -> None:
        while True:
            message = await self._send.get()
            assert self._ws is not None
            with contextlib.suppress(ConnectionClosed):
                await self._ws.send(message)

    def _queue(self, event: dict[str, Any]) -> None:
        try:
            self._send.put_nowait(json.dumps(event))
        except asyncio.QueueFull:
            self.dropped_appends += 1

    async def _reader(self) -> None:
        while not self._closing:
            try:
                assert self._ws is not None
                async for raw in self._ws:
                    self._on_event(raw)
            except ConnectionClosed:
                pass
            if self._closing:
                return
            if self._in_response:
                self.outbox.put(Error("connection_lost", "the realtime server closed the connection mid-response"))
                self._end_response(interrupted=True)
            try:
                await self.connect_again()
            except ValueError as exc:
                self.outbox.put(Error("unreachable", str(exc)))
                self.outbox.close()  # the engine is gone: the session ends
                return

    async def connect_again(self) -> None:
        for t in self._tasks:
            if t is not asyncio.current_task():
                t.cancel()
        await self.connect()

    # ---- server events ----

    def _on_event(self, raw: str | bytes) -> None:
        try:
            ev = rt.parse_event(raw)
        except rt.RealtimeError:
            self.outbox.put(Error("protocol", "the realtime server sent something that is not an event"))
            return
        kind = ev["type"]
        response = ev.get("response") if isinstance(ev.get("response"), dict) else {}
        rid = ev.get("response_id") or response.get("id")
        if kind == "error":
            code, message = rt.error_of(ev)
            self.outbox.put(Error(code, message))
        elif rid in self._dropping or (self._drop_current and kind not in self.dialect.end_events):
            pass  # what is left of a reply the user cut, from a server that cannot cancel it
        elif kind == "session.updated":
            rate = rt.input_rate(ev.get("session"))
            if rate is not None and rate != self._rate and rate in rt.RATES:  # the server chose: follow it
                self._rate, self._up = rate, StreamResampler(INPUT_RATE, rate, quality="LQ")
        elif kind == "conversation.item.input_audio_transcription.completed":
            if self.turns is None:  # where our own end of turn drives, the turn was reported then
                self.outbox.put(TranscriptDelta("user", str(ev.get("transcript", "")), True))
        elif kind == "response.created":
            self._response_id = rid
        elif kind in rt.TEXT_DELTAS:
            self._begin(ev)
            self._transcript += str(ev.get("delta", ""))
            self.outbox.put(TextDelta(str(ev.get("delta", ""))))
        elif kind in rt.AUDIO_DELTAS:
            self._begin(ev)
            try:
                pcm, rate = rt.audio_of(ev, RATE)
            except rt.RealtimeError:
                self.outbox.put(Error("protocol", "undecodable audio from the realtime server"))
                return
            self._audio(pcm.astype(np.float32) / 32768, rate)
        elif kind == "response.function_call_arguments.done":
            self._call(ev)
        elif kind in self.dialect.end_events:
            self._finished(response.get("status"), rid)
        elif not kind.startswith(rt.KNOWN_PREFIXES):
            n = self.unknown_events[kind] = self.unknown_events.get(kind, 0) + 1
            if n == 1:
                log.info("realtime: %s server sent an event we do not use: %s", self.dialect.name, kind)

    def _begin(self, ev: dict[str, Any]) -> None:
        self._in_response = True
        self._item_id = ev.get("item_id") or self._item_id
        self._response_id = ev.get("response_id") or self._response_id

    def _finished(self, status: Any, rid: str | None) -> None:
        if rid is not None and rid in self._dropping:
            self._dropping.discard(rid)
            return
        if self._drop_current:  # the cut reply's own end (a server without ids): it was ended then
            self._new_response()
            return
        if self._tool_reply and status != "cancelled" and not self._transcript and not self._received_ms:
            self._tool_reply = False  # the response that made the call ended; the one answering it follows
            self._new_response()
            return
        self._tool_reply = False
        self._end_response(interrupted=status == "cancelled")

    def _call(self, ev: dict[str, Any]) -> None:
        """A function call: run it on the car, show it, and give the result back for the model to speak."""
        name, call_id = str(ev.get("name", "")), str(ev.get("call_id", ""))
        try:
            args = json.loads(ev.get("arguments") or "{}")
        except (ValueError, TypeError):
            args = None
        if self.car is None or not isinstance(args, dict):
            state = self.car.state.snapshot() if self.car is not None else {}
            why = "this profile has no tools" if self.car is None else "the arguments are not a JSON object"
            result = {"ok": False, "message": why, "state": state}
        else:
            result = self.car.call(name, args)
        self.outbox.put(ToolCall(name, args if isinstance(args, dict) else {}, result))
        self._queue(rt.function_output(call_id, {"ok": result["ok"], "message": result["message"]}))
        self._queue(rt.RESPONSE_CREATE)
        self._tool_reply = True

    def _audio(self, pcm: np.ndarray, rate: int) -> None:
        if self.text_only:
            return  # text only (the server's overload level): captions, no speech
        if rate != OUTPUT_RATE:
            if self._down is None or self._down[0] != rate:
                self._down = (rate, StreamResampler(rate, OUTPUT_RATE, quality="HQ"))
            pcm = self._down[1].process(pcm)
        self._received_ms += pcm.size * 1000 / OUTPUT_RATE
        self._pcm = np.concatenate((self._pcm, pcm)) if self._pcm.size else pcm
        while self._pcm.size >= OUTPUT_SAMPLES_PER_FRAME:
            frame, self._pcm = self._pcm[:OUTPUT_SAMPLES_PER_FRAME], self._pcm[OUTPUT_SAMPLES_PER_FRAME:]
            self.outbox.put(SpeechFrame(frame, self._frame))
            self._frame += 1

    def _end_response(self, interrupted: bool) -> None:
        if self._pcm.size and not interrupted:
            self.outbox.put(SpeechFrame(self._pcm, self._frame))
        if self._transcript:
            self.outbox.put(TranscriptDelta("assistant", self._transcript, True))
        self._new_response()
        self.outbox.put(TurnEnd(interrupted=interrupted))

    # ---- the engine contract ----

    def feed(self, chunk: AlignedChunk) -> None:
        if self.turns is None:  # the server's VAD listens to everything
            self._append(chunk.audio)
            return
        d, turns = self.dialect, self.turns
        step = turns.feed(chunk, self._replying)
        if step.barge_in:
            self.interrupt()
        if step.event is EndpointEvent.START:
            for audio in turns.spoken():  # the pre-roll too: word onsets
                self._append(audio)
        elif turns.in_speech or step.event is EndpointEvent.END:
            self._append(turns.tick_audio(chunk))
        if step.event is EndpointEvent.PAUSE and d.commit_final and not self._generating:
            self._queue(rt.commit(final=False))  # start the reply over the stream, as our speculation does
            self._generating = True
        elif step.event is EndpointEvent.END:
            ended = turns.end()
            seconds = round(ended.audio.size / INPUT_RATE, 2)
            said = f"[{seconds:.1f} s of speech]"  # the server does not say what it heard
            extra = {"seconds": seconds}
            self.outbox.put(TranscriptDelta("user", said, True, ended.speech_end_tick, ended.end_tick, extra))
            self._flush_input()
            if d.commit_final:
                if not self._generating:
                    self._queue(rt.commit(final=False))
                self._queue(rt.commit(final=True))
                self._generating = False
            else:
                self._queue(rt.commit())
                if d.commit_response:
                    self._queue(rt.RESPONSE_CREATE)

    def _append(self, audio: np.ndarray) -> None:
        pcm = self._up.process(audio)
        if pcm.size:
            self._queue(rt.append_audio(pcm))

    def _flush_input(self) -> None:
        """The resampler's last samples of the turn, so the commit covers all of it."""
        pcm = self._up.process(np.zeros(0, np.float32), last=True)
        self._up = StreamResampler(INPUT_RATE, self._rate, quality="LQ")
        if pcm.size:
            self._queue(rt.append_audio(pcm))

    def _replying(self) -> bool:
        return self._in_response or self.outbox.has_reply()

    def send_text(self, text: str) -> None:
        if not self.dialect.full_session:
            self.outbox.put(Error("unsupported", f"a {self.dialect.name} server takes speech only, not typed text"))
            return
        self._queue(rt.user_text(text))
        self._queue(rt.RESPONSE_CREATE)

    def interrupt(self) -> None:
        if self.dialect.cancel:
            self._queue(rt.RESPONSE_CANCEL)
            if self._item_id is not None and self._received_ms > 0:
                played = min(self._received_ms, self.played_ms())  # what the transport sent of it
                self._queue(rt.truncate(self._item_id, int(played)))
        if self._in_response:  # what is left of this reply (in flight, or all of it where the server cannot
            if self._response_id is not None:  # stop) is dropped here
                self._dropping.add(self._response_id)
            else:
                self._drop_current = True
        if self._in_response or self.outbox.has_reply():
            self.outbox.cancel_reply()
            dropping = self._drop_current
            self._new_response()
            self._drop_current = dropping
            self.outbox.put(TurnEnd(interrupted=True))

    def events(self) -> AsyncIterator[EngineEvent]:
        return self.outbox.__aiter__()

    def counters(self) -> dict[str, float]:
        return {
            "realtime_dropped_appends": self.dropped_appends,
            "realtime_unknown_events": sum(self.unknown_events.values()),
            **self.outbox.counters(),
        }

    async def close(self) -> None:
        self._closing = True
        for t in self._tasks:
            t.cancel()
        if self._ws is not None:
            with contextlib.suppress(Exception):
                await self._ws.close()
        self.outbox.close()
