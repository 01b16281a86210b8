"""An aiortc client that speaks the wire protocol: for tests, benchmarks and bench.

It sends audio from a numpy buffer (paced like a microphone), optionally a
synthetic camera, records what comes back with arrival times, and collects
the server's messages.
"""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import json
import time
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any, Protocol

import av
import numpy as np
from aiortc import MediaStreamTrack, RTCPeerConnection, RTCSessionDescription
from aiortc.mediastreams import MediaStreamError
from websockets.asyncio.client import ClientConnection, connect

from agent.config import IceConfig
from agent.impair import ImpairingRelay
from agent.transport.ice import page_configuration, rtc_configuration
from media.pacer import Pacer
from media.rtc.receiver import audio_decoder, tune_receivers

RATE = 48_000
FRAME = 960  # 20 ms


async def paced(pacer: Pacer) -> None:
    """Wakes a track's `recv()` when its next frame is due, so frames leave as a live source sends them."""
    while not pacer.take(now := time.monotonic()):
        await asyncio.sleep(pacer.next_due(now) - now)


class Microphone(Protocol):
    """What a client speaks through: `MicrophoneTrack` (PCM, encoded as it goes) or `replay.ReplayMicrophone`
    (pre-encoded; it has a `run(pc, on_audio)` that sends and receives, which the client starts once
    connected)."""

    sent_at: dict[int, float]

    def play(self, media: Any) -> int: ...


class RoomEcho:
    """A loudspeaker the microphone hears: what came back, played as it arrives, heard `delay_ms` later at
    `gain_db` through a room's impulse response (sans-I/O; for tests and benchmarks of echo cancellation).

    The room is convolved by overlap-add on FFTs (a reverb tail of a few hundred ms is thousands of taps)."""

    def __init__(self, delay_ms: float, gain_db: float, impulse: np.ndarray | None = None, rate: int = RATE) -> None:
        ir = np.ones(1, np.float32) if impulse is None else np.asarray(impulse, np.float32)
        self.ir = ir / max(float(np.sqrt(np.dot(ir, ir))), 1e-9) * np.float32(10 ** (gain_db / 20))
        self._speaker: list[np.ndarray] = []  # what arrived and is not played yet
        self._queued = 0
        self._line = np.zeros(int(delay_ms * rate / 1000), np.float32)  # played, not yet heard
        self._tail = np.zeros(0, np.float32)  # the reverb of what was heard, still ringing
        self._max_queued = rate  # a second: the speaker plays on arrival, so more is a stall

    def heard(self, pcm: np.ndarray) -> None:
        """Audio that came back (float32 mono), to the loudspeaker."""
        self._speaker.append(np.asarray(pcm, np.float32))
        self._queued += pcm.size
        while self._queued > self._max_queued:
            self._queued -= self._speaker.pop(0).size

    def echo(self, n: int) -> np.ndarray:
        """The next `n` samples the microphone hears of the loudspeaker."""
        played = np.zeros(n, np.float32)
        got = 0
        while got < n and self._speaker:
            head = self._speaker[0]
            take = min(n - got, head.size)
            played[got : got + take] = head[:take]
            got += take
            if take == head.size:
                self._speaker.pop(0)
            else:
                self._speaker[0] = head[take:]
        self._queued -= got
        line = np.concatenate((self._line, played))
        now, self._line = line[:n], line[n:]
        size = 1 << int(np.ceil(np.log2(n + self.ir.size)))
        wet = np.fft.irfft(np.fft.rfft(now, size) * np.fft.rfft(self.ir, size), size)[: n + self.ir.size - 1]
        wet = wet.astype(np.float32)
        wet[: self._tail.size] += self._tail[: wet.size]
        self._tail = wet[n:]
        return wet[:n]


