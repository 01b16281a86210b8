"""The inbound audio's jitter buffer, in place of aiortc's (which holds every packet for the next): packets
passed on with their sequence numbers to the adaptive buffer (media.jitter), or, with it off, each released as it
arrives."""

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
        self.packets = 0
        self.late = 0

    def add(self, packet: RtpPacket) -> tuple[bool, JitterFrame | None]:
        seq = packet.sequence_number
        self.packets += 1
        if self._last is not None and not uint16_gt(seq, self._last):
            self.late += 1
            return False, None
        self._last = seq
        return False, JitterFrame(data=payload(packet), timestamp=packet.timestamp)


class SequencedFrame(JitterFrame):
    """A packet's payload with its sequence number, for the decoder's side to order (media.jitter)."""

    def __init__(self, data: bytes, timestamp: int, sequence: int) -> None:
        super().__init__(data, timestamp)
        self.sequence = sequence


class PassingAudioBuffer(JitterBuffer):
    """aiortc's receiver hands every audio packet on at once, with its sequence number: the adaptive buffer is
    on the decoder's side (`receiver.InlineAudioDecoder`), which has a timer to give a lost packet up."""

    def __init__(self) -> None:
        super().__init__(capacity=16)

    def add(self, packet: RtpPacket) -> tuple[bool, JitterFrame | None]:
        return False, SequencedFrame(payload(packet), packet.timestamp, packet.sequence_number)
