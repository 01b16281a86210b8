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
decoded, to measure it; the kernel stamps when it arrived. Once connected,
every client in the process runs on one `Ticker` that reads and writes their
sockets directly (`MediaSocket`), not through asyncio and aioice.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import selectors
import socket
import struct
import sys
import time
import weakref
from collections.abc import Callable, Sequence
from fractions import Fraction
from typing import Any

import av
import numpy as np
import pylibsrtp
from aiortc import MediaStreamTrack, RTCPeerConnection, RTCRtpTransceiver
from aiortc.codecs.vpx import Vp8Encoder
from aiortc.mediastreams import MediaStreamError
from aiortc.rtcdtlstransport import State as DtlsState

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
# the kernel's receive time on each datagram; Python names it on no platform, Linux's value is fixed
SO_TIMESTAMPNS = 35 if sys.platform == "linux" else None
TIMESTAMP_SPACE = socket.CMSG_SPACE(16)  # struct timespec


def rtp_or_rtcp(data: bytes) -> bool:
    """RTP or RTCP, not STUN or DTLS, by the first byte (RFC 7983)."""
    return len(data) > 12 and 127 < data[0] < 192


def is_rtcp(data: bytes) -> bool:
    """Of RTP and RTCP, RTCP by its packet type (RFC 5761)."""
    return 191 < data[1] < 224


class MediaSocket:
    """The UDP socket of a peer's ICE pair in use, read and written here rather than through asyncio and aioice.

    Through asyncio each datagram costs a turn of the event loop, and through
    aioice a dispatch; a load generator sends and receives ~150 a second per
    session. Once DTLS is up (the keys are known), asyncio stops watching the
    socket and a `Ticker` reads it with every other client's: RTP goes to
    `on_rtp` with the kernel's arrival time (`SO_TIMESTAMPNS`; reading on a tick
    costs no precision), STUN (consent) and DTLS to aioice as before. The
    server's RTCP (receiver reports, bandwidth estimates, key-frame requests)
    is counted and dropped: the replay does not adapt to it, and parsing it in
    aiortc cost more than the audio. Packets are written straight to the
    socket.
    """

    def __init__(self, dtls: Any, on_rtp: Callable[[bytes, float], None]) -> None:
        pair = dtls.transport._connection._nominated.get(1)
        if dtls.state != "connected" or pair is None or pair.protocol.transport is None:
            raise ConnectionError("the peer has closed")
        self.dtls = dtls
        self.on_rtp = on_rtp
        self.protocol = pair.protocol
        self._transport = pair.protocol.transport
        self.sock: socket.socket = self._transport._sock
        self.fd = self.sock.fileno()
        self.remote = pair.remote_addr
        self.stamped = SO_TIMESTAMPNS is not None
        if self.stamped:
            self.sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
        asyncio.get_running_loop()._remove_reader(self.fd)  # type: ignore[attr-defined]
        self.sent = 0
        self.send_dropped = 0  # the socket's buffer was full: lost, as on a network
        self.rtcp_ignored = 0

    @property
    def open(self) -> bool:
        return self.dtls._state is DtlsState.CONNECTED and self._transport._sock is self.sock

    def send(self, datagram: bytes) -> None:
        """ConnectionError once the socket is closed."""
        try:
            self.sock.sendto(datagram, self.remote)
            self.sent += 1
        except BlockingIOError:
            self.send_dropped += 1
        except OSError as e:
            raise ConnectionError("the peer has closed") from e

    def read(self) -> None:
        """One datagram, if there is one. Not all: the try that finds none costs as much as a read, and
        another tick comes within milliseconds (the kernel's arrival time keeps the wait out of the
        measure)."""
        try:
            data, ancillary, _, addr = self.sock.recvmsg(2048, TIMESTAMP_SPACE)
        except OSError:  # nothing after all (BlockingIOError), or closed
            return
        if not rtp_or_rtcp(data):
            self.protocol.datagram_received(data, addr)
        elif is_rtcp(data):
            self.rtcp_ignored += 1
        else:
            for level, kind, value in ancillary:
                if level == socket.SOL_SOCKET and kind == SO_TIMESTAMPNS and len(value) >= 16:
                    sec, nsec = struct.unpack_from("@qq", value)
                    self.on_rtp(data, sec + nsec * 1e-9 - (time.time() - time.monotonic()))  # wall clock
                    return
            self.on_rtp(data, time.monotonic())


