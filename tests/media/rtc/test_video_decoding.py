"""Inbound video decoded in a process of its own (media.rtc.video_decoding, media.video_worker): on idle CPU, the
pictures the session can use handed back, what it cannot keep up with shed up to a key frame, a dead worker
restarted."""

import asyncio
import os
import sys
import time
from types import SimpleNamespace

import av
import numpy as np
import pytest
from aiortc.jitterbuffer import JitterFrame
from aiortc.rtcrtpparameters import RTCRtpCodecParameters

from agent.replay import encode_camera_loop
from benchmarks.harness import wait_until
from media.rtc import video_decoding
from media.rtc.video_decoding import DecodingProcess, IdleVideoDecoder, is_vp8_key_frame

VP8 = RTCRtpCodecParameters(mimeType="video/VP8", clockRate=90000, payloadType=96)
TICKS = 9000  # 10 fps at 90 kHz


@pytest.fixture(scope="module")
def frames() -> list[bytes]:
    return encode_camera_loop(seconds=2.0, size=(160, 120), keyframe_s=1.0)  # real VP8: a key frame a second


def receiver() -> SimpleNamespace:
    return SimpleNamespace(track=SimpleNamespace(_queue=asyncio.Queue()))  # what aiortc's RemoteStreamTrack reads


def pictures(r: SimpleNamespace) -> list[av.VideoFrame]:
    out = []
    while not r.track._queue.empty():
        out.append(r.track._queue.get_nowait())
    return out


async def test_the_worker_runs_on_idle_cpu_and_hands_back_the_pictures_due(frames):
    process = DecodingProcess()
    try:
        r = receiver()
        # 4 pictures a second of a 10 fps camera; two seconds of it sent at once
        decoder = IdleVideoDecoder(r, every_s=0.25, max_frames=len(frames), process=process)
        for i, data in enumerate(frames):
            decoder.put((VP8, JitterFrame(data, i * TICKS)))
        assert await wait_until(lambda: decoder.decoded == len(frames), 10)
        assert os.sched_getscheduler(process.pid) == os.SCHED_IDLE
        await asyncio.sleep(0.05)  # the last picture's hand-over to the loop
        got = pictures(r)
        assert [p.pts for p in got] == [i * TICKS for i in range(0, len(frames), 3)]  # >= 0.25 s apart
        assert decoder.passed == len(got) and decoder.shed == decoder.errors == 0
        # each is the picture decoding the same frames here gives
        local = av.CodecContext.create("libvpx", "r")
        mine = {i * TICKS: local.decode(av.Packet(data))[0] for i, data in enumerate(frames)}
        for p in got:
            assert p.time_base.denominator == 90_000 and (p.width, p.height) == (160, 120)
            assert np.array_equal(p.to_ndarray(), mine[p.pts].to_ndarray())
        decoder.put(None)  # the end: aiortc's thread, waiting in get(), ends the track
        assert decoder.get() is None
    finally:
        process.shutdown()
    assert process.pid is None


async def test_what_the_worker_cannot_keep_up_with_is_shed_up_to_a_key_frame_it_asks_for(frames):
    # a worker that has stalled: it reads nothing (as one starved of idle CPU)
    process = DecodingProcess([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        decoder = IdleVideoDecoder(receiver(), max_frames=4, process=process)
        assert [is_vp8_key_frame(f) for f in frames] == ([True] + [False] * 9) * 2
        for i in range(4):
            decoder.put((VP8, JitterFrame(frames[i], i * TICKS)))
        assert decoder.shed == 0 and not decoder.decode_error.is_set()
        decoder.put((VP8, JitterFrame(frames[4], 4 * TICKS)))  # the fifth: no room
        assert decoder.shed == 1 and decoder.decode_error.is_set()  # aiortc sends a PLI on its next packet
        decoder.decode_error.clear()
        for i in range(5, 10):  # inter frames until the key frame: undecodable without the one shed
            decoder.put((VP8, JitterFrame(frames[i], i * TICKS)))
        assert decoder.shed == 6 and not decoder.decode_error.is_set()
        decoder.put((VP8, JitterFrame(frames[10], 10 * TICKS)))  # the key frame, still no room: asked for again
        assert decoder.shed == 7 and decoder.decode_error.is_set()
    finally:
        process.shutdown()


async def test_garbage_is_counted_and_a_dead_worker_restarts_from_a_key_frame(frames, monkeypatch):
    monkeypatch.setattr(video_decoding, "RESTART_AFTER_S", 0.2)
    process = DecodingProcess()
    try:
        r = receiver()
        decoder = IdleVideoDecoder(r, process=process)
        decoder.put((VP8, JitterFrame(b"\x00 not vp8 at all", 0)))
        decoder.put((VP8, JitterFrame(frames[0], TICKS)))
        assert await wait_until(lambda: decoder.errors == 1 and decoder.decoded == 1, 10)
        assert decoder.decode_error.is_set()  # as aiortc does for a frame that fails: a key frame asked for
        decoder.decode_error.clear()
        first = process.pid
        os.kill(first, 9)
        assert await wait_until(lambda: process.restarts == 1, 5)
        assert decoder.decode_error.is_set()  # its decoder state went with it
        decoder.put((VP8, JitterFrame(frames[1], 2 * TICKS)))  # within the restart delay: shed
        assert decoder.shed == 1 and process.pid is None
        time.sleep(0.25)
        decoder.put((VP8, JitterFrame(frames[2], 3 * TICKS)))  # an inter frame: still waiting for a key frame
        assert decoder.shed == 2
        decoder.put((VP8, JitterFrame(frames[10], 4 * TICKS)))  # the key frame: a new worker decodes it
        assert await wait_until(lambda: decoder.decoded == 2, 10)
        assert process.pid not in (None, first) and decoder.errors == 1
        await asyncio.sleep(0.05)
        assert [p.pts for p in pictures(r)] == [TICKS, 4 * TICKS]
    finally:
        process.shutdown()
