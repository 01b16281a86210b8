"""Benchmark: what the `realtime` engine's hop costs, per server dialect.

A scripted far server of each dialect (benchmarks/harness.py `ScriptedRealtime`, answering the moment a turn
is committed) behind our server's `realtime` engine, and an aiortc client speaking espeak-ng questions
over WebRTC, all on 127.0.0.1 in this one process. Per turn: the server's `first_audio_ms` (from the end
of the user's turn to our first speech frame: the commit going out, the far server's first audio coming
back and being resampled and framed; the far server itself adds nothing), and voice to voice at the
client. Prints medians and writes JSON, with the processor named.
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from pathlib import Path

import numpy as np
from websockets.asyncio.server import serve

from agent.client import AgentClient
from agent.machine import machine
from agent.transport.ice import set_host_addresses
from benchmarks.harness import (
    ScriptedRealtime,
    make_config,
    media_flowing,
    quiet_again,
    running,
    spoken,
    write_result,
    ws_url,
)

QUESTIONS = ["What time is it?", "What can you do?", "Hello there.", "Can you see me?"]


async def one_dialect(dialect: str, rounds: int, tmp: Path) -> list[dict]:
    far = ScriptedRealtime(dialect)
    async with serve(far.handler, "127.0.0.1", 0) as srv:
        cfg = make_config("realtime")
        port = srv.sockets[0].getsockname()[1]
        cfg.engine.options = {"url": f"ws://127.0.0.1:{port}/v1/realtime", "model": "scripted", "dialect": dialect}
        async with running(cfg) as near:
            client = AgentClient(ws_url(near))
            await client.connect()
            await media_flowing(client)
            rows = []
            for r in range(rounds):
                for q in QUESTIONS:
                    audio = spoken(q, tmp)
                    last_voiced = int(np.flatnonzero(np.abs(audio) > 0.01)[-1])
                    start, frames = len(client.messages), len(client.received.frames)
                    ident = client.mic.play(audio)
                    metrics = await client.wait_for(lambda m: m["type"] == "metrics", 30, start)
                    await quiet_again(client, frames)
                    t_end = client.mic.sent_at[ident] + last_voiced / 48_000
                    t_reply = client.received.first_loud_after(t_end, threshold=0.02)
                    row = {
                        "question": q,
                        "first_audio_ms": metrics["first_audio_ms"],
                        "endpoint_ms": metrics["endpoint_ms"],
                        "voice_to_voice_ms": (t_reply - t_end) * 1000 if t_reply else None,
                    }
                    rows.append(row)
                    print(f"  {dialect:15} [{r + 1}] {q!r:22} first audio {row['first_audio_ms']} ms, "
                          f"voice to voice {row['voice_to_voice_ms'] or float('nan'):.0f} ms", flush=True)  # fmt: skip
                    await asyncio.sleep(0.3)
            await client.close()
    return rows


def median(rows: list[dict], key: str) -> float | None:
    vals = [r[key] for r in rows if r[key] is not None]
    return float(np.median(vals)) if vals else None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dialects", default="openai,vllm-omni,vllm-omni-turn,dynamo")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--json", type=Path, default=Path("results/realtime_dialects.json"))
    args = ap.parse_args()
    set_host_addresses(["127.0.0.1"])
    tmp = Path(tempfile.mkdtemp())
    doc: dict = {"benchmark": "realtime_dialects", "machine": machine(), "started": time.time(), "dialects": {}}
    print("| dialect | first audio after the turn's end, median ms | voice to voice, median ms |\n| --- | --- | --- |")
    for d in args.dialects.split(","):
        rows = asyncio.run(one_dialect(d, args.rounds, tmp))
        first, v2v = median(rows, "first_audio_ms"), median(rows, "voice_to_voice_ms")
        doc["dialects"][d] = {"first_audio_ms": first, "voice_to_voice_ms": v2v, "turns": rows}
        print(f"| {d} | {first or float('nan'):.0f} | {v2v or float('nan'):.0f} |")
    write_result(args.json, doc)


if __name__ == "__main__":
    main()