class MicrophoneTrack(MediaStreamTrack):
    """Plays queued float32 48 kHz mono audio in 20 ms frames, silence between.

    `sent_at` maps each `play()` id to the monotonic time its first frame
    left `recv()`: the reference for round trips.
    """

    kind = "audio"

    def __init__(self, channels: int = 2) -> None:
        super().__init__()
        self.channels = channels
        self._queue: list[tuple[int, np.ndarray]] = []
        self._buf = np.zeros(0, np.float32)
        self._pacer = Pacer(FRAME / RATE)
        self._pts = 0
        self._next_id = 0
        self.sent_at: dict[int, float] = {}
        self._current: int | None = None
        self.background: np.ndarray | None = None  # mixed under everything sent, looped (a car's cabin noise)
        self.room: RoomEcho | None = None  # the loudspeaker heard too: what came back, echoed

    def play(self, pcm: np.ndarray) -> int:
        """Queue audio; returns an id for `sent_at`."""
        ident = self._next_id
        self._next_id += 1
        self._queue.append((ident, np.asarray(pcm, np.float32)))
        return ident

    async def recv(self) -> av.AudioFrame:
        if self.readyState != "live":
            raise MediaStreamError
        await paced(self._pacer)
        if self._buf.size == 0 and self._queue:
            self._current, self._buf = self._queue.pop(0)
            self.sent_at[self._current] = time.monotonic()
        chunk = self._buf[:FRAME]
        self._buf = self._buf[FRAME:]
        pcm = np.zeros(FRAME, np.float32)
        pcm[: chunk.size] = chunk
        if self.background is not None and self.background.size:
            at = self._pts % self.background.size
            pcm += np.take(self.background, np.arange(at, at + FRAME), mode="wrap")
        if self.room is not None:
            pcm += self.room.echo(FRAME)
        s16 = (np.clip(pcm, -1, 1) * 32767).astype(np.int16)
        data = np.repeat(s16, self.channels).reshape(1, -1)
        frame = av.AudioFrame.from_ndarray(data, format="s16", layout="stereo" if self.channels == 2 else "mono")
        frame.sample_rate = RATE
        frame.pts = self._pts
        frame.time_base = Fraction(1, RATE)
        self._pts += FRAME
        return frame


class CameraTrack(MediaStreamTrack):
    """A synthetic camera: a moving pattern, or a still image, at `fps`."""

    kind = "video"

    def __init__(self, fps: float = 10, size: tuple[int, int] = (640, 480), image: np.ndarray | None = None):
        super().__init__()
        self.fps = fps
        self.size = size
        self.image = image
        self._n = 0
        self._pacer = Pacer(1 / fps)

    async def recv(self) -> av.VideoFrame:
        if self.readyState != "live":
            raise MediaStreamError
        await paced(self._pacer)
        if self.image is not None:
            img = self.image
        else:
            w, h = self.size
            img = np.zeros((h, w, 3), np.uint8)
            x = (self._n * 8) % w
            img[:, x : x + 16] = (255, 200, 0)
        frame = av.VideoFrame.from_ndarray(img, format="rgb24")
        frame.pts = int(self._n * 90_000 / self.fps)
        frame.time_base = Fraction(1, 90_000)
        self._n += 1
        return frame


@dataclass
class Received:
    """Audio that came back: one entry per 20 ms frame as it arrived."""

    times: list[float] = field(default_factory=list)
    frames: list[np.ndarray] = field(default_factory=list)  # float32 mono
    rate: int = RATE

    def audio(self) -> np.ndarray:
        return np.concatenate(self.frames) if self.frames else np.zeros(0, np.float32)

    def first_loud_after(self, t0: float, threshold: float = 0.1) -> float | None:
        """Arrival time of the first sample above `threshold` in frames that arrived after t0,
        corrected for its position inside the frame."""
        for i in range(bisect.bisect_left(self.times, t0), len(self.times)):
            f = self.frames[i]
            idx = np.flatnonzero(np.abs(f) > threshold)
            if idx.size:
                return self.times[i] - (f.size - idx[0]) / self.rate
        return None

    def quiet_from(self, t0: float, t1: float, threshold: float = 0.02) -> float | None:
        """Arrival time of the first frame after t0 from which every frame up to t1 is quiet: when the audio
        stopped for good (a cut reply) before t1; None if it was still sounding at t1."""
        lo, hi = bisect.bisect_right(self.times, t0), bisect.bisect_left(self.times, t1)
        stopped = None
        for i in range(lo, hi):
            if float(np.abs(self.frames[i]).max()) > threshold:
                stopped = None
            elif stopped is None:
                stopped = self.times[i]
        return stopped


