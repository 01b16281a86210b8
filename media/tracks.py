"""aiortc adapters on the receiving side: the inbound drains, the audio decoded on the loop, video decoding and
bandwidth estimates tuned.

Thin asyncio edges: what they hand on (decoded audio, frames to decode) goes to the pump, which owns the
aligner and the framer.
"""

from __future__ import annotations

import collections
import logging
import threading
from collections.abc import Callable
from typing import Any

import av
from aiortc import MediaStreamTrack, RTCPeerConnection, RTCRtpReceiver
from aiortc.codecs import get_decoder
from aiortc.codecs.base import Decoder
from aiortc.jitterbuffer import JitterBuffer, JitterFrame
from aiortc.mediastreams import MediaStreamError
from aiortc.rate import MIN_FRAME_PERIOD_HISTORY_LENGTH
from aiortc.rtcrtpparameters import RTCRtpCodecParameters
from aiortc.rtp import RtpPacket
from aiortc.utils import uint16_gt

from media.video_decoding import IdleVideoDecoder

log = logging.getLogger(__name__)


async def drain(track: MediaStreamTrack, on_frame: Callable[[av.frame.Frame], None]) -> None:
    """Read a remote track until it ends. Always drain every track: an unread
    aiortc track buffers without bound (about 13 MB/s for 640x480 video)."""
    while True:
        try:
            frame = await track.recv()
        except MediaStreamError:
            return
        on_frame(frame)


class ImmediateAudioBuffer(JitterBuffer):
    """An audio "jitter buffer" that releases each packet as it arrives.

    aiortc's buffer completes a frame only when a packet with the next
    timestamp arrives, so even prefetch 1 costs 20 ms. An Opus packet is a
    whole frame, so waiting buys nothing here: reordering and loss are dealt
    with downstream, by pts, in the FrameAligner. Packets older than the last
    one released (late or duplicated) are dropped and counted.
    """

    def __init__(self) -> None:
        super().__init__(capacity=16)
        self._last: int | None = None
        self.late = 0

    def add(self, packet: RtpPacket) -> tuple[bool, JitterFrame | None]:
        seq = packet.sequence_number
        if self._last is not None and not uint16_gt(seq, self._last):
            self.late += 1
            return False, None
        self._last = seq
        return False, JitterFrame(data=packet._data, timestamp=packet.timestamp)  # type: ignore[attr-defined]


class InlineAudioDecoder:
    """Decodes inbound audio on the event loop, standing in for the queue that
    feeds aiortc's per-receiver decoder thread.

    A 20 ms Opus packet decodes in ~0.04 ms (to mono: the aligner downmixes
    anyway); handing it to that thread and the frame back through
    `run_coroutine_threadsafe` cost ~0.12 ms more, 50 times a second a session
    (EPYC). With a `sink` each frame goes straight to it, not through the
    track's queue and a task that drains it. aiortc's thread still starts, reads
    from here and idles until the receiver stops; then it ends the track as
    before. Video is decoded in a process of its own (`media.video_decoding`).
    """

    def __init__(self, receiver: RTCRtpReceiver, channels: int = 2) -> None:
        self._receiver = receiver  # its track (and the track's queue) comes with the remote description
        self._channels = channels
        self._stopped = threading.Event()
        self._decoder: Decoder | None = None
        self._codec: str | None = None
        self.sink: Callable[[av.AudioFrame], None] | None = None
        self.errors = 0

    def _decoder_for(self, codec: RTCRtpCodecParameters) -> Decoder:
        decoder = get_decoder(codec)
        if codec.name.lower() == "opus" and self._channels == 1:
            decoder.codec.layout = "mono"  # type: ignore[attr-defined]
        return decoder

    def put(self, task: tuple[RTCRtpCodecParameters, JitterFrame] | None) -> None:
        if task is None:
            self._stopped.set()
            return
        codec, encoded = task
        if self._decoder is None or codec.name != self._codec:
            self._decoder, self._codec = self._decoder_for(codec), codec.name
        try:
            frames = self._decoder.decode(encoded)
        except av.FFmpegError as exc:
            self.errors += 1
            log.debug("an inbound %s packet did not decode: %s", codec.name, exc)
            return
        for frame in frames:
            if self.sink is not None:
                self.sink(frame)
            else:
                self._receiver.track._queue.put_nowait(frame)  # type: ignore[attr-defined]

    def get(self) -> None:
        """aiortc's decoder thread: wait for the stop, then end the track."""
        self._stopped.wait()