class RtpStream:
    """One outgoing RTP stream written below aiortc's RTCRtpSender.

    aiortc's sender costs ~0.3 ms of Python a packet (an RtpPacket object, its
    header extensions through `datetime`, a task hop per frame, four layers of
    coroutines down to the socket); here a header is one `struct.pack`, the
    DTLS transport's SRTP session protects it and it goes to the MediaSocket.
    It carries what a browser's does: the negotiated payload type and SSRC,
    the MID and abs-send-time extensions (the server's bandwidth estimator
    reads the latter), the marker on a frame's last packet.
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

    def send(self, sock: MediaSocket, payloads: Sequence[bytes], timestamp: int) -> None:
        """ConnectionError once the peer has closed."""
        protect = self.dtls._tx_srtp.protect
        for packet in self.packets_for(payloads, timestamp):
            sock.send(protect(packet))
        self.packets += len(payloads)


SETTLED = 0.5 / 32768  # a decoder whose output changed less than half an LSB from the last frame has settled


class LeanAudioIn:
    """The server's audio to a replaying client, taken below aiortc's RTCRtpReceiver.

    aiortc's receiver keeps statistics, a NACK list and a jitter buffer for
    each packet in Python, behind aioice's queue and a task hop; a load
    generator needs only the decoded audio (to hear the replies) and when it
    came. `receive(srtp, at)` undoes SRTP with the DTLS transport's session,
    skips the header by its lengths and decodes the Opus payload to mono
    float32 for `sink(pcm, at)`.

    An agent that listens sends the same silence packet over and over; once a
    repeated packet has decoded to what the one before did, to within half an
    LSB (the decoder has settled), its repeats are not decoded again (counted
    in `repeats`): within one LSB of decoding them, and most of what an idle
    session receives.
    """

    def __init__(self, payload_type: int, dtls: Any, sink: Callable[[np.ndarray, float], None]) -> None:
        self.payload_type = payload_type
        self.dtls = dtls
        self.sink = sink
        self._codec = av.CodecContext.create("opus", "r")  # FFmpeg's own: a third faster than libopus here
        self._codec.sample_rate, self._codec.layout = RATE, "mono"  # float32 out, as the sink takes it
        self._last = b""
        self._last_pcm = np.zeros(0, np.float32)
        self._settled = False
        self.packets = 0
        self.repeats = 0
        self.undecodable = 0

    def receive(self, data: bytes, at: float) -> None:
        try:
            self.handle(self.dtls._rx_srtp.unprotect(data), at)
        except pylibsrtp.Error:
            self.undecodable += 1

    def handle(self, data: bytes, at: float) -> None:
        if len(data) < 12 or data[1] & 0x7F != self.payload_type:
            return
        first = data[0]
        start = 12 + 4 * (first & 0x0F)  # the CSRCs
        if first & 0x10:  # an extension block: 4 bytes, then its length in words
            start += 4 + 4 * int.from_bytes(data[start + 2 : start + 4], "big")
        end = len(data) - (data[-1] if first & 0x20 else 0)  # padding
        payload = data[start:end]
        self.packets += 1
        if self._settled and payload == self._last:
            self.repeats += 1
            self.sink(self._last_pcm, at)
            return
        try:
            frames = self._codec.decode(av.Packet(payload))
        except av.FFmpegError:
            self.undecodable += 1
            self._last, self._settled = b"", False
            return
        if not frames:
            return
        planes = [np.frombuffer(f.planes[0], np.float32, f.samples) for f in frames]  # mono: one plane
        pcm = planes[0] if len(planes) == 1 else np.concatenate(planes)
        pcm.flags.writeable = False  # repeats hand on this same array
        self._settled = (
            payload == self._last
            and pcm.size == self._last_pcm.size
            and float(np.abs(pcm - self._last_pcm).max()) <= SETTLED
        )
        self._last, self._last_pcm = payload, pcm
        self.sink(pcm, at)


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

    async def run(self, pc: RTCPeerConnection, on_audio: Callable[[np.ndarray, float], None]) -> None:
        """Send until the peer closes, on the loop's Ticker: audio every 20 ms, the camera's frames when
        they are due."""
        (audio,) = [t for t in pc.getTransceivers() if t.sender.track is self]
        video = next((t for t in pc.getTransceivers() if isinstance(t.sender.track, ReplayCamera)), None)
        dtls = audio.sender.transport
        while dtls.state != "connected":  # no media before DTLS is up, as a browser
            if dtls.state in ("closed", "failed"):
                return
            await asyncio.sleep(0.01)
        self.inbound = LeanAudioIn(audio._codecs[0].payloadType, dtls, on_audio)
        try:
            sock = MediaSocket(dtls, self.inbound.receive)
        except ConnectionError:
            return
        self.streams = [RtpStream(audio)] + ([RtpStream(video)] if video is not None else [])
        link = ReplayLink(self, sock, video.sender.track if video is not None else None)
        ticker = Ticker.of_running_loop()
        ticker.add(link)
        try:
            await link.done
        finally:
            ticker.discard(link)


class ReplayLink:
    """One replaying client as its Ticker drives it: the packets due, and its socket."""

    def __init__(self, mic: ReplayMicrophone, sock: MediaSocket, camera: ReplayCamera | None) -> None:
        self.mic = mic
        self.socket = sock
        self.camera = camera
        self.start = time.monotonic()
        self.frames = 0  # audio frames sent
        self.due = self.start  # when the next is
        self.done: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    def send_due(self, now: float) -> None:
        """ConnectionError once the peer has closed."""
        if not self.socket.open:
            raise ConnectionError("the peer has closed")
        mic, *camera = self.mic.streams
        while self.due <= now:
            mic.send(self.socket, [self.mic._next_packet()], self.frames * FRAME)
            if self.camera is not None:
                while self.camera.sent <= self.frames * FRAME / RATE * self.camera.fps:
                    camera[0].send(self.socket, *self.camera.next_frame())
            self.frames += 1
            self.due = self.start + self.frames * FRAME / RATE

    def end(self, error: BaseException | None = None) -> None:
        if not self.done.done():
            if error is None:
                self.done.set_result(None)
            else:
                self.done.set_exception(error)


class Ticker:
    """Every replaying client on an event loop, on one timer.

    A timer per client is a turn of the event loop each 20 ms per session, and
    as much again for each datagram that arrives; here each tick reads the
    sockets that have something (one `select` for all) and sends what is due.
    Clients keep their own phase, so the tick sets how bursty the server's
    input is: at 5 ms their packets fall in four slots of each 20 ms, near the
    spread of unsynchronised browsers (a 10 ms tick cost the clients ~15 %
    less, and the server less too, by waking it for bigger bursts). The loop's
    one ticker lives while it has clients.
    """

    TICK = 0.005
    _of_loop: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Ticker] = weakref.WeakKeyDictionary()

    @classmethod
    def of_running_loop(cls) -> Ticker:
        loop = asyncio.get_running_loop()
        ticker = cls._of_loop.get(loop)
        if ticker is None:
            ticker = cls._of_loop[loop] = cls()
        return ticker

    def __init__(self, tick: float = TICK) -> None:
        self.tick = tick
        self._selector = selectors.DefaultSelector()
        self._links: set[ReplayLink] = set()
        self._task: asyncio.Task[None] | None = None
        self.ticks = 0

    def add(self, link: ReplayLink) -> None:
        fd = link.socket.fd
        with contextlib.suppress(KeyError):  # a closed socket's number, given again
            self._selector.unregister(fd)
        self._selector.register(fd, selectors.EVENT_READ, link)
        self._links.add(link)
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run())

    def discard(self, link: ReplayLink, error: BaseException | None = None) -> None:
        if link in self._links:
            self._links.discard(link)
            key = self._selector.get_map().get(link.socket.fd)
            if key is not None and key.data is link:
                self._selector.unregister(link.socket.fd)
        link.end(error)

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        due = loop.time()
        try:
            while self._links:
                due = max(due + self.tick, loop.time())  # behind (a stalled loop): catch up once, not in a burst
                await asyncio.sleep(due - loop.time())
                self.step(time.monotonic())
        finally:
            self._task = None
            for link in list(self._links):
                self.discard(link)

    def step(self, now: float) -> None:
        """Read each socket that has something, then send what is due."""
        self.ticks += 1
        for key, _ in self._selector.select(0):
            self._guarded(key.data, key.data.socket.read)
        for link in [link for link in self._links if link.due <= now]:
            self._guarded(link, link.send_due, now)

    def _guarded(self, link: ReplayLink, act: Callable[..., None], *args: float) -> None:
        """One client's fault ends that client, not the others."""
        try:
            act(*args)
        except ConnectionError:
            self.discard(link)
        except Exception as e:
            self.discard(link, e)