class AgentClient:
    def __init__(
        self,
        url: str,
        profile: str = "default",
        video: MediaStreamTrack | None = None,
        jitter_buffer: bool = True,
        mic: Microphone | None = None,
        stock_receiver: bool = False,
    ) -> None:
        self.url = url
        self.jitter_buffer = jitter_buffer
        self.stock_receiver = stock_receiver  # aiortc's own receiver as any aiortc app has it: its jitter buffer
        self.target_lang: str | None = None
        self.token: str | None = None
        self.text_only = False  # ask for replies in text only
        self.echo_cancelled = False  # say the client cancels the agent's voice itself (the server then does not)
        self.relay: ImpairingRelay | None = None  # the network between: what it sends goes through this
        self.ice: dict[str, Any] | None = None  # the server's ICE servers and policy, as the page gets them (`/ice`)
        self.profile = profile
        self.mic: Any = mic if mic is not None else MicrophoneTrack()
        self.camera = video
        self.received = Received()
        self.messages: list[dict[str, Any]] = []
        self.message_times: list[float] = []
        self.pc: RTCPeerConnection | None = None
        self.ws: ClientConnection | None = None
        self.answer: dict[str, Any] = {}
        self._tasks: list[asyncio.Task[Any]] = []
        self._new_message = asyncio.Event()

    def fetch_ice(self) -> None:
        """The server's ICE servers and policy, read as the page reads them before it builds its peer."""
        base = self.url.replace("ws", "http", 1).rsplit("/", 1)[0]
        query = f"?token={urllib.parse.quote(self.token)}" if self.token else ""
        with urllib.request.urlopen(f"{base}/ice{query}", timeout=10) as reply:
            self.ice = json.load(reply)

    async def connect(self, timeout: float = 10.0) -> dict[str, Any]:
        self.ws = await connect(self.url, max_size=1 << 20)
        pc = RTCPeerConnection(page_configuration(self.ice) if self.ice else rtc_configuration(IceConfig()))
        self.pc = pc
        pc.addTrack(self.mic)
        if self.camera is not None:
            pc.addTrack(self.camera)
        pc.on("track", self._on_track)
        if not self.stock_receiver:
            tune_receivers(pc, self.jitter_buffer, channels=1)
        await pc.setLocalDescription(await pc.createOffer())  # gathers all candidates
        offer = {"type": "offer", "sdp": pc.localDescription.sdp, "profile": self.profile}
        if self.target_lang:
            offer["target_lang"] = self.target_lang
        if self.token is not None:
            offer["token"] = self.token
        if self.text_only:
            offer["text_only"] = True
        if self.echo_cancelled:
            offer["echo_cancelled"] = True
        await self.ws.send(json.dumps(offer))
        self._tasks.append(asyncio.create_task(self._read()))
        self.answer = await self.wait_for(lambda m: m["type"] in ("answer", "error"), timeout)
        if self.answer["type"] == "error":
            raise RuntimeError(f"server refused: {self.answer}")
        sdp = self.answer["sdp"] if self.relay is None else await self.relay.route(self.answer["sdp"])
        await pc.setRemoteDescription(RTCSessionDescription(sdp, "answer"))
        run = getattr(self.mic, "run", None)
        if run is not None:
            self._tasks.append(asyncio.create_task(run(pc, self._keep)))
        return self.answer

    def _on_track(self, track: MediaStreamTrack) -> None:
        if track.kind == "audio" and self.stock_receiver:
            self._tasks.append(asyncio.create_task(self._pull(track)))
        elif track.kind == "audio":
            assert self.pc is not None
            decoder = audio_decoder(self.pc, track)
            assert decoder is not None, "connect() tunes every audio receiver"
            decoder.sink = self._record  # straight from the decoder, no queue and task between

    def _record(self, frame: av.AudioFrame) -> None:
        self.received.rate = frame.sample_rate
        pcm = frame.to_ndarray().reshape(-1)  # decoded to mono: float, or int16 with the jitter buffer off
        self._keep(pcm * np.float32(1 / 32768) if pcm.dtype == np.int16 else pcm, time.monotonic())

    async def _pull(self, track: MediaStreamTrack) -> None:
        """Frames as an aiortc application reads them: `recv()`, after aiortc's jitter buffer and decoder."""
        with contextlib.suppress(MediaStreamError):
            while True:
                frame = await track.recv()
                self.received.rate = frame.sample_rate
                pcm = frame.to_ndarray().reshape(-1, len(frame.layout.channels)).mean(axis=1)
                self._keep(pcm.astype(np.float32) * np.float32(1 / 32768), time.monotonic())

    def _keep(self, mono: np.ndarray, at: float) -> None:
        """One frame that came back at `at` (monotonic), float32 mono at `received.rate`."""
        self.received.times.append(at)
        self.received.frames.append(mono)
        room = getattr(self.mic, "room", None)
        if room is not None:
            room.heard(mono)

    async def _read(self) -> None:
        assert self.ws is not None
        with contextlib.suppress(Exception):
            async for raw in self.ws:
                self.messages.append(json.loads(raw))
                self.message_times.append(time.monotonic())
                self._new_message.set()

    async def send(self, msg: dict[str, Any]) -> None:
        assert self.ws is not None
        await self.ws.send(json.dumps(msg))

    async def wait_for(self, pred: Any, timeout: float = 10.0, start: int = 0) -> dict[str, Any]:
        """The first message from index `start` on that satisfies `pred`."""
        deadline = time.monotonic() + timeout
        seen = start
        while True:
            for m in self.messages[seen:]:
                if pred(m):
                    return m
            seen = max(seen, len(self.messages))
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"no matching message within {timeout} s; got {self.messages[-5:]}")
            self._new_message.clear()
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._new_message.wait(), left)

    async def close(self, bye: bool = True) -> None:
        if self.ws is not None and bye:
            with contextlib.suppress(Exception):
                await self.send({"type": "bye"})
        for t in self._tasks:
            t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if self.pc is not None:
            await self.pc.close()
        if self.ws is not None:
            await self.ws.close()
        if self.relay is not None:
            self.relay.close()
