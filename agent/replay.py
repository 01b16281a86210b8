"""Media encoded once and sent by many clients: the load generator behind `omni-agent bench --replay`.

An aiortc client that encodes its own Opus and 640x480 VP8 spends more CPU
than the server spends on its session, so a bench on one machine measures its
clients. Here every spoken clip is Opus-encoded once (20 ms packets, made as
aiortc's own encoder makes them) and a camera loop is VP8-encoded once (10 fps;
a key frame first and every 3 s, as a browser sends them on a clean network);
each client then sends those packets as they are. aiortc's sender packetizes an
`av.Packet` that a track returns instead of encoding a frame (the path its
`MediaPlayer(decode=False)` takes). The server cannot tell: it receives the
same RTP. What the clients receive is still decoded, to measure it.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from fractions import Fraction

import av
import numpy as np
from aiortc import MediaStreamTrack
from aiortc.mediastreams import MediaStreamError

from agent.client import Pacer

RATE = 48_000
FRAME = 960  # 20 ms
AUDIO_TIME_BASE = Fraction(1, RATE)
VIDEO_TIME_BASE = Fraction(1, 90_000)


def _opus_encoder() -> av.AudioCodecContext:
    codec = av.CodecContext.create("libopus", "w")
    codec.bit_rate = 96_000  # aiortc's OpusEncoder settings
    codec.format = "s16"
    codec.layout = "stereo"
    codec.sample_rate = RATE
    codec.time_base = AUDIO_TIME_BASE
    codec.options = {"application": "voip"}
    return codec


WARM_FRAMES = 5  # a fresh encoder fades its first frame in: a click at the start of a clip came out 30x weaker


def encode_opus(pcm: np.ndarray) -> list[bytes]:
    """48 kHz mono float32 as 20 ms Opus packets (stereo, as a browser and aiortc send it), flushed. The
    encoder runs on silence first, as a live one would have; those packets are left out."""
    codec = _opus_encoder()
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


class ReplayMicrophone(MediaStreamTrack):
    """Sends queued pre-encoded clips as 20 ms Opus packets, a silence packet between them, paced like a
    microphone. `play(packets)` and `sent_at` work as `client.MicrophoneTrack`'s."""

    kind = "audio"

    def __init__(self, silence: bytes) -> None:
        super().__init__()
        self.silence = silence
        self.sent_at: dict[int, float] = {}
        self._queue: list[tuple[int, Sequence[bytes]]] = []
        self._current: Sequence[bytes] = ()
        self._pos = 0
        self._next_id = 0
        self._pacer = Pacer()
        self._pts = 0

    def play(self, packets: Sequence[bytes]) -> int:
        ident = self._next_id
        self._next_id += 1
        self._queue.append((ident, packets))
        return ident

    async def recv(self) -> av.Packet:
        if self.readyState != "live":
            raise MediaStreamError
        await self._pacer.wait(self._pts / RATE)
        if self._pos >= len(self._current) and self._queue:
            ident, self._current = self._queue.pop(0)
            self._pos = 0
            self.sent_at[ident] = time.monotonic()
        if self._pos < len(self._current):
            data = self._current[self._pos]
            self._pos += 1
        else:
            data = self.silence
        packet = av.Packet(data)
        packet.pts = self._pts
        packet.time_base = AUDIO_TIME_BASE
        self._pts += FRAME
        return packet


class ReplayCamera(MediaStreamTrack):
    """Sends a pre-encoded VP8 loop at `fps`, round and round."""

    kind = "video"

    def __init__(self, frames: Sequence[bytes], fps: float = 10.0) -> None:
        super().__init__()
        self.frames = frames
        self.fps = fps
        self._n = 0
        self._pacer = Pacer()

    async def recv(self) -> av.Packet:
        if self.readyState != "live":
            raise MediaStreamError
        await self._pacer.wait(self._n / self.fps)
        packet = av.Packet(self.frames[self._n % len(self.frames)])
        packet.pts = int(self._n * 90_000 / self.fps)
        packet.time_base = VIDEO_TIME_BASE
        self._n += 1
        return packet
