"""Every private part of aiortc and aioice this project reads or writes, checked when it is imported.

aiortc has no option for what `media/rtc/` changes (an audio jitter buffer that releases each packet, the
decoder on the loop, RTP written below its sender, SRTP read below its DTLS transport's task), so those
modules reach its private attributes; they do it only through the functions here. At import each name in
`REQUIRED` is looked up (a method or class attribute on the class, an instance attribute among the
assignments in the class's source), and a missing one stops the process at start with its name and the
aiortc version, not a session later with an AttributeError. An aiortc upgrade is then a run of the tests,
and the message says which name moved. What would be welcome upstream: `docs/aiortc-upstream.md`.
"""

from __future__ import annotations

import ast
import asyncio
import inspect
import socket
import textwrap
from importlib.metadata import version
from typing import Any

import aioice.ice
from aiortc import RTCDtlsTransport, RTCIceTransport, RTCRtpReceiver, RTCRtpSender, RTCRtpTransceiver
from aiortc.codecs.vpx import Vp8Encoder
from aiortc.rtcdtlstransport import State as DtlsState
from aiortc.rtcrtpreceiver import RemoteStreamTrack
from aiortc.rtp import RtpPacket

# (class, attribute as Python stores it: name-mangled for a double underscore)
REQUIRED: list[tuple[type, str]] = [
    (RTCRtpReceiver, "_RTCRtpReceiver__jitter_buffer"),
    (RTCRtpReceiver, "_RTCRtpReceiver__decoder_queue"),
    (RTCRtpReceiver, "_RTCRtpReceiver__decoder_error"),
    (RTCRtpReceiver, "_RTCRtpReceiver__remote_bitrate_estimator"),
    (RTCRtpSender, "_ssrc"),
    (RTCRtpSender, "_RTCRtpSender__packet_count"),
    (RTCRtpSender, "_RTCRtpSender__octet_count"),
    (RTCRtpSender, "_RTCRtpSender__rtp_timestamp"),
    (RTCRtpSender, "_RTCRtpSender__ntp_timestamp"),
    (RTCRtpTransceiver, "_codecs"),
    (RTCRtpTransceiver, "_headerExtensions"),
    (RTCDtlsTransport, "_state"),
    (RTCDtlsTransport, "_tx_srtp"),
    (RTCDtlsTransport, "_rx_srtp"),
    (RTCDtlsTransport, "_RTCDtlsTransport__rx_bytes"),
    (RTCDtlsTransport, "_RTCDtlsTransport__rx_packets"),
    (RTCDtlsTransport, "_handle_rtp_data"),
    (RTCDtlsTransport, "_handle_rtcp_data"),
    (RTCIceTransport, "_connection"),
    (aioice.ice.Connection, "_nominated"),
    (RemoteStreamTrack, "_queue"),
    (RTCRtpReceiver, "_data"),  # set on each RtpPacket by the receiver: its depacketized payload
    (Vp8Encoder, "_packetize"),
    (asyncio.selector_events._SelectorTransport, "_sock"),  # aioice's datagram transport
    (asyncio.selector_events.BaseSelectorEventLoop, "_remove_reader"),
]


class AiortcChanged(ImportError):
    """aiortc (or aioice) no longer has a private part `media/rtc/` needs."""


def _assigned(cls: type) -> set[str]:
    """Attributes a class (or a base) assigns in its source, on itself or on what it handles, as Python
    stores them."""
    names: set[str] = set()
    for klass in cls.__mro__:
        if klass is object or klass.__module__ == "builtins":
            continue
        try:
            tree = ast.parse(textwrap.dedent(inspect.getsource(klass)))
        except (OSError, TypeError):
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
                private = node.attr.startswith("__") and not node.attr.endswith("__")
                names.add(f"_{klass.__name__.lstrip('_')}{node.attr}" if private else node.attr)
    return names


def missing(required: list[tuple[type, str]]) -> list[str]:
    """Each required part that is not there, as "module.Class.attribute"."""
    gone = []
    for cls, name in required:
        if not hasattr(cls, name) and name not in _assigned(cls):
            gone.append(f"{cls.__module__}.{cls.__qualname__}.{name}")
    return gone


def check(required: list[tuple[type, str]] = REQUIRED) -> None:
    gone = missing(required)
    if gone:
        raise AiortcChanged(
            f"aiortc {version('aiortc')} (aioice {version('aioice')}) lacks what media/rtc/ needs: "
            f"{', '.join(gone)}; this project is tested with the versions pinned in pyproject.toml"
        )


check()


# ---- the receiver: its jitter buffer, decoder queue and bandwidth estimator, swapped before it starts


def jitter_buffer(receiver: RTCRtpReceiver) -> Any:
    return receiver._RTCRtpReceiver__jitter_buffer  # type: ignore[attr-defined]


def set_jitter_buffer(receiver: RTCRtpReceiver, buffer: Any) -> None:
    receiver._RTCRtpReceiver__jitter_buffer = buffer  # type: ignore[attr-defined]


