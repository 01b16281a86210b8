"""RTP written below aiortc's sender parses as aiortc's own receiver parses RTP: the negotiated payload type and
SSRC, a sequence that counts on, the codec clock from the stream's origin, the marker, the MID and abs-send-time
extensions."""

from aiortc import RTCPeerConnection
from aiortc.rtcrtpparameters import RTCRtpHeaderExtensionParameters, RTCRtpParameters
from aiortc.rtp import HeaderExtensionsMap, RtpPacket

from media.rtc import private
from media.rtc.rtp_sender import ABS_SEND_TIME, MID, RtpStream, is_rtcp, rtp_or_rtcp


async def negotiated():
    caller, callee = RTCPeerConnection(), RTCPeerConnection()
    caller.addTransceiver("audio", direction="sendrecv")
    caller.addTransceiver("video", direction="sendonly")
    await caller.setLocalDescription(await caller.createOffer())
    await callee.setRemoteDescription(caller.localDescription)
    await callee.setLocalDescription(await callee.createAnswer())
    await caller.setRemoteDescription(callee.localDescription)
    return caller, callee


def extension_map(ids: dict[str, int]) -> HeaderExtensionsMap:
    """As aiortc's receiver reads the negotiated extensions."""
    extensions = HeaderExtensionsMap()
    extensions.configure(
        RTCRtpParameters(headerExtensions=[RTCRtpHeaderExtensionParameters(id=i, uri=u) for u, i in ids.items()])
    )
    return extensions


async def test_packets_parse_as_the_negotiated_stream():
    caller, callee = await negotiated()
    try:
        transceiver, video = caller.getTransceivers()
        stream = RtpStream(transceiver)
        ids = private.header_extension_ids(transceiver)
        extensions = extension_map(ids)
        first = RtpPacket.parse(stream.packet(b"\x01\x02", True, 0), extensions)
        second = RtpPacket.parse(stream.packet(b"\x03", False, 960), extensions)
        assert first.payload_type == private.payload_type(transceiver) == second.payload_type
        assert first.ssrc == private.ssrc(transceiver.sender) == second.ssrc
        assert second.sequence_number == (first.sequence_number + 1) & 0xFFFF
        assert (second.timestamp - first.timestamp) & 0xFFFFFFFF == 960
        assert first.marker == 1 and second.marker == 0
        assert first.payload == b"\x01\x02" and second.payload == b"\x03"
        assert first.extensions.mid == transceiver.mid
        assert MID in ids and first.extensions.abs_send_time is None  # aiortc's audio has no abs-send-time
        # video carries abs-send-time, which the receiver's bandwidth estimator reads
        ids = private.header_extension_ids(video)
        extensions = extension_map(ids)
        frame = RtpPacket.parse(RtpStream(video).packet(b"\x10", True, 9000), extensions)
        assert ABS_SEND_TIME in ids and frame.extensions.abs_send_time is not None
        assert frame.extensions.mid == video.mid and frame.payload_type == private.payload_type(video)
        rtp = stream.packet(b"\x00", False, 0)
        assert rtp_or_rtcp(rtp) and not is_rtcp(rtp)
        assert not rtp_or_rtcp(b"\x00\x01" + bytes(20))  # STUN's first byte
        for kind in (200, 201, 205, 206):  # sender and receiver reports, transport and payload feedback
            rtcp = bytes([0x81, kind]) + bytes(14)
            assert rtp_or_rtcp(rtcp) and is_rtcp(rtcp)
    finally:
        await caller.close()
        await callee.close()
