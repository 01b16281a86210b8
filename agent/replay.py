"""Media encoded once and sent by many clients: the load generator behind `omni-agent bench --replay`.

An aiortc client that encodes its own Opus and 640x480 VP8 spends more CPU
than the server spends on its session, so a bench on one machine measures its
clients. Here every spoken clip is Opus-encoded once (20 ms packets, made as
aiortc's own encoder makes them) and a camera loop is VP8-encoded once (10 fps;
a key frame first and every 3 s, as a browser sends them on a clean network);
each client then sends those packets as they are, as RTP written below
aiortc's sender (`RtpStream`: aiortc's own per-packet Python cost more than
the server's). The server cannot tell: it receives the RTP a browser sends,
over aiortc's real ICE, DTLS and SRTP. What the clients receive is still
decoded, to measure it.
"""

from __future__ import annotations

import asyncio
import random
import struct
import time
from collections.abc import Callable, Sequence
from fractions import Fraction
from typing import Any

import av
import numpy as np
import pylibsrtp
from aiortc import MediaStreamTrack, RTCPeerConnection, RTCRtpTransceiver
from aiortc.codecs.vpx import Vp8Encoder
from aiortc.mediastreams import MediaStreamError

from agent.client import Pacer
from media.opus import opus_encoder

RATE = 48_000
FRAME = 960  # 20 ms
AUDIO_TIME_BASE = Fraction(1, RATE)
VIDEO_TIME_BASE = Fraction(1, 90_000)


WARM_FRAMES = 5  # a fresh encoder fades its first frame in: a click at the start of a clip came out 30x weaker


def encode_opus(pcm: np.ndarray) -> list[bytes]:
    """48 kHz mono float32 as 20 ms Opus packets (stereo, as a browser and aiortc send it), flushed. The
    encoder runs on silence first, as a live one would have; those packets are left out."""
    codec = opus_encoder(RATE, "stereo", 96_000, {"application": "voip"})  # aiortc's OpusEncoder settings
    s16 = (np.clip(np.asarray(pcm, np.float32), -1, 1) * 32767).astype(np.int16)
    s16 = np.pad(s16, (WARM_FRAMES * FRAME, -s16.size % FRAME))
    packets: list[bytes] = []
    for start in range(0, s16.size, FRAME):
        frame = av.AudioFrame.from_ndarray(
            np.repeat(s16[start : start + FRAME], 2).reshape(1, -1), format="s16", layout="stereo"
        )
        frame.sample_rate = RATE
        frame.pts = start
        frame.time_base = AUDIO_TIME_BASE
        packets += [bytes(p) for p in codec.encode(frame)]
    packets += [bytes(p) for p in codec.encode(None)]
    return packets[WARM_FRAMES:]


def silence_packet() -> bytes:
    """One steady-state Opus packet of silence, sent between clips."""
    return encode_opus(np.zeros(FRAME, np.float32))[0]


def encode_camera_loop(
    seconds: float = 6.0, fps: float = 10.0, size: tuple[int, int] = (640, 480), keyframe_s: float = 3.0
) -> list[bytes]:
    """A moving pattern (the synthetic camera's) as VP8 frames at aiortc's default 500 kbit/s CBR; the loop
    starts with a key frame, so it can repeat."""
    w, h = size
    codec = av.CodecContext.create("libvpx", "w")
    codec.width, codec.height = w, h
    codec.pix_fmt = "yuv420p"
    codec.bit_rate = 500_000
    codec.time_base = VIDEO_TIME_BASE
    codec.gop_size = max(1, round(keyframe_s * fps))
    codec.options = {"deadline": "realtime", "cpu-used": "-6", "lag-in-frames": "0", "static-thresh": "1"}
    frames: list[bytes] = []
    n = round(seconds * fps)
    for i in range(n):
        img = np.zeros((h, w, 3), np.uint8)
        x = (i * 8) % w
        img[:, x : x + 16] = (255, 200, 0)
        frame = av.VideoFrame.from_ndarray(img, format="rgb24").reformat(format="yuv420p")
        frame.pts = int(i * 90_000 / fps)
        frame.time_base = VIDEO_TIME_BASE
        frames.append(b"".join(bytes(p) for p in codec.encode(frame)))
    return frames


NTP_UNIX_OFFSET = 2_208_988_800  # seconds from 1900 (NTP) to 1970 (Unix)
MID = "urn:ietf:params:rtp-hdrext:sdes:mid"
ABS_SEND_TIME = "http://www.webrtc.org/experiments/rtp-hdrext/abs-send-time"


