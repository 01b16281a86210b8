"""Faults injected into real sessions: each ends or recovers only the affected session."""

import numpy as np
import pytest

from agent.client import RATE, AgentClient
from agent.server import AgentServer
from benchmarks.harness import make_config, media_flowing, running, wait_until, ws_url
from tests.support import SlowEcho, burst, session_tasks


async def test_client_vanishing_mid_reply():
    async with running(make_config("echo", "turn")) as server:
        healthy = AgentClient(ws_url(server))
        await healthy.connect()
        gone = AgentClient(ws_url(server))
        await gone.connect()
        sid = gone.answer["session"]
        await media_flowing(gone)
        t = np.arange(int(2.0 * RATE)) / RATE
        gone.mic.play((0.4 * np.sin(2 * np.pi * 300 * t)).astype(np.float32))  # a long reply follows
        await gone.wait_for(lambda m: m.get("state") == "speaking", 10)
        gone.ws.transport.abort()  # the network drops: no bye, no close handshake
        for t in gone._tasks:
            t.cancel()
        assert await wait_until(lambda: sid not in server.sessions and not session_tasks(sid), 10.0)
        assert healthy.answer["session"] in server.sessions and healthy.pc.connectionState == "connected"
        await gone.close(bye=False)
        await healthy.close()


async def test_hung_engine_turn_is_cut_at_the_deadline_and_the_session_goes_on():
    cfg = make_config("echo", "turn")
    cfg.engine.end_silence_ms = 320
    cfg.media.turn_deadline_s = 1.0
    engine = SlowEcho("turn", end_silence_ms=320)
    engine.delay = 3600  # hangs
    server = AgentServer(cfg, engine=engine)
    await server.start()
    try:
        client = AgentClient(ws_url(server))
        await client.connect()
        await media_flowing(client)
        client.mic.play(burst())
        err = await client.wait_for(lambda m: m["type"] == "error", 10)
        assert err["code"] == "engine" and "no answer within 1" in err["message"]
        await client.wait_for(lambda m: m["type"] == "metrics" and m["interrupted"], 5)
        # the next turn is answered normally
        engine.delay = 0
        start = len(client.messages)
        client.mic.play(burst())
        await client.wait_for(lambda m: m["type"] == "metrics" and not m["interrupted"], 10, start)
        assert any(m.get("state") == "speaking" for m in client.messages[start:])
        await client.close()
    finally:
        await server.close()


async def test_a_reply_longer_than_the_deadline_is_not_cut():
    """The deadline is for a hung engine: a reply that keeps streaming (2.5 s echoed, 1 s deadline) plays out."""
    cfg = make_config("echo", "turn")
    cfg.engine.end_silence_ms = 320
    cfg.media.turn_deadline_s = 1.0
    async with running(cfg) as server:
        client = AgentClient(ws_url(server))
        await client.connect()
        await media_flowing(client)
        t = np.arange(int(2.5 * RATE)) / RATE
        client.mic.play((0.4 * np.sin(2 * np.pi * 300 * t)).astype(np.float32))
        metrics = await client.wait_for(lambda m: m["type"] == "metrics", 15)
        await client.close()
    assert metrics["interrupted"] is False
    assert not any(m["type"] == "error" for m in client.messages)


async def test_engine_session_that_cannot_open_fails_only_that_session():
    async with running(make_config("cascade")) as server:
        healthy = AgentClient(ws_url(server), profile="in_car")
        await healthy.connect()
        bad = AgentClient(ws_url(server), profile="translate")
        bad.target_lang = "ja"
        with pytest.raises(RuntimeError, match="no offline translation"):
            await bad.connect()
        await bad.close()
        assert list(server.sessions) == [healthy.answer["session"]]
        await healthy.close()
