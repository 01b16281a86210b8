"""The echo engine over real aiortc peers: the round trip, how inbound media is decoded, how speech leaves,
how inbound SRTP is read; a text-only offer."""

import asyncio
import os
import threading

import numpy as np

from agent.client import RATE, AgentClient, CameraTrack
from benchmarks.harness import make_config, media_flowing, quiet_again, running, wait_until, ws_url
from media.rtc import private
from media.rtc.receiver import InlineAudioDecoder
from media.rtc.video_decoding import IdleVideoDecoder, shared_process
from tests.support import round_trip


def click(ms=10, amp=0.8):
    n = RATE * ms // 1000
    return (amp * np.sin(np.arange(n) * 2 * np.pi * 1000 / RATE)).astype(np.float32)


def decoder_threads() -> list[threading.Thread]:
    """aiortc's per-receiver decoder threads (named after their kind)."""
    return [t for t in threading.enumerate() if t.name in ("audio-decoder", "video-decoder")]


async def echo_session(server, video: bool = False):
    client = AgentClient(ws_url(server), video=CameraTrack(fps=10, size=(320, 240)) if video else None)
    await client.connect()
    await media_flowing(client)
    return client, next(iter(server.sessions.values()))


async def test_echo_stream_click_round_trip_and_continuity():
    async with running(make_config("echo", "stream")) as server:
        client, conn = await echo_session(server)
        assert client.answer["engine"] == "echo" and client.answer["profile"] == "default"
        rtts = []
        for _ in range(5):
            rtt = await round_trip(client, click())
            assert rtt is not None, "the click did not come back"
            rtts.append(rtt)
            await quiet_again(client, len(client.received.frames) - 10)
        # continuity is judged over at least 3 s of the returned stream
        await wait_until(lambda: len(client.received.times) >= 150, 20)
        await client.close()
    median = float(np.median(rtts))
    print(f"echo click round trip: median {median * 1000:.0f} ms, all {[round(r * 1000) for r in rtts]}")
    # typically ~0.1 s; 5x that as the bound: 2 shared cores, client and server in one process
    assert 0.02 < median < 0.5
    # continuity: the returned stream has one 20 ms frame per 20 ms, without gaps
    times = np.array(client.received.times)
    assert times.size > 100
    span = times[-1] - times[0]
    assert len(times) * 0.02 > 0.9 * span


async def test_inbound_audio_decodes_on_the_loop_and_the_camera_in_an_idle_process():
    async with running(make_config("echo", "stream")) as server:
        client, conn = await echo_session(server, video=True)
        await wait_until(lambda: conn.pump.aligner.stats.video_sampled > 0, 10)
        assert await round_trip(client, click()) is not None
        # inbound audio is decoded on the loop; aiortc's audio decoder thread only waits for the end
        (receiver,) = [t.receiver for t in conn.peer.pc.getTransceivers() if t.kind == "audio"]
        decoder = private.decoder_queue(receiver)
        assert isinstance(decoder, InlineAudioDecoder) and decoder.errors == 0
        assert decoder_threads()
        # the camera is decoded in a process of its own that runs on idle CPU only; of its pictures those the
        # aligner can use (twice its 2 fps) come back
        (video,) = [t.receiver for t in conn.peer.pc.getTransceivers() if t.kind == "video"]
        decoding = private.decoder_queue(video)
        assert isinstance(decoding, IdleVideoDecoder) and decoding.shed == decoding.errors == 0
        assert os.sched_getscheduler(shared_process().pid) == os.SCHED_IDLE
        await wait_until(lambda: decoding.decoded >= 20, 20)
        print("camera frames decoded", decoding.decoded, "passed on", decoding.passed)
        assert decoding.decoded >= 20 and 0 < decoding.passed <= decoding.decoded // 2
        stats = conn.pump.aligner.stats
        assert stats.video_frames > 0 and stats.video_sampled > 0  # the camera reached the aligner
        await client.close()
        await wait_until(lambda: not server.sessions, 10)
    assert await wait_until(lambda: not decoder_threads(), 5)  # the session ended: nothing of it left running


async def test_speech_leaves_below_aiortcs_sender_and_its_reports_count_it():
    async with running(make_config("echo", "stream")) as server:
        client, conn = await echo_session(server)
        for _ in range(3):
            assert await round_trip(client, click()) is not None
        # the speech leaves below aiortc's sender: its own Opus, none of it encoded while it only sends
        # silence; every frame the framer gave out was sent, and the sender reports (RTCP SR) carry those counts
        outbound = conn.peer.outbound
        encoder, stream = outbound._encoder, outbound.stream
        sent = conn.pump.framer.stats.frames
        print("encoded", encoder.encoded, "of", sent)
        assert 0 < encoder.encoded < sent and stream.packets == sent
        (sender,) = [x for x in conn.peer.pc.getSenders() if x.track is outbound.track]
        (server_out,) = [s for s in (await sender.getStats()).values() if s.type == "outbound-rtp"]
        assert server_out.packetsSent == stream.packets and server_out.bytesSent == stream.octets
        (audio_in,) = [t.receiver for t in client.pc.getTransceivers() if t.kind == "audio"]
        reported: list = []
        for _ in range(100):  # a sender report arrives within seconds
            reported = [s for s in (await audio_in.getStats()).values() if s.type == "remote-outbound-rtp"]
            if reported:
                break
            await asyncio.sleep(0.1)
        assert reported and 0 < reported[0].packetsSent <= stream.packets and reported[0].ssrc == stream.ssrc
        await client.close()


