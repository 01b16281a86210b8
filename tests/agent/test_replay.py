"""Media encoded once and replayed by clients (`agent/replay.py`): real codecs, a real server over loopback."""

from __future__ import annotations

import asyncio
import socket
import time

import av
import numpy as np
import pytest
from aiortc.codecs.vpx import Vp8Encoder
from aiortc.rtcrtpparameters import RTCRtpParameters
from aiortc.rtp import HeaderExtensionsMap, RtpPacket

from agent.client import RATE, AgentClient
from agent.replay import (
    FRAME,
    LeanAudioIn,
    ReplayCamera,
    ReplayMicrophone,
    Ticker,
    VideoPacing,
    encode_camera_loop,
    encode_opus,
    silence_packet,
)
from benchmarks.harness import make_config, running, wait_until, ws_url
from media.opus import SpeechEncoder
from media.rtc.rtp_sender import NTP_UNIX_OFFSET


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
            raws = [stream.packet(b"\x01" * 10, False, 960), stream.packet(b"\x02" * 20, True, 960)]
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


def test_camera_loop_is_a_webcam_stream_with_one_key_frame_that_cameras_restart_at_their_own_length():
    frames = encode_camera_loop(seconds=6.0, fps=10)
    assert len(frames) == 60
    kbits = sum(map(len, frames)) * 8 / 6.0 / 1000
    packets = sum(len(Vp8Encoder._packetize(f, 0)) for f in frames) / 60
    print(f"camera loop: {kbits:.0f} kbit/s, {packets:.1f} packets a frame")
    assert 350 < kbits < 650 and packets > 3  # as a webcam at aiortc's 500 kbit/s, not a cartoon
    keys = [i for i, f in enumerate(frames) if f[0] & 1 == 0]  # VP8: bit 0 of the first byte clear = key frame
    assert keys == [0]
    assert [i for i, f in enumerate(encode_camera_loop(seconds=2.0, keyframe_s=1.0)) if f[0] & 1 == 0] == [0, 10]
    codec = av.CodecContext.create("libvpx", "r")
    images = [img for f in frames for img in codec.decode(av.Packet(f))]
    assert len(images) == 60 and (images[0].width, images[0].height) == (640, 480)
    lengths = {ReplayCamera(frames).length for _ in range(20)}
    assert len(lengths) > 3 and min(lengths) >= 40 and max(lengths) <= 60  # restarts out of step
    camera = ReplayCamera(frames)
    sent = [camera.next_frame() for _ in range(camera.length + 1)]
    assert sent[camera.length][0] == sent[0][0]  # back at the key frame
    assert sent[camera.length][1] == camera.length * 9000  # while the RTP clock runs on
    camera.next_frame()
    camera.key_frame()  # the receiver asked for one (a PLI)
    payloads, timestamp = camera.next_frame()
    assert payloads == sent[0][0] and timestamp == (camera.length + 2) * 9000


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
        # a key frame the server asks for (its decoder shed frames, or failed) reaches the camera, as a
        # browser's encoder hears it: aiortc sends the PLI, SRTCP-protected, on its next video packet
        (video,) = [r for r in peer.pc.getReceivers() if r.track.kind == "video"]
        video._RTCRtpReceiver__decoder_queue.decode_error.set()
        assert await wait_until(lambda: client.mic.socket.key_frame_requests >= 1, 5)
        await client.close()
    assert heard is not None, "the replayed click never came back"
    round_trip = (heard - client.mic.sent_at[ident]) * 1000
    print(f"replayed click round trip: {round_trip:.0f} ms; video frames sampled: {aligner.stats.video_sampled}")
    assert 0 < round_trip < 2000


def test_repeats_of_a_settled_packet_are_not_decoded_and_sound_the_same():
    """The server's speech encoder resends one packet while the agent is silent: those repeats are taken from
    the last decode once it has settled, within one LSB of decoding each, and speech after them is the same."""
    rng = np.random.default_rng(0)

    def speech(n: int) -> np.ndarray:
        t = np.arange(n) / 24_000
        return 0.3 * np.sin(2 * np.pi * 220 * t) * (1 + 0.5 * np.sin(2 * np.pi * 3 * t)) + 0.02 * rng.standard_normal(n)

    pcm = np.concatenate([speech(24_000), np.zeros(24_000), speech(12_000), np.zeros(4_800), speech(9_600)])
    s16 = (pcm * 32767).astype(np.int16)
    encoder = SpeechEncoder(24_000)
    payloads = [bytes(encoder.encode(s16[i : i + 480], i)) for i in range(0, s16.size - 479, 480)]
    rtp = [bytes([0x80, 111]) + bytes(10) + p for p in payloads]  # a bare header, payload type 111

    got: list[np.ndarray] = []
    lean = LeanAudioIn(111, dtls=None, sink=lambda pcm, at: got.append(pcm))
    for packet in rtp:
        lean.handle(packet, 0.0)
    codec = av.CodecContext.create("opus", "r")
    codec.sample_rate, codec.layout = RATE, "mono"
    every = np.concatenate([f.to_ndarray().reshape(-1) for p in payloads for f in codec.decode(av.Packet(p))])
    lean_pcm = np.concatenate(got)
    worst = float(np.abs(lean_pcm - every).max()) * 32768
    print(f"{lean.repeats} of {lean.packets} packets repeated; max difference {worst:.2f} LSB")
    assert lean.packets == len(payloads) and lean_pcm.size == every.size
    assert lean.repeats > 25  # most of the 1 s pause, once the decoder has settled (~10 frames)
    assert worst <= 1
    assert not got[-1].flags.writeable  # a repeat hands on the same array: nobody may change it


