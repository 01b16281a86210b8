"""Benchmark: the in-car and translation profiles, measured at the client.

In-car: end of the spoken command (last voiced sample sent) to the `tool`
event that changed the car's state. Translation: end of each spoken segment
to the first sample of its translation heard, and to its caption. Starts
`omni-agent serve` (cascade) in its own process; prints median and p95 and
writes JSON.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import tempfile
from pathlib import Path

import numpy as np

from agent.client import RATE, AgentClient
from agent.transport.ice import set_host_addresses
from benchmarks.harness import read_wav, speech_wav, stats, write_result
from benchmarks.voice_to_voice import start_server

COMMANDS = [
    "Open the front window.",
    "Close the front window.",
    "Make it warmer.",
    "Set the temperature to 23 degrees.",
    "Turn on the seat heating for the driver.",
    "Turn on the AC.",
    "Open the sunroof halfway.",
    "Lock the doors.",
]
SEGMENTS = ["Good morning.", "Where is the train station?", "I need a doctor.", "Thank you very much."]


def clip(text: str, tmp: Path) -> tuple[np.ndarray, int]:
    audio, _ = read_wav(speech_wav(text, tmp / f"{abs(hash(text))}.wav", rate=RATE, pad_before=0.2, pad_after=0.1))
    return audio, int(np.flatnonzero(np.abs(audio) > 0.01)[-1])


async def car(url: str, tmp: Path, rounds: int) -> list[float]:
    client = AgentClient(url, profile="in_car")
    await client.connect()
    await asyncio.sleep(1.0)
    out = []
    for _ in range(rounds):
        for text in COMMANDS:
            audio, last = clip(text, tmp)
            start = len(client.messages)
            ident = client.mic.play(audio)
            await client.wait_for(lambda m: m["type"] == "metrics", 30, start)
            tools = [(i, m) for i, m in enumerate(client.messages[start:], start) if m["type"] == "tool"]
            if not tools:
                heard = [m["text"] for m in client.messages[start:] if m["type"] == "transcript" and m["final"]]
                print(f"  car {text!r:45} -> no command understood: {heard}", flush=True)
                continue
            i, tool = tools[0]
            ms = (client.message_times[i] - (client.mic.sent_at[ident] + last / RATE)) * 1000
            out.append(ms)
            print(f"  car {text!r:45} -> {tool['name']} ok={tool['result']['ok']}: {ms:.0f} ms", flush=True)
            await client.wait_for(lambda m: m.get("state") == "listening", 30, start)
            await asyncio.sleep(0.4)
    await client.close()
    return out


async def translate(url: str, tmp: Path, rounds: int) -> tuple[list[float], list[float]]:
    client = AgentClient(url, profile="translate")
    client.target_lang = "es"
    await client.connect()
    await asyncio.sleep(1.0)
    gap = np.zeros(int(0.9 * RATE), np.float32)
    speech_lags, caption_lags = [], []
    for r in range(rounds):
        parts, ends, pos = [], [], 0
        for text in SEGMENTS:
            audio, last = clip(text, tmp)
            ends.append(pos + last)
            parts += [audio, gap]
            pos += audio.size + gap.size
        start = len(client.messages)
        ident = client.mic.play(np.concatenate(parts))
        last_segment = (r + 1) * len(SEGMENTS)
        await client.wait_for(
            lambda m: m["type"] == "transcript" and m["role"] == "assistant" and m.get("segment") == last_segment,  # noqa: B023
            60,
            start,
        )
        await asyncio.sleep(0.3)
        t0 = client.mic.sent_at[ident]
        caps = [
            (t, m)
            for t, m in zip(client.message_times[start:], client.messages[start:], strict=True)
            if m["type"] == "transcript" and m["role"] == "assistant" and m["final"] and "segment" in m
        ]
        for i, end in enumerate(ends):
            t_end = t0 + end / RATE
            heard = client.received.first_loud_after(t_end, threshold=0.02)
            t_cap = caps[i][0] if i < len(caps) else None
            if heard is not None:
                speech_lags.append((heard - t_end) * 1000)
            if t_cap is not None:
                caption_lags.append((t_cap - t_end) * 1000)
            print(
                f"  segment {SEGMENTS[i]!r:32} caption after {((t_cap or t_end) - t_end) * 1000:5.0f} ms, "
                f"speech after {((heard or t_end) - t_end) * 1000:5.0f} ms",
                flush=True,
            )
        await asyncio.sleep(1.0)
    await client.close()
    return speech_lags, caption_lags


def main() -> None:
    ap = argparse.ArgumentParser(description="in-car and translation latency")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--json", type=Path, default=Path("results/profiles_latency.json"))
    args = ap.parse_args()
    set_host_addresses(["127.0.0.1"])
    tmp = Path(tempfile.mkdtemp())
    proc, url = start_server([])
    try:
        car_ms = asyncio.run(car(url, tmp, args.rounds))
        speech_ms, caption_ms = asyncio.run(translate(url, tmp, args.rounds))
    finally:
        proc.terminate()
        proc.wait(10)
    result = {
        "benchmark": "profiles_latency",
        "machine": f"{platform.machine()} {os.cpu_count()} cores",
        "command_to_state_change": stats(car_ms),
        "segment_to_caption": stats(caption_ms),
        "segment_to_translated_speech": stats(speech_ms),
    }
    print("\n| measure | median ms | p95 ms | n |\n| --- | --- | --- | --- |")
    for key in ("command_to_state_change", "segment_to_caption", "segment_to_translated_speech"):
        s = result[key]
        print(f"| {key.replace('_', ' ')} | {s['median_ms']:.0f} | {s['p95_ms']:.0f} | {s['n']} |")
    write_result(args.json, result)


if __name__ == "__main__":
    main()
