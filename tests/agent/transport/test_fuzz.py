"""Fuzzing the signalling protocol: random and mutated JSON, SDP and binary messages.

A bounded number of cases. The server must answer or close each connection,
never crash, and never leak a session; a healthy session keeps its audio.
"""

import asyncio
import contextlib
import json
import random

from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed

from agent.client import AgentClient
from benchmarks.harness import make_config, media_flowing, running, wait_until, ws_url
from tests.support import healthy_round_trip

CASES = 300


def mutate(text: str, rng: random.Random) -> str | bytes:
    choice = rng.randrange(8)
    if choice == 0:
        return bytes(rng.randrange(256) for _ in range(rng.randrange(1, 200)))
    if choice == 1:
        cut = rng.randrange(len(text))
        return text[:cut]
    if choice == 2:
        i = rng.randrange(len(text))
        return text[:i] + chr(rng.randrange(0x20, 0x2FFF)) + text[i + 1 :]
    if choice == 3:
        return json.dumps(rng.choice([None, 1, 1.5, "x", [], {}, [{"type": "offer"}], {"type": None}]))
    if choice == 4:
        return json.dumps(
            {
                "type": rng.choice(["offer", "text", "interrupt", "bye", "client_metrics", "x"]),
                rng.choice(["sdp", "text", "profile", "token", "voice_to_voice_ms"]): rng.choice(
                    [None, 0, -1, 1e308, "", "v=0", "x" * rng.randrange(2000), [], {"a": 1}, True]
                ),
            }
        )
    if choice == 5:
        lines = text.split("\\r\\n")
        rng.shuffle(lines)
        return "\\r\\n".join(lines)
    if choice == 6:
        return text * rng.randrange(1, 3)
    return "".join(rng.choice(text) for _ in range(rng.randrange(1, 300)))


async def test_fuzzed_messages_never_crash_or_leak():
    rng = random.Random(1234)
    async with running(make_config("echo", "stream", max_sessions=4)) as server:
        healthy = AgentClient(ws_url(server))
        await healthy.connect()
        await media_flowing(healthy)
        offer = json.dumps({"type": "offer", "sdp": healthy.pc.localDescription.sdp, "profile": "default"})
        seeds = [offer, '{"type": "text", "text": "hello"}', '{"type": "interrupt"}', '{"type": "bye"}']
        answered = 0
        for i in range(CASES):
            async with connect(ws_url(server), max_size=1 << 21) as ws:
                for _ in range(rng.randrange(1, 4)):
                    try:
                        await ws.send(mutate(rng.choice(seeds), rng))
                    except ConnectionClosed:
                        break  # the server ended this session: what bad input should do
                with contextlib.suppress(TimeoutError, ConnectionClosed):
                    reply = await asyncio.wait_for(ws.recv(), 5)
                    answered += 1
                    if isinstance(reply, str) and json.loads(reply).get("type") == "answer":
                        await ws.send('{"type": "bye"}')
            if i % 50 == 0:
                assert await healthy_round_trip(healthy) is not None
        await wait_until(lambda: len(server.sessions) == 1, 10)
        assert list(server.sessions) == [healthy.answer["session"]], "a fuzzed session leaked"
        assert answered > CASES // 2
        assert await healthy_round_trip(healthy) is not None
        await healthy.close()