class WindowRate:
    """aiortc's `RateCounter` (the bytes received in the last `window` ms, as a rate) in O(1) a packet.

    aiortc's keeps a list of 1 ms buckets: each packet walks the buckets of
    every millisecond since the last one to clear them, and each reset builds
    1,000 bucket objects; its video bandwidth estimator (REMB) calls it for
    every video packet, ~10 % of the event loop at a dozen webcam sessions.
    Here the window is a queue of (ms, bytes); the figures are the same.
    """

    def __init__(self, window_size: int, scale: int = 8000) -> None:
        self._window = window_size
        self._scale = scale
        self.reset()

    def reset(self) -> None:
        self._added: collections.deque[tuple[int, int]] = collections.deque()
        self._origin_ms: int | None = None
        self._count = 0
        self._total = 0

    def add(self, value: int, now_ms: int) -> None:
        if self._origin_ms is None:
            self._origin_ms = now_ms
        else:
            self._erase_old(now_ms)
        self._added.append((now_ms, value))
        self._count += 1
        self._total += value

    def rate(self, now_ms: int) -> int | None:
        if self._origin_ms is not None:
            self._erase_old(now_ms)
            active = now_ms - self._origin_ms + 1
            if self._count > 0 and active > 1:
                return round(self._scale * self._total / active)
        return None

    def _erase_old(self, now_ms: int) -> None:
        assert self._origin_ms is not None
        origin = now_ms - self._window + 1
        if self._origin_ms < origin:
            while self._added and self._added[0][0] < origin:
                _, value = self._added.popleft()
                self._count -= 1
                self._total -= value
            self._origin_ms = origin


class MinFramePeriod:
    """aiortc's `OveruseEstimator.update_min_frame_period` (the least of the last 60 group time deltas), the
    minimum taken in C: aiortc's walks its history list in Python for every packet group, ~3 % of the loop
    at 30 webcam sessions on one core. Same figures."""

    def __init__(self, history: int = MIN_FRAME_PERIOD_HISTORY_LENGTH) -> None:
        self._history: collections.deque[float] = collections.deque(maxlen=history - 1)

    def __call__(self, ts_delta: float) -> float:
        least = min(self._history, default=ts_delta)
        self._history.append(ts_delta)
        return min(least, ts_delta)


class ThrottledRemb:
    """aiortc's video bandwidth estimator, whose estimates go out as REMB at most every 200 ms unless one
    falls by more than 3 % (libwebrtc's REMB throttler does the same).

    While aiortc's estimator judges the link overused it returns an estimate
    for every packet, and its receiver sends each as an RTCP packet: one per
    video packet (~4 % of the event loop's samples at 14 webcam sessions on
    one core, just when the server is busiest), RTCP the browser does not
    need.
    """

    INTERVAL_MS = 200
    FALL_PERCENT = 3

    def __init__(self, estimator: Any) -> None:
        self.estimator = estimator
        self._last_ms: int | None = None
        self._last_bitrate = 0
        self.held = 0  # estimates not sent

    def add(self, arrival_time_ms: int, abs_send_time: int, payload_size: int, ssrc: int) -> Any:
        remb = self.estimator.add(
            arrival_time_ms=arrival_time_ms, abs_send_time=abs_send_time, payload_size=payload_size, ssrc=ssrc
        )
        if remb is None:
            return None
        bitrate = remb[0]
        fell = bitrate * (100 + self.FALL_PERCENT) < self._last_bitrate * 100
        if self._last_ms is not None and arrival_time_ms - self._last_ms < self.INTERVAL_MS and not fell:
            self.held += 1
            return None
        self._last_ms, self._last_bitrate = arrival_time_ms, bitrate
        return remb


