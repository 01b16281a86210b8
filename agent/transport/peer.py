"""One aiortc peer per `/ws` session, wired as in docs/architecture.md.

Inbound RTP is handled as it arrives (DirectReceive), its audio and video
drained into the session pump (whose aligner puts them on the 80 ms clock);
speech leaves through OutboundSpeech, paced from the pump's framer on the
loop's 20 ms SpeechTicker. An ICE failure, a dead audio track or audio that
stops for `audio_timeout_s` ends the session.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import Any

from aiortc import RTCPeerConnection, RTCSessionDescription

from agent.config import Config
from agent.transport.connection import Connection
from agent.transport.ice import rtc_configuration
from agent.wire.signalling import ProtocolError, with_inband_fec
from media.aligner import MediaError
from media.av_convert import audio_input, video_input
from media.rtc.receiver import audio_decoder, inbound_counters, jitter_buffers, tune_receivers
from media.rtc.speech_out import OutboundSpeech
from media.rtc.srtp_receive import DirectReceive
from media.rtc.tracks import drain

log = logging.getLogger(__name__)


class Peer:
    def __init__(self, conn: Connection, config: Config) -> None:
        self.conn = conn
        self.config = config
        self.pc: RTCPeerConnection | None = None
        self.outbound: OutboundSpeech | None = None
        self.direct: list[DirectReceive] = []  # one per DTLS transport (one when bundled, as browsers do)
        self.has_video = False
        self.last_audio = time.monotonic()

    async def answer(
        self, sdp: str, options: dict[str, Any], text_only: bool = False, echo_cancelled: bool = False
    ) -> str:
        pc = RTCPeerConnection(rtc_configuration(self.config.ice))
        self.pc = pc
        pc.on("track", self._on_track)
        pc.on("connectionstatechange", self._on_state)
        try:
            await pc.setRemoteDescription(RTCSessionDescription(sdp=sdp, type="offer"))
        except Exception as exc:  # aiortc raises ValueError, KeyError, ... on odd SDP
            raise ProtocolError("bad_sdp", f"the offer could not be used: {exc or type(exc).__name__}", True) from None
        if not any(t.kind == "audio" for t in pc.getTransceivers()):
            raise ProtocolError("bad_sdp", "the offer has no usable audio section", True)
        # pictures back at twice the aligner's video rate (4 a second), not a camera's 10-30: each costs the loop
        every_s = 1 / (2 * self.config.media.video_fps)
        tune_receivers(pc, self.config.media.jitter_buffer == "adaptive", channels=1, video_every_s=every_s)
        try:
            pump = await self.conn.open_session(self.config, options)
        except ValueError as exc:
            raise ProtocolError("engine", str(exc), True) from None
        if text_only:
            pump.ask_text_only()
        if echo_cancelled:
            pump.client_cancels_echo()
        self.outbound = OutboundSpeech(pump.framer)
        pump.transport_counters = self.counters
        pump.transport_gauges = self.gauges
        sender = pc.addTrack(self.outbound.track)  # joins the offered audio transceiver: sendrecv
        (transceiver,) = [t for t in pc.getTransceivers() if t.sender is sender]
        self.outbound.attach(transceiver, lambda exc: self.conn.fail("engine", f"speech output stopped: {exc}"))
        self.last_audio = time.monotonic()
        self.conn.spawn(self._watchdog(), "watchdog")
        answer = await pc.createAnswer()
        if self.config.media.jitter_buffer == "adaptive":  # which rebuilds a lost packet from the next one's FEC
            answer = RTCSessionDescription(with_inband_fec(answer.sdp), answer.type)
        await pc.setLocalDescription(answer)
        return pc.localDescription.sdp

    def counters(self) -> dict[str, float]:
        """What the media transport dropped or skipped, for the session's metrics."""
        out: dict[str, float] = dict(inbound_counters(self.pc)) if self.pc is not None else {}
        out["srtp_undecryptable_packets"] = sum(d.undecryptable for d in self.direct)
        if self.outbound is not None:
            out["output_late_resets"] = self.outbound.late_resets
        return out

    def gauges(self) -> dict[str, float]:
        """The inbound audio's jitter buffer now: its target delay and the packets it holds."""
        buffers = jitter_buffers(self.pc) if self.pc is not None else []
        if not buffers:
            return {}
        return {"jitter_target_ms": max(b.target_ms for b in buffers), "jitter_depth": sum(b.depth for b in buffers)}

    def _on_track(self, track: Any) -> None:
        if track.kind == "audio":
            assert self.pc is not None
            decoder = audio_decoder(self.pc, track)
            if decoder is not None:
                decoder.sink = self._on_audio  # frames come straight from the decoder; the track only ends
            self.conn.spawn(self._drain_audio(track), "audio")
        elif track.kind == "video":
            self.has_video = True
            self.conn.spawn(drain(track, self._on_video), "video")

    async def _drain_audio(self, track: Any) -> None:
        await drain(track, self._on_audio)
        self.conn.end("the audio track ended")

    async def _watchdog(self) -> None:
        limit = self.config.media.audio_timeout_s
        while True:
            await asyncio.sleep(min(0.5, limit / 4))
            silent = time.monotonic() - self.last_audio
            if silent > limit:
                self.conn.fail("timeout", f"no audio arrived for {silent:.1f} s; ending the session")
                return

    def _on_audio(self, frame: Any) -> None:
        pump = self.conn.pump
        assert pump is not None
        self.last_audio = time.monotonic()
        try:
            pump.push_audio(audio_input(frame))
        except MediaError as exc:
            self.conn.fail("bad_request", f"unusable audio: {exc}")
        except Exception as exc:  # called from aiortc's receiver: a bug must end this session, not its transport
            log.error("session %s: audio failed: %r", self.conn.id, exc, exc_info=exc)
            self.conn.fail("engine", f"audio stopped: {exc}")

    def _on_video(self, frame: Any) -> None:
        pump = self.conn.pump
        assert pump is not None
        limit = self.config.media.max_video_pixels
        if frame.width * frame.height > limit:
            self.conn.fail(
                "bad_request", f"video of {frame.width}x{frame.height} is larger than allowed ({limit} pixels)"
            )
            return
        try:
            pump.push_video(video_input(frame))
        except MediaError as exc:
            self.conn.fail("bad_request", f"unusable video: {exc}")

    async def _on_state(self) -> None:
        assert self.pc is not None
        state = self.pc.connectionState
        log.debug("session %s: connection %s", self.conn.id, state)
        if state == "connected" and not self.direct:
            for dtls in {t.receiver.transport for t in self.pc.getTransceivers()}:
                self.direct.append(
                    DirectReceive(dtls, lambda exc: self.conn.fail("engine", f"media input stopped: {exc}"))
                )
        if state in ("failed", "closed"):
            self.conn.end(f"the connection {state}")

    async def close(self) -> None:
        for direct in self.direct:
            direct.close()
        if self.outbound is not None:
            self.outbound.close()
        if self.pc is not None:
            with contextlib.suppress(Exception):
                await self.pc.close()
