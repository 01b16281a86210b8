"""`/v1/realtime`: our engines behind the OpenAI Realtime protocol (WebSocket, JSON events).

So existing Realtime clients (the official `openai` SDK among them) can use
any of our engines without WebRTC. The events and the PCM16 codec are in
agent/wire/realtime.py. Audio is PCM16 mono at 24 kHz both ways (16 kHz in
where the client asks), base64 in `input_audio_buffer.append` and
`response.output_audio.delta`. Turn detection is the engine's own (server
VAD). A connection is a session like a `/ws` one: the same admission, the
same pump (queue, turn deadline, transcripts, turn metrics, overload), and
its speech leaves at the pace it is spoken, so a cancel stops it at once.
"""

from __future__ import annotations

import asyncio
import logging
import time
from fractions import Fraction
from typing import Any

import numpy as np
from websockets.exceptions import ConnectionClosed

from agent.transport.connection import Connection, Refused
from agent.transport.limits import TokenBucket
from agent.wire import realtime as rt
from agent.wire.messages import Error, ServerMessage, State
from media.aligner import AudioInput, MediaError
from media.pacer import Pacer

log = logging.getLogger(__name__)
PACE_S = 0.04  # speech goes out in 40 ms deltas, as it would play
MAX_LAG_S = 0.1  # a late pacer moves its schedule on rather than bursting


class RealtimeConnection(Connection):
    protocol = "realtime"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.input_rate = rt.RATE
        self.response = rt.ResponseWriter()

    # ---- out ----

    def deliver(self, msg: ServerMessage) -> None:
        if msg == State("listening"):
            self._speak_out(None)  # the reply's last samples go before its end
        for event in self.response.message(msg):
            self.write(event)

    def write(self, event: dict[str, Any]) -> None:
        event.setdefault("event_id", rt.new_id("event"))
        super().write(event)

    def refuse(self, no: Refused) -> None:
        super().refuse(no)
        self.close_code = 1008 if no.code == "unauthorized" else 1013  # policy violation; try again later

    def _speak_out(self, frames: int | None) -> None:
        """Up to `frames` 20 ms frames of queued speech (None: all of it) as one delta."""
        framer = self.pump.framer if self.pump is not None else None
        if framer is None:
            return
        parts = []
        while framer.backlog_ms > 0 and (frames is None or len(parts) < frames):
            parts.append(framer.pull().samples)
        if parts:
            for event in self.response.audio(np.concatenate(parts)):
                self.write(event)

    async def _pace(self) -> None:
        """The reply's speech in 40 ms deltas as it would play, on the server's one pacer."""
        loop = asyncio.get_running_loop()
        pacer = Pacer.speech(PACE_S, MAX_LAG_S)
        frames = round(PACE_S * 1000 / 20)
        while True:
            await asyncio.sleep(max(0.0, pacer.next_due(loop.time()) - loop.time()))
            if n := pacer.due(loop.time()):
                self._speak_out(n * frames)

    def session_info(self) -> dict[str, Any]:
        info = rt.session_object(self.input_rate, model=self.host.engine.name, voice="default", offer_rates=True)
        return {"id": self.id, "object": "realtime.session", **info}

    # ---- in ----

    async def serve(self) -> None:
        headers = self.headers
        bearer = (headers.get("Authorization") or "").removeprefix("Bearer ").strip()
        try:
            self.host.admit(self, bearer)
        except Refused as no:
            self.refuse(no)
            self.end(no.message)
            return
        cfg = self.host.config
        try:
            await self.open_session(cfg, cfg.session_options())
        except ValueError as exc:
            self.fail("engine_unavailable", str(exc))
            return
        self.write({"type": "session.created", "session": self.session_info()})
        self.spawn(self._pace(), "pace")
        srv = cfg.server
        bucket = TokenBucket(max(srv.messages_per_second, 200), 400)  # audio appends come every 20-100 ms
        try:
            async for raw in self.ws:
                if len(raw) > srv.max_message_bytes * 4:
                    self._client_error("invalid_event", "an event is at most a few hundred KiB")
                    continue
                if not bucket.allow(time.monotonic()):
                    self.fail("rate_limited", "too many events a second")
                    return
                event: dict[str, Any] = {}
                try:
                    event = rt.parse_event(raw)
                    self._handle(rt.parse_client_event(event))
                except rt.RealtimeError as err:
                    self._client_error(err.code, err.message, event.get("event_id"))
                except MediaError as exc:
                    self._client_error("invalid_audio", f"input_audio_buffer.append: {exc}", event.get("event_id"))
        except ConnectionClosed:
            return

    def _client_error(self, code: str, message: str, eid: Any = None) -> None:
        self.send(Error(code, message, eid if isinstance(eid, str) else None))

    def _handle(self, action: rt.ClientEvent) -> None:
        pump = self.pump
        assert pump is not None
        if isinstance(action, rt.AudioIn):
            rate = self.input_rate
            pump.push_audio(AudioInput(action.pcm, rate, None, Fraction(1, rate), "s16", 1))
        elif isinstance(action, rt.TextIn):
            pump.send_text(action.text)
        elif isinstance(action, rt.Cancel):
            pump.interrupt()
        elif isinstance(action, rt.SetRate):
            if action.rate is not None and action.rate not in rt.RATES:
                raise rt.RealtimeError(
                    "invalid_format", f"input audio is PCM16 at 24000 Hz (or 16000), not {action.rate}"
                )
            self.input_rate = action.rate or self.input_rate
            self.write({"type": "session.updated", "session": self.session_info()})
        elif isinstance(action, rt.Ack):
            self.write({"type": action.reply})
