"""Each limit, driven past its bound by a real client: refused or closed with its code,
while a healthy session in parallel keeps its audio."""

import asyncio
import json

import pytest
from websockets.asyncio.client import connect

from agent.client import AgentClient, CameraTrack
from tests.agent.conftest import make_config, running, ws_url
from tests.agent.test_bad_input import healthy_round_trip


@pytest.fixture
async def limited():
    cfg = make_config("echo", "stream", max_sessions=4)
    cfg.server.messages_per_second = 5
    cfg.media.max_video_pixels = 320 * 240
    async with running(cfg) as server:
        healthy = AgentClient(ws_url(server))
        await healthy.connect()
        await asyncio.sleep(0.8)
        yield server, healthy
        assert await healthy_round_trip(healthy) is not None, "the healthy session lost its audio"
        await healthy.close()


async def test_messages_per_second(limited):
    server, healthy = limited
    async with connect(ws_url(server)) as ws:
        for _ in range(30):
            await ws.send(json.dumps({"type": "dance"}))
        codes = []
        try:
            while True:
                codes.append(json.loads(await asyncio.wait_for(ws.recv(), 5))["code"])
        except Exception:
            pass
    assert codes.count("bad_request") == 10 and codes[-1] == "rate_limited"  # burst of 2 x 5, then cut off
    assert await healthy_round_trip(healthy) is not None


async def test_total_session_length():
    cfg = make_config("echo", "stream")
    cfg.server.max_session_s = 2.0
    async with running(cfg) as server:
        client = AgentClient(ws_url(server))
        await client.connect()
        err = await client.wait_for(lambda m: m["type"] == "error", 5)
        assert err["code"] == "timeout" and "at most 2" in err["message"]
        await asyncio.sleep(0.3)
        assert not server.sessions
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
    await asyncio.sleep(0.8)
    assert not [m for m in small.messages if m["type"] == "error"]
    assert await healthy_round_trip(healthy) is not None
    await small.close()
