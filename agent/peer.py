"""One WebRTC peer per signalling session, wired as in docs/architecture.md.

Inbound audio and video are always drained into the FrameAligner; its chunks
go to the ThinkerTalkerSession; speech leaves through the OutboundAudioTrack.
`ended` is set when anything ends the peer (ICE failure, a dead audio track,
the engine stopping); `close()` frees tasks, tracks and the connection.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import Any

from aiortc import RTCPeerConnection, RTCSessionDescription

from agent.config import Config
from agent.engines.base import Engine, EngineSession
from agent.ice import rtc_configuration
from agent.protocol import ProtocolError
from agent.session import Send, ThinkerTalkerSession
from media.aligner import AlignerConfig, FrameAligner, MediaError
from media.av_convert import audio_input, to_rgb, video_input
from media.tracks import OutboundAudioTrack, drain, tune_jitter_buffers

log = logging.getLogger(__name__)


class PeerSession:
    def __init__(
        self, config: Config, engine: Engine, send: Send, session_id: str, options: dict[str, Any] | None = None
    ) -> None:
        self.config = config
        self.options = options or {}
        self.engine = engine
        self.send = send
        self.id = session_id
        self.ended = asyncio.Event()
        self.end_reason = ""
        self.pc: RTCPeerConnection | None = None
        self.aligner = FrameAligner(
            AlignerConfig(video_fps=config.media.video_fps, max_video_pixels=config.media.max_video_pixels), to_rgb
        )
        self.session: ThinkerTalkerSession | None = None
        self.engine_session: EngineSession | None = None
        self.outbound: OutboundAudioTrack | None = None
        self.tasks: list[asyncio.Task[Any]] = []
        self.has_video = False
        self.last_audio = self.started = time.monotonic()
        self._closed = False

    async def answer(self, sdp: str) -> str:
        pc = RTCPeerConnection(rtc_configuration(self.config.ice.servers))
        self.pc = pc
        pc.on("track", self._on_track)
        pc.on("connectionstatechange", self._on_state)
        try:
            await pc.setRemoteDescription(RTCSessionDescription(sdp=sdp, type="offer"))
        except Exception as exc:  # aiortc raises ValueError, KeyError, ... on odd SDP
            raise ProtocolError("bad_sdp", f"the offer could not be used: {exc or type(exc).__name__}", True) from None
        audio = [t for t in pc.getTransceivers() if t.kind == "audio"]
        if not audio:
            raise ProtocolError("bad_sdp", "the offer has no usable audio section", True)
        tune_jitter_buffers(pc, self.config.media.jitter_prefetch)
        try:
            self.engine_session = await self.engine.open_session(self.config.profile, self.options)
        except ValueError as exc:
            raise ProtocolError("engine", str(exc), True) from None
        self.session = ThinkerTalkerSession(self.engine_session, self.send, self.engine.live_output, self.config.media)
        self.outbound = OutboundAudioTrack(self.session.framer)
        pc.addTrack(self.outbound)  # joins the offered audio transceiver: sendrecv
        self._spawn(self.session.run(), "session")
        self._spawn(self._watchdog(), "watchdog")
        answer = await pc.createAnswer()
        await pc.setLocalDescription(answer)
        return pc.localDescription.sdp

    def _on_track(self, track: Any) -> None:
        if track.kind == "audio":
            self._spawn(self._drain_audio(track), "audio")
        elif track.kind == "video":
            self.has_video = True
            self._spawn(drain(track, self._on_video), "video")

    async def _drain_audio(self, track: Any) -> None:
        await drain(track, self._on_audio)
        self.end("the audio track ended")

    async def _watchdog(self) -> None:
        limit = self.config.media.audio_timeout_s
        longest = self.config.server.max_session_s
        while True:
            await asyncio.sleep(min(0.5, limit / 4))
            now = time.monotonic()
            if now - self.last_audio > limit:
                self.fail("timeout", f"no audio arrived for {now - self.last_audio:.1f} s; ending the session")
                return
            if now - self.started > longest:
                self.fail("timeout", f"sessions last at most {longest:g} s; this one has ended")
                return

    def _on_audio(self, frame: Any) -> None:
        assert self.session is not None
        self.last_audio = time.monotonic()
        try:
            chunks = self.aligner.push_audio(audio_input(frame))
        except MediaError as exc:
            self.fail("bad_request", f"unusable audio: {exc}")
            return
        for chunk in chunks:
            self.session.push_chunk(chunk)

    def _on_video(self, frame: Any) -> None:
        limit = self.config.media.max_video_pixels
        if frame.width * frame.height > limit:
            self.fail("bad_request", f"video of {frame.width}x{frame.height} is larger than allowed ({limit} pixels)")
            return
        try:
            self.aligner.push_video(video_input(frame))
        except MediaError as exc:
            self.fail("bad_request", f"unusable video: {exc}")

    async def _on_state(self) -> None:
        assert self.pc is not None
        state = self.pc.connectionState
        log.debug("session %s: connection %s", self.id, state)
        if state in ("failed", "closed"):
            self.end(f"the connection {state}")

    def _spawn(self, coro: Any, name: str) -> None:
        task = asyncio.get_running_loop().create_task(coro, name=f"{self.id}:{name}")
        task.add_done_callback(self._task_done)
        self.tasks.append(task)

    def _task_done(self, task: asyncio.Task[Any]) -> None:
        if task.cancelled():
            return
        exc = task.exception()
        if exc is None and task.get_name().endswith(":session"):
            self.end("the engine ended the session")
        elif exc is not None:
            log.error("session %s: %s failed: %r", self.id, task.get_name(), exc, exc_info=exc)
            self.fail("engine", f"{task.get_name().split(':')[-1]} stopped: {exc}")

    def set_load_level(self, level: int) -> None:
        """The overload policy's say: shed video (1+), speak no more, text only (2+)."""
        if self.session is not None:
            self.session.queue.shed_video = level >= 1
        if self.engine_session is not None:
            self.engine_session.text_only = level >= 2

    def fail(self, code: str, message: str) -> None:
        if not self.ended.is_set():
            self.send({"type": "error", "code": code, "message": message})
        self.end(message)

    def end(self, reason: str) -> None:
        if not self.ended.is_set():
            self.end_reason = reason
            self.ended.set()

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self.end("closed")
        current = asyncio.current_task()
        for t in self.tasks:
            if t is not current:
                t.cancel()
        if self.outbound is not None:
            self.outbound.stop()
        if self.engine_session is not None:
            with contextlib.suppress(Exception):
                await self.engine_session.close()
        if self.pc is not None:
            with contextlib.suppress(Exception):
                await self.pc.close()
        others = [t for t in self.tasks if t is not current]
        if others:
            await asyncio.wait(others, timeout=1.0)
