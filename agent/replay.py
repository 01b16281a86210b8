"""Media encoded once and sent by many clients: the load generator behind `omni-agent bench --replay`.

An aiortc client that encodes its own Opus and 640x480 VP8 spends more CPU
than the server spends on its session, so a bench on one machine measures its
clients. Here every spoken clip is Opus-encoded once (20 ms packets, made as
aiortc's own encoder makes them) and a camera loop is VP8-encoded once (10 fps;
one key frame, as a browser sends on a clean network);
each client then sends those packets as they are, as RTP written below
aiortc's sender (`media.rtc.rtp_sender.RtpStream`: aiortc's own per-packet Python cost
more than the server's). The server cannot tell: it receives the RTP a browser sends,
over aiortc's real ICE, DTLS and SRTP. What the clients receive is still
decoded, to measure it; the kernel stamps when it arrived. Once connected,
every client in the process runs on one `Ticker` that reads and writes their
sockets directly (`MediaSocket`), not through asyncio and aioice.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import random
import selectors
import socket
import struct
import sys
import time
import weakref
from collections.abc import Callable, Iterator, Sequence
from fractions import Fraction
from typing import Any

import av
import numpy as np
import pylibsrtp
from aiortc import RTCPeerConnection
from av.video.frame import PictureType

from media.opus import opus_encoder
from media.pacer import Pacer
from media.rtc import private
from media.rtc.rtp_sender import PlaceholderTrack, RtpStream, connected, is_rtcp, nominated_pair, rtp_or_rtcp

RATE = 48_000
FRAME = 960  # 20 ms
AUDIO_TIME_BASE = Fraction(1, RATE)
VIDEO_TIME_BASE = Fraction(1, 90_000)


WARM_FRAMES = 5  # a fresh encoder fades its first frame in: a click at the start of a clip came out 30x weaker


def encode_opus(pcm: np.ndarray, fec_loss_pct: int = 0) -> list[bytes]:
    """48 kHz mono float32 as 20 ms Opus packets (stereo, as a browser and aiortc send it), flushed. The
    encoder runs on silence first, as a live one would have; those packets are left out. With
    `fec_loss_pct`, as a browser encodes for a receiver that asked for in-band FEC once it sees that much
    loss: at its 32 kbit/s, each packet with a copy of the one before."""
    if fec_loss_pct:
        options = {"application": "voip", "fec": "1", "packet_loss": str(fec_loss_pct)}
        codec = opus_encoder(RATE, "stereo", 32_000, options)
    else:
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


def camera_scene(count: int, size: tuple[int, int] = (640, 480), seed: int = 7) -> Iterator[np.ndarray]:
    """`count` RGB frames that cost a video encoder what a webcam does: a textured room panning slowly, a
    head moving in it, and sensor noise on every frame. (A bar moving over black, the first camera here,
    came out at 15 kbit/s instead of the 500 aimed at: one packet a frame where a camera sends five.)"""
    w, h = size
    rng = np.random.default_rng(seed)
    cells = rng.random((h // 16 + 1, (w + 128) // 16 + 1, 3))
    room = 0.55 * np.kron(cells, np.ones((16, 16, 1)))[:h, : w + 128] + 0.2 * rng.random((h, w + 128, 1)) + 0.15
    room = (room * 255).astype(np.float32)
    yy, xx = np.ogrid[:h, :w]
    for i in range(count):
        pan = int(64 + 63 * np.sin(i / 40))
        img = room[:, pan : pan + w].copy()
        cy, cx = h // 2 + int(h / 48 * np.sin(i / 7)), w // 2 + int(w / 32 * np.sin(i / 11))
        img[((yy - cy) / (h * 0.29)) ** 2 + ((xx - cx) / (w * 0.16)) ** 2 < 1] = (200, 160, 130)
        img += rng.normal(0, 3, img.shape).astype(np.float32)
        yield np.clip(img, 0, 255).astype(np.uint8)


def encode_camera_loop(
    seconds: float = 9.0, fps: float = 10.0, size: tuple[int, int] = (640, 480), keyframe_s: float | None = None
) -> list[bytes]:
    """A camera_scene as VP8 frames at aiortc's default 500 kbit/s CBR, as its encoder sets it up. A key
    frame first, and then only every `keyframe_s` if given: a browser sends one at the start and then only
    when asked (a receiver lost something), never on a clean network. The encoder runs a second of the scene
    before the loop, so its first key frame is a settled one (~22 KB), not a cold start's (~40 KB)."""
    w, h = size
    codec = av.CodecContext.create("libvpx", "w")
    codec.width, codec.height = w, h
    codec.pix_fmt = "yuv420p"
    codec.bit_rate = 500_000
    codec.time_base = VIDEO_TIME_BASE
    codec.gop_size = max(1, round(keyframe_s * fps)) if keyframe_s else 1 << 20
    codec.options = {
        **{"deadline": "realtime", "cpu-used": "-6", "lag-in-frames": "0", "static-thresh": "1"},  # aiortc's
        # libwebrtc's rate control: a key frame at most 3 frames' worth at 10 fps (600 ms buffer x 0.5 x fps / 10)
        **{"max-intra-rate": str(round(600 * 0.5 * fps / 10)), "overshoot-pct": "15", "undershoot-pct": "100"},
    }
    warm = round(fps)
    frames: list[bytes] = []
    for i, img in enumerate(camera_scene(warm + round(seconds * fps), size)):
        frame = av.VideoFrame.from_ndarray(img, format="rgb24").reformat(format="yuv420p")
        frame.pts = int(i * 90_000 / fps)
        frame.time_base = VIDEO_TIME_BASE
        if i == warm:
            frame.pict_type = PictureType.I  # the loop's first frame: a key frame
        encoded = b"".join(bytes(p) for p in codec.encode(frame))
        if i >= warm:
            frames.append(encoded)
    return frames


