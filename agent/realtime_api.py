"""`/v1/realtime`: our engines behind the OpenAI Realtime protocol (WebSocket, JSON events).

So existing Realtime clients (the official `openai` SDK among them) can use
any of our engines without WebRTC. Audio is PCM16 mono at 24 kHz both ways,
base64 in `input_audio_buffer.append` and `response.output_audio.delta`.
Turn detection is the engine's own (server VAD). One engine session per
WebSocket; the same limits as `/ws` apply (message size, rate).
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import json
import logging
import secrets
import time
from fractions import Fraction
from typing import TYPE_CHECKING, Any

import numpy as np
from websockets.asyncio.server import ServerConnection
from websockets.exceptions import ConnectionClosed

from agent.engines.base import Error, SpeechFrame, TextDelta, ToolCall, TranscriptDelta, TurnEnd
from agent.limits import TokenBucket
from media.aligner import AudioInput, FrameAligner, MediaError
from media.pcm import float_to_s16

if TYPE_CHECKING:
    from agent.server import AgentServer

log = logging.getLogger(__name__)
RATE = 24_000
ACKS = {
    "input_audio_buffer.commit": "input_audio_buffer.committed",
    "input_audio_buffer.clear": "input_audio_buffer.cleared",
}


def _id(prefix: str) -> str:
    return f"{prefix}_{secrets.token_hex(8)}"


class RealtimeSession:
    def __init__(self, server: AgentServer, ws: ServerConnection) -> None:
        self.server = server
        self.ws = ws
        self.id = _id("sess")
        self.aligner = FrameAligner()
        self.engine_session: Any = None
        self.input_rate = RATE  # 16 kHz may be asked for (our realtime engine does): no resampling then
        self.response_id: str | None = None
        self.item_id: str | None = None
        self._out: asyncio.Queue[dict[str, Any] | None] = asyncio.Queue(512)
        self._transcript = ""

    def send(self, event: dict[str, Any]) -> None:
        event.setdefault("event_id", _id("event"))
        with contextlib.suppress(asyncio.QueueFull):
            self._out.put_nowait(event)

    def error(self, code: str, message: str, event_id: str | None = None) -> None:
        self.send(
            {
                "type": "error",
                "error": {"type": "invalid_request_error", "code": code, "message": message, "event_id": event_id},
            }
        )

    def session_info(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "type": "realtime",
            "object": "realtime.session",
            "model": self.server.engine.name,
            "output_modalities": ["audio"],
            "audio": {
                "input": {
                    "format": {"type": "audio/pcm", "rate": self.input_rate},
                    "turn_detection": {"type": "server_vad"},
                    # an addition: clients that can send 16 kHz spare both sides a resampling
                    "rates": [16_000, 24_000],
                },
                "output": {"format": {"type": "audio/pcm", "rate": RATE}, "voice": "default"},
            },
        }

    async def run(self) -> None:
        writer = asyncio.create_task(self._writer())
        try:
            self.engine_session = await self.server.engine.open_session(
                self.server.config.profile, self.server.config.session_options()
            )
        except ValueError as exc:
            self.error("engine_unavailable", str(exc))
            self._out.put_nowait(None)
            await writer
            return
        self.send({"type": "session.created", "session": self.session_info()})
        events = asyncio.create_task(self._events())
        try:
            await self._reader()
        finally:
            events.cancel()
            await self.engine_session.close()
            self._out.put_nowait(None)
            with contextlib.suppress(Exception):
                await asyncio.wait_for(writer, 1.0)
            writer.cancel()

    async def _writer(self) -> None:
        while (event := await self._out.get()) is not None:
            await self.ws.send(json.dumps(event))

    async def _reader(self) -> None:
        cfg = self.server.config.server
        bucket = TokenBucket(max(cfg.messages_per_second, 200), 400)  # audio appends come every 20-100 ms
        try:
            async for raw in self.ws:
                if isinstance(raw, bytes) or len(raw) > cfg.max_message_bytes * 4:
                    self.error("invalid_event", "events are JSON text, at most a few hundred KiB")
                    continue
                if not bucket.allow(time.monotonic()):
                    self.error("rate_limited", "too many events a second")
                    return
                try:
                    event = json.loads(raw)
                    kind = event["type"]
                except (json.JSONDecodeError, KeyError, TypeError):
                    self.error("invalid_event", "an event is a JSON object with a 'type'")
                    continue
                self._handle(kind, event)
        except ConnectionClosed:
            return

    def _handle(self, kind: str, event: dict[str, Any]) -> None:
        eid = event.get("event_id")
        es = self.engine_session
        if kind == "session.update":
            session = event.get("session") if isinstance(event.get("session"), dict) else {}
            fmt = ((session.get("audio") or {}).get("input") or {}).get("format") or {}
            rate = fmt.get("rate", self.input_rate) if isinstance(fmt, dict) else self.input_rate
            if rate in (16_000, 24_000):
                self.input_rate = rate
            else:
                self.error("invalid_format", f"input audio is PCM16 at 24000 Hz (or 16000), not {rate}", eid)
            self.send({"type": "session.updated", "session": self.session_info()})
        elif kind == "input_audio_buffer.append":
            try:
                pcm = np.frombuffer(base64.b64decode(event["audio"], validate=True), "<i2")
                rate = self.input_rate
                chunks = self.aligner.push_audio(AudioInput(pcm, rate, None, Fraction(1, rate), "s16", 1))
            except (KeyError, TypeError, ValueError, binascii.Error, MediaError) as exc:
                self.error("invalid_audio", f"input_audio_buffer.append needs base64 PCM16: {exc}", eid)
                return
            for chunk in chunks:
                es.feed(chunk)
        elif kind in ACKS:
            # Turn ends come from the engine's own VAD; acknowledge so clients move on.
            self.send({"type": ACKS[kind]})
        elif kind == "conversation.item.create":
            item = event.get("item") or {}
            texts = [c.get("text") for c in item.get("content", []) if isinstance(c, dict) and c.get("text")]
            if texts:
                es.send_text(" ".join(texts))
            else:
                self.error("invalid_item", "only user messages with text content are supported", eid)
        elif kind == "response.create":
            pass  # answers start by themselves at the end of each turn
        elif kind == "response.cancel":
            es.interrupt()
        else:
            self.error("unknown_event", f"unknown event type {kind!r}", eid)

    def _begin_response(self) -> None:
        if self.response_id is None:
            self.response_id, self.item_id = _id("resp"), _id("item")
            self._transcript = ""
            self.send({"type": "response.created", "response": {"id": self.response_id, "status": "in_progress"}})

    async def _events(self) -> None:
        async for ev in self.engine_session.events():
            if isinstance(ev, TranscriptDelta) and ev.role == "user":
                if ev.final:
                    item = _id("item")
                    self.send({"type": "input_audio_buffer.speech_stopped", "item_id": item})
                    self.send({"type": "input_audio_buffer.committed", "item_id": item})
                    self.send(
                        {
                            "type": "conversation.item.input_audio_transcription.completed",
                            "item_id": item,
                            "content_index": 0,
                            "transcript": ev.text,
                        }
                    )
            elif isinstance(ev, TextDelta):
                self._begin_response()
                self._transcript += ev.text
                self.send(
                    {
                        "type": "response.output_audio_transcript.delta",
                        "response_id": self.response_id,
                        "item_id": self.item_id,
                        "output_index": 0,
                        "content_index": 0,
                        "delta": ev.text,
                    }
                )
            elif isinstance(ev, SpeechFrame):
                self._begin_response()
                audio = base64.b64encode(float_to_s16(ev.pcm).astype("<i2").tobytes()).decode()
                self.send(
                    {
                        "type": "response.output_audio.delta",
                        "response_id": self.response_id,
                        "item_id": self.item_id,
                        "output_index": 0,
                        "content_index": 0,
                        "delta": audio,
                    }
                )
            elif isinstance(ev, ToolCall):
                self.send(
                    {
                        "type": "response.function_call_arguments.done",
                        "name": ev.name,
                        "arguments": json.dumps(ev.arguments),
                        "call_id": _id("call"),
                    }
                )
            elif isinstance(ev, Error):
                self.error(ev.code, ev.message)
            elif isinstance(ev, TurnEnd) and self.response_id is not None:
                rid = self.response_id
                self.send(
                    {
                        "type": "response.output_audio_transcript.done",
                        "response_id": rid,
                        "item_id": self.item_id,
                        "transcript": self._transcript,
                    }
                )
                self.send({"type": "response.output_audio.done", "response_id": rid, "item_id": self.item_id})
                status = "cancelled" if ev.interrupted else "completed"
                self.send({"type": "response.done", "response": {"id": rid, "status": status}})
                self.response_id = None
