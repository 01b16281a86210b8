"""Every way a session ends frees its tasks, peer and threads within a second."""

import threading

import numpy as np
import pytest

from agent.client import RATE, AgentClient, CameraTrack
from agent.engines.echo import EchoEngine
from agent.server import AgentServer
from benchmarks.harness import make_config, media_flowing, running, wait_until, ws_url
from tests.support import round_trip, session_tasks


class ExplodingEngine(EchoEngine):
    """Echo that raises on the 20th chunk: an engine bug mid-session."""

    async def open_session(self, profile, options=None):
        session = await super().open_session(profile, options)
        feed = session.feed
        count = 0

        def exploding_feed(chunk):
            nonlocal count
            count += 1
            if count == 20:
                raise RuntimeError("boom")
            feed(chunk)

        session.feed = exploding_feed
        return session


def click(ms=10, amp=0.8):
    t = np.arange(RATE * ms // 1000) / RATE
    return (amp * np.sin(2 * np.pi * 1000 * t)).astype(np.float32)


def own_threads():
    # The loop's default executor keeps its few worker threads for reuse (by
    # design, bounded); anything else still running would be a leak.
    return [t.name for t in threading.enumerate() if not t.name.startswith("asyncio_")]


async def end_by_bye(client):
    await client.send({"type": "bye"})


async def end_by_socket_close(client):
    await client.ws.close()


async def end_by_peer_close(client):
    await client.pc.close()  # ICE and DTLS go away under the server


async def end_by_dead_track(client):
    client.mic.stop()  # no more audio: the watchdog ends it


@pytest.mark.parametrize(
    "ender", [end_by_bye, end_by_socket_close, end_by_peer_close, end_by_dead_track], ids=lambda f: f.__name__
)
async def test_session_end_frees_everything(ender):
    cfg = make_config("echo", "stream")
    cfg.media.audio_timeout_s = 1.0
    server = AgentServer(cfg)
    await server.start()
    threads_before = own_threads()
    try:
        client = AgentClient(ws_url(server), video=CameraTrack(fps=10, size=(160, 120)))
        answer = await client.connect()
        sid = answer["session"]
        await media_flowing(client)
        conn = server.sessions[sid]
        pc = conn.peer.pc
        assert session_tasks(sid)
        await ender(client)
        # within a second (the watchdog needs its 1 s timeout first); the deadline allows 5x for slow machines
        limit = 10.0 if ender is end_by_dead_track else 5.0
        assert await wait_until(lambda: sid not in server.sessions and not session_tasks(sid), limit)
        assert pc.connectionState == "closed"
        await client.close(bye=False)
        assert await wait_until(lambda: own_threads() == threads_before, 5.0), own_threads()
    finally:
        await server.close()


async def test_engine_failure_is_reported_and_ends_only_that_session():
    cfg = make_config("echo", "stream")
    server = AgentServer(cfg, engine=ExplodingEngine("stream"))
    await server.start()
    try:
        client = AgentClient(ws_url(server))
        answer = await client.connect()
        err = await client.wait_for(lambda m: m["type"] == "error", timeout=5)
        assert err["code"] == "engine" and "boom" in err["message"]
        assert await wait_until(lambda: answer["session"] not in server.sessions, 1.0)
        await client.close(bye=False)
    finally:
        await server.close()


async def test_a_failing_inbound_packet_handler_ends_only_that_session():
    """A bug below the socket callback (media/rtp_receive.py) ends its session, not the loop's other ones."""
    async with running(make_config("echo", "stream")) as server:
        broken, healthy = AgentClient(ws_url(server)), AgentClient(ws_url(server))
        broken_id = (await broken.connect())["session"]
        await healthy.connect()
        await media_flowing(broken)
        await media_flowing(healthy)

        async def raising(data, arrival_time_ms):
            raise RuntimeError("bad packet handler")

        (direct,) = server.sessions[broken_id].peer.direct
        direct.dtls._handle_rtp_data = raising
        err = await broken.wait_for(lambda m: m["type"] == "error", timeout=5)
        assert err["code"] == "engine" and "bad packet handler" in err["message"]
        assert await wait_until(lambda: broken_id not in server.sessions, 5)
        assert direct.failed
        assert await round_trip(healthy, click()) is not None
        await broken.close(bye=False)
        await healthy.close()
