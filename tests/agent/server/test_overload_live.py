"""The overload policy on a real server with an artificially slow engine."""

import asyncio

import numpy as np
import pytest

from agent.client import AgentClient, CameraTrack
from agent.server import AgentServer
from benchmarks.harness import make_config, wait_until, ws_url
from tests.support import SlowEcho, burst


async def talk(client, stop):
    """Say something every 1.5 s until told to stop."""
    while not stop.is_set():
        client.mic.play(burst())
        await asyncio.sleep(1.5)


async def wait_level(server, level, timeout):
    return await wait_until(lambda: server.overload.level == level, timeout)


async def test_sheds_video_then_text_only_then_refuses_then_recovers():
    cfg = make_config("echo", "turn")
    cfg.engine.end_silence_ms = 320
    o = cfg.overload
    o.first_audio_p95_ms, o.escalate_s, o.recover_s, o.window_s = 300, 0.8, 1.0, 4.0
    o.loop_lag_p95_ms = 10_000  # only the slow engine should drive it here
    engine = SlowEcho("turn", end_silence_ms=320)
    engine.delay = 1.0
    server = AgentServer(cfg, engine=engine)
    await server.start()
    stop = asyncio.Event()
    try:
        client = AgentClient(ws_url(server), video=CameraTrack(fps=10, size=(160, 120)))
        await client.connect()
        session = server.sessions[client.answer["session"]].pump
        talking = asyncio.create_task(talk(client, stop))
        assert await wait_level(server, 1, 15), "video was not shed"
        assert session.queue.shed_video
        shed_before = session.queue.video_shed
        assert await wait_until(lambda: session.queue.video_shed > shed_before, 10)  # video really is dropped now
        assert await wait_level(server, 2, 10), "did not go text-only"
        assert server.sessions[client.answer["session"]].pump.engine.text_only
        assert await wait_level(server, 3, 10), "did not start refusing"
        refused = AgentClient(ws_url(server))
        with pytest.raises(RuntimeError, match="overloaded"):
            await refused.connect()
        await refused.close()
        # text-only turns: transcripts go on, speech does not
        start = len(client.messages)
        await client.wait_for(lambda m: m["type"] == "metrics", 10, start)
        assert next(m for m in client.messages[start:] if m["type"] == "metrics")["first_audio_ms"] is None
        # the load falls: the server steps back down to normal
        engine.delay = 0.0
        assert await wait_level(server, 0, 20), f"did not recover (level {server.overload.level})"
        assert not session.queue.shed_video
        stop.set()
        await talking
        gaps = np.diff(np.array(client.received.times))
        # continuous: never more than a few 20 ms packets late, even on a loaded 2-core CI machine
        assert gaps.max() < 0.25, f"audio stalled for {gaps.max() * 1000:.0f} ms on the way"
        health = server.metrics.render().decode()
        assert "omni_overload_transitions_total 6.0" in health
        await client.close()
    finally:
        stop.set()
        await server.close()
