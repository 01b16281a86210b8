"""Media encoded once and replayed by clients (`agent/replay.py`): real codecs, a real server over loopback."""

from __future__ import annotations

import asyncio
import time

import av
import numpy as np
from aiortc.rtcrtpparameters import RTCRtpParameters
from aiortc.rtp import HeaderExtensionsMap, RtpPacket

from agent.client import RATE, AgentClient
from agent.replay import (
    FRAME,
    NTP_UNIX_OFFSET,
    ReplayCamera,
    ReplayMicrophone,
    encode_camera_loop,
    encode_opus,
    silence_packet,
)
from tests.support import make_config, running, wait_until, ws_url


def decode_opus(packets: list[bytes]) -> np.ndarray:
    codec = av.CodecContext.create("libopus", "r")
    codec.sample_rate, codec.layout, codec.format = RATE, "stereo", "s16"
    out = [f.to_ndarray().reshape(-1, 2)[:, 0] for p in packets for f in codec.decode(av.Packet(p))]
    return np.concatenate(out).astype(np.float32) / 32768


def test_opus_packets_are_20_ms_and_decode_to_the_clip():
    t = np.arange(RATE // 2) / RATE
    chirp = (0.5 * np.sin(2 * np.pi * (200 + 1800 * t) * t)).astype(np.float32)  # one alignment fits
    packets = encode_opus(chirp)
    decoded = decode_opus(packets)
    assert len(packets) >= chirp.size // FRAME and decoded.size == len(packets) * FRAME  # 20 ms each
    lag = int(np.argmax(np.correlate(decoded[:12_000], chirp[:10_000], "valid")))  # the encoder's look-ahead
    assert lag < FRAME
    match = np.corrcoef(decoded[lag : lag + 20_000], chirp[:20_000])[0, 1]
    print(f"look-ahead {lag} samples, correlation {match:.3f}")
    assert match > 0.95, match
    assert np.abs(decode_opus([silence_packet()] * 5)).max() < 1e-3


async def test_rtp_headers_carry_what_the_peer_negotiated():
    async with running(make_config("echo", "stream")) as server:
        client = AgentClient(
            ws_url(server), mic=ReplayMicrophone(silence_packet()), video=ReplayCamera(encode_camera_loop(1.0))
        )
        await client.connect()
        assert await wait_until(lambda: len(client.mic.streams) == 2, 10)
        for stream, transceiver in zip(client.mic.streams, client.pc.getTransceivers(), strict=True):
            extensions = HeaderExtensionsMap()
            extensions.configure(RTCRtpParameters(headerExtensions=transceiver._headerExtensions))
            raws = stream.packets_for([b"\x01" * 10, b"\x02" * 20], 960)
            first, second = (RtpPacket.parse(raw, extensions) for raw in raws)
            assert first.payload_type == transceiver._codecs[0].payloadType and first.ssrc == stream.ssrc
            assert second.sequence_number == (first.sequence_number + 1) % 65536
            assert (first.marker, second.marker) == (0, 1)  # the frame's last packet
            assert first.timestamp == second.timestamp and second.payload == b"\x02" * 20
            assert first.extensions.mid == transceiver.mid
            if transceiver.kind == "video":  # aiortc negotiates abs-send-time for video only
                now = int((time.time() + NTP_UNIX_OFFSET) * (1 << 18)) & 0xFFFFFF
                assert (now - first.extensions.abs_send_time) % (1 << 24) < 1 << 14  # within 1/16 s of now
        await client.close()


def test_camera_loop_starts_with_a_key_frame_every_3_s_and_decodes():
    frames = encode_camera_loop(seconds=6.0, fps=10)
    assert len(frames) == 60
    keys = [i for i, f in enumerate(frames) if f[0] & 1 == 0]  # VP8: bit 0 of the first byte clear = key frame
    assert keys == [0, 30]
    codec = av.CodecContext.create("libvpx", "r")
    images = [img for f in frames for img in codec.decode(av.Packet(f))]
    assert len(images) == 60 and (images[0].width, images[0].height) == (640, 480)


async def test_replaying_clients_are_heard_and_seen_by_the_server():
    """Packets go out unencoded; the server decodes the audio (the click comes back) and the video."""
    click = (0.8 * np.sin(np.arange(480) * 2 * np.pi * 1000 / RATE)).astype(np.float32)
    async with running(make_config("echo", "stream")) as server:
        client = AgentClient(
            ws_url(server), mic=ReplayMicrophone(silence_packet()), video=ReplayCamera(encode_camera_loop(3.0))
        )
        await client.connect()
        aligner = server.sessions[client.answer["session"]].pump.aligner
        assert await wait_until(lambda: aligner.stats.video_sampled >= 3, 20), "no replayed video was decoded"
        await asyncio.sleep(0.5)
        ident = client.mic.play(encode_opus(click))
        assert await wait_until(lambda: ident in client.mic.sent_at, 5)
        heard = None
        for _ in range(100):
            await asyncio.sleep(0.05)
            heard = client.received.first_loud_after(client.mic.sent_at[ident], threshold=0.1)
            if heard is not None:
                break
        # the media left below aiortc's senders: they sent nothing, the RtpStreams everything
        mic_stream, camera_stream = client.mic.streams
        assert mic_stream.packets > 50 and camera_stream.packets > 10
        # what came back was taken below aiortc's receiver, and decoded
        assert client.mic.inbound.packets > 50 and client.mic.inbound.undecodable == 0
        for sender in client.pc.getSenders():
            (outbound,) = [s for s in (await sender.getStats()).values() if s.type == "outbound-rtp"]
            assert outbound.packetsSent == 0
        # and arrived at the server's receivers as RTP like any other
        peer = server.sessions[client.answer["session"]].peer
        received = 0
        for receiver in peer.pc.getReceivers():
            stats = [s for s in (await receiver.getStats()).values() if s.type == "inbound-rtp"]
            received += sum(s.packetsReceived for s in stats)
        assert received >= mic_stream.packets + camera_stream.packets - 20  # a few still in flight
        await client.close()
    assert heard is not None, "the replayed click never came back"
    round_trip = (heard - client.mic.sent_at[ident]) * 1000
    print(f"replayed click round trip: {round_trip:.0f} ms; video frames sampled: {aligner.stats.video_sampled}")
    assert 0 < round_trip < 2000