# the kernel's receive time on each datagram; Python names it on no platform, Linux's value is fixed
SO_TIMESTAMPNS = 35 if sys.platform == "linux" else None
TIMESTAMP_SPACE = socket.CMSG_SPACE(16)  # struct timespec


def is_pli(data: bytes) -> bool:
    """A picture loss indication (RFC 4585 6.3.1: payload-specific feedback, FMT 1), from the header SRTCP
    leaves in clear. aiortc sends each alone, not behind a report in a compound packet."""
    return len(data) >= 12 and data[1] == 206 and data[0] & 0x1F == 1


class MediaSocket:
    """The UDP socket of a peer's ICE pair in use, read and written here rather than through asyncio and aioice.

    Through asyncio each datagram costs a turn of the event loop, and through
    aioice a dispatch; a load generator sends and receives ~150 a second per
    session. Once DTLS is up (the keys are known), asyncio stops watching the
    socket and a `Ticker` reads it with every other client's: RTP goes to
    `on_rtp` with the kernel's arrival time (`SO_TIMESTAMPNS`; reading on a tick
    costs no precision), STUN (consent) and DTLS to aioice as before. The
    server's RTCP (receiver reports, bandwidth estimates) is counted and
    dropped: the replay does not adapt to it, and parsing it in aiortc cost
    more than the audio. A key-frame request (PLI) is read from its clear
    header and goes to `on_key_frame_request`, as a browser's encoder answers
    it. Packets are written straight to the socket.
    """

    def __init__(
        self, dtls: Any, on_rtp: Callable[[bytes, float], None], on_key_frame_request: Callable[[], None] = lambda: None
    ) -> None:
        pair = nominated_pair(dtls)
        self.dtls = dtls
        self.on_rtp = on_rtp
        self.protocol = pair.protocol
        self._transport = pair.protocol.transport
        self.sock = private.udp_socket(self._transport)
        self.fd = self.sock.fileno()
        self.remote = pair.remote_addr
        if SO_TIMESTAMPNS is not None:
            self.sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
        private.stop_watching(asyncio.get_running_loop(), self.fd)
        self.sent = 0
        self.send_dropped = 0  # the socket's buffer was full: lost, as on a network
        self.rtcp_ignored = 0
        self.key_frame_requests = 0
        self.on_key_frame_request = on_key_frame_request

    @property
    def open(self) -> bool:
        return connected(self.dtls) and private.udp_socket(self._transport) is self.sock

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
            if is_pli(data):
                self.key_frame_requests += 1
                self.on_key_frame_request()
            else:
                self.rtcp_ignored += 1
        else:
            for level, kind, value in ancillary:
                if level == socket.SOL_SOCKET and kind == SO_TIMESTAMPNS and len(value) >= 16:
                    sec, nsec = struct.unpack_from("@qq", value)
                    self.on_rtp(data, sec + nsec * 1e-9 - (time.time() - time.monotonic()))  # wall clock
                    return
            self.on_rtp(data, time.monotonic())