async def test_replaying_clients_share_one_timer_and_read_their_sockets_there():
    """Three clients on one Ticker: the kernel stamps each reply's arrival, the server's RTCP is counted and
    dropped, DTLS still reaches aiortc (the server ending a session ends that client's replay, not the
    others'), and the ticker stops with its last client."""
    async with running(make_config("echo", "stream")) as server:
        clients = [AgentClient(ws_url(server), mic=ReplayMicrophone(silence_packet())) for _ in range(3)]
        t0 = time.monotonic()
        for c in clients:
            await c.connect()
        ticker = Ticker.of_running_loop()
        assert await wait_until(lambda: len(ticker._links) == 3, 10)
        assert await wait_until(lambda: all(len(c.received.times) >= 100 for c in clients), 20)
        for c in clients:
            times = np.array(c.received.times)
            assert t0 < times[0] and times[-1] <= time.monotonic() and np.all(np.diff(times) >= 0)
            spacing = float(np.median(np.diff(times)))
            assert 0.015 < spacing < 0.025, spacing  # 20 ms frames, stamped as they arrived, not per tick
        links = list(ticker._links)
        assert await wait_until(lambda: all(link.socket.rtcp_ignored > 0 for link in links), 10)
        assert all(c.mic.socket.sent > 50 and c.mic.socket.send_dropped == 0 for c in clients)  # ~2 s of audio
        first = clients[0]
        server.sessions[first.answer["session"]].end("test: the server ends one session")
        replay = first._tasks[-1]
        assert await wait_until(replay.done, 10), "the server's DTLS close never reached aiortc"
        assert len(ticker._links) == 2
        others = [len(c.received.times) for c in clients[1:]]
        await asyncio.sleep(0.3)
        assert all(len(c.received.times) > n for c, n in zip(clients[1:], others, strict=True))
        for c in clients:
            await c.close()
        assert await wait_until(lambda: ticker._timer is None, 5)
        assert not ticker._links and not ticker._selector.get_map()


class _Link:
    """What a Ticker drives, without a peer: a UDP socket to read and a send that can be made to fail."""

    def __init__(self, fail: bool = False) -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.setblocking(False)
        self.socket = self  # the Ticker reads `link.socket`
        self.fd = self.sock.fileno()
        self.fail, self.due, self.sends, self.reads = fail, 0.0, 0, 0
        self.done: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    def read(self) -> None:
        self.sock.recv(2048)
        self.reads += 1

    def send_due(self, now: float) -> None:
        if self.fail:
            raise RuntimeError("this client's fault")
        self.sends += 1
        self.due = now + 0.02

    def end(self, error: BaseException | None = None) -> None:
        if self.done.done():
            return
        if error is None:
            self.done.set_result(None)
        else:
            self.done.set_exception(error)


async def test_a_ticker_reads_what_arrived_sends_what_is_due_and_a_fault_ends_one_client():
    ticker = Ticker(tick=0.005)
    good, bad = _Link(), _Link(fail=True)
    ticker.add(good)
    ticker.add(bad)
    started = time.monotonic()
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as peer:
        peer.sendto(b"x", good.sock.getsockname())
        await asyncio.sleep(0.3)
    elapsed = time.monotonic() - started
    with pytest.raises(RuntimeError, match="this client's fault"):
        await bad.done
    assert not good.done.done() and good.reads == 1
    assert 5 <= good.sends <= elapsed / 0.02 + 2  # when due (every 20 ms), not on every 5 ms tick
    ticker.discard(good)
    await good.done
    assert await wait_until(lambda: ticker._timer is None, 1) and not ticker._selector.get_map()
    good.sock.close()
    bad.sock.close()


def test_video_pacing_spreads_a_frame_as_a_browser_pacer_does():
    """2.5 x 500 kbit/s in 5 ms steps: a 36 KB key frame leaves over ~230 ms, not in one burst; a small frame
    after a pause leaves at once."""
    sent: list[tuple[float, int, bool]] = []
    now = 0.0

    class Stream:
        def protected(self, payload: bytes, marker: bool, timestamp: int) -> tuple[float, int, bool]:
            return (now, len(payload), marker)

    class Socket:
        send = sent.append

    pacing = VideoPacing(Stream())  # type: ignore[arg-type]
    pacing.add([bytes(1200)] * 30, 0)
    while pacing.queue and now < 1:
        pacing.send(Socket(), now)  # type: ignore[arg-type]
        now += 0.005
    assert len(sent) == 30 and [m for _, _, m in sent].count(True) == 1 and sent[-1][2]
    assert sum(1 for t, _, _ in sent if t == 0) == 1  # one packet in the first step
    span = sent[-1][0] - sent[0][0]
    print(f"36 KB frame paced over {span * 1000:.0f} ms")
    assert 0.2 < span < 0.26  # 36 KB at 156 KB/s
    now += 0.5
    pacing.add([bytes(600)], 9000)
    pacing.send(Socket(), now)  # type: ignore[arg-type]
    assert sent[-1][0] == now  # the budget was there
