"""The inbound audio's jitter buffer, in place of aiortc's (which holds every packet for the next)."""

from __future__ import annotations

from aiortc.jitterbuffer import JitterBuffer, JitterFrame
from aiortc.rtp import RtpPacket
from aiortc.utils import uint16_gt

from media.rtc.private import payload


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
        return False, JitterFrame(data=payload(packet), timestamp=packet.timestamp)