class VideoPacing:
    """A video frame's packets leave spread out, as a browser's pacer sends them, not all at once.

    Chrome paces at 2.5 times the target bitrate in 5 ms steps: a 6 KB frame
    leaves over ~40 ms and a 40 KB key frame over ~250 ms. aiortc's sender (and
    a replay without this) sends each frame as one burst, which is harsher on
    the server than any browser: a key frame is 30 packets in a millisecond.
    """

    FACTOR = 2.5

    def __init__(self, stream: RtpStream, bit_rate: int = 500_000, step: float = 0.005) -> None:
        self.stream = stream
        self.bytes_per_s = self.FACTOR * bit_rate / 8
        self.cap = self.bytes_per_s * step  # unused budget does not build up beyond one step
        self.queue: collections.deque[tuple[bytes, bool, int]] = collections.deque()
        self._budget = self.cap
        self._last: float | None = None

    def add(self, payloads: Sequence[bytes], timestamp: int) -> None:
        last = len(payloads) - 1
        self.queue.extend((payload, i == last, timestamp) for i, payload in enumerate(payloads))

    def send(self, sock: MediaSocket, now: float) -> None:
        """What the budget allows by `now` (a packet may overdraw it; the next ones wait)."""
        if self._last is not None:
            self._budget = min(self._budget + (now - self._last) * self.bytes_per_s, self.cap)
        self._last = now
        while self.queue and self._budget > 0:
            payload, marker, timestamp = self.queue.popleft()
            sock.send(self.stream.protected(payload, marker, timestamp))
            self._budget -= len(payload)


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
        self._unprotect: Callable[[bytes], bytes] | None = None
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
        if self._unprotect is None:  # the DTLS transport's session, there once it is connected
            self._unprotect = private.srtp_in(self.dtls).unprotect
        try:
            self.handle(self._unprotect(data), at)
        except pylibsrtp.Error:
            self.undecodable += 1

    def handle(self, data: bytes, at: float) -> None:
        if len(data) < 12 or data[1] & 0x7F != self.payload_type:
            return
        first = data[0]
        start = 12 + 4 * (first & 0x0F)  # the CSRCs
        if first & 0x10:  # an extension block: 4 bytes, then its length in words
            start += 4 + 4 * ((data[start + 2] << 8) | data[start + 3])
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


