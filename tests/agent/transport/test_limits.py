"""Each limit, driven past its bound by a real client: refused or closed with its code,
while a healthy session in parallel keeps its audio."""

import asyncio
import contextlib
import json

import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed

from agent.client import AgentClient, CameraTrack
from benchmarks.harness import make_config, media_flowing, running, wait_until, ws_url
from tests.support import healthy_round_trip


@pytest.fixture
async def limited():
    cfg = make_config("echo", "stream", max_sessions=4)
    cfg.server.messages_per_second = 5
    cfg.media.max_video_pixels = 320 * 240
    async with running(cfg) as server:
        healthy = AgentClient(ws_url(server))
        await healthy.connect()
        await media_flowing(healthy)
        yield server, healthy
        assert await healthy_round_trip(healthy) is not None, "the healthy session lost its audio"
        await healthy.close()


async def test_messages_per_second(limited):
    server, healthy = limited
    loop = asyncio.get_running_loop()
    async with connect(ws_url(server)) as ws:
        t0 = loop.time()
        for _ in range(30):
            await ws.send(json.dumps({"type": "dance"}))
        sending = loop.time() - t0
        codes = []
        with contextlib.suppress(TimeoutError, ConnectionClosed):
            while True:
                codes.append(json.loads(await asyncio.wait_for(ws.recv(), 5))["code"])
    # a burst of 2 x 5 is answered, then the connection is cut off; on a slow machine the bucket refills at
    # 5 a second while the 30 messages are being sent, so a few more may get through
    assert 10 <= codes.count("bad_request") <= 10 + 5 * sending + 1, (codes, sending)
    assert codes[-1] == "rate_limited" and len(codes) < 30
    assert await healthy_round_trip(healthy) is not None


async def test_total_session_length():
    cfg = make_config("echo", "stream")
    cfg.server.max_session_s = 2.0
    async with running(cfg) as server:
        client = AgentClient(ws_url(server))
        await client.connect()
        err = await client.wait_for(lambda m: m["type"] == "error", 5)
        assert err["code"] == "timeout" and "at most 2" in err["message"]
        assert await wait_until(lambda: not server.sessions, 10)
        await client.close()


async def test_video_resolution(limited):
    server, healthy = limited
    big = AgentClient(ws_url(server), video=CameraTrack(fps=5, size=(640, 480)))
    await big.connect()
    err = await big.wait_for(lambda m: m["type"] == "error", 5)
    assert err["code"] == "bad_request" and "640x480" in err["message"]
    await big.close()
    small = AgentClient(ws_url(server), video=CameraTrack(fps=5, size=(320, 240)))
    await small.connect()
    await media_flowing(small)
    aligner = server.sessions[small.answer["session"]].pump.aligner
    assert await wait_until(lambda: aligner.stats.video_frames >= 5, 20), "the small camera's frames never arrived"
    assert not [m for m in small.messages if m["type"] == "error"]
    assert await healthy_round_trip(healthy) is not None
    await small.close()
