"""aiortc track adapters: the outbound speech track and the inbound drains.

Thin asyncio edges around the sans-I/O framer and aligner.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from fractions import Fraction

import av
from aiortc import MediaStreamTrack, RTCPeerConnection
from aiortc.jitterbuffer import JitterBuffer, JitterFrame
from aiortc.mediastreams import MediaStreamError
from aiortc.rtp import RtpPacket
from aiortc.utils import uint16_gt

from media.framer import OutputFramer


class OutboundAudioTrack(MediaStreamTrack):
    """Speech to the peer, one 20 ms frame per 20 ms, paced by the clock.

    aiortc's sender calls `recv()` back to back, so the track sleeps until
    each frame is due. The frame is taken from the framer only after the
    sleep, so speech that arrived meanwhile makes this very packet. If the
    loop stalled for longer than `max_lag` the schedule is moved rather than
    bursting out the backlog (the pts still runs on without a jump).
    """

    kind = "audio"

    def __init__(self, framer: OutputFramer, clock: Callable[[], float] = time.monotonic, max_lag: float = 0.1):
        super().__init__()
        self.framer = framer
        self._clock = clock
        self._start: float | None = None
        self._max_lag = max_lag
        self._time_base = Fraction(1, framer.rate)
        self.late_resets = 0

    async def recv(self) -> av.AudioFrame:
        if self.readyState != "live":
            raise MediaStreamError
        now = self._clock()
        if self._start is None:
            self._start = now
        due = self._start + self.framer.pts / self.framer.rate
        if due > now:
            await asyncio.sleep(due - now)
        elif now - due > self._max_lag:
            self._start = now - self.framer.pts / self.framer.rate
            self.late_resets += 1
        out = self.framer.pull()
        frame = av.AudioFrame.from_ndarray(out.samples.reshape(1, -1), format="s16", layout="mono")
        frame.sample_rate = out.rate
        frame.pts = out.pts
        frame.time_base = self._time_base
        return frame


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


def tune_jitter_buffers(pc: RTCPeerConnection, prefetch: int) -> None:
    """aiortc releases an inbound audio packet only once `prefetch` (4) more
    have arrived: +80 ms on every receiving side (the echo click round trip
    was ~276 ms with it). On loopback and LANs far less is needed: 0 releases
    every packet at once (see ImmediateAudioBuffer), n > 0 keeps aiortc's
    buffer with that prefetch. aiortc has no option for it, so the buffer is
    swapped after the transceivers exist and before any packet arrives."""
    for t in pc.getTransceivers():
        if t.kind == "audio":
            buf = ImmediateAudioBuffer() if prefetch == 0 else JitterBuffer(capacity=16, prefetch=prefetch)
            t.receiver._RTCRtpReceiver__jitter_buffer = buf
