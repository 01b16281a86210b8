"""The `realtime` engine against a scripted Realtime server (the OpenAI Realtime API reference,
https://platform.openai.com/docs/api-reference/realtime): far-side trouble becomes Error events, never a crash."""

from __future__ import annotations

import asyncio
import base64
import json

import numpy as np
import pytest
from websockets.asyncio.server import serve

from agent.client import AgentClient
from agent.engines.base import Error, TurnEnd
from agent.engines.realtime import RealtimeEngine
from agent.profiles import get_profile
from agent.server import AgentServer
from benchmarks.harness import make_config, wait_until, ws_url


class FakeRealtime:
    """A misbehaving realtime server, scripted per connection."""

    def __init__(self, script):
        self.script = script
        self.connections = 0

    async def handler(self, ws):
        self.connections += 1
        await ws.send(json.dumps({"type": "session.created", "session": {}}))
        for event in self.script(self.connections):
            if event == "CLOSE":
                await ws.close()
                return
            await ws.send(json.dumps(event) if isinstance(event, dict) else event)
        await asyncio.sleep(30)


def audio_delta(n=2400):
    return {
        "type": "response.output_audio.delta",
        "delta": base64.b64encode(np.full(n, 3000, "<i2").tobytes()).decode(),
    }


async def collect(session, n, timeout=20.0):
    out = []

    async def take():
        async for ev in session.events():
            out.append(ev)
            if len(out) >= n:
                return

    await asyncio.wait_for(take(), timeout)
    return out


async def test_remote_protocol_errors_become_error_events_and_unknown_events_are_counted():
    def script(conn):
        if conn == 1:
            return [
                {"type": "mystery.event"},
                "not json",
                {"type": "error", "error": {"code": "model_overloaded", "message": "try later"}},
                audio_delta(),
                "CLOSE",  # mid-response
            ]
        return []

    fake = FakeRealtime(script)
    async with serve(fake.handler, "127.0.0.1", 0) as srv:
        port = srv.sockets[0].getsockname()[1]
        engine = RealtimeEngine(url=f"ws://127.0.0.1:{port}/v1/realtime", retries=2, timeout=2)
        session = await engine.open_session(get_profile("default"))
        events = await collect(session, 5)
        errors = [e for e in events if isinstance(e, Error)]
        codes = [e.code for e in errors]
        assert codes[:2] == ["protocol", "model_overloaded"]  # not JSON; the server's own error
        assert "connection_lost" in codes
        assert session.unknown_events == {"mystery.event": 1}  # counted and logged, not shown
        assert session.counters()["realtime_unknown_events"] == 1  # what /metrics shows as omni_engine_events
        assert any(isinstance(e, TurnEnd) and e.interrupted for e in events)
        await wait_until(lambda: fake.connections >= 2, 10)
        assert fake.connections == 2  # it reconnected, once
        await session.close()


async def test_unreachable_server_is_a_clear_error():
    engine = RealtimeEngine(url="ws://127.0.0.1:9/v1/realtime", retries=1, timeout=1)
    with pytest.raises(ValueError, match="cannot be reached"):
        await engine.open_session(get_profile("default"))
    server = AgentServer(make_config("realtime"), engine=engine)
    await server.start()
    try:
        client = AgentClient(ws_url(server))
        with pytest.raises(RuntimeError, match="cannot be reached"):
            await client.connect()
        await client.close()
    finally:
        await server.close()


async def test_a_cut_reply_is_truncated_at_what_the_transport_played():
    """The far server is told how much of a cut reply was heard from what the session's transport sent of it
    (`played_ms`), not from wall time: a reply held while speech over it is judged plays nothing meanwhile."""
    from agent.engines.realtime import RealtimeClientSession

    engine = RealtimeEngine(url="ws://127.0.0.1:9/unused", dialect="openai")
    session = RealtimeClientSession(engine, get_profile("default"), {}, lambda audio: False, 480)
    session._in_response, session._item_id = True, "item_1"  # a reply under way, as its events would set
    session._audio(np.zeros(24_000, np.float32), 24_000)  # one second of it received
    for played, told in ((240.0, 240), (5000.0, 1000)):  # never more than was received
        session.played_ms = lambda played=played: played
        session._in_response, session._item_id = True, "item_1"
        session.interrupt()
        sent = [json.loads(session._send.get_nowait()) for _ in range(session._send.qsize())]
        (cut,) = [e for e in sent if e["type"] == "conversation.item.truncate"]
        assert cut == {
            "type": "conversation.item.truncate",
            "item_id": "item_1",
            "content_index": 0,
            "audio_end_ms": told,
        }
        session._audio(np.zeros(24_000, np.float32), 24_000)
