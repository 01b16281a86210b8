"""The aiortc edges: inbound Opus decoded on the loop, what it drops counted, aiortc's thread ended on stop."""

import asyncio
import threading
from types import SimpleNamespace

import numpy as np
import pytest
from aiortc.codecs import get_decoder
from aiortc.jitterbuffer import JitterFrame
from aiortc.rtp import RtpPacket

from media.opus import SpeechEncoder
from media.rtc.jitter_buffer import ImmediateAudioBuffer
from media.rtc.receiver import InlineAudioDecoder
from tests.media.test_opus import OPUS


def opus_packets(n: int) -> list[bytes]:
    encoder = SpeechEncoder(24_000)
    t = np.arange(480 * n) / 24_000
    voice = (8000 * np.sin(2 * np.pi * 440 * t)).astype(np.int16)
    return [bytes(encoder.encode(voice[i * 480 : (i + 1) * 480], i * 480)) for i in range(n)]


async def test_audio_decodes_on_the_loop_thread_and_garbage_is_counted_not_fatal():
    track = SimpleNamespace(_queue=asyncio.Queue())  # what aiortc's RemoteStreamTrack reads from
    decoder = InlineAudioDecoder(SimpleNamespace(track=track))  # type: ignore[arg-type]
    packets = opus_packets(5)
    decoder.put((OPUS, JitterFrame(packets[0], 0)))
    decoder.put((OPUS, JitterFrame(b"\xff" * 40, 960)))  # not Opus
    for i, p in enumerate(packets[1:], 2):
        decoder.put((OPUS, JitterFrame(p, 960 * i)))
    # decoded at once, on this (the loop's) thread: nothing waits for another thread
    assert track._queue.qsize() == 5 and decoder.errors == 1
    frames = [track._queue.get_nowait() for _ in range(5)]
    assert all(f.samples == 960 and f.sample_rate == 48_000 for f in frames)
    reference = get_decoder(OPUS)
    expected = [reference.decode(JitterFrame(p, 0))[0].to_ndarray() for p in packets]
    assert all(np.array_equal(f.to_ndarray(), e) for f, e in zip(frames, expected, strict=True))


async def test_with_a_sink_frames_skip_the_track_queue_and_decode_to_mono():
    track = SimpleNamespace(_queue=asyncio.Queue())
    decoder = InlineAudioDecoder(SimpleNamespace(track=track), channels=1)  # type: ignore[arg-type]
    got = []
    decoder.sink = got.append
    packets = opus_packets(5)
    for i, p in enumerate(packets):
        decoder.put((OPUS, JitterFrame(p, 960 * i)))
    assert track._queue.empty() and len(got) == 5
    assert all(f.layout.name == "mono" and f.samples == 960 and f.sample_rate == 48_000 for f in got)
    assert [f.pts for f in got] == [960 * i for i in range(5)]  # the RTP clock, as aiortc gives it
    stereo = get_decoder(OPUS)
    left = np.concatenate([stereo.decode(JitterFrame(p, 0))[0].to_ndarray().reshape(-1, 2)[:, 0] for p in packets])
    mono = np.concatenate([f.to_ndarray().reshape(-1) for f in got])
    assert float(np.corrcoef(left.astype(float), mono.astype(float))[0, 1]) > 0.99


async def test_aiortc_decoder_thread_idles_on_it_and_ends_the_track_on_stop():
    loop = asyncio.get_running_loop()
    track = SimpleNamespace(_queue=asyncio.Queue())
    decoder = InlineAudioDecoder(SimpleNamespace(track=track))  # type: ignore[arg-type]

    def aiortc_worker() -> None:  # what aiortc's decoder_worker does with its queue
        while (task := decoder.get()) is not None:
            raise AssertionError(f"the thread was handed work: {task}")
        asyncio.run_coroutine_threadsafe(track._queue.put(None), loop)

    thread = threading.Thread(target=aiortc_worker)
    thread.start()
    decoder.put((OPUS, JitterFrame(opus_packets(1)[0], 0)))
    assert (await asyncio.wait_for(track._queue.get(), 1)).samples == 960
    assert thread.is_alive()
    decoder.put(None)  # RTCRtpReceiver.stop()
    await asyncio.to_thread(thread.join, 2)
    assert not thread.is_alive()
    assert await asyncio.wait_for(track._queue.get(), 1) is None  # the track ends