def tune_receivers(pc: RTCPeerConnection, prefetch: int, channels: int = 2, video_every_s: float = 0.0) -> None:
    """Swap aiortc's audio jitter buffer and decoder thread for ours; decode video in a process on idle CPU
    (IdleVideoDecoder: a picture back at most every `video_every_s`), count
    its bandwidth estimator's incoming rate in O(1) (WindowRate), take its frame-period minimum in C
    (MinFramePeriod) and send its estimates throttled (ThrottledRemb).

    aiortc releases an inbound audio packet only once `prefetch` (4) more have
    arrived: +80 ms on every receiving side (the echo click round trip was
    ~276 ms with it). On loopback and LANs far less is needed: 0 releases every
    packet at once (see ImmediateAudioBuffer), n > 0 keeps aiortc's buffer with
    that prefetch. Decoding moves onto the loop (InlineAudioDecoder), to
    `channels` (1: mono, for a peer that downmixes anyway). aiortc
    has no option for either, so both are swapped after the transceivers exist
    and before the receiver starts (its thread takes the queue at start).
    """
    for t in pc.getTransceivers():
        r = t.receiver
        if t.kind == "audio":
            buf = ImmediateAudioBuffer() if prefetch == 0 else JitterBuffer(capacity=16, prefetch=prefetch)
            r._RTCRtpReceiver__jitter_buffer = buf
            r._RTCRtpReceiver__decoder_queue = InlineAudioDecoder(r, channels)
        elif t.kind == "video":
            r._RTCRtpReceiver__decoder_queue = IdleVideoDecoder(r, r._RTCRtpReceiver__decoder_error, video_every_s)
            estimator = r._RTCRtpReceiver__remote_bitrate_estimator
            if estimator is not None:
                estimator.incoming_bitrate = WindowRate(1000, 8000)  # what aiortc's builds
                estimator.estimator.update_min_frame_period = MinFramePeriod()
                r._RTCRtpReceiver__remote_bitrate_estimator = ThrottledRemb(estimator)


def audio_decoder(pc: RTCPeerConnection, track: MediaStreamTrack) -> InlineAudioDecoder | None:
    """The inline decoder feeding `track`, if its receiver was tuned."""
    for t in pc.getTransceivers():
        if t.receiver.track is track and isinstance(t.receiver._RTCRtpReceiver__decoder_queue, InlineAudioDecoder):
            return t.receiver._RTCRtpReceiver__decoder_queue
    return None


def inbound_counters(pc: RTCPeerConnection) -> dict[str, int]:
    """What the swapped receivers dropped: late or duplicated audio packets, audio packets that did not
    decode; video frames decoded, shed undecoded, that did not decode."""
    names = ("audio_late_packets", "audio_undecodable_packets", "video_frames_decoded", "video_frames_shed")
    out = dict.fromkeys((*names, "video_undecodable_frames"), 0)
    for t in pc.getTransceivers():
        queue_ = t.receiver._RTCRtpReceiver__decoder_queue
        if isinstance(queue_, InlineAudioDecoder):
            out["audio_late_packets"] += getattr(t.receiver._RTCRtpReceiver__jitter_buffer, "late", 0)
            out["audio_undecodable_packets"] += queue_.errors
        elif isinstance(queue_, IdleVideoDecoder):
            out["video_frames_decoded"] += queue_.decoded
            out["video_frames_shed"] += queue_.shed
            out["video_undecodable_frames"] += queue_.errors
    return out