class ReplayCamera(PlaceholderTrack):
    """A pre-encoded VP8 loop, packetized once as aiortc does (picture ids follow the loop), sent round and
    round at `fps` by the ReplayMicrophone of the same peer.

    Each camera restarts the loop (at its key frame) after its own number of
    frames, between two thirds of the loop and all of it: clients that
    connected together would otherwise send their key frames together, every
    loop, and a dozen key frames decoded at once stalled the server for
    60-100 ms (browsers' key frames are not in step either: each sends one
    when it starts).
    """

    kind = "video"

    def __init__(self, frames: Sequence[bytes], fps: float = 10.0) -> None:
        super().__init__()
        self.fps = fps
        self.payloads = [private.vp8_payloads(f, i) for i, f in enumerate(frames)]
        self.length = random.randint(max(1, len(frames) * 2 // 3), len(frames))
        self.sent = 0
        self._at = 0  # the next frame's place in the loop

    def next_frame(self) -> tuple[list[bytes], int]:
        """The next frame's payloads and its RTP timestamp (90 kHz)."""
        n, at = self.sent, self._at
        self.sent, self._at = n + 1, (at + 1) % self.length
        return self.payloads[at], int(n * 90_000 / self.fps)

    def key_frame(self) -> None:
        """The receiver asked for one (it lost or shed frames): the loop restarts at its key frame next."""
        self._at = 0


class ReplayMicrophone(PlaceholderTrack):
    """Queued pre-encoded clips as 20 ms Opus packets, a silence packet between them, paced like a
    microphone; `play(packets)` and `sent_at` work as `client.MicrophoneTrack`'s. `run(pc, on_audio)` (the
    client starts it once connected) sends them, and a ReplayCamera's frames on the same peer, through one
    RtpStream each (no aiortc sender) on the loop's Ticker, and hands the audio that comes back to
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
        self.socket: MediaSocket | None = None  # once running

    def play(self, packets: Sequence[bytes]) -> int:
        ident = self._next_id
        self._next_id += 1
        self._queue.append((ident, packets))
        return ident

    def next_packet(self) -> bytes:
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
        self.inbound = LeanAudioIn(private.payload_type(audio), dtls, on_audio)
        camera = video.sender.track if video is not None else None
        try:
            self.socket = sock = MediaSocket(
                dtls, self.inbound.receive, camera.key_frame if camera is not None else lambda: None
            )
        except ConnectionError:
            return
        self.streams = [RtpStream(audio)] + ([RtpStream(video)] if video is not None else [])
        link = ReplayLink(self, sock, camera)
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
        self.video = (camera, VideoPacing(mic.streams[1])) if camera is not None else None
        # a browser's capture clock has its own phase, nothing to do with when the transport connected (the
        # server starts sending then): clients that started in step with the server were echoed in step with it
        self.due = time.monotonic() + random.uniform(0, FRAME / RATE)  # when it next has something to send
        self.pacer = Pacer(FRAME / RATE, start=self.due)
        self.frames = 0  # audio frames sent
        self.done: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    def send_due(self, now: float) -> None:
        """ConnectionError once the peer has closed."""
        if not self.socket.open:
            raise ConnectionError("the peer has closed")
        while self.pacer.take(now):
            self.socket.send(self.mic.streams[0].protected(self.mic.next_packet(), True, self.frames * FRAME))
            if self.video is not None:
                camera, pacing = self.video
                while camera.sent <= self.frames * FRAME / RATE * camera.fps:
                    pacing.add(*camera.next_frame())
            self.frames += 1
        if self.video is not None:
            self.video[1].send(self.socket, now)
        paced = self.video is not None and self.video[1].queue  # a frame's packets still to spread: every tick
        self.due = now if paced else self.pacer.next_due(now)

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
        self._timer: asyncio.TimerHandle | None = None  # the next tick, while there are clients
        self._pacer = Pacer(tick)
        self.ticks = 0

    def add(self, link: ReplayLink) -> None:
        fd = link.socket.fd
        with contextlib.suppress(KeyError):  # a closed socket's number, given again
            self._selector.unregister(fd)
        self._selector.register(fd, selectors.EVENT_READ, link)
        self._links.add(link)
        if self._timer is None:
            loop = asyncio.get_running_loop()
            self._pacer = Pacer(self.tick)
            self._timer = loop.call_at(loop.time(), self._tick)

    def discard(self, link: ReplayLink, error: BaseException | None = None) -> None:
        if link in self._links:
            self._links.discard(link)
            key = self._selector.get_map().get(link.socket.fd)
            if key is not None and key.data is link:
                self._selector.unregister(link.socket.fd)
        link.end(error)

    def _tick(self) -> None:
        """A timer callback, not a task: no coroutine, future and task step per tick."""
        self._timer = None
        if not self._links:
            return
        try:
            self.step(time.monotonic())
        except Exception as e:  # the ticker's own fault: every client ends with it
            for link in list(self._links):
                self.discard(link, e)
            return
        loop = asyncio.get_running_loop()
        self._pacer.due(now := loop.time())  # behind (a stalled loop): one tick, then on the grid again
        self._timer = loop.call_at(self._pacer.next_due(now), self._tick)

    def step(self, now: float) -> None:
        """Read each socket that has something, then send what is due."""
        self.ticks += 1
        for key, _ in self._selector.select(0):
            try:
                key.data.socket.read()
            except Exception as e:
                self._fault(key.data, e)
        for link in [link for link in self._links if link.due <= now]:
            try:
                link.send_due(now)
            except Exception as e:
                self._fault(link, e)

    def _fault(self, link: ReplayLink, error: Exception) -> None:
        """One client's fault ends that client, not the others; a closed peer ends it without one."""
        self.discard(link, None if isinstance(error, ConnectionError) else error)
