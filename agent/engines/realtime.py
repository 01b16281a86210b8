"""The `realtime` engine: a client of an OpenAI-Realtime-compatible server.

vLLM-Omni serves Qwen3-Omni this way across GPUs; so does our own
`/v1/realtime`. The session's aligned audio (16 kHz) is resampled to the
server's 24 kHz PCM16 and streamed as `input_audio_buffer.append`; the
server's turn detection ends turns; its `response.*` text and audio deltas
become transcript events and 80 ms speech frames; `interrupt` cancels the
response. A dropped connection is retried with backoff; protocol trouble
from the far side becomes `Error` events, never a crash.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
from collections.abc import AsyncIterator
from typing import Any
from urllib.parse import urlencode

import numpy as np
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidHandshake, InvalidURI

from agent.engines.base import EngineEvent, Error, SpeechFrame, TextDelta, TranscriptDelta, TurnEnd
from agent.engines.outbox import Outbox
from agent.profiles import Profile
from agent.wire import realtime as rt
from media.aligner import AlignedChunk
from media.clock import INPUT_RATE, OUTPUT_SAMPLES_PER_FRAME
from media.pcm import StreamResampler

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
    ) -> None:
        self.url = url or os.environ.get("OMNI_REALTIME_URL", "")
        if not self.url:
            raise ValueError("the realtime engine needs a server: engine.options.url or OMNI_REALTIME_URL")
        self.model = model or os.environ.get("OMNI_REALTIME_MODEL", "")
        self.voice = voice or os.environ.get("OMNI_REALTIME_VOICE", "")
        self.api_key = api_key or os.environ.get("OMNI_REALTIME_KEY", "")
        self.retries, self.timeout = retries, timeout
        # 24 kHz is the protocol's rate. 16 kHz, where the server offers it (our own
        # /v1/realtime does), spares a resampling on each side and the far side's
        # resampler lag, which costs a whole 80 ms tick. None: choose by what is offered.
        self.input_rate = input_rate

    def endpoint(self) -> str:
        return self.url + (("&" if "?" in self.url else "?") + urlencode({"model": self.model}) if self.model else "")

    async def open_session(self, profile: Profile, options: dict[str, Any] | None = None) -> RealtimeClientSession:
        session = RealtimeClientSession(self)
        await session.connect()
        return session

    async def close(self) -> None:
        return None


class RealtimeClientSession:
    def __init__(self, engine: RealtimeEngine) -> None:
        self.engine = engine
        self.outbox = Outbox()
        self.text_only = False
        self._ws: ClientConnection | None = None
        self._rate = engine.input_rate or RATE
        self._up = StreamResampler(INPUT_RATE, self._rate, quality="LQ")
        self._send: asyncio.Queue[str] = asyncio.Queue(256)  # ~5 s of 20 ms appends
        self._tasks: list[asyncio.Task[Any]] = []
        self._pcm = np.zeros(0, np.float32)
        self._frame = 0
        self._in_response = False
        self._transcript = ""
        self._closing = False
        self.dropped_appends = 0

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
                    raise ValueError(f"the realtime server refused: {first.get('error', {}).get('message', first)}")
                if e.input_rate is None:  # 16 kHz where offered (our /v1/realtime): no resampling either side
                    rate = INPUT_RATE if INPUT_RATE in rt.offered_rates(first.get("session")) else RATE
                    if rate != self._rate:
                        self._rate, self._up = rate, StreamResampler(INPUT_RATE, rate, quality="LQ")
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
        update = rt.session_update(rt.session_object(self._rate, voice=e.voice))
        with contextlib.suppress(ConnectionClosed):  # the reader notices and reconnects
            await self._ws.send(json.dumps(update))
        loop = asyncio.get_running_loop()
        self._tasks = [loop.create_task(self._writer()), loop.create_task(self._reader())]

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
        if kind == "session.updated":
            rate = rt.input_rate(ev.get("session"))
            if rate is not None and rate != self._rate and rate in rt.RATES:  # the server chose: follow it
                self._rate, self._up = rate, StreamResampler(INPUT_RATE, rate, quality="LQ")
        elif kind == "conversation.item.input_audio_transcription.completed":
            self.outbox.put(TranscriptDelta("user", str(ev.get("transcript", "")), True))
        elif kind in rt.TEXT_DELTAS:
            self._in_response = True
            self._transcript += str(ev.get("delta", ""))
            self.outbox.put(TextDelta(str(ev.get("delta", ""))))
        elif kind in rt.AUDIO_DELTAS:
            self._in_response = True
            try:
                pcm = rt.decode_pcm16(ev.get("delta", ""))
            except rt.RealtimeError:
                self.outbox.put(Error("protocol", "undecodable audio from the realtime server"))
                return
            self._audio(pcm.astype(np.float32) / 32768)
        elif kind == "response.done":
            status = (ev.get("response") or {}).get("status")
            self._end_response(interrupted=status == "cancelled")
        elif kind == "error":
            err = ev.get("error") or {}
            self.outbox.put(Error(str(err.get("code") or "remote_error"), str(err.get("message", "unknown error"))))
        elif not kind.startswith(rt.KNOWN_PREFIXES):
            self.outbox.put(Error("protocol", f"unknown event type {kind!r} from the realtime server"))

    def _audio(self, pcm: np.ndarray) -> None:
        self._pcm = np.concatenate((self._pcm, pcm)) if self._pcm.size else pcm
        while self._pcm.size >= OUTPUT_SAMPLES_PER_FRAME:
            frame, self._pcm = self._pcm[:OUTPUT_SAMPLES_PER_FRAME], self._pcm[OUTPUT_SAMPLES_PER_FRAME:]
            self.outbox.put(SpeechFrame(frame, self._frame))
            self._frame += 1

    def _end_response(self, interrupted: bool) -> None:
        if self._pcm.size and not interrupted:
            self.outbox.put(SpeechFrame(self._pcm, self._frame))
        self._pcm = np.zeros(0, np.float32)
        if self._transcript:
            self.outbox.put(TranscriptDelta("assistant", self._transcript, True))
        self._transcript, self._frame, self._in_response = "", 0, False
        self.outbox.put(TurnEnd(interrupted=interrupted))

    # ---- the engine contract ----

    def feed(self, chunk: AlignedChunk) -> None:
        pcm = self._up.process(chunk.audio)
        if pcm.size:
            self._queue(rt.append_audio(pcm))

    def send_text(self, text: str) -> None:
        self._queue(rt.user_text(text))
        self._queue(rt.RESPONSE_CREATE)

    def interrupt(self) -> None:
        self._queue(rt.RESPONSE_CANCEL)
        if self._in_response or self.outbox.has_reply():
            self.outbox.cancel_reply()
            self._pcm = np.zeros(0, np.float32)
            self._transcript, self._in_response = "", False
            self.outbox.put(TurnEnd(interrupted=True))

    def events(self) -> AsyncIterator[EngineEvent]:
        return self.outbox.__aiter__()

    async def close(self) -> None:
        self._closing = True
        for t in self._tasks:
            t.cancel()
        if self._ws is not None:
            with contextlib.suppress(Exception):
                await self._ws.close()
        self.outbox.close()
