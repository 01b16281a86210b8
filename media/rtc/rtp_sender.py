"""RTP written below aiortc's RTCRtpSender: the server's speech and the load generator's media.

aiortc's sender costs ~0.3 ms of Python a packet on the slow EPYC (an
RtpPacket object, its header extensions through `datetime`, a task hop per
frame, four layers of coroutines down to the socket); here a header is one
`struct.pack` and the DTLS transport's SRTP session protects it. aiortc's
sender stays for what it negotiates and for RTCP: a `PlaceholderTrack` keeps
its RTP loop idle, and `report_to` gives its sender reports our counts.
"""

from __future__ import annotations

import asyncio
import random
import struct
import time
from collections.abc import Callable
from typing import Any

import av
from aiortc import MediaStreamTrack, RTCRtpTransceiver
from aiortc.mediastreams import MediaStreamError

from media.rtc import private

NTP_UNIX_OFFSET = 2_208_988_800  # seconds from 1900 (NTP) to 1970 (Unix)
MID = "urn:ietf:params:rtp-hdrext:sdes:mid"
ABS_SEND_TIME = "http://www.webrtc.org/experiments/rtp-hdrext/abs-send-time"
pack_header = struct.Struct("!BBHII").pack  # RFC 3550: V/P/X/CC, M/PT, sequence, timestamp, SSRC


class RtpStream:
    """One outgoing RTP stream of a transceiver, as a browser writes it: the negotiated payload type and
    SSRC, the MID and abs-send-time extensions (a bandwidth estimator reads the latter), the marker on a
    frame's last packet."""

    def __init__(self, transceiver: RTCRtpTransceiver) -> None:
        sender = transceiver.sender
        self.dtls = sender.transport
        self.ssrc = private.ssrc(sender)
        self.payload_type = private.payload_type(transceiver)
        ids = private.header_extension_ids(transceiver)
        mid = (transceiver.mid or "").encode()
        self._fixed = bytes([(ids[MID] << 4) | (len(mid) - 1)]) + mid if MID in ids and mid else b""
        self._abs_id = ids.get(ABS_SEND_TIME)
        self._constant: bytes | None = None
        self._protect: Callable[[bytes], bytes] | None = None
        self.sequence = random.randrange(1 << 16)
        self._timestamp_origin = random.randrange(1 << 32)
        self.packets = 0
        self.octets = 0  # payload bytes, as RTCP counts them
        self.last_timestamp = 0
        self.last_sent = 0.0  # wall clock

    def _extensions(self) -> bytes:
        body = self._fixed
        if self._abs_id is not None:  # 6.18 fixed-point seconds, 24 bits
            when = int((time.time() + NTP_UNIX_OFFSET) * (1 << 18)) & 0xFFFFFF
            body += bytes([(self._abs_id << 4) | 2]) + when.to_bytes(3, "big")
        elif self._constant is not None:
            return self._constant
        if body:
            body += bytes(-len(body) % 4)
            body = struct.pack("!HH", 0xBEDE, len(body) // 4) + body  # RFC 8285, one-byte form
        if self._abs_id is None:
            self._constant = body  # the same for every packet
        return body

    def packet(self, payload: bytes, marker: bool, timestamp: int) -> bytes:
        """The next RTP packet, stamped (abs-send-time) now; `timestamp` in the codec's clock from the
        stream's start."""
        extensions = self._extensions()
        first = 0x90 if extensions else 0x80  # version 2, extension bit
        stamp = (self._timestamp_origin + timestamp) & 0xFFFFFFFF
        header = pack_header(first, (0x80 if marker else 0) | self.payload_type, self.sequence, stamp, self.ssrc)
        self.sequence = (self.sequence + 1) & 0xFFFF
        return header + extensions + payload

    def protected(self, payload: bytes, marker: bool, timestamp: int) -> bytes:
        """The next packet as SRTP, counted as sent."""
        if self._protect is None:  # the DTLS transport's session, there once it is connected
            self._protect = private.srtp_out(self.dtls).protect
        datagram = self._protect(self.packet(payload, marker, timestamp))
        self.packets += 1
        self.octets += len(payload)
        self.last_timestamp = (self._timestamp_origin + timestamp) & 0xFFFFFFFF
        return datagram

    def report_to(self, sender: Any) -> None:
        """What aiortc's sender reports (RTCP SR, its stats) as if it had sent our packets."""
        ntp = int((time.time() + NTP_UNIX_OFFSET) * (1 << 32))
        private.report_sent(sender, self.packets, self.octets, self.last_timestamp, ntp)


def connected(dtls: Any) -> bool:
    return private.dtls_connected(dtls)


def rtp_or_rtcp(data: bytes) -> bool:
    """RTP or RTCP, not STUN or DTLS, by the first byte (RFC 7983)."""
    return len(data) > 12 and 127 < data[0] < 192


def is_rtcp(data: bytes) -> bool:
    """Of RTP and RTCP, RTCP by its packet type (RFC 5761: 192-223); the one test for both ends."""
    return len(data) >= 2 and 191 < data[1] < 224


def nominated_pair(dtls: Any) -> Any:
    """The ICE candidate pair the media goes over, its socket open; ConnectionError once the peer has closed
    (or before DTLS is up)."""
    pair = private.nominated(dtls)
    if not connected(dtls) or pair is None or pair.protocol.transport is None:
        raise ConnectionError("the peer has closed")
    return pair


def ice_route(dtls: Any) -> tuple[Any, Any]:
    """The nominated ICE pair's datagram transport and the peer's address; ConnectionError once closed."""
    pair = nominated_pair(dtls)
    return pair.protocol.transport, pair.remote_addr


class PlaceholderTrack(MediaStreamTrack):
    """A track that gives aiortc's sender nothing (the media leaves through an RtpStream) until it stops.

    `on_sending` is called when aiortc's sender first asks for media: the
    transport is up and the sender started, the moment it would have sent.
    """

    def __init__(self, kind: str | None = None, on_sending: Callable[[], None] | None = None) -> None:
        super().__init__()
        if kind is not None:
            self.kind = kind
        self._on_sending = on_sending
        self._stopped = asyncio.Event()

    def stop(self) -> None:
        super().stop()
        self._stopped.set()

    async def recv(self) -> av.Packet:
        if self._on_sending is not None and self.readyState == "live":
            self._on_sending, on_sending = None, self._on_sending
            on_sending()
        await self._stopped.wait()
        raise MediaStreamError