def test_immediate_buffer_releases_each_packet_and_counts_late_ones():
    buf = ImmediateAudioBuffer()
    released = []
    for seq in (10, 11, 13, 12, 13, 14):
        packet = RtpPacket(sequence_number=seq, timestamp=seq * 960)
        packet._data = bytes([seq])  # type: ignore[attr-defined]
        _, frame = buf.add(packet)
        if frame is not None:
            released.append(frame.timestamp // 960)
    assert released == [10, 11, 13, 14]  # 12 came after 13; the second 13 is a duplicate
    assert buf.late == 2


async def test_window_rate_gives_aiortcs_figures_and_is_installed_for_video():
    """The same rates as aiortc's RateCounter over a webcam's packet times (bursts, gaps past the window,
    resets), and tune_receivers puts it in each video receiver's bandwidth estimator."""
    import random

    from aiortc import RTCPeerConnection
    from aiortc.rate import RateCounter

    from media.rtc.rate_estimator import MinFramePeriod, ThrottledRemb, WindowRate
    from media.rtc.receiver import tune_receivers

    rng = random.Random(3)
    theirs, ours = RateCounter(1000, 8000), WindowRate(1000, 8000)
    now, checked = 10_000, 0
    for step in range(20_000):
        now += rng.choice([0, 0, 1, 3, 7, 33, 100, 250]) + (1500 if step % 2000 == 1999 else 0)
        if step % 3000 == 2999:
            theirs.reset()
            ours.reset()
        if rng.random() < 0.8:
            size = rng.randrange(100, 1300)
            theirs.add(size, now)
            ours.add(size, now)
        else:
            assert ours.rate(now) == theirs.rate(now), (step, now)
            checked += 1
    assert checked > 3000

    pc = RTCPeerConnection()
    pc.addTransceiver("audio")
    pc.addTransceiver("video")
    tune_receivers(pc)
    (video,) = [t.receiver for t in pc.getTransceivers() if t.kind == "video"]
    estimator = video._RTCRtpReceiver__remote_bitrate_estimator
    assert isinstance(estimator, ThrottledRemb) and isinstance(estimator.estimator.incoming_bitrate, WindowRate)
    assert isinstance(estimator.estimator.estimator.update_min_frame_period, MinFramePeriod)
    await pc.close()


def test_min_frame_period_gives_aiortcs_figures():
    import random

    from aiortc.rate import OveruseEstimator

    from media.rtc.rate_estimator import MinFramePeriod

    rng = random.Random(5)
    theirs, ours = OveruseEstimator(), MinFramePeriod()
    deltas = [rng.choice([rng.uniform(30, 120), rng.uniform(0, 5)]) for _ in range(2000)]
    expected = [theirs.update_min_frame_period(d) for d in deltas]
    assert [ours(d) for d in deltas] == expected
    assert len(set(expected)) > 50  # the minimum moved as old deltas left the window


def test_remb_estimates_go_out_every_200_ms_unless_one_falls_by_more_than_3_percent():
    """aiortc's estimator, driven into overuse by growing queueing delay, returns an estimate for every
    packet; through ThrottledRemb they leave at most every 200 ms, and a fall of more than 3 % at once."""
    from aiortc.rate import RemoteBitrateEstimator

    from media.rtc.rate_estimator import ThrottledRemb

    def drive(estimator) -> list[tuple[int, int]]:
        sent, now, send_time, delay = [], 0, 0.0, 0.0
        for n in range(3000):  # 100 packets a second for 30 s; from 10 s on, each waits 1 ms longer
            now = n * 10
            if n > 1000:
                delay += 1
            send_time = n * 0.010
            abs_send = int(send_time * (1 << 18)) & 0xFFFFFF
            remb = estimator.add(arrival_time_ms=now + int(delay), abs_send_time=abs_send, payload_size=1200, ssrc=1)
            if remb is not None:
                sent.append((now + int(delay), remb[0]))
        return sent

    raw = drive(RemoteBitrateEstimator())
    throttled = ThrottledRemb(RemoteBitrateEstimator())
    sent = drive(throttled)
    print(f"aiortc alone: {len(raw)} REMBs; throttled: {len(sent)}, {throttled.held} held")
    assert len(raw) > 1000  # overused: one a packet
    assert 0 < len(sent) < len(raw) // 5 and throttled.held == len(raw) - len(sent)
    for (t0, b0), (t1, b1) in zip(sent, sent[1:], strict=False):
        assert t1 - t0 >= 200 or b1 * 103 < b0 * 100, (t0, b0, t1, b1)

    class Scripted:  # an estimator that gives these estimates, one a packet
        def __init__(self, bitrates: list[int]) -> None:
            self.bitrates = iter(bitrates)

        def add(self, **_: int) -> tuple[int, list[int]]:
            return next(self.bitrates), [1]

    remb = ThrottledRemb(Scripted([1000, 990, 980, 960, 950, 1100, 900]))
    out = [remb.add(arrival_time_ms=t, abs_send_time=0, payload_size=1, ssrc=1) for t in (0, 10, 20, 30, 40, 250, 260)]
    # sent: the first; 960 (4 % under 1000) at once; 1100 after 200 ms; 900 (18 % under 1100) at once
    assert [r[0] if r else None for r in out] == [1000, None, None, 960, None, 1100, 900]


@pytest.mark.parametrize("fec", [True, False])
async def test_a_lost_packet_reaches_the_sink_made_up_in_its_place_once_given_up(fec):
    from media.rtc.jitter_buffer import SequencedFrame
    from tests.media.test_opus import voice_packets

    decoder = InlineAudioDecoder(SimpleNamespace(track=None), channels=1)  # type: ignore[arg-type]
    got = []
    decoder.sink = got.append
    _, packets = voice_packets(0.4, fec_loss_pct=10 if fec else 0)  # with FEC as a browser sends once it sees loss
    lost = 12
    for i, p in enumerate(packets):
        if i != lost:
            decoder.put((OPUS, SequencedFrame(p, 1000 + 960 * i, 7 + i)))
    assert len(got) == lost  # the packets after it wait for it, until the decoder's timer gives it up
    for _ in range(250):
        if len(got) == len(packets):
            break
        await asyncio.sleep(0.02)
    assert [f.pts for f in got] == [1000 + 960 * i for i in range(len(packets))]
    assert (decoder.recovered, decoder.concealed) == ((1, 0) if fec else (0, 1))
    assert decoder.buffer.stats.lost == 1
    made_up = got[lost].to_ndarray().reshape(-1)
    assert got[lost].format.name == "flt" and np.abs(made_up).max() > 0.05  # the voice, not silence


async def test_a_packet_held_up_by_a_busy_loop_is_not_given_up_for_lost():
    from media.rtc.jitter_buffer import SequencedFrame
    from tests.media.test_opus import voice_packets

    decoder = InlineAudioDecoder(SimpleNamespace(track=None), channels=1)  # type: ignore[arg-type]
    got = []
    decoder.sink = got.append
    _, packets = voice_packets(0.3)
    late = 8
    for i, p in enumerate(packets):
        if i != late:
            decoder.put((OPUS, SequencedFrame(p, 1000 + 960 * i, 7 + i)))

    async def through_the_transport() -> None:  # socket, ICE, DTLS, SRTP: a few turns of the loop
        for _ in range(3):
            await asyncio.sleep(0)
        decoder.put((OPUS, SequencedFrame(packets[late], 1000 + 960 * late, 7 + late)))

    def busy() -> None:  # the loop stalls past the give-up time while the packet comes in
        import time

        time.sleep(0.3)
        asyncio.ensure_future(through_the_transport())

    asyncio.get_running_loop().call_soon(busy)
    for _ in range(50):
        await asyncio.sleep(0.02)
        if len(got) == len(packets):
            break
    assert [f.pts for f in got] == [1000 + 960 * i for i in range(len(packets))]
    assert decoder.buffer.stats.lost == 0 and decoder.buffer.stats.late == 0