class RtpStream:
    """One outgoing RTP stream written below aiortc's RTCRtpSender.

    aiortc's sender costs ~0.3 ms of Python a packet (an RtpPacket object, its
    header extensions through `datetime`, a task hop per frame, four layers of
    coroutines down to the socket); here a header is one `struct.pack`, the
    DTLS transport's SRTP session protects it and it goes to the socket of the
    ICE pair in use. It carries what a browser's does:
    the negotiated payload type and SSRC, the MID and abs-send-time extensions
    (the server's bandwidth estimator reads the latter), the marker on a
    frame's last packet.
    """

    def __init__(self, transceiver: RTCRtpTransceiver) -> None:
        sender = transceiver.sender
        self.dtls = sender.transport
        self.ssrc: int = sender._ssrc  # type: ignore[attr-defined]
        self.payload_type = transceiver._codecs[0].payloadType
        ids = {e.uri: e.id for e in transceiver._headerExtensions}
        mid = (transceiver.mid or "").encode()
        self._fixed = bytes([(ids[MID] << 4) | (len(mid) - 1)]) + mid if MID in ids and mid else b""
        self._abs_id = ids.get(ABS_SEND_TIME)
        self.sequence = random.randrange(1 << 16)
        self._timestamp_origin = random.randrange(1 << 32)
        self.packets = 0

    def _extensions(self) -> bytes:
        body = self._fixed
        if self._abs_id is not None:  # 6.18 fixed-point seconds, 24 bits
            when = int((time.time() + NTP_UNIX_OFFSET) * (1 << 18)) & 0xFFFFFF
            body += bytes([(self._abs_id << 4) | 2]) + when.to_bytes(3, "big")
        if not body:
            return b""
        body += bytes(-len(body) % 4)
        return struct.pack("!HH", 0xBEDE, len(body) // 4) + body  # RFC 8285, one-byte form

    def packets_for(self, payloads: Sequence[bytes], timestamp: int) -> list[bytes]:
        """One frame's RTP packets; `timestamp` in the codec's clock from the stream's start."""
        extensions = self._extensions()
        first = 0x90 if extensions else 0x80  # version 2, extension bit
        stamp = (self._timestamp_origin + timestamp) & 0xFFFFFFFF
        last = len(payloads) - 1
        out = []
        for i, payload in enumerate(payloads):
            marker_type = (0x80 if i == last else 0) | self.payload_type
            header = struct.pack("!BBHII", first, marker_type, self.sequence, stamp, self.ssrc)
            out.append(header + extensions + payload)
            self.sequence = (self.sequence + 1) & 0xFFFF
        return out

    def send(self, payloads: Sequence[bytes], timestamp: int) -> None:
        """ConnectionError once the peer has closed."""
        pair = self.dtls.transport._connection._nominated.get(1)
        if self.dtls.state != "connected" or pair is None or pair.protocol.transport is None:
            raise ConnectionError("the peer has closed")
        srtp = self.dtls._tx_srtp
        for packet in self.packets_for(payloads, timestamp):
            pair.protocol.transport.sendto(srtp.protect(packet), pair.remote_addr)
        self.packets += len(payloads)


class LeanAudioIn:
    """The server's audio to a replaying client, taken below aiortc's RTCRtpReceiver.

    aiortc's receiver keeps statistics, a NACK list and a jitter buffer for
    each packet in Python, behind aioice's queue and a task hop; a load
    generator needs only the decoded audio (to hear the replies) and when it
    came. `take(ice, dtls)` has the ICE connection hand it each SRTP packet as
    the datagram arrives (SRTCP and DTLS still go to aiortc): SRTP is undone
    with the DTLS transport's session, the header skipped by its lengths and
    the Opus payload decoded, mono.
    """

    def __init__(self, payload_type: int, sink: Callable[[av.AudioFrame], None]) -> None:
        self.payload_type = payload_type
        self.sink = sink
        self._codec = av.CodecContext.create("libopus", "r")
        self._codec.sample_rate, self._codec.layout, self._codec.format = RATE, "mono", "s16"
        self.packets = 0
        self.undecodable = 0

    def take(self, ice: Any, dtls: Any) -> None:
        aiortc_path = ice.data_received
        srtp = dtls._rx_srtp

        def data_received(data: bytes, component: int) -> None:
            if 127 < data[0] < 192 and not 191 < data[1] < 224:  # RTP, not RTCP (RFC 5761)
                try:
                    self.handle(srtp.unprotect(data))
                except pylibsrtp.Error:
                    self.undecodable += 1
            else:
                aiortc_path(data, component)

        ice.data_received = data_received

    def handle(self, data: bytes) -> None:
        if len(data) < 12 or data[1] & 0x7F != self.payload_type:
            return
        first = data[0]
        start = 12 + 4 * (first & 0x0F)  # the CSRCs
        if first & 0x10:  # an extension block: 4 bytes, then its length in words
            start += 4 + 4 * int.from_bytes(data[start + 2 : start + 4], "big")
        end = len(data) - (data[-1] if first & 0x20 else 0)  # padding
        self.packets += 1
        try:
            frames = self._codec.decode(av.Packet(data[start:end]))
        except av.FFmpegError:
            self.undecodable += 1
            return
        for frame in frames:
            self.sink(frame)


class _Placeholder(MediaStreamTrack):
    """A track that gives aiortc's sender nothing (its media leaves through RtpStream) until it stops."""

    def __init__(self) -> None:
        super().__init__()
        self._stopped = asyncio.Event()

    def stop(self) -> None:
        super().stop()
        self._stopped.set()

    async def recv(self) -> av.Packet:
        await self._stopped.wait()
        raise MediaStreamError


class ReplayCamera(_Placeholder):
    """A pre-encoded VP8 loop, packetized once as aiortc does (picture ids follow the loop), sent round and
    round at `fps` by the ReplayMicrophone of the same peer."""

    kind = "video"

    def __init__(self, frames: Sequence[bytes], fps: float = 10.0) -> None:
        super().__init__()
        self.fps = fps
        self.payloads = [Vp8Encoder._packetize(f, i) for i, f in enumerate(frames)]
        self.sent = 0

    def next_frame(self) -> tuple[list[bytes], int]:
        """The next frame's payloads and its RTP timestamp (90 kHz)."""
        n = self.sent
        self.sent += 1
        return self.payloads[n % len(self.payloads)], int(n * 90_000 / self.fps)


class ReplayMicrophone(_Placeholder):
    """Queued pre-encoded clips as 20 ms Opus packets, a silence packet between them, paced like a
    microphone; `play(packets)` and `sent_at` work as `client.MicrophoneTrack`'s. `run(pc, on_audio)` (the
    client starts it once connected) sends them, and a ReplayCamera's frames on the same peer, through one
    RtpStream each (one timer for both, no aiortc sender), and hands the audio that comes back to
    `on_audio` through a LeanAudioIn."""

    kind = "audio"

    def __init__(self, silence: bytes) -> None:
        super().__init__()
        self.silence = silence
        self.sent_at: dict[int, float] = {}
        self._queue: list[tuple[int, Sequence[bytes]]] = []
        self._current: Sequence[bytes] = ()
        self._pos = 0
        self._next_id = 0
        self.streams: list[RtpStream] = []  # once running: the microphone's, then the camera's
        self.inbound: LeanAudioIn | None = None

    def play(self, packets: Sequence[bytes]) -> int:
        ident = self._next_id
        self._next_id += 1
        self._queue.append((ident, packets))
        return ident

    def _next_packet(self) -> bytes:
        if self._pos >= len(self._current) and self._queue:
            ident, self._current = self._queue.pop(0)
            self._pos = 0
            self.sent_at[ident] = time.monotonic()
        if self._pos < len(self._current):
            self._pos += 1
            return self._current[self._pos - 1]
        return self.silence

    async def run(self, pc: RTCPeerConnection, on_audio: Callable[[av.AudioFrame], None]) -> None:
        """Send until the peer closes: audio every 20 ms, the camera's frames when they are due."""
        (audio,) = [t for t in pc.getTransceivers() if t.sender.track is self]
        video = next((t for t in pc.getTransceivers() if isinstance(t.sender.track, ReplayCamera)), None)
        while audio.sender.transport.state != "connected":  # no media before DTLS is up, as a browser
            if audio.sender.transport.state in ("closed", "failed"):
                return
            await asyncio.sleep(0.01)
        self.inbound = LeanAudioIn(audio._codecs[0].payloadType, on_audio)
        dtls = audio.receiver.transport
        self.inbound.take(dtls.transport._connection, dtls)
        mic = RtpStream(audio)
        camera = (RtpStream(video), video.sender.track) if video is not None else None
        self.streams = [mic] + ([camera[0]] if camera is not None else [])
        pacer = Pacer()
        n = 0
        try:
            while True:
                await pacer.wait(n * FRAME / RATE)
                mic.send([self._next_packet()], n * FRAME)
                if camera is not None:
                    stream, track = camera
                    while track.sent <= n * FRAME / RATE * track.fps:
                        stream.send(*track.next_frame())
                n += 1
        except ConnectionError:  # the peer closed
            return
