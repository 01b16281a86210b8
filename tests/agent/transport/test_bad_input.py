"""Bad input ends at most its own session; a healthy session keeps its audio."""

import asyncio
import json

import pytest
from aiortc import RTCPeerConnection
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed

from agent.client import AgentClient, CameraTrack
from agent.config import IceConfig
from agent.transport.ice import rtc_configuration
from benchmarks.harness import make_config, media_flowing, running, wait_until, ws_url
from tests.support import healthy_round_trip


async def recv_json(ws, timeout=5.0):
    return json.loads(await asyncio.wait_for(ws.recv(), timeout))


async def closed(ws, timeout=5.0):
    try:
        while True:
            await asyncio.wait_for(ws.recv(), timeout)
    except ConnectionClosed:
        return True
    except TimeoutError:
        return False


async def video_only_offer():
    pc = RTCPeerConnection(rtc_configuration(IceConfig()))
    pc.addTrack(CameraTrack(size=(64, 48)))
    await pc.setLocalDescription(await pc.createOffer())
    sdp = pc.localDescription.sdp
    await pc.close()
    return sdp


@pytest.fixture
async def server_and_healthy():
    async with running(make_config("echo", "stream", max_sessions=3)) as server:
        healthy = AgentClient(ws_url(server))
        await healthy.connect()
        await media_flowing(healthy)
        assert await healthy_round_trip(healthy) is not None
        yield server, healthy
        assert await healthy_round_trip(healthy) is not None, "the healthy session lost its audio"
        assert healthy.pc.connectionState == "connected"
        await healthy.close()


CASES = [
    ("malformed json", lambda: "{not json", "bad_request", False),
    ("not an object", lambda: "[1, 2]", "bad_request", False),
    ("unknown type", lambda: json.dumps({"type": "dance"}), "bad_request", False),
    ("text before offer", lambda: json.dumps({"type": "text", "text": "hi"}), "bad_request", False),
    ("empty text", lambda: json.dumps({"type": "text", "text": ""}), "bad_request", False),
    ("oversized", lambda: json.dumps({"type": "text", "text": "x" * 100_000}), "too_large", True),
    ("not sdp", lambda: json.dumps({"type": "offer", "sdp": "hello world"}), "bad_sdp", True),
    ("sdp not a string", lambda: json.dumps({"type": "offer", "sdp": 42}), "bad_sdp", True),
    ("unknown profile", lambda: json.dumps({"type": "offer", "sdp": "v=0", "profile": "x"}), "bad_request", True),
    ("text_only not a bool", lambda: json.dumps({"type": "offer", "sdp": "v=0", "text_only": 1}), "bad_request", True),
    ("binary", lambda: b"\x00\x01\x02", "bad_request", True),
]


@pytest.mark.parametrize("name,make,code,fatal", CASES, ids=[c[0] for c in CASES])
async def test_bad_message(server_and_healthy, name, make, code, fatal):
    server, _ = server_and_healthy
    async with connect(ws_url(server)) as ws:
        await ws.send(make())
        msg = await recv_json(ws)
        assert msg["type"] == "error" and msg["code"] == code, msg
        assert msg["message"]
        if fatal:
            assert await closed(ws)
        else:
            await ws.send(json.dumps({"type": "bye"}))
            assert await closed(ws)


async def test_sdp_without_audio_and_garbage_sdp(server_and_healthy):
    server, _ = server_and_healthy
    sdp = await video_only_offer()
    async with connect(ws_url(server)) as ws:
        await ws.send(json.dumps({"type": "offer", "sdp": sdp}))
        msg = await recv_json(ws)
        assert msg["code"] == "bad_sdp" and "audio" in msg["message"]
        assert await closed(ws)
    # looks like SDP, has an audio line and a candidate, but is nonsense inside
    junk = "v=0\r\no=- 1 1 IN IP4 127.0.0.1\r\nm=audio 9 RTP/AVP 0\r\na=candidate:garbage\r\n"
    async with connect(ws_url(server)) as ws:
        await ws.send(json.dumps({"type": "offer", "sdp": junk}))
        msg = await recv_json(ws)
        assert msg["code"] == "bad_sdp"
        assert await closed(ws)
    assert len(server.sessions) == 1  # only the healthy one


async def test_second_offer_on_live_session_and_busy(server_and_healthy):
    server, _ = server_and_healthy
    second = AgentClient(ws_url(server))
    await second.connect()
    await second.send({"type": "offer", "sdp": second.pc.localDescription.sdp})
    err = await second.wait_for(lambda m: m["type"] == "error")
    assert err["code"] == "bad_request" and "already" in err["message"]
    third = AgentClient(ws_url(server))
    await third.connect()
    assert len(server.sessions) == 3
    fourth = AgentClient(ws_url(server))
    with pytest.raises(RuntimeError, match="busy"):
        await fourth.connect()
    await fourth.close()
    # the second session is still alive after its bad offer
    assert await healthy_round_trip(second) is not None
    await second.close()
    await third.close()
    assert await wait_until(lambda: len(server.sessions) == 1, 10)
