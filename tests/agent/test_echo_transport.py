import asyncio

import numpy as np

from agent.client import RATE, AgentClient, CameraTrack
from tests.agent.conftest import make_config, running, ws_url


def click(ms=10, amp=0.8):
    n = RATE * ms // 1000
    return (amp * np.sin(np.arange(n) * 2 * np.pi * 1000 / RATE)).astype(np.float32)


async def test_echo_stream_click_round_trip_and_continuity():
    async with running(make_config("echo", "stream")) as server:
        client = AgentClient(ws_url(server), video=CameraTrack(fps=10, size=(320, 240)))
        answer = await client.connect()
        assert answer["engine"] == "echo" and answer["profile"] == "default"
        await asyncio.sleep(1.0)  # let ICE/DTLS settle and the pipeline fill
        rtts = []
        for _ in range(5):
            ident = client.mic.play(click())
            await asyncio.sleep(0.6)
            t0 = client.mic.sent_at[ident]
            t1 = client.received.first_loud_after(t0)
            assert t1 is not None, "the click did not come back"
            rtts.append(t1 - t0)
        peer = next(iter(server.sessions.values())).peer
        stats = peer.aligner.stats
        await client.close()
    median = float(np.median(rtts))
    print(f"echo click round trip: median {median * 1000:.0f} ms, all {[round(r * 1000) for r in rtts]}")
    assert 0.02 < median < 0.4  # generous: 2 shared cores, client and server in one process
    # continuity: the returned stream has one 20 ms frame per 20 ms, without gaps
    times = np.array(client.received.times)
    assert times.size > 100
    span = times[-1] - times[0]
    assert len(times) * 0.02 > 0.9 * span
    assert stats.video_frames > 0 and stats.video_sampled > 0  # the camera reached the aligner


async def test_speech_comes_back_correlated():
    async with running(make_config("echo", "stream")) as server:
        client = AgentClient(ws_url(server))
        await client.connect()
        await asyncio.sleep(0.8)
        rng = np.random.default_rng(7)
        t = np.arange(RATE) / RATE
        # a "voice": a chirp with an envelope, so the correlation has one clear peak
        sent = (0.4 * np.sin(2 * np.pi * (200 + 600 * t) * t) * (0.5 + 0.5 * np.sin(2 * np.pi * 3 * t))).astype(
            np.float32
        )
        sent += 0.01 * rng.standard_normal(sent.size).astype(np.float32)
        start_index = len(client.received.frames)
        client.mic.play(sent)
        await asyncio.sleep(1.8)
        await client.close()
    got = np.concatenate(client.received.frames[start_index:])
    peak, lag = normalised_xcorr(got, sent[: RATE // 2])
    print(f"returned audio: normalised correlation {peak:.2f} at {lag / RATE * 1000:.0f} ms")
    assert peak > 0.8


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