def decoder_queue(receiver: RTCRtpReceiver) -> Any:
    return receiver._RTCRtpReceiver__decoder_queue  # type: ignore[attr-defined]


def set_decoder_queue(receiver: RTCRtpReceiver, queue: Any) -> None:
    receiver._RTCRtpReceiver__decoder_queue = queue  # type: ignore[attr-defined]


def decoder_error(receiver: RTCRtpReceiver) -> Any:
    """The receiver's callback for a decoder that failed (it asks the peer for a key frame)."""
    return receiver._RTCRtpReceiver__decoder_error  # type: ignore[attr-defined]


def bitrate_estimator(receiver: RTCRtpReceiver) -> Any:
    return receiver._RTCRtpReceiver__remote_bitrate_estimator  # type: ignore[attr-defined]


def set_bitrate_estimator(receiver: RTCRtpReceiver, estimator: Any) -> None:
    receiver._RTCRtpReceiver__remote_bitrate_estimator = estimator  # type: ignore[attr-defined]


def deliver(track: Any, frame: Any) -> None:
    """A decoded frame to a remote track, as aiortc's decoder thread would hand it."""
    track._queue.put_nowait(frame)


def payload(packet: RtpPacket) -> bytes:
    """An RTP packet's payload as the receiver depacketized it, before its jitter buffer."""
    return packet._data  # type: ignore[attr-defined,no-any-return]


# ---- the sender and the transceiver: what RTP written below the sender needs, and its reports


def ssrc(sender: RTCRtpSender) -> int:
    return sender._ssrc  # type: ignore[attr-defined,no-any-return]


def payload_type(transceiver: RTCRtpTransceiver) -> int:
    """The negotiated payload type of the transceiver's first codec."""
    return transceiver._codecs[0].payloadType  # type: ignore[attr-defined,no-any-return]


def header_extension_ids(transceiver: RTCRtpTransceiver) -> dict[str, int]:
    return {e.uri: e.id for e in transceiver._headerExtensions}  # type: ignore[attr-defined]


def report_sent(sender: RTCRtpSender, packets: int, octets: int, rtp_timestamp: int, ntp_timestamp: int) -> None:
    """What the sender's RTCP sender reports and stats say, as if it had sent these packets."""
    sender._RTCRtpSender__packet_count = packets  # type: ignore[attr-defined]
    sender._RTCRtpSender__octet_count = octets  # type: ignore[attr-defined]
    sender._RTCRtpSender__rtp_timestamp = rtp_timestamp  # type: ignore[attr-defined]
    sender._RTCRtpSender__ntp_timestamp = ntp_timestamp  # type: ignore[attr-defined]


def vp8_payloads(frame: bytes, picture_id: int) -> list[bytes]:
    """An encoded VP8 frame cut into RTP payloads, as aiortc's encoder cuts them."""
    return Vp8Encoder._packetize(frame, picture_id)  # type: ignore[attr-defined,no-any-return]


# ---- the DTLS transport: its state, its SRTP sessions, its receive handlers and counts


def dtls_connected(dtls: RTCDtlsTransport) -> bool:
    return dtls._state is DtlsState.CONNECTED  # type: ignore[attr-defined]


def srtp_out(dtls: RTCDtlsTransport) -> Any:
    """The session that protects what we send (there once DTLS is connected)."""
    return dtls._tx_srtp  # type: ignore[attr-defined]


def srtp_in(dtls: RTCDtlsTransport) -> Any:
    """The session that unprotects what the peer sends."""
    return dtls._rx_srtp  # type: ignore[attr-defined]


def count_received(dtls: RTCDtlsTransport, datagram: bytes) -> None:
    """Counted in the transport's stats, as its own receive task counts a datagram."""
    dtls._RTCDtlsTransport__rx_bytes += len(datagram)  # type: ignore[attr-defined]
    dtls._RTCDtlsTransport__rx_packets += 1  # type: ignore[attr-defined]


def handle_rtp(dtls: RTCDtlsTransport, packet: bytes, arrival_time_ms: int) -> Any:
    """The transport's handler for unprotected RTP (a coroutine)."""
    return dtls._handle_rtp_data(packet, arrival_time_ms=arrival_time_ms)  # type: ignore[attr-defined]


def handle_rtcp(dtls: RTCDtlsTransport, packet: bytes) -> Any:
    """The transport's handler for unprotected RTCP (a coroutine)."""
    return dtls._handle_rtcp_data(packet)  # type: ignore[attr-defined]


def nominated(dtls: RTCDtlsTransport) -> Any:
    """The ICE candidate pair the media goes over (None before ICE has chosen one)."""
    return dtls.transport._connection._nominated.get(1)  # type: ignore[attr-defined]


# ---- the socket under aioice's datagram transport, read directly by the load generator


def udp_socket(transport: asyncio.DatagramTransport) -> socket.socket:
    return transport._sock  # type: ignore[attr-defined,no-any-return]


def stop_watching(loop: asyncio.AbstractEventLoop, fd: int) -> None:
    """The loop no longer reads `fd`; something else does."""
    loop._remove_reader(fd)  # type: ignore[attr-defined]