async def test_inbound_srtp_is_handled_in_the_sockets_callback_and_a_forged_packet_is_dropped():
    async with running(make_config("echo", "stream")) as server:
        client, conn = await echo_session(server)
        for _ in range(3):
            assert await round_trip(client, click()) is not None
        # inbound RTP is handled in the socket's callback, not through aioice's queue and aiortc's task;
        # aiortc's transport statistics still count it
        (direct,) = conn.peer.direct
        await wait_until(lambda: direct.packets > 100, 10)  # 50 a second from the microphone
        (dtls_stats,) = [s for s in (await conn.peer.pc.getStats()).values() if s.type == "transport"]
        print("received", dtls_stats.packetsReceived, "of which directly", direct.packets)
        assert direct.packets > 100 and not direct.failed
        # all but the DTLS handshake and what came before the switch (a few here; more on a busy machine)
        assert 0.8 * dtls_stats.packetsReceived <= direct.packets <= dtls_stats.packetsReceived
        # a forged SRTP packet is dropped and counted; the session goes on
        pair = private.nominated(client.pc.getTransceivers()[0].sender.transport)
        pair.protocol.transport.sendto(b"\x80\x6f" + bytes(40), pair.remote_addr)
        assert await wait_until(lambda: direct.undecryptable == 1, 5)
        assert conn.peer.counters()["srtp_undecryptable_packets"] == 1
        assert await round_trip(client, click()) is not None
        await client.close()
        await wait_until(lambda: not server.sessions, 10)
        assert direct.protocol.datagram_received != direct._received  # aioice has its callback back


async def test_speech_comes_back_correlated():
    async with running(make_config("echo", "stream")) as server:
        client = AgentClient(ws_url(server))
        await client.connect()
        await media_flowing(client)
        rng = np.random.default_rng(7)
        t = np.arange(RATE) / RATE
        # a "voice": a chirp with an envelope, so the correlation has one clear peak
        sent = (0.4 * np.sin(2 * np.pi * (200 + 600 * t) * t) * (0.5 + 0.5 * np.sin(2 * np.pi * 3 * t))).astype(
            np.float32
        )
        sent += 0.01 * rng.standard_normal(sent.size).astype(np.float32)
        start_index = len(client.received.frames)
        client.mic.play(sent)
        await quiet_again(client, start_index)
        await client.close()
    got = np.concatenate(client.received.frames[start_index:])
    # each quarter second of the voice separately: a busy machine may make the server drop a late tick
    # (counted, by design: live output never lags), which would blur one long template's peak
    quarter = RATE // 4
    peaks = [normalised_xcorr(got, sent[i : i + quarter]) for i in range(0, sent.size, quarter)]
    print("returned audio: normalised correlation per quarter second:", [(round(p, 2), lag) for p, lag in peaks])
    assert sum(p > 0.8 for p, _ in peaks) >= 3


def normalised_xcorr(signal, template):
    """Max of the normalised cross-correlation (1.0 = same waveform) and its lag."""
    n = signal.size + template.size
    size = 1 << (n - 1).bit_length()
    corr = np.fft.irfft(np.fft.rfft(signal, size) * np.conj(np.fft.rfft(template, size)), size)
    corr = corr[: signal.size - template.size + 1]
    energy = np.cumsum(np.concatenate(([0.0], signal.astype(np.float64) ** 2)))
    local = np.sqrt(energy[template.size :] - energy[: -template.size])
    score = np.where(local > 1e-3, corr / (np.linalg.norm(template) * np.maximum(local, 1e-3)), 0.0)
    lag = int(np.argmax(score))
    return float(score[lag]), lag


async def test_an_offer_for_text_only_gets_its_reply_in_text_and_no_speech():
    async with running(make_config("echo", "turn")) as server:
        client = AgentClient(ws_url(server))
        client.text_only = True
        await client.connect()
        await media_flowing(client)
        t = np.arange(int(0.6 * RATE)) / RATE
        start, since = len(client.messages), len(client.received.frames)
        client.mic.play((0.4 * np.sin(2 * np.pi * 300 * t)).astype(np.float32))
        reply = await client.wait_for(lambda m: m["type"] == "transcript" and m["role"] == "assistant", 10, start)
        await client.wait_for(lambda m: m["type"] == "metrics", 10, start)
        await asyncio.sleep(1.0)  # where the spoken reply would have played
        await client.close()
    assert "here it is" in reply["text"]
    assert np.abs(np.concatenate(client.received.frames[since:])).max() < 0.01
