"""A client in its own network namespace (`tests/agent/transport/test_turn_relay.py`): reads the server's ICE
servers from `/ice` as the page does, says a sentence to the echo engine and prints, as JSON, what came back
and the candidate pair its peer chose."""

from __future__ import annotations

import asyncio
import json
import sys
import time
from pathlib import Path

from agent.client import AgentClient
from benchmarks.harness import media_flowing, spoken, wait_until


async def main(url: str, wav_dir: str) -> dict:
    client = AgentClient(url.replace("http", "ws", 1) + "/ws")
    client.fetch_ice()
    started = time.monotonic()
    try:
        await client.connect(timeout=20)
    except RuntimeError as exc:
        return {"ice": client.ice, "refused": str(exc)}
    await wait_until(lambda: client.pc is not None and client.pc.connectionState == "connected", 20)
    connected = time.monotonic() - started
    await media_flowing(client)
    start = len(client.messages)
    client.mic.play(spoken("Hello through the relay.", Path(wav_dir)))
    figures = await client.wait_for(lambda m: m["type"] == "metrics", 60, start)
    pair = None
    for transceiver in client.pc.getTransceivers():
        connection = transceiver.receiver.transport.transport.iceGatherer._connection  # aioice's
        nominated = next(iter(connection._nominated.values()), None)
        if nominated is not None:
            pair = [nominated.local_candidate.type, nominated.remote_candidate.type]
            break
    await client.close()
    return {"ice": client.ice, "figures": figures, "pair": pair, "connected_s": connected,
            "peak": float(abs(client.received.audio()).max(initial=0.0))}  # fmt: skip


if __name__ == "__main__":
    print(json.dumps(asyncio.run(main(sys.argv[1], sys.argv[2]))), flush=True)
